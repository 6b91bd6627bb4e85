//! What each Corefile plugin becomes in nodens, or why it becomes nothing.
//!
//! The rule: a setting with an equivalent is carried over; a plugin or
//! option without one is listed with its line and left out, never guessed
//! at; plugins whose job nodens does another way (`reload`, `loop`, `errors`,
//! `log`, `ready`) get a note saying how. Settings the Corefile does not
//! mention keep nodens' defaults.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::corefile::{Corefile, Directive, ServerBlock, Token, go_duration};
use super::pillars::{CLUSTER_DNS, UPSTREAM_SERVERS};
use super::{ConvertError, Finding, Options};
use crate::config::ZoneName;

/// CoreDNS's cache capacity when `success` or `denial` gives none (entries).
const COREDNS_CACHE_ENTRIES: u64 = 9984;
/// nodens' pool `idle_timeout`, `max_fails` and `health_check` defaults:
/// what a zone that does not set them has, for the pool agreement check.
const DEFAULT_IDLE: Duration = Duration::from_secs(10);
const DEFAULT_MAX_FAILS: u32 = 2;
const DEFAULT_HEALTH_CHECK: Duration = Duration::from_millis(500);
/// nodens' `max_ttl` default, for the `min_ttl <= max_ttl` rule.
const DEFAULT_MAX_TTL: Duration = Duration::from_secs(3600);

/// Findings, one per message, each with every line it was seen on.
#[derive(Debug, Default)]
pub(super) struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, line: usize, message: impl Into<String>) {
        let message = message.into();
        match self.0.iter_mut().find(|f| f.message == message) {
            Some(f) if !f.lines.contains(&line) => f.lines.push(line),
            Some(_) => {}
            None => self.0.push(Finding {
                lines: vec![line],
                message,
            }),
        }
    }

    pub(super) fn into_findings(mut self) -> Vec<Finding> {
        self.0.sort_by_key(|f| f.lines[0]);
        self.0
    }
}

/// Where a zone's queries go.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Upstream {
    Addresses(Vec<SocketAddr>),
    /// `__PILLAR__CLUSTER__DNS__`: the Service node-cache's `-upstreamsvc` names.
    Service(String),
    /// A resolv.conf path; `true` when it stands for `__PILLAR__UPSTREAM__SERVERS__`.
    ResolvConf(PathBuf, bool),
}

impl Upstream {
    /// The names under which zones share a server (and so its pool).
    fn share_keys(&self) -> Vec<String> {
        match self {
            Upstream::Addresses(a) => a.iter().map(|a| a.to_string()).collect(),
            Upstream::Service(s) => vec![format!("service {s}")],
            Upstream::ResolvConf(p, _) => vec![format!("resolv.conf {}", p.display())],
        }
    }

    fn may_be_several(&self) -> bool {
        match self {
            Upstream::Addresses(a) => a.len() > 1,
            Upstream::Service(_) => false,
            Upstream::ResolvConf(..) => true,
        }
    }
}

/// One `[[zone]]` to write.
#[derive(Debug, Clone)]
pub(super) struct ZoneOut {
    /// As written in the output: lower case, no trailing dot (`.` for the root).
    pub name: String,
    /// The server block it comes from.
    pub line: usize,
    pub upstream: Upstream,
    /// The `forward` it comes from.
    pub forward_line: usize,
    pub force_tcp: bool,
    /// `"random"` or `"sequential"` and why, when not nodens' default.
    pub policy: Option<(&'static str, &'static str)>,
    pub max_fails: Option<u32>,
    pub health_check: Option<Duration>,
    /// `[zone.pool] idle_timeout`, from `forward`'s `expire`.
    pub idle_timeout: Option<Duration>,
    pub min_ttl: Option<Duration>,
    pub max_ttl: Option<Duration>,
    pub negative_max_ttl: Option<Duration>,
}

