//! The schema of the configuration file: one TOML document, every option
//! with a default, read as written (with the positions of the values that
//! later checks may need to point at). `check` says whether it makes sense;
//! `compile` turns it into the [`super::Config`] everything else reads.

use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

use crate::upstream::{Policy, PoolConfig, Transport};
use crate::vocab::values::{DnsAddr, ZoneName};

/// The whole file, as written (an empty file is all defaults).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct File {
    pub server: ServerConfig,
    pub cache: crate::cache::config::CacheConfig,
    pub metrics: crate::http::config::MetricsConfig,
    pub log: crate::logging::LogConfig,
    pub node: crate::node::config::NodeConfig,
    pub cluster: ClusterConfig,
    pub kubernetes: KubernetesConfig,
    #[serde(rename = "zone")]
    pub zones: Vec<ZoneConfig>,
    /// The query log's sink (`[query_log]`); each zone says what it logs.
    pub query_log: crate::querylog::config::QueryLogConfig,
    /// Per-namespace query and miss budgets (`[budget]`); off by default.
    pub budget: crate::admission::budget::BudgetConfig,
    /// dnstap over Frame Streams (`[dnstap]`); absent: off.
    pub dnstap: Option<crate::dnstap::config::DnstapConfig>,
    /// Lenient for a start (`Config::load_to_start`): an input another
    /// party edits (the kube-dns ConfigMap, a hosts file) that is bad is
    /// skipped, not an error, and said.
    #[serde(skip)]
    pub(super) inputs: crate::vocab::Inputs,
    /// The deprecated keys the text writes, read as their replacements
    /// (`deprecated.rs`).
    #[serde(skip)]
    pub deprecated: Vec<super::Deprecation>,
}

/// How nodens reaches the Kubernetes API, for the features that read it
/// (a zone's `endpoints`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// A kubeconfig file; without it, the pod's service account (in a
    /// cluster) or `$KUBECONFIG` / `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// This node's name, for the pod watch of `cluster.autopath`; unset:
    /// `$NODE_NAME` (the chart sets it from `spec.nodeName`).
    pub node_name: Option<String>,
    /// The kube-dns ConfigMap's mounted directory (node-cache's
    /// `-kubednscm`): its `stubDomains` become zones, its
    /// `upstreamNameservers` the root zone's upstreams, followed live.
    pub kube_dns_config: Option<Spanned<PathBuf>>,
    /// How often the ConfigMap's files are read for changes.
    #[serde(with = "humantime_serde")]
    pub kube_dns_config_interval: Duration,
    /// Lists as streaming lists (WatchList) where the API server serves
    /// them (docs/scale.md says what they cost).
    pub streaming_lists: bool,
    /// A taint key nodens removes from its own node once it serves, so
    /// that pods are scheduled on a new node only when its cache answers.
    pub startup_taint: Option<String>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            kubeconfig: None,
            node_name: None,
            kube_dns_config: None,
            kube_dns_config_interval: Duration::from_secs(10),
            streaming_lists: false,
            startup_taint: None,
        }
    }
}

impl KubernetesConfig {
    /// The node's name as configured, else from `$NODE_NAME`.
    pub fn node_name(&self) -> Option<String> {
        self.node_name
            .clone()
            .or_else(|| std::env::var("NODE_NAME").ok())
            .filter(|n| !n.is_empty())
    }
}

/// A Service whose EndpointSlices name a zone's upstreams: its ready
/// endpoints are asked directly, the zone's `upstreams` (its ClusterIP)
/// only while they are not known.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EndpointsConfig {
    pub service: Spanned<String>,
    #[serde(default = "default_endpoints_namespace")]
    pub namespace: Spanned<String>,
    /// The name of the Service port to ask (its UDP port; TCP uses the same number).
    #[serde(default = "default_endpoints_port")]
    pub port: String,
    /// Which endpoints are asked first: `auto`, `prefer_close`, `off`.
    #[serde(default)]
    pub topology: crate::upstream::Topology,
}

