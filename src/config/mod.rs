//! Configuration: the file assembled from the features' sections
//! ([`File`], in `file.rs`), the rules across sections (`check.rs`,
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

pub use crate::admission::budget::{
    BudgetAction, BudgetConfig, BudgetLimits, BudgetPlan, NamespaceBudgetConfig,
};
pub use crate::dnstap::config::{DnstapConfig, DnstapPlan, DnstapQueue, DnstapSocket};
pub use crate::records::config::{FallthroughConfig, HostsConfig, RecordsPlan, TemplateConfig};
use crate::vocab::position::Document;
use check::Invalid;
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
        file.compile()
            .map_err(|invalid| named(error_at(&text, invalid)))
    }

    /// Parses, checks and compiles configuration text; compiling reads the
    /// resolv.conf of each zone that lists no upstreams.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let file = File::parse(text)?;
        file.compile().map_err(|invalid| error_at(text, invalid))
    }
}

impl File {
    /// Parses and checks configuration text, without compiling it.
    pub fn parse(text: &str) -> Result<File, ConfigError> {
        let mut file: File = toml::from_str(text).map_err(|e| ConfigError {
            file: None,
            position: e
                .span()
                .map(|s| crate::vocab::position::line_col(text, s.start)),
            message: e.message().trim_end().to_string(),
        })?;
        if file.zones.is_empty() {
            file.zones.push(file::ZoneConfig::root());
        }
        file.check().map_err(|invalid| error_at(text, invalid))?;
        Ok(file)
    }
}