/// `[cache]`, from every block's `cache`.
#[derive(Debug, Default)]
pub(super) struct CacheOut {
    /// Entries the Corefile's caches held together (success + denial).
    pub entries: u64,
    pub servfail_ttl: Option<(Duration, usize)>,
    /// `prefetch AMOUNT ... PERCENTAGE%`: hits and percent.
    pub prefetch: Option<((u32, u8), usize)>,
    pub stale_max_age: Option<(Duration, usize)>,
}

/// The whole configuration to write.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub listen: Vec<SocketAddr>,
    /// `[node] setup`: some listen address belongs on the node interface.
    pub node_setup: bool,
    /// `[metrics] listen` and where it came from; the health address if it differed.
    pub metrics: Option<(SocketAddr, usize)>,
    pub health: Option<(SocketAddr, usize)>,
    pub cache: CacheOut,
    /// Sum of `forward`'s `max_concurrent`.
    pub max_misses_in_flight: Option<u64>,
    pub zones: Vec<ZoneOut>,
    pub untranslated: Findings,
    pub notes: Findings,
}

/// One server block's zones and port, from its keys.
struct Keys {
    zones: Vec<(String, usize)>,
    port: u16,
}

pub(super) fn translate(corefile: &Corefile, options: &Options) -> Result<Plan, ConvertError> {
    let mut plan = Plan::default();
    let mut first_listen: Option<(Vec<SocketAddr>, usize)> = None;
    for block in &corefile.blocks {
        if block.keys[0].text.starts_with('(') {
            plan.untranslated.add(
                block.line(),
                format!("snippet {}: `import` is not translated", block.keys[0].text),
            );
            continue;
        }
        let Some(keys) = keys(block, &mut plan)? else {
            continue;
        };
        let listen = translate_block(block, &keys, options, &mut plan)?;
        let Some(listen) = listen else { continue };
        match &first_listen {
            None => first_listen = Some((listen.clone(), block.line())),
            Some((first, line)) if !same_set(first, &listen) => plan.untranslated.add(
                block.line(),
                format!(
                    "this block listens on {}, the block at line {line} on {}: nodens serves every zone on every listen address (the union)",
                    list(&listen),
                    list(first)
                ),
            ),
            Some(_) => {}
        }
        for a in listen {
            if !plan.listen.contains(&a) {
                plan.listen.push(a);
            }
        }
    }
    if plan.zones.is_empty() {
        return Err(ConvertError {
            line: None,
            message: "no server block forwards anywhere: nothing nodens could serve".into(),
            output_refused: false,
        });
    }
    if let (Some((metrics, _)), Some((health, line))) = (plan.metrics, plan.health)
        && metrics != health
    {
        plan.notes.add(
            line,
            format!(
                "health {health}: nodens serves /health, /ready and /metrics on one address, the [metrics] listen {metrics}; point the liveness probe at port {} path /health",
                metrics.port()
            ),
        );
    }
    for zone in &plan.zones {
        let Upstream::Addresses(addresses) = &zone.upstream else {
            continue;
        };
        let own = addresses.iter().find(|a| {
            plan.listen
                .iter()
                .any(|l| l.port() == a.port() && (l.ip() == a.ip() || l.ip().is_unspecified()))
        });
        if let Some(a) = own {
            return Err(ConvertError::at(
                zone.forward_line,
                format!("forward to {a}: one of the listen addresses, a forwarding loop"),
            ));
        }
    }
    plan.node_setup = plan
        .listen
        .iter()
        .any(|a| !a.ip().is_loopback() && !a.ip().is_unspecified());
    agree_on_pools(&mut plan);
    Ok(plan)
}

