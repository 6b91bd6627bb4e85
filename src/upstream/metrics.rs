//! Upstream metrics: CoreDNS's `coredns_proxy_*` (as its `forward` plugin
//! names them) and nodens's per-upstream health, pool and queue series.

use prometheus::{Histogram, IntCounter};

use crate::metrics::label_set;
use crate::metrics::{Counters, Gauges, Histograms, Registry, duration_buckets};
use crate::wire::rcode_name;

/// CoreDNS's `proxy_name` label value for its forward plugin.
pub(crate) const PROXY_NAME: &str = "forward";

label_set! {
    pub struct ToLabels { to = "to" }
    pub struct ProxyLabels { proxy_name = "proxy_name", to = "to" }
    pub struct ProxyProtoLabels { proxy_name = "proxy_name", to = "to", proto = "proto" }
    pub struct ProxyRcodeLabels { proxy_name = "proxy_name", to = "to", rcode = "rcode" }
    pub struct ErrorLabels { to = "to", error = "error" }
    pub struct ToResultLabels { to = "to", result = "result" }
    pub struct StateLabels { to = "to", state = "state" }
    pub struct ToReasonLabels { to = "to", reason = "reason" }
    /// A zone's bulkhead (`bulkhead.rs`).
    pub struct ZoneViewLabels { zone = "zone", view = "view" }
}

pub struct UpstreamMetrics {
    pub proxy_duration: Histograms<ProxyRcodeLabels<'static>>,
    pub proxy_conn_hits: Counters<ProxyProtoLabels<'static>>,
    pub proxy_conn_misses: Counters<ProxyProtoLabels<'static>>,
    pub errors: Counters<ErrorLabels<'static>>,
    pub inflight: Gauges<ToLabels<'static>>,
    pub healthy: Gauges<ToLabels<'static>>,
    pub health_checks: Counters<ToResultLabels<'static>>,
    pub health_transitions: Counters<StateLabels<'static>>,
    pub proxy_healthcheck_failures: Counters<ProxyLabels<'static>>,
    pub pool_connections: Gauges<StateLabels<'static>>,
    pub pool_dials: Counters<ToLabels<'static>>,
    pub pool_dial_failures: Counters<ToLabels<'static>>,
    pub pool_closed: Counters<ToReasonLabels<'static>>,
    /// DNS-over-TLS handshakes, by how they ended (`tls`).
    pub tls_handshakes: Counters<ToResultLabels<'static>>,
    pub queue_length: Gauges<ToLabels<'static>>,
    pub queue_capacity: Gauges<ToLabels<'static>>,
    pub queue_wait: Histograms<ToLabels<'static>>,
    pub queue_rejected: Counters<ToReasonLabels<'static>>,
    /// A zone's misses in flight, and those turned away by its bulkhead.
    pub zone_misses: Gauges<ZoneViewLabels<'static>>,
    pub zone_rejected: Counters<ZoneViewLabels<'static>>,
    /// Answers a rewrite or a dns64 synthesis would have made longer than
    /// a DNS message can be (answered SERVFAIL), with their warning.
    pub(crate) rewrite_too_long: super::rules::TooLong,
}

