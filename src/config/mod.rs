//! Configuration: the file assembled from the features' sections
//! ([`File`], in `file.rs`), the keys renamed that still load under their
//! old names (`deprecated.rs`), the rules across sections (`check.rs`,
//! `views.rs`), the load (the file, resolv.conf, the kube-dns ConfigMap)
//! and the compile step (`compile.rs`) that turns it into the [`Config`]
//! snapshot that the server, reload and the request path read.
//!
//! Each feature owns its section and its compile step, beside its runtime
//! (as each CoreDNS plugin parses its own stanza): `cache/config.rs`,
//! `upstream/config.rs` (the zone plan) and `upstream/pool/config.rs`,
//! `records/config.rs`, `querylog/config.rs`, `dnstap/config.rs`,
//! `admission/budget/config.rs`, `http/config.rs`, `node/config.rs`,
//! `logging.rs`; the vocabulary they share (typed values,
//! positions, the broken rule) is `vocab/`, a leaf. This module imports
//! them, never the other way round.
//!
//! Errors name the file, line and column of the value they are about, both
//! for syntax errors and for values that parse but make no sense (a zone
//! listed twice, a zero timeout, an upstream that is one of our own listen
//! addresses).

mod check;
mod compile;
mod deprecated;
mod file;
mod kube_dns;
pub(crate) mod resolv_conf;
pub(crate) mod views;
mod zone_rules;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use toml::de::DeTable;

pub use crate::admission::budget::{
    BudgetAction, BudgetConfig, BudgetLimits, BudgetPlan, NamespaceBudgetConfig,
};
pub use crate::dnstap::config::{DnstapConfig, DnstapPlan, DnstapQueue, DnstapSocket};
pub use crate::records::config::{FallthroughConfig, HostsConfig, RecordsPlan, TemplateConfig};
use crate::vocab::position::{Document, line_col};
use check::Invalid;
pub use deprecated::{Deprecated, Deprecation, KEYS as DEPRECATED_KEYS};
pub use file::{File, ServerConfig, ZoneConfig};
pub use kube_dns::{KubeDnsPoll, KubeDnsSource};

pub use crate::cache::config::{
    CacheConfig, CachePolicy, CacheSettings, SnapshotPlan, ZoneCacheConfig,
};
pub use crate::http::config::{HttpPlan, MetricsConfig};
pub use crate::kubernetes::{FollowApiPlan, FollowEndpoints, KubernetesPlan};
pub use crate::listen::TcpLimits;
pub use crate::logging::{LogConfig, LogFormat, LogSettings};
pub use crate::node::config::{Backend, LinkKind, NodeConfig, NodePlan};
pub use crate::querylog::config::{
    Class as QueryLogClass, QueryLogConfig, QueryLogFormat, QueryLogOutput, QueryLogPlan,
    ZoneLogPlan, ZoneQueryLogConfig,
};
pub use crate::upstream::{
    EndpointsPlan, Policy, PoolConfig, Transport, UpstreamSettings, ZonePlan,
};
pub use crate::vocab::{BadValue, DnsAddr, HttpListen, LogFilter, ZoneName};
pub use resolv_conf::{ResolvConfError, nameservers as resolv_conf_nameservers};

/// The configuration in force: what `nodens serve` runs with, compiled
/// from the file (or the built-in defaults) once per load.
#[derive(Debug, Clone)]
pub struct Config {
    /// DNS listen addresses, UDP and TCP on each.
    pub listen: Vec<SocketAddr>,
    /// Inputs other parties edit that a start skipped, and why
    /// ([`Config::load_to_start`]); always empty from a strict load.
    pub skipped: Vec<String>,
    /// The deprecated keys the file writes, in file order: each loads as
    /// its replacement, and is said (`check-config`, the log at each load).
    pub deprecated: Vec<Deprecation>,
    /// Worker threads asked for; 0: from the CPU quota and affinity.
    pub workers: usize,
    pub server: ServerSettings,
    pub cache: CacheSettings,
    /// The HTTP servers (`[metrics]`).
    pub http: HttpPlan,
    pub log: LogSettings,
    /// The node setup, when `[node] setup = true`.
    pub node: Option<NodePlan>,
    /// The cluster DNS schema rules (`[cluster]`).
    pub cluster: crate::search::ClusterRules,
    /// Forwarding zones, in file order, with their upstream addresses.
    pub zones: Vec<ZonePlan>,
    /// The Kubernetes API, when a feature reads it.
    pub kubernetes: Option<KubernetesPlan>,
    /// The kube-dns ConfigMap the zones were built with, polled for changes.
    pub kube_dns: Option<KubeDnsSource>,
    /// The query log's sink (each zone says what it logs).
    pub query_log: QueryLogPlan,
    /// Per-namespace budgets (`[budget]`); `None`: off.
    pub budget: Option<BudgetPlan>,
    /// The Service and EndpointSlice watch (`[cluster] follow_api`).
    pub follow_api: Option<FollowApiPlan>,
    /// dnstap output (`[dnstap]`); `None`: off.
    pub dnstap: Option<DnstapPlan>,
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub max_udp_payload: u16,
    pub tcp: TcpLimits,
    pub query_timeout: Duration,
    /// Source ranges answered.
    pub allow: Vec<IpNet>,
    pub rate_limit: Option<RateLimit>,
    pub max_misses_in_flight: usize,
    pub shutdown_grace: Duration,
    /// Answering, not ready, after SIGTERM (`[server] lameduck`).
    pub lameduck: Duration,
    pub handover_socket: Option<PathBuf>,
    /// Answer the CHAOS identity names (`[server] identity`).
    pub identity: bool,
    /// The uid and gid to run as (`[server] run_as_user`, `run_as_group`).
    pub run_as: Option<(u32, u32)>,
    /// The control channel's socket (`[server] control_socket`).
    pub control_socket: Option<PathBuf>,
    /// Per-workload counters (`[server] workload_counters`).
    pub workload_counters: bool,
    /// Their top-K series on /metrics (`[server] workload_metrics`).
    pub workload_metrics: bool,
}

