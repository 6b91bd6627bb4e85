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
//! the ones that become notes) and makes its zones, [`forward`], [`cache`]
//! and [`log`] translate those plugins; this file holds the [`Plan`]
//! they fill and puts the blocks together.

mod block;
mod cache;
mod forward;
mod keys;
mod log;

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
    /// `"random"` or `"sequential"` and why, when not nodens' default.
    pub policy: Option<(&'static str, &'static str)>,
    pub max_fails: Option<u32>,
    pub health_check: Option<Duration>,
    /// `[zone.pool] idle_timeout`, from `forward`'s `expire`.
    pub idle_timeout: Option<Duration>,
    pub min_ttl: Option<Duration>,
    pub max_ttl: Option<Duration>,
    pub negative_max_ttl: Option<Duration>,
    /// `[zone.query_log] classes`, from `log`.
    pub query_log: Option<Vec<&'static str>>,
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
        let Some(keys) = keys::keys(block, &mut plan)? else {
            continue;
        };
        let listen = block::translate_block(block, &keys, options, &mut plan)?;
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
    forward::agree_on_pools(&mut plan);
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