fn default_endpoints_namespace() -> Spanned<String> {
    Spanned::new(0..0, "kube-system".into())
}

fn default_endpoints_port() -> String {
    "dns".into()
}

/// The cluster's DNS schema: which names nodens answers NXDOMAIN itself
/// (docs/configuration.md, `[cluster]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The kubelet's `clusterDomain`.
    pub domain: Spanned<ZoneName>,
    /// Answer NXDOMAIN for names under the cluster domain (and the cloud
    /// suffixes) that the Kubernetes DNS schema rules out, with the zone's
    /// SOA learned from the cluster DNS, without asking it.
    pub local_nxdomain: bool,
    /// A cached NXDOMAIN for a namespace or Service node under the cluster
    /// domain answers every name below it (RFC 8020).
    pub nxdomain_cut: bool,
    /// Schema rules switched off, by name.
    pub disable_rules: Vec<Spanned<crate::search::Rule>>,
    /// Names at and below which nothing is answered locally (records added
    /// by `rewrite`, `hosts` or a multicluster plugin).
    pub exceptions: Vec<Spanned<ZoneName>>,
    /// Cloud DNS suffixes in the pods' search lists, with the number of
    /// labels their names have.
    pub cloud_suffix: Vec<CloudSuffixConfig>,
    /// Before `X.<ns>.svc.<domain>` (X of two labels or more) goes
    /// upstream, ask whether namespace `<ns>` exists, unless known.
    pub namespace_check: bool,
    /// Resolve the later search-list expansions of a lookup as soon as its
    /// first expansion arrives.
    pub speculate: bool,
    /// The node's search domains, which the kubelet appends to each pod's
    /// search list, in order (the cloud domains).
    pub search_domains: Vec<Spanned<ZoneName>>,
    /// A resolv.conf whose `search` line holds the node's search domains
    /// (the kubelet's `resolvConf`), read instead of `search_domains`.
    pub search_domains_from: Option<Spanned<PathBuf>>,
    /// Speculative upstream queries in flight at most.
    pub max_speculations: usize,
    /// Watch the namespaces through the Kubernetes API (`[kubernetes]`):
    /// names below `<ns>.svc.<domain>` of a namespace that does not exist
    /// are NXDOMAIN without asking.
    pub namespaces_from_api: bool,
    /// Answer the first search-list expansion of a verified pod on this
    /// node with the name its search list ends at, behind a CNAME.
    pub autopath: bool,
    /// Watch Services and EndpointSlices through the Kubernetes API and
    /// drop the cached answers of what they change (`kubernetes::follow`).
    pub follow_api: bool,
    /// With `follow_api`, how long past its TTL an answer the watch covers
    /// may be served while the watch is current (0: not at all).
    #[serde(with = "humantime_serde")]
    pub hold_past_ttl: Duration,
    /// With `follow_api`, which EndpointSlices are watched: `"headless"`
    /// (when unset) or `"all"` (`kubernetes::FollowEndpoints`).
    pub follow_api_endpoints: Option<crate::kubernetes::FollowEndpoints>,
    /// With `follow_api`: a denial of a Service the watch says exists is
    /// replaced by its last positive answer (`cache::last_good`); on when
    /// unset.
    pub keep_last_good: Option<bool>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            domain: Spanned::new(0..0, ZoneName("cluster.local.".into())),
            local_nxdomain: true,
            nxdomain_cut: true,
            disable_rules: Vec::new(),
            exceptions: Vec::new(),
            cloud_suffix: Vec::new(),
            namespace_check: true,
            speculate: true,
            search_domains: Vec::new(),
            search_domains_from: None,
            max_speculations: 256,
            namespaces_from_api: false,
            autopath: false,
            follow_api: false,
            hold_past_ttl: Duration::ZERO,
            follow_api_endpoints: None,
            keep_last_good: None,
        }
    }
}