/// The error for a broken rule, positioned in `text` (parsed again for its
/// spans only now, when there is an error to place).
fn error_at(text: &str, invalid: Invalid) -> ConfigError {
    let doc = Document::new(text);
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
mod tests {
    use super::*;

    #[test]
    fn defaults_serve() {
        let c = File::parse("").unwrap();
        assert_eq!(
            c.server
                .listen
                .iter()
                .map(|a| a.get_ref().0)
                .collect::<Vec<_>>(),
            vec!["127.0.0.1:1053".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(c.zones.len(), 1);
        assert_eq!(c.zones[0].name.get_ref().0, ".");
        assert!(c.zones[0].upstreams.is_empty());
    }

    #[test]
    fn syntax_error_names_line() {
        let e = File::parse("[server]\nlisten = [\"127.0.0.1:53\"\nworkers = 2\n").unwrap_err();
        assert!(e.position.is_some(), "{e}");
    }

    #[test]
    fn bad_value_names_line() {
        let e = Config::parse("[server]\nworkers = 1\n\n[[zone]]\nname = \"cluster.local\"\nupstreams = [\"10.0.0.300\"]\n")
            .unwrap_err();
        assert_eq!(e.position.unwrap().0, 6, "{e}");
        assert!(e.message.contains("10.0.0.300"), "{e}");
    }

    #[test]
    fn node_search_domains_from_a_resolv_conf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(
            &path,
            "search . a.example Corp.Internal.\nnameserver 10.0.0.2\n",
        )
        .unwrap();
        let text = format!("[cluster]\nsearch_domains_from = \"{}\"\n", path.display());
        let c = Config::parse(&text).unwrap();
        assert_eq!(
            c.cluster.search().search_domains,
            [&b"\x01a\x07example\x00"[..], b"\x04corp\x08internal\x00"].map(Box::from)
        );
        let missing = format!(
            "[cluster]\n\nsearch_domains_from = \"{}/none\"\n",
            dir.path().display()
        );
        let e = Config::parse(&missing).unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
        let both = format!("{text}search_domains = [\"x.example\"]\n");
        assert!(
            Config::parse(&both)
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
    }

    #[test]
    fn a_shared_directory_is_never_taken_for_a_socket_or_file() {
        for (text, line) in [
            ("[server]\ncontrol_socket = \"/run/control.sock\"\n", 2),
            ("[server]\nhandover_socket = \"/tmp/h.sock\"\n", 2),
            ("[cache]\nsnapshot_file = \"/var/lib/cache.snap\"\n", 2),
        ] {
            let e = Config::parse(text).unwrap_err();
            assert_eq!(e.position.map(|p| p.0), Some(line), "{e}");
            assert!(e.message.contains("other programs share"), "{e}");
        }
        let e = Config::parse("[node]\nsetup = true\nstate_dir = \"/run\"\n").unwrap_err();
        assert!(
            e.message.contains("node.state_dir: /run is a directory"),
            "{e}"
        );
        Config::parse("[server]\ncontrol_socket = \"/run/nodens/control.sock\"\n").unwrap();
    }

    #[test]
    fn autopath_takes_the_node_name() {
        let c = Config::parse("[cluster]\nautopath = true\n[kubernetes]\nnode_name = \"n1\"\n")
            .unwrap();
        assert_eq!(c.kubernetes.unwrap().node_name.as_deref(), Some("n1"));
    }

    #[test]
    fn unknown_key_names_line() {
        let e = Config::parse("[cache]\ncapacity = \"1 MiB\"\nprefetch = 3\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
    }

    #[test]
    fn duplicate_zone_names_second_line() {
        let text = "[[zone]]\nname = \"a.\"\nupstreams = [\"127.0.0.1\"]\n[[zone]]\nname = \"A\"\nupstreams = [\"127.0.0.1\"]\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 5, "{e}");
    }

    #[test]
    fn forwarding_loop_is_an_error() {
        let text = "[server]\nlisten = [\"127.0.0.1:1053\"]\n[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1053\"]\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 5, "{e}");
    }

    #[test]
    fn case_randomisation_is_off_by_default_under_the_cluster_domain() {
        let zone = |name: &str, extra: &str| {
            format!("[[zone]]\nname = \"{name}\"\nupstreams = [\"10.0.0.10\"]\n{extra}")
        };
        let text = [
            zone("cluster.local", ""),
            zone("svc.cluster.local", ""),
            zone("xcluster.local", ""),
            zone(".", ""),
            zone("corp.example", "randomize_case = false\n"),
            zone("team.cluster.local", "randomize_case = true\n"),
        ]
        .concat();
        let c = Config::parse(&text).unwrap();
        let on: Vec<bool> = c.zones.iter().map(|z| z.randomize_case).collect();
        assert_eq!(on, [false, false, true, true, false, true]);
        let c = Config::parse(&format!("[cluster]\ndomain = \"k8s.example\"\n{text}")).unwrap();
        let on: Vec<bool> = c.zones.iter().map(|z| z.randomize_case).collect();
        assert_eq!(on, [true, true, true, true, false, true]);
    }

    #[test]
    fn addresses_default_to_port_53() {
        let c = Config::parse(
            "[[zone]]\nname = \"x\"\nupstreams = [\"::1\", \"[::1]:5353\", \"10.0.0.1\"]\n",
        )
        .unwrap();
        let ups: Vec<String> = c.zones[0].upstreams.iter().map(|u| u.to_string()).collect();
        assert_eq!(ups, ["[::1]:53", "[::1]:5353", "10.0.0.1:53"]);
        assert_eq!(c.zones[0].name, "x.");
    }

    #[test]
    fn pool_table_belongs_to_its_zone() {
        let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\ntransport = \"force_tcp\"\n\
                    [zone.pool]\nmax_connections = 2\nidle_timeout = \"1s\"\n\
                    [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.2\"]\n";
        let c = Config::parse(text).unwrap();
        assert_eq!(c.zones[0].transport, Transport::ForceTcp);
        assert_eq!(c.zones[0].upstream.pool.max_connections, 2);
        assert_eq!(
            c.zones[0].upstream.pool.idle_timeout,
            Duration::from_secs(1)
        );
        assert_eq!(c.zones[1].transport, Transport::PreferUdp);
        assert_eq!(c.zones[1].upstream.pool.max_connections, 4);
        let e = Config::parse("[[zone]]\nname = \"a\"\n[zone.pool]\nmax_conns = 2\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 4, "{e}");
    }

    #[test]
    fn shared_upstream_needs_one_pool_setting() {
        let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\n[zone.pool]\nmax_connections = 2\n\
                    [[zone]]\nname = \"b\"\nupstreams = [\"127.0.0.1\"]\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 8, "{e}");
    }

    #[test]
    fn allow_list_errors_name_the_line() {
        let c = Config::parse("[server]\nallow = [\"10.0.0.0/8\", \"::/0\"]\n").unwrap();
        assert_eq!(c.server.allow.len(), 2);
        assert_eq!(
            Config::parse("[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1\"]\n")
                .unwrap()
                .server
                .allow
                .len(),
            9
        );
        let e = Config::parse("[server]\nworkers = 1\nallow = [\"10.0.0.0/33\"]\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
    }

    #[test]
    fn server_and_cache_errors_name_the_line() {
        let e = Config::parse("[server]\nworkers = 1\nquery_timeout = \"0s\"\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
        let e = Config::parse("[cache]\n\nprefetch_percent = 101\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
        let e = Config::parse("[metrics]\nlisten = \"nowhere\"\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 2, "{e}");
        let e = Config::parse("\n[log]\nlevel = \"=[\"\n").unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
    }

    #[test]
    fn zone_errors_name_the_field() {
        let text = "[[zone]]\nname = \"a\"\nupstreams = [\"127.0.0.1\"]\nhealth_check = \"0s\"\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 4, "{e}");
    }

    #[test]
    fn a_key_left_out_is_located_through_its_table() {
        use crate::vocab::position::Step::{Index, Key};
        let text = "[server]\nworkers = 1\n\n[[zone]]\nname = \"a\"\n";
        let doc = Document::new(text);
        let at = |path: &[crate::vocab::position::Step<'_>]| {
            doc.locate(path).map(|s| doc.line_col(s.start).0)
        };
        assert_eq!(at(&[Key("server"), Key("query_timeout")]), Some(1));
        assert_eq!(at(&[Key("zone"), Index(0), Key("resolv_conf")]), Some(4));
        assert_eq!(at(&[Key("cache"), Key("capacity")]), None);
    }

    #[test]
    fn missing_resolv_conf_names_the_zone() {
        let text = "[[zone]]\nname = \"a\"\nresolv_conf = \"/nonexistent/resolv.conf\"\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.position.unwrap().0, 3, "{e}");
        assert!(e.message.contains("/nonexistent/resolv.conf"), "{e}");
    }
}