fn same_set(a: &[SocketAddr], b: &[SocketAddr]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `[dns://]zone[:port]` keys; `None` (and a finding) for a block whose
/// keys nodens cannot serve (another scheme, a reverse CIDR off the octet
/// boundary).
fn keys(block: &ServerBlock, plan: &mut Plan) -> Result<Option<Keys>, ConvertError> {
    let mut zones = Vec::new();
    let mut port = None;
    for key in &block.keys {
        let mut text = key.text.as_str();
        if let Some((scheme, rest)) = text.split_once("://") {
            if !scheme.eq_ignore_ascii_case("dns") {
                plan.untranslated.add(
                    key.line,
                    format!("server block `{}`: nodens serves plain DNS only (not {scheme}://); block not translated", key.text),
                );
                return Ok(None);
            }
            text = rest;
        }
        let (name, key_port) = match text.rsplit_once(':') {
            Some((name, p)) if !name.contains(':') || name.ends_with(']') => {
                let p: u16 = p.parse().map_err(|_| {
                    ConvertError::at(key.line, format!("`{}`: `{p}` is not a port", key.text))
                })?;
                (name, p)
            }
            _ => (text, 53),
        };
        let name = if name.contains('/') {
            match reverse_zone(name) {
                Some(z) => z,
                None => {
                    plan.untranslated.add(
                        key.line,
                        format!("server block `{}`: only IPv4 networks on an octet boundary (/8, /16, /24) become in-addr.arpa zones; block not translated", key.text),
                    );
                    return Ok(None);
                }
            }
        } else {
            name.to_string()
        };
        let normal: ZoneName = name
            .parse()
            .map_err(|e| ConvertError::at(key.line, format!("`{}`: {e}", key.text)))?;
        match port {
            Some(p) if p != key_port => {
                return Err(ConvertError::at(
                    key.line,
                    format!("`{}`: the keys of one block must share a port", key.text),
                ));
            }
            _ => port = Some(key_port),
        }
        let shown = match normal.0.trim_end_matches('.') {
            "" => ".".to_string(),
            n => n.to_string(),
        };
        // A name with bytes nodens writes as `\DDD` escapes does not read
        // back as a zone name: refuse it here rather than write it.
        if shown.parse::<ZoneName>().ok().as_ref() != Some(&normal) {
            return Err(ConvertError::at(
                key.line,
                format!(
                    "`{}`: not a zone name nodens can write (`{shown}`)",
                    key.text
                ),
            ));
        }
        zones.push((shown, key.line));
    }
    Ok(Some(Keys {
        zones,
        port: port.unwrap_or(53),
    }))
}

/// `10.0.0.0/8` → `10.in-addr.arpa`.
fn reverse_zone(cidr: &str) -> Option<String> {
    let (ip, len) = cidr.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    if len % 8 != 0 || len > 32 {
        return None;
    }
    let octets = ip.octets();
    let kept = usize::from(len / 8);
    if octets[kept..].iter().any(|&o| o != 0) {
        return None;
    }
    let mut labels: Vec<String> = octets[..kept].iter().rev().map(|o| o.to_string()).collect();
    labels.push("in-addr.arpa".into());
    Some(labels.join("."))
}

/// What one block's directives say, before it becomes zones.
#[derive(Default)]
struct BlockOut {
    binds: Vec<IpAddr>,
    forward: Option<(Upstream, usize)>,
    force_tcp: bool,
    policy: Option<(&'static str, &'static str)>,
    max_fails: Option<u32>,
    health_check: Option<Duration>,
    idle_timeout: Option<Duration>,
    cached: bool,
    min_ttl: Option<Duration>,
    max_ttl: Option<Duration>,
    negative_max_ttl: Option<Duration>,
}

/// Translates one block into zones; returns its listen addresses, or
/// `None` when the block gave no zone.
fn translate_block(
    block: &ServerBlock,
    keys: &Keys,
    options: &Options,
    plan: &mut Plan,
) -> Result<Option<Vec<SocketAddr>>, ConvertError> {
    let mut out = BlockOut::default();
    for d in &block.directives {
        let line = d.line();
        match d.name.text.as_str() {
            "bind" => bind(d, &mut out, plan),
            "forward" => forward(d, keys, &mut out, options, plan)?,
            "cache" => cache(d, &mut out, plan),
            "prometheus" => http_endpoint(
                d,
                "localhost:9153",
                &mut plan.metrics,
                "prometheus",
                &mut plan.untranslated,
            ),
            "health" => {
                if let Some(sub) = d.block.as_ref().and_then(|b| b.first()) {
                    plan.untranslated.add(
                        sub.line(),
                        format!("health `{}`: no equivalent; on SIGTERM nodens turns /ready to 503 and drains for server.shutdown_grace", sub.name.text),
                    );
                }
                http_endpoint(
                    d,
                    ":8080",
                    &mut plan.health,
                    "health",
                    &mut plan.untranslated,
                )
            }
            "ready" => plan.notes.add(
                line,
                "ready: nodens answers /ready on the [metrics] listen address",
            ),
            "reload" => plan.notes.add(
                line,
                "reload: nodens re-reads its file on SIGHUP (docs/configuration.md, Reloading); a changed ConfigMap needs a SIGHUP or a rollout",
            ),
            "loop" => plan.notes.add(
                line,
                "loop: no probe query at start; check-config refuses an upstream that is one of nodens' own listen addresses",
            ),
            "errors" => plan.notes.add(
                line,
                "errors: nodens logs upstream errors (one line per upstream per log.upstream_error_interval) and counts every one in its metrics",
            ),
            "log" => plan.notes.add(
                line,
                "log: nodens keeps no query log; its metrics count queries by zone, answer and upstream",
            ),
            other => plan.untranslated.add(
                line,
                format!("{}: the `{other}` plugin has no nodens equivalent", describe(d)),
            ),
        }
    }
    let Some((upstream, forward_line)) = out.forward.clone() else {
        let names: Vec<&str> = keys.zones.iter().map(|(n, _)| n.as_str()).collect();
        plan.untranslated.add(
            block.line(),
            format!(
                "server block {}: no `forward` nodens can translate, so no zone for it (nodens answers REFUSED there)",
                names.join(" ")
            ),
        );
        return Ok(None);
    };
    if !out.cached {
        plan.untranslated.add(
            block.line(),
            "this block has no `cache`: nodens caches every zone (bounded by the zone's max_ttl)",
        );
    }
    let listen: Vec<SocketAddr> = if out.binds.is_empty() {
        plan.notes.add(
            block.line(),
            "no `bind`: CoreDNS listened on every address; nodens listens on 0.0.0.0 (IPv4 only) and sets up nothing on the node",
        );
        vec![SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), keys.port)]
    } else {
        out.binds
            .iter()
            .map(|ip| SocketAddr::new(*ip, keys.port))
            .collect()
    };
    if let Some(min) = out.min_ttl
        && min > out.max_ttl.unwrap_or(DEFAULT_MAX_TTL)
    {
        plan.untranslated.add(
            block.line(),
            "cache success MINTTL above its TTL: nodens needs min_ttl <= max_ttl; min_ttl left out",
        );
        out.min_ttl = None;
    }
    let mut added = false;
    for (name, line) in &keys.zones {
        if let Some(earlier) = plan.zones.iter().find(|z| &z.name == name) {
            plan.untranslated.add(
                *line,
                format!("zone {name} again (first at line {}): nodens has one set of upstreams per zone; this block is left out", earlier.line),
            );
            continue;
        }
        let policy = out.policy.or_else(|| {
            upstream
                .may_be_several()
                .then_some(("random", "forward's default policy (random) kept"))
        });
        plan.zones.push(ZoneOut {
            name: name.clone(),
            line: *line,
            upstream: upstream.clone(),
            forward_line,
            force_tcp: out.force_tcp,
            policy,
            max_fails: out.max_fails,
            health_check: out.health_check,
            idle_timeout: out.idle_timeout,
            min_ttl: out.min_ttl,
            max_ttl: out.max_ttl,
            negative_max_ttl: out.negative_max_ttl,
        });
        added = true;
    }
    Ok(added.then_some(listen))
}