/// `[[cluster.cloud_suffix]]`: names with more than `max_labels` labels
/// left of `suffix` cannot exist. `*` in `suffix` matches one label.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudSuffixConfig {
    pub suffix: Spanned<String>,
    pub max_labels: Spanned<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Addresses to serve on, UDP and TCP on each.
    pub listen: Vec<Spanned<DnsAddr>>,
    /// Worker threads; 0 means the smaller of the cgroup CPU quota and the
    /// process's CPU affinity mask.
    pub workers: usize,
    /// The largest UDP answer sent to a client, whatever size it advertises.
    pub max_udp_payload: u16,
    /// A client TCP connection with nothing in flight is closed after this long.
    #[serde(with = "humantime_serde")]
    pub tcp_idle_timeout: Duration,
    /// A client TCP message must arrive whole within this long of its first
    /// byte, and a new connection's first message within this long of the
    /// accept (against slowloris: trickled bytes restart no timer).
    #[serde(with = "humantime_serde")]
    pub tcp_read_timeout: Duration,
    /// Concurrent client TCP connections; further ones are closed at once.
    pub tcp_max_connections: usize,
    /// Concurrent TCP connections from one client address.
    pub tcp_max_connections_per_client: usize,
    /// Queries in flight on one client TCP connection before we stop reading it.
    pub tcp_max_in_flight: usize,
    /// The whole time a cache miss may take before the client gets SERVFAIL.
    #[serde(with = "humantime_serde")]
    pub query_timeout: Duration,
    /// Source ranges answered; others get REFUSED. Unset: loopback, the
    /// private, shared (RFC 6598) and link-local ranges, IPv6 ULA and
    /// link-local. `["0.0.0.0/0", "::/0"]` answers everyone.
    pub allow: Option<Vec<Spanned<IpNet>>>,
    /// Queries per second one client address may send; 0: no limit.
    pub client_rate_limit: u32,
    /// Queries a client may send at once above its rate; 0: the rate.
    pub client_rate_burst: u32,
    /// Cache misses waiting on upstreams at once; a miss beyond it gets a
    /// stale answer if there is one, else no answer (it is dropped, as
    /// unbound drops queries beyond `num-queries-per-thread`).
    pub max_misses_in_flight: usize,
    /// Cache misses one zone may have waiting on its upstreams at once (a
    /// bulkhead: a silent stub domain cannot take the others' room); unset:
    /// half of `max_misses_in_flight`; 0: no bound per zone. A zone's own
    /// `max_misses_in_flight` overrides it.
    pub max_misses_in_flight_per_zone: Option<usize>,
    /// On SIGTERM, how long in-flight queries may take to finish.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// A Unix socket path where this process hands its listening sockets
    /// to the process that replaces it, and where a new process asks for
    /// them (zero-loss handover; docs/node.md). Unset: no handover.
    pub handover_socket: Option<PathBuf>,
    /// Answer CHAOS TXT `id.server`/`hostname.bind` (the node) and
    /// `version.server`/`version.bind` (nodens's version), so that a client
    /// (or `nodens doctor`) can tell which server answers.
    pub identity: bool,
    /// The uid nodens runs as once started (as root, by the container
    /// runtime): the server, its supervisor and the guard switch to it,
    /// keeping only the capabilities they need. With it, no other root
    /// process on the node can join nodens's listening sockets, reach its
    /// handover socket or take its claim (docs/security.md). Unset: stay
    /// as started.
    pub run_as_user: Option<u32>,
    /// The gid that goes with `run_as_user` (default: the same number).
    pub run_as_group: Option<u32>,
    /// On SIGTERM, how long to keep answering, not ready, before the
    /// drain: for datapaths that stop sending to a pod only once they see
    /// it not ready (Cilium's LocalRedirectPolicy), as CoreDNS's
    /// `health { lameduck }`. 0: drain at once.
    #[serde(with = "humantime_serde")]
    pub lameduck: Duration,
    /// A Unix socket path for the local control channel (`nodens cache`,
    /// `nodens top`), in a directory private to nodens's uid; unset: none.
    pub control_socket: Option<PathBuf>,
    /// Count queries, hits and answer codes per client workload, for
    /// `nodens top` and the top-K `nodens_workload_*` metrics.
    pub workload_counters: bool,
    /// Publish the top-K `nodens_workload_*` series on /metrics: off by
    /// default, as whoever reaches the metrics port (any pod, on the node
    /// IP) would read which pods of the node ask most.
    pub workload_metrics: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: vec![Spanned::new(
                0..0,
                DnsAddr("127.0.0.1:1053".parse().unwrap()),
            )],
            workers: 0,
            max_udp_payload: 1232,
            tcp_idle_timeout: Duration::from_secs(10),
            tcp_read_timeout: Duration::from_secs(2),
            tcp_max_connections: 1024,
            tcp_max_connections_per_client: 64,
            tcp_max_in_flight: 64,
            query_timeout: Duration::from_secs(4),
            allow: None,
            client_rate_limit: 0,
            client_rate_burst: 0,
            max_misses_in_flight: 2048,
            max_misses_in_flight_per_zone: None,
            shutdown_grace: Duration::from_secs(5),
            handover_socket: None,
            identity: true,
            run_as_user: None,
            run_as_group: None,
            lameduck: Duration::ZERO,
            control_socket: None,
            workload_counters: false,
            workload_metrics: false,
        }
    }
}

