//! What each Corefile plugin becomes in nodens, or why it becomes nothing.
//!
//! The rule: a setting with an equivalent is carried over; a plugin or
//! option without one is listed with its line and left out, never guessed
//! at; plugins whose job nodens does another way (`reload`, `loop`, `errors`,
//! `ready`) get a note saying how. Settings the Corefile does not
//! mention keep nodens' defaults.
//!
//! One file per job: [`keys`] reads a server block's keys (zones, port),
//! [`block`] walks a block's plugins (`bind`, `prometheus`, `health` and
//! the ones that become notes) and makes its zones, [`forward`] (with
//! [`tls`] for its `tls://` destinations), [`cache`] and [`log`] translate
//! those plugins; this file holds the [`Plan`] they fill and puts the
//! blocks together.

mod block;
mod block_out;
mod cache;
mod dns64;
mod dnstap;
mod except;
mod forward;
mod keys;
mod log;
mod records;
mod rewrite;
pub(super) mod tls;
mod unforwarded;
mod views;
pub(super) mod zone_rules;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::corefile::Corefile;
use super::{ConvertError, Finding, Options};
use crate::config::ZoneConfig;

/// What a `[[zone]]` that does not set a value has: the configuration's
/// own defaults, never copies of them that could drift, for the checks
/// that compare a zone's settings with the ones it would have anyway (the
/// pool agreement, `min_ttl <= max_ttl`).
fn zone_defaults() -> ZoneConfig {
    ZoneConfig::root()
}

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
    /// `transport = "tls"` and `[zone.tls]`, from a `forward` to `tls://`.
    pub tls: Option<tls::TlsOut>,
    /// `"random"` or `"sequential"` and why, when not nodens' default.
    pub policy: Option<(&'static str, &'static str)>,
    pub max_fails: Option<u32>,
    /// `max_misses_in_flight`, from `forward`'s `max_concurrent`.
    pub max_misses_in_flight: Option<u32>,
    pub health_check: Option<Duration>,
    /// `[zone.pool] idle_timeout`, from `forward`'s `expire`.
    pub idle_timeout: Option<Duration>,
    pub min_ttl: Option<Duration>,
    pub max_ttl: Option<Duration>,
    pub negative_max_ttl: Option<Duration>,
    pub cache: ZoneCacheOut,
    /// `hosts`, `template`, `local` (`records`).
    pub records: RecordsOut,
    /// The addresses its block serves it on; emptied (every address) when
    /// the zone is on all of the output's listen addresses.
    pub listen: Vec<SocketAddr>,
    /// `rewrite`, `dns64`, `forward ... except`.
    pub rules: zone_rules::RulesOut,
    /// `minimal`.
    pub minimal: bool,
    /// `[zone.query_log] classes`, from `log`.
    pub query_log: Option<Vec<&'static str>>,
}

/// A zone's local answers as TOML: keys of the `[[zone]]` table, and the
/// sub-tables written after it.
#[derive(Debug, Clone, Default)]
pub(super) struct RecordsOut {
    pub keys: String,
    pub tables: String,
    /// The line of a `whoami`, settled once the block's `forward` is known.
    pub whoami: Option<usize>,
}

/// `[cache]`, from every block's `cache`: the capacity, one for all.
#[derive(Debug, Default)]
pub(super) struct CacheOut {
    /// Entries the Corefile's caches held together (success + denial).
    pub entries: u64,
}

/// `[zone.cache]`, from the zone's block's `cache` (each with the line it
/// comes from).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ZoneCacheOut {
    /// The block has no `cache`: CoreDNS caches nothing there.
    pub off: Option<usize>,
    pub servfail_ttl: Option<(Duration, usize)>,
    /// `prefetch AMOUNT ... PERCENTAGE%`: hits and percent.
    pub prefetch: Option<((u32, u8), usize)>,
    pub stale_max_age: Option<(Duration, usize)>,
    pub stale_answer_timeout: Option<(Duration, usize)>,
    /// `disable success` / `disable denial`.
    pub no_success: Option<usize>,
    pub no_denial: Option<usize>,
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
    /// `health`'s `lameduck`, the longest.
    pub lameduck: Option<Duration>,
    pub zones: Vec<ZoneOut>,
    pub untranslated: Findings,
    pub notes: Findings,
    /// Every address a plain-DNS block listens on, with the block's line.
    served: Vec<(SocketAddr, usize)>,
    /// Blocks without a `forward`: their zones, lines and addresses.
    unforwarded: Vec<unforwarded::Unforwarded>,
    /// The cluster domain the Corefile says by its shape: the zone whose
    /// block forwards to the cluster DNS, with its line.
    pub cluster_domain: Option<(String, usize)>,
    /// `[dnstap]`, from the first `dnstap`.
    pub dnstap: Option<dnstap::DnstapOut>,
}

pub(super) fn translate(corefile: &Corefile, options: &Options) -> Result<Plan, ConvertError> {
    let mut plan = Plan::default();
    for block in &corefile.blocks {
        let Some(keys) = keys::keys(block, &mut plan)? else {
            continue;
        };
        let listen = block::translate_block(block, &keys, options, &mut plan)?;
        for a in listen.into_iter().flatten() {
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
    let own = crate::config::views::OwnAddresses::read();
    for zone in &plan.zones {
        let Upstream::Addresses(addresses) = &zone.upstream else {
            continue;
        };
        if let Some(a) = addresses.iter().find(|&&a| own.loops(&plan.listen, a)) {
            return Err(ConvertError::at(
                zone.forward_line,
                format!("forward to {a}: one of the listen addresses, a forwarding loop"),
            ));
        }
    }
    views::no_address_dropped(&plan)?;
    unforwarded::explain(&mut plan);
    views::keep_only_views(&mut plan)?;
    plan.node_setup = plan
        .listen
        .iter()
        .any(|a| !a.ip().is_loopback() && !a.ip().is_unspecified());
    forward::agree_on_pools(&mut plan)?;
    plan.cluster_domain = cluster_domain(&plan, options);
    Ok(plan)
}

/// The zone whose block forwards to the cluster DNS (the
/// `__PILLAR__CLUSTER__DNS__` Service, or `--dns-server`'s address), not
/// the root nor a reverse zone: NodeLocal DNSCache's first block,
/// `__PILLAR__DNS__DOMAIN__:53`, substituted.
fn cluster_domain(plan: &Plan, options: &Options) -> Option<(String, usize)> {
    let dns_server: Option<std::net::IpAddr> =
        options.dns_server.as_deref().and_then(|s| s.parse().ok());
    plan.zones
        .iter()
        .filter(|z| z.name != "." && !z.name.to_ascii_lowercase().ends_with("arpa"))
        .find(|z| match &z.upstream {
            Upstream::Service(_) => true,
            Upstream::Addresses(a) => dns_server.is_some_and(|ip| a.iter().any(|a| a.ip() == ip)),
            Upstream::ResolvConf(..) => false,
        })
        .map(|z| (z.name.clone(), z.line))
}