/// A short quote of a directive for messages: `rewrite name a b`.
fn describe(d: &Directive) -> String {
    let mut words = vec![d.name.text.as_str()];
    words.extend(d.args.iter().take(4).map(|t| t.text.as_str()));
    if d.args.len() > 4 {
        words.push("...");
    }
    format!("`{}`", words.join(" "))
}

fn bind(d: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let mut args = d.args.iter();
    for t in args.by_ref() {
        if t.text == "except" {
            plan.untranslated.add(
                t.line,
                "bind ... except: list the addresses to serve instead",
            );
            break;
        }
        match t.text.parse::<IpAddr>() {
            Ok(ip) if !out.binds.contains(&ip) => out.binds.push(ip),
            Ok(_) => {}
            Err(_) => plan.untranslated.add(
                t.line,
                format!(
                    "bind `{}`: not an IP address (an interface name?); list its addresses",
                    t.text
                ),
            ),
        }
    }
}

fn forward(
    d: &Directive,
    keys: &Keys,
    out: &mut BlockOut,
    options: &Options,
    plan: &mut Plan,
) -> Result<(), ConvertError> {
    let line = d.line();
    if out.forward.is_some() {
        plan.untranslated.add(
            line,
            "a second `forward` in one block: nodens has one set of upstreams per zone",
        );
        return Ok(());
    }
    let Some((from, to)) = d.args.split_first() else {
        return Err(ConvertError::at(line, "forward without arguments"));
    };
    if from.text != "." {
        let from_zone: Option<ZoneName> = from.text.parse().ok();
        let matches = keys.zones.iter().all(|(z, _)| {
            let zone: Option<ZoneName> = z.parse().ok();
            zone.is_some() && zone == from_zone
        });
        if !matches {
            plan.untranslated.add(
                line,
                format!("forward {}: forwarding part of the block's zone is not translated; make it a server block of its own", from.text),
            );
            return Ok(());
        }
    }
    if to.is_empty() {
        return Err(ConvertError::at(line, "forward without a destination"));
    }
    let upstream = destinations(to, options, plan)?;
    let Some(upstream) = upstream else {
        return Ok(());
    };
    if let Upstream::ResolvConf(_, true) = upstream {
        plan.notes.add(
            line,
            format!(
                "{UPSTREAM_SERVERS}: the nameservers of {} (node-cache's default); if the kube-dns ConfigMap sets upstreamNameservers or stubDomains, node-cache used those: list them as upstreams / zones",
                options.resolv_conf.display()
            ),
        );
    }
    if let Upstream::Service(s) = &upstream {
        plan.notes.add(
            line,
            format!("{CLUSTER_DNS}: upstream_service = \"{s}\", the Service node-cache's -upstreamsvc names; nodens reads its address from the pod's environment"),
        );
    }
    out.forward = Some((upstream, line));
    for option in d.block.iter().flatten() {
        forward_option(option, out, plan);
    }
    Ok(())
}