/// One forwarding zone: queries at or below `name` go to `upstreams`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneConfig {
    pub name: Spanned<ZoneName>,
    /// Upstream servers, `IP` or `IP:port`; empty means the nameservers of `resolv_conf`.
    #[serde(default)]
    pub upstreams: Vec<Spanned<DnsAddr>>,
    #[serde(default = "default_resolv_conf")]
    pub resolv_conf: PathBuf,
    /// A Kubernetes Service whose address Kubernetes puts in the
    /// environment (`<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`), as
    /// node-cache's `-upstreamsvc`; used when `upstreams` is empty.
    #[serde(default)]
    pub upstream_service: Option<String>,
    #[serde(default)]
    pub policy: Policy,
    /// How long to wait for one upstream before trying the next.
    #[serde(default = "default_upstream_timeout", with = "humantime_serde")]
    pub upstream_timeout: Duration,
    /// TTL clamps for answers (positive responses).
    #[serde(default, with = "humantime_serde")]
    pub min_ttl: Duration,
    #[serde(default = "default_max_ttl", with = "humantime_serde")]
    pub max_ttl: Duration,
    /// Upper clamp for NXDOMAIN and NODATA (RFC 2308 TTLs from the SOA).
    #[serde(default = "default_negative_max_ttl", with = "humantime_serde")]
    pub negative_max_ttl: Duration,
    /// How queries travel to this zone's upstreams.
    #[serde(default)]
    pub transport: Transport,
    /// Randomise the letter case of questions sent over UDP and accept only
    /// answers in the same case (0x20); a server that does not keep case
    /// is detected and asked without it. Unset: on, but for zones at or
    /// below `[cluster] domain` (see `randomize_case_for`).
    #[serde(default)]
    pub randomize_case: Option<bool>,
    /// The bounded TCP connection pool, one per upstream address.
    #[serde(default)]
    pub pool: PoolConfig,
    /// Discover the upstreams from a Service's EndpointSlices (`[kubernetes]`).
    #[serde(default)]
    pub endpoints: Option<EndpointsConfig>,
    /// How a `transport = "tls"` zone checks its upstreams' certificates.
    #[serde(default)]
    pub tls: Option<crate::upstream::tls::config::TlsConfig>,
    /// Cache misses this zone may have waiting on its upstreams at once
    /// (`[server] max_misses_in_flight_per_zone` when unset; 0: no bound).
    #[serde(default)]
    pub max_misses_in_flight: Option<Spanned<usize>>,
    /// Consecutive failed exchanges after which an upstream is marked down:
    /// skipped while another is up, and probed with backoff until it answers.
    #[serde(default = "default_max_fails")]
    pub max_fails: u32,
    /// First wait between health probes of a down upstream; doubles up to 30 s.
    #[serde(default = "default_health_check", with = "humantime_serde")]
    pub health_check: Duration,
    /// This zone's cache policy, each key falling back to `[cache]`.
    #[serde(default)]
    pub cache: crate::cache::config::ZoneCacheConfig,
    /// Local records (`[zone.hosts]`), synthesised answers
    /// (`[[zone.template]]`) and the RFC 6761 names (`local`), answered
    /// before the cache (`records`).
    #[serde(default)]
    pub hosts: Option<crate::records::config::HostsConfig>,
    #[serde(default)]
    pub template: Vec<crate::records::config::TemplateConfig>,
    #[serde(default)]
    pub local: bool,
    /// Answer every question left with the client's address and port
    /// (CoreDNS's `whoami`).
    #[serde(default)]
    pub whoami: bool,
    /// The listen addresses (of `[server] listen`) this zone serves, a
    /// view: empty, every one. The same zone name may appear again for
    /// other addresses with other settings.
    #[serde(default)]
    pub listen: Vec<Spanned<DnsAddr>>,
    /// Names at and below these the zone does not forward (CoreDNS's
    /// `forward ... { except }`): SERVFAIL.
    #[serde(default)]
    pub except: Vec<Spanned<ZoneName>>,
    /// Question rewrites, in order (`[[zone.rewrite]]`, CoreDNS's `rewrite`).
    #[serde(default)]
    pub rewrite: Vec<super::zone_rules::RewriteConfig>,
    /// AAAA synthesized from A (`[zone.dns64]`, RFC 6147).
    #[serde(default)]
    pub dns64: Option<super::zone_rules::Dns64Config>,
    /// The zone's query log (`[zone.query_log]`); none: not logged.
    #[serde(default)]
    pub query_log: Option<crate::querylog::config::ZoneQueryLogConfig>,
    /// Answer AAAA questions from pods of this node that hold no IPv6
    /// address with NODATA, without asking (the node's pod watch).
    #[serde(default)]
    pub no_aaaa_for_ipv4_pods: bool,
    /// Answers keep only their answer section (`minimal`).
    #[serde(default)]
    pub minimal: bool,
}