impl UpstreamMetrics {
    pub fn register(r: &Registry) -> UpstreamMetrics {
        UpstreamMetrics {
            proxy_duration: r.histograms(
                "coredns_proxy_request_duration_seconds",
                "Histogram of the time each request took.",
                duration_buckets(),
            ),
            proxy_conn_hits: r.counters(
                "coredns_proxy_conn_cache_hits_total",
                "Counter of connection cache hits per upstream and protocol.",
            ),
            proxy_conn_misses: r.counters(
                "coredns_proxy_conn_cache_misses_total",
                "Counter of connection cache misses per upstream and protocol.",
            ),
            errors: r.counters(
                "nodens_upstream_errors_total",
                "Upstream exchanges that failed, by upstream and kind of failure.",
            ),
            inflight: r.gauges(
                "nodens_upstream_inflight",
                "Queries in flight to an upstream, UDP and TCP.",
            ),
            healthy: r.gauges(
                "nodens_upstream_healthy",
                "1 while an upstream is up, 0 while it is marked down and probed.",
            ),
            health_checks: r.counters(
                "nodens_upstream_health_checks_total",
                "Health probes of upstreams marked down, by result.",
            ),
            health_transitions: r.counters(
                "nodens_upstream_health_transitions_total",
                "Times an upstream was marked down or up again, by the state it went to.",
            ),
            proxy_healthcheck_failures: r.counters(
                "coredns_proxy_healthcheck_failures_total",
                "Count of failed health checks per upstream.",
            ),
            pool_connections: r.gauges(
                "nodens_upstream_tcp_connections",
                "Open TCP connections to an upstream, idle (nothing in flight) or busy.",
            ),
            pool_dials: r.counters(
                "nodens_upstream_tcp_dials_total",
                "TCP connections dialled to an upstream.",
            ),
            pool_dial_failures: r.counters(
                "nodens_upstream_tcp_dial_failures_total",
                "TCP dials to an upstream that failed or timed out.",
            ),
            pool_closed: r.counters(
                "nodens_upstream_tcp_closed_total",
                "TCP connections to an upstream closed, by reason.",
            ),
            tls_handshakes: r.counters(
                "nodens_upstream_tls_handshakes_total",
                "TLS handshakes with a DNS-over-TLS upstream, by result: full, resumed (a session resumed), certificate (the upstream's certificate refused), timeout, error.",
            ),
            queue_length: r.gauges(
                "nodens_upstream_queue_length",
                "Queries waiting for a TCP connection slot to an upstream.",
            ),
            queue_capacity: r.gauges(
                "nodens_upstream_queue_capacity",
                "The configured wait queue size (pool.max_queue) of an upstream.",
            ),
            queue_wait: r.histograms(
                "nodens_upstream_queue_wait_seconds",
                "Time queries waited in the queue for a TCP connection slot.",
                duration_buckets(),
            ),
            queue_rejected: r.counters(
                "nodens_upstream_queue_rejected_total",
                "Queries failed by the wait queue: it was full, or the wait expired.",
            ),
            zone_misses: r.gauges(
                "nodens_zone_misses_in_flight",
                "Cache misses of a zone waiting on its upstreams now (its bulkhead: [[zone]] max_misses_in_flight).",
            ),
            zone_rejected: r.counters(
                "nodens_zone_misses_rejected_total",
                "Cache misses of a zone turned away because the zone had its max_misses_in_flight waiting: answered stale or SERVFAIL at once.",
            ),
            rewrite_too_long: super::rules::TooLong::new(r.counter(
                "nodens_rewrite_too_long_total",
                "Rewritten or dns64-synthesized answers that would have been longer than 65,535 bytes, answered SERVFAIL.",
            )),
        }
    }

    /// `nodens_upstream_errors_total{to, error}`.
    pub fn error(&self, to: &str, error: &str) -> IntCounter {
        self.errors.get(&ErrorLabels { to, error })
    }

    /// `nodens_upstream_health_transitions_total` for one upstream, into `state`.
    pub fn transition(&self, to: &str, state: &str) -> IntCounter {
        self.health_transitions.get(&StateLabels { to, state })
    }

    /// `coredns_proxy_request_duration_seconds` for one upstream and rcode.
    pub fn duration(&self, to: &str, rcode: u16) -> Histogram {
        self.proxy_duration.get(&ProxyRcodeLabels {
            proxy_name: PROXY_NAME,
            to,
            rcode: rcode_name(rcode),
        })
    }

    /// The connection-reuse counters (hit, miss) for `proto` ("udp", "tcp").
    pub fn conn_reuse(&self, to: &str, proto: &str) -> (IntCounter, IntCounter) {
        let labels = ProxyProtoLabels {
            proxy_name: PROXY_NAME,
            to,
            proto,
        };
        (
            self.proxy_conn_hits.get(&labels),
            self.proxy_conn_misses.get(&labels),
        )
    }
}