/// `forward`'s destinations: addresses, a resolv.conf, or a pillar.
fn destinations(
    to: &[Token],
    options: &Options,
    plan: &mut Plan,
) -> Result<Option<Upstream>, ConvertError> {
    let mut addresses = Vec::new();
    let mut other: Option<Upstream> = None;
    for t in to {
        let text = t.text.as_str();
        let kind = if text == CLUSTER_DNS {
            Upstream::Service(options.upstream_service.clone())
        } else if text == UPSTREAM_SERVERS {
            Upstream::ResolvConf(options.resolv_conf.clone(), true)
        } else if text.starts_with('/') {
            Upstream::ResolvConf(PathBuf::from(text), false)
        } else {
            let bare = text.strip_prefix("dns://").unwrap_or(text);
            if bare.contains("://") {
                plan.untranslated.add(
                    t.line,
                    format!("forward to `{text}`: nodens forwards plain DNS only; this forward is not translated"),
                );
                return Ok(None);
            }
            let addr = bare
                .parse::<SocketAddr>()
                .ok()
                .or_else(|| {
                    bare.parse::<IpAddr>()
                        .ok()
                        .map(|ip| SocketAddr::new(ip, 53))
                })
                .ok_or_else(|| {
                    ConvertError::at(
                        t.line,
                        format!("forward to `{text}`: not an address or a file"),
                    )
                })?;
            addresses.push(addr);
            continue;
        };
        if other.as_ref().is_some_and(|o| o != &kind) {
            return Err(ConvertError::at(
                t.line,
                "forward mixes two resolv.conf files or Services: nodens takes one per zone",
            ));
        }
        other = Some(kind);
    }
    match (other, addresses.is_empty()) {
        (Some(kind), true) => Ok(Some(kind)),
        (None, false) => Ok(Some(Upstream::Addresses(addresses))),
        (Some(_), false) => Err(ConvertError::at(
            to[0].line,
            "forward mixes addresses with a resolv.conf or a Service: nodens takes one kind per zone",
        )),
        (None, true) => unreachable!("`to` is not empty"),
    }
}