fn default_max_fails() -> u32 {
    2
}
fn default_health_check() -> Duration {
    Duration::from_millis(500)
}

fn default_resolv_conf() -> PathBuf {
    PathBuf::from("/etc/resolv.conf")
}
fn default_upstream_timeout() -> Duration {
    Duration::from_secs(2)
}
fn default_max_ttl() -> Duration {
    Duration::from_secs(3600)
}
fn default_negative_max_ttl() -> Duration {
    Duration::from_secs(1800)
}

impl ZoneConfig {
    /// The zone for everything, forwarding to the nameservers of /etc/resolv.conf,
    /// every other setting at its default: what a `[[zone]]` that sets nothing
    /// has (`convert` compares a zone's settings with it).
    pub fn root() -> Self {
        ZoneConfig {
            name: Spanned::new(0..0, ZoneName(".".into())),
            upstreams: Vec::new(),
            resolv_conf: default_resolv_conf(),
            upstream_service: None,
            policy: Policy::default(),
            upstream_timeout: default_upstream_timeout(),
            min_ttl: Duration::ZERO,
            max_ttl: default_max_ttl(),
            negative_max_ttl: default_negative_max_ttl(),
            transport: Transport::default(),
            randomize_case: None,
            endpoints: None,
            tls: None,
            pool: PoolConfig::default(),
            max_misses_in_flight: None,
            max_fails: default_max_fails(),
            health_check: default_health_check(),
            cache: Default::default(),
            hosts: None,
            template: Vec::new(),
            local: false,
            whoami: false,
            listen: Vec::new(),
            except: Vec::new(),
            rewrite: Vec::new(),
            dns64: None,
            query_log: None,
            no_aaaa_for_ipv4_pods: false,
            minimal: false,
        }
    }
}