/// The per-client token bucket.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    pub per_second: u32,
    pub burst: u32,
}

/// A configuration error, with the position of the value it is about when known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: Option<PathBuf>,
    /// 1-based line and column.
    pub position: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}:", file.display())?;
        }
        if let Some((line, col)) = self.position {
            write!(f, "{line}:{col}: ")?;
        } else if self.file.is_some() {
            write!(f, " ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl Config {
    /// The watches of the Kubernetes API this configuration needs, and
    /// what each feature behind them asks.
    pub(crate) fn kubernetes_wanted(&self) -> crate::kubernetes::Wanted<'_> {
        let search = self.cluster.search();
        crate::kubernetes::Wanted {
            api: self.kubernetes.as_ref(),
            endpoints: self
                .zones
                .iter()
                .filter_map(|z| z.endpoints.as_ref())
                .collect(),
            namespaces: search.namespaces_from_api,
            pods_needed: search.autopath
                || self.budget.is_some()
                || self.zones.iter().any(|z| z.no_aaaa_for_ipv4_pods),
            pods_of_use: self.server.workload_counters,
            follow_api: self.follow_api.map(|plan| (plan, self.cluster.domain())),
        }
    }
}

impl Config {
    /// The built-in defaults: listen on 127.0.0.1:1053, forward everything
    /// to the nameservers of /etc/resolv.conf.
    pub fn defaults() -> Result<Config, ConfigError> {
        Config::parse("")
    }

    /// Reads, checks and compiles a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_from(path, false)
    }

    /// [`Config::load`] for a start of the server or of the fail-open
    /// guard: what other parties edit (the kube-dns ConfigMap, hosts files)
    /// must not keep DNS from starting, so a bad one is skipped (its zones
    /// or records left out until it reads well, which the server's poll
    /// and reloads pick up) and named in [`Config::skipped`]. Everything
    /// of the file itself is checked as strictly as ever; a reload stays
    /// strict (a bad input then keeps the running configuration).
    pub fn load_to_start(path: &Path) -> Result<Config, ConfigError> {
        Config::load_from(path, true)
    }

    /// Reads, parses, checks and compiles the file at `path`; `lenient`:
    /// see [`Config::load_to_start`]. Every error names the file.
    fn load_from(path: &Path, lenient: bool) -> Result<Config, ConfigError> {
        let named = |mut e: ConfigError| {
            e.file = Some(path.to_owned());
            e
        };
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: Some(path.to_owned()),
            position: None,
            message: format!("cannot read: {e}"),
        })?;
        let mut file = File::parse(&text).map_err(named)?;
        file.inputs = crate::vocab::Inputs::new(lenient);
        let mut config = file
            .compile()
            .map_err(|invalid| named(error_at(&text, invalid, &file.deprecated)))?;
        for d in &mut config.deprecated {
            d.file = Some(path.to_owned());
        }
        Ok(config)
    }

    /// Parses, checks and compiles configuration text; compiling reads the
    /// resolv.conf of each zone that lists no upstreams.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let file = File::parse(text)?;
        file.compile()
            .map_err(|invalid| error_at(text, invalid, &file.deprecated))
    }
}

impl File {
    /// Parses and checks configuration text, without compiling it. A
    /// deprecated key ([`DEPRECATED_KEYS`]) is read as its replacement and
    /// listed in [`File::deprecated`].
    pub fn parse(text: &str) -> Result<File, ConfigError> {
        File::parse_with(text, deprecated::KEYS)
    }

    /// [`File::parse`] with `keys` as the table of deprecated keys.
    pub(crate) fn parse_with(text: &str, keys: &'static [Deprecated]) -> Result<File, ConfigError> {
        let at = |span: std::ops::Range<usize>| Some(line_col(text, span.start));
        let syntax = |e: toml::de::Error| ConfigError {
            file: None,
            position: e.span().and_then(at),
            message: e.message().trim_end().to_string(),
        };
        let mut root = DeTable::parse(text).map_err(syntax)?;
        let renamed =
            deprecated::rename(root.get_mut(), keys).map_err(|(span, message)| ConfigError {
                file: None,
                position: at(span),
                message,
            })?;
        let mut file = File::deserialize(toml::de::Deserializer::from(root)).map_err(syntax)?;
        file.deprecated = renamed
            .into_iter()
            .map(|r| Deprecation {
                file: None,
                position: line_col(text, r.span.start),
                key: r.key,
            })
            .collect();
        if file.zones.is_empty() {
            file.zones.push(file::ZoneConfig::root());
        }
        file.check()
            .map_err(|invalid| error_at(text, invalid, &file.deprecated))?;
        Ok(file)
    }
}

/// The error for a broken rule, positioned in `text` (parsed again for its
/// spans only now, when there is an error to place, with the deprecated
/// keys the file wrote renamed as the load renamed them).
fn error_at(text: &str, invalid: Invalid, renamed: &[Deprecation]) -> ConfigError {
    let tree = DeTable::parse(text).ok().map(|mut root| {
        // The load renamed these without an error: so does this.
        let _ = deprecated::rename(root.get_mut(), renamed.iter().map(|d| d.key));
        root
    });
    let doc = Document::with_tree(text, tree);
    let (span, message) = match invalid {
        Invalid::At(span, message) => (Some(span), message),
        Invalid::Key(path, message) => (doc.locate(&path), message),
    };
    ConfigError {
        file: None,
        position: span.map(|s| doc.line_col(s.start)),
        message,
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