fn forward_option(option: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = option.line();
    let args = option.arg_texts();
    let duration = |plan: &mut Plan| -> Option<Duration> {
        let d = args.first().and_then(|a| go_duration(a));
        if d.is_none() {
            plan.untranslated.add(
                line,
                format!("forward {}: expected a duration", describe(option)),
            );
        }
        d
    };
    match option.name.text.as_str() {
        "force_tcp" => out.force_tcp = true,
        "prefer_udp" => out.force_tcp = false,
        "expire" | "health_check" if args.first().and_then(|a| go_duration(a)) == Some(Duration::ZERO) => {
            plan.untranslated.add(
                line,
                format!("forward {}: nodens needs a duration above 0", describe(option)),
            );
        }
        "expire" => out.idle_timeout = duration(plan),
        "health_check" => {
            out.health_check = duration(plan);
            if args.len() > 1 {
                plan.untranslated.add(
                    line,
                    format!("forward health_check {}: nodens probes with `. IN NS`, recursion desired", args[1..].join(" ")),
                );
            }
        }
        "max_fails" => match args.first().and_then(|a| a.parse::<u32>().ok()) {
            Some(n) if n > 0 => out.max_fails = Some(n),
            _ => plan.untranslated.add(
                line,
                "forward max_fails 0 (never mark an upstream down): nodens always does after max_fails",
            ),
        },
        "policy" => match args.first().copied() {
            Some("sequential") => out.policy = Some(("sequential", "forward's policy sequential")),
            Some("random") => out.policy = Some(("random", "forward's policy random")),
            Some("round_robin") => {
                out.policy = Some(("random", "forward's policy round_robin"));
                plan.notes.add(
                    line,
                    "forward policy round_robin: nodens has sequential and random; random spreads the load the same way on average",
                );
            }
            _ => plan.untranslated.add(line, format!("forward {}: unknown policy", describe(option))),
        },
        "max_concurrent" => match args.first().and_then(|a| a.parse::<u32>().ok()) {
            Some(0) => {}
            Some(n) => {
                *plan.max_misses_in_flight.get_or_insert(0) += u64::from(n);
                plan.notes.add(
                    line,
                    "forward max_concurrent: nodens bounds misses in flight for the whole server (server.max_misses_in_flight, the sum); beyond it a miss gets a stale answer or none, where CoreDNS answered REFUSED",
                );
            }
            None => plan.untranslated.add(line, format!("forward {}: expected a number", describe(option))),
        },
        _ => plan.untranslated.add(
            line,
            format!("forward option {}: no nodens equivalent", describe(option)),
        ),
    }
}

