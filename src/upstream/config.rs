//! What a forwarding zone is built from ([`ZonePlan`]: compiled by
//! `config` from a `[[zone]]`), and the zone section's choices of how its
//! upstreams are asked ([`Policy`], [`Transport`]) and run
//! ([`UpstreamSettings`]).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::PoolConfig;
use crate::cache::TtlPolicy;
use crate::cache::config::CachePolicy;
use crate::querylog::config::ZoneLogPlan;
use crate::records::config::RecordsPlan;

/// One forwarding zone, ready to be built.
#[derive(Debug, Clone)]
pub struct ZonePlan {
    /// Presentation form ("cluster.local.", ".").
    pub name: String,
    /// The listed upstreams, or the nameservers of the zone's resolv.conf.
    pub upstreams: Vec<SocketAddr>,
    pub policy: Policy,
    pub transport: Transport,
    pub randomize_case: bool,
    pub upstream_timeout: Duration,
    pub ttl: TtlPolicy,
    /// How this zone wants its upstreams run (pool, health, logs).
    pub upstream: UpstreamSettings,
    /// Upstreams discovered from a Service's EndpointSlices; `upstreams`
    /// is the fallback while they are unknown.
    pub endpoints: Option<EndpointsPlan>,
    /// The zone's cache policy (`[zone.cache]` over `[cache]`).
    pub cache: CachePolicy,
    /// Answers from the configuration before the cache (`records`).
    pub records: Option<RecordsPlan>,
    /// The listen addresses this zone serves (a view); empty: every one.
    pub listen: Vec<SocketAddr>,
    /// `except`, `rewrite`, `dns64` compiled (`zone_rules.rs`); `None`: plain forwarding.
    pub(crate) rules: Option<std::sync::Arc<super::rules::ZoneRules>>,
    /// What the zone's query log logs; `None`: nothing.
    pub query_log: Option<ZoneLogPlan>,
    /// AAAA from a pod of this node without IPv6: NODATA, not asked.
    pub no_aaaa_for_ipv4_pods: bool,
    /// Answers keep only their answer section (`minimal`).
    pub minimal: bool,
    /// Cache misses the zone may have waiting at once (its bulkhead); 0:
    /// no bound but the server's.
    pub max_misses_in_flight: usize,
    /// How many of `upstreams` (at their front) are on this node, then in
    /// its zone: asked first (`[zone.endpoints] topology`). [0, 0]: none.
    pub near: [usize; 2],
}

/// What an upstream is built from; an upstream whose settings did not
/// change survives a reload with its connections and health.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSettings {
    pub pool: PoolConfig,
    pub max_fails: u32,
    pub health_check: Duration,
    /// Probe through the pool (the zone forces TCP or TLS) or over UDP.
    pub probe_through_pool: bool,
    /// DNS over TLS (`[zone.tls]`): every connection of the pool is a TLS session.
    pub tls: Option<super::tls::TlsClient>,
    pub probe_timeout: Duration,
    /// At most one log line per this interval for the upstream's errors.
    pub log_interval: Duration,
}

/// The Service whose ready endpoints a zone asks (`[zone.endpoints]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EndpointsPlan {
    pub namespace: String,
    pub service: String,
    pub port: String,
    /// Which endpoints are asked first (`topology`).
    pub topology: Topology,
}

/// Which of a Service's endpoints a zone asks first (`[zone.endpoints]
/// topology`): those on this node, then those in its zone, then the rest
/// (each in the zone's order, those marked down last), as kube-proxy
/// routes a Service with `trafficDistribution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// Near first when the Service asks for it: its slices carry the
    /// hints `trafficDistribution` (PreferClose, PreferSameZone,
    /// PreferSameNode) or topology-aware routing put there.
    #[default]
    Auto,
    /// Near first, always (the endpoints' node and zone).
    PreferClose,
    /// Any endpoint, in random order.
    Off,
}

/// In which order a zone's upstreams are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// In the configured order, like resolv.conf.
    #[default]
    Sequential,
    /// A random first upstream per query, then the others in order.
    Random,
    /// Each query starts at the next upstream in turn, then the others in
    /// order (CoreDNS forward's `policy round_robin`).
    RoundRobin,
}

/// How a zone's queries travel upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// UDP; TCP (through the pool) only for an answer that came back truncated.
    #[default]
    PreferUdp,
    /// Every query over TCP through the pool (NodeLocal DNSCache's `force_tcp`).
    ForceTcp,
    /// UDP, and the same query over TCP if UDP gets no answer within half
    /// the upstream timeout (a datagram lost to a conntrack race, say).
    TcpFallbackOnTimeout,
    /// Every query over TLS (RFC 7858) through the pool, checked as
    /// `[zone.tls]` says; never in the clear.
    Tls,
}