/// `cache [TTL] [ZONES...] { success | denial | prefetch | serve_stale | servfail ... }`.
fn cache(d: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = d.line();
    out.cached = true;
    let args = d.arg_texts();
    if let Some(ttl) = args.first() {
        match ttl.parse::<u32>() {
            Ok(secs) => {
                let secs = u64::from(secs);
                out.max_ttl = Some(Duration::from_secs(secs));
                out.negative_max_ttl = Some(Duration::from_secs(secs));
                if args.len() > 1 {
                    plan.untranslated
                        .add(line, "cache ZONES: nodens caches every zone it forwards");
                }
            }
            Err(_) => plan
                .untranslated
                .add(line, "cache ZONES: nodens caches every zone it forwards"),
        }
    }
    let mut success = COREDNS_CACHE_ENTRIES;
    let mut denial = COREDNS_CACHE_ENTRIES;
    for option in d.block.iter().flatten() {
        let line = option.line();
        let args = option.arg_texts();
        let seconds = |i: usize| {
            args.get(i)
                .and_then(|a| a.parse::<u32>().ok())
                .map(|s| Duration::from_secs(s.into()))
        };
        match option.name.text.as_str() {
            "success" => {
                success = args
                    .first()
                    .and_then(|a| a.parse::<u32>().ok())
                    .map_or(success, u64::from);
                if let Some(ttl) = seconds(1) {
                    out.max_ttl = Some(ttl);
                }
                if let Some(min) = seconds(2) {
                    out.min_ttl = Some(min);
                }
            }
            "denial" => {
                denial = args
                    .first()
                    .and_then(|a| a.parse::<u32>().ok())
                    .map_or(denial, u64::from);
                if let Some(ttl) = seconds(1) {
                    out.negative_max_ttl = Some(ttl);
                }
                if args.len() > 2 {
                    plan.untranslated.add(
                        line,
                        "cache denial MINTTL: nodens has no lower clamp for negative answers (they keep the SOA's TTL up to negative_max_ttl)",
                    );
                }
            }
            "prefetch" => prefetch(option, plan),
            "serve_stale" => {
                let age = match args.first() {
                    None => Some(Duration::from_secs(3600)),
                    Some(a) => go_duration(a),
                };
                match age {
                    Some(age) => set_once(
                        &mut plan.cache.stale_max_age,
                        age,
                        line,
                        "serve_stale",
                        &mut plan.untranslated,
                    ),
                    None => plan.untranslated.add(
                        line,
                        format!("cache {}: expected a duration", describe(option)),
                    ),
                }
                if args.get(1) == Some(&"immediate") {
                    plan.untranslated.add(
                        line,
                        "serve_stale immediate: nodens serves a stale answer only when every upstream failed (CoreDNS's `verify`)",
                    );
                }
            }
            "servfail" => match args.first().and_then(|a| go_duration(a)) {
                Some(ttl) => set_once(
                    &mut plan.cache.servfail_ttl,
                    ttl,
                    line,
                    "servfail",
                    &mut plan.untranslated,
                ),
                None => plan.untranslated.add(
                    line,
                    format!("cache {}: expected a duration", describe(option)),
                ),
            },
            _ => plan.untranslated.add(
                line,
                format!("cache option {}: no nodens equivalent", describe(option)),
            ),
        }
    }
    plan.cache.entries = plan.cache.entries.saturating_add(success + denial);
}

/// `prefetch AMOUNT [DURATION] [PERCENTAGE%]`.
fn prefetch(option: &Directive, plan: &mut Plan) {
    let line = option.line();
    let args = option.arg_texts();
    let Some(hits) = args.first().and_then(|a| a.parse::<u32>().ok()) else {
        plan.untranslated.add(
            line,
            format!("cache {}: expected a number of hits", describe(option)),
        );
        return;
    };
    let mut percent = 10u8;
    for a in &args[1..] {
        if let Some(p) = a.strip_suffix('%').and_then(|p| p.parse::<u8>().ok()) {
            percent = p.min(100);
        } else if go_duration(a).is_some() {
            plan.notes.add(
                line,
                "prefetch DURATION: nodens counts an entry's hits over its whole life, not per window",
            );
        } else {
            plan.untranslated.add(
                line,
                format!(
                    "cache {}: `{a}` is neither a duration nor a percentage",
                    describe(option)
                ),
            );
        }
    }
    set_once(
        &mut plan.cache.prefetch,
        (hits, percent),
        line,
        "prefetch",
        &mut plan.untranslated,
    );
}

/// Sets a `[cache]` value that is one for the whole server; a block that
/// asks for another is listed.
fn set_once<T: PartialEq + Copy>(
    slot: &mut Option<(T, usize)>,
    value: T,
    line: usize,
    what: &str,
    untranslated: &mut Findings,
) {
    match slot {
        None => *slot = Some((value, line)),
        Some((v, _)) if *v == value => {}
        Some((_, first)) => untranslated.add(
            line,
            format!("cache {what} differs from the one at line {first}: nodens has one [cache] for every zone; line {first}'s is used"),
        ),
    }
}

/// `prometheus [ADDR]` or `health [ADDR]`: the first address wins.
fn http_endpoint(
    d: &Directive,
    default: &str,
    slot: &mut Option<(SocketAddr, usize)>,
    what: &str,
    untranslated: &mut Findings,
) {
    let line = d.line();
    let text = d.args.first().map_or(default, |t| t.text.as_str());
    let Some(addr) = http_address(text) else {
        untranslated.add(
            line,
            format!("{what} `{text}`: not an address nodens can listen on"),
        );
        return;
    };
    match slot {
        None => *slot = Some((addr, line)),
        Some((a, _)) if *a == addr => {}
        Some((a, first)) => untranslated.add(
            line,
            format!("{what} {addr} differs from {a} (line {first}): nodens has one HTTP address"),
        ),
    }
}

/// `:9253` (every address), `localhost:9153`, `IP:port`, `[IPv6]:port`.
fn http_address(text: &str) -> Option<SocketAddr> {
    if let Some(port) = text.strip_prefix(':') {
        return Some(SocketAddr::new(
            Ipv4Addr::UNSPECIFIED.into(),
            port.parse().ok()?,
        ));
    }
    if let Some(port) = text.strip_prefix("localhost:") {
        return Some(SocketAddr::new(
            Ipv4Addr::LOCALHOST.into(),
            port.parse().ok()?,
        ));
    }
    text.parse().ok()
}

/// nodens gives one server one connection pool and one health state, so
/// zones that share an upstream must agree on `expire`, `max_fails` and
/// `health_check`: the first zone's settings are kept, and a later zone
/// that asked for others is listed.
fn agree_on_pools(plan: &mut Plan) {
    type Settings = (Duration, u32, Duration);
    let settings = |z: &ZoneOut| -> Settings {
        (
            z.idle_timeout.unwrap_or(DEFAULT_IDLE),
            z.max_fails.unwrap_or(DEFAULT_MAX_FAILS),
            z.health_check.unwrap_or(DEFAULT_HEALTH_CHECK),
        )
    };
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..plan.zones.len() {
        let keys = plan.zones[i].upstream.share_keys();
        let owner = keys.iter().find_map(|k| owners.get(k).copied());
        if let Some(j) = owner
            && settings(&plan.zones[i]) != settings(&plan.zones[j])
        {
            let (first, first_line) = (plan.zones[j].clone(), plan.zones[j].line);
            let zone = &mut plan.zones[i];
            zone.idle_timeout = first.idle_timeout;
            zone.max_fails = first.max_fails;
            zone.health_check = first.health_check;
            let message = format!(
                "zone {}: forward's expire / max_fails / health_check differ from zone {} (line {first_line}), which forwards to the same server; nodens keeps one pool per server, so zone {}'s are used",
                zone.name, first.name, first.name
            );
            let line = zone.line;
            plan.untranslated.add(line, message);
        }
        for k in keys {
            owners.entry(k).or_insert(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_zones_from_networks() {
        assert_eq!(
            reverse_zone("10.0.0.0/8").as_deref(),
            Some("10.in-addr.arpa")
        );
        assert_eq!(
            reverse_zone("172.16.0.0/16").as_deref(),
            Some("16.172.in-addr.arpa")
        );
        assert_eq!(reverse_zone("10.1.0.0/12"), None);
        assert_eq!(reverse_zone("10.1.0.0/8"), None);
        assert_eq!(reverse_zone("fd00::/8"), None);
    }

    #[test]
    fn http_addresses() {
        assert_eq!(http_address(":9253"), Some("0.0.0.0:9253".parse().unwrap()));
        assert_eq!(
            http_address("localhost:9153"),
            Some("127.0.0.1:9153".parse().unwrap())
        );
        assert_eq!(
            http_address("169.254.20.10:8080"),
            Some("169.254.20.10:8080".parse().unwrap())
        );
        assert_eq!(http_address("nowhere"), None);
    }
}
