//! Prometheus metrics and the HTTP server for /metrics, /health and /ready.
//!
//! Where a metric means what a CoreDNS metric means, it has CoreDNS's name,
//! labels and buckets, so the dashboards and alerts people already run for
//! NodeLocal DNSCache keep working. Everything else is `nodens_*`.
//! The full list is in docs/metrics.md.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder, exponential_buckets,
};
use tokio_util::sync::CancellationToken;

use crate::cache::CacheStats;

/// CoreDNS's `view` label; nodens has no views, so it is always empty.
pub const VIEW: &str = "";
/// CoreDNS's `proxy_name` label value for its forward plugin.
pub const PROXY_NAME: &str = "forward";
/// CoreDNS's `plugin` label on responses: which plugin wrote the reply. In
/// NodeLocal DNSCache's chain every answer passes through `cache`, forwarded
/// ones included; a SERVFAIL written after a forward error has none.
pub const PLUGIN_CACHE: &str = "cache";
pub const PLUGIN_NONE: &str = "";
/// CoreDNS's `zone` label for queries that matched no zone (answered REFUSED).
pub const ZONE_DROPPED: &str = "dropped";

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub responses: IntCounterVec,
    pub request_duration: HistogramVec,
    pub request_size: HistogramVec,
    pub response_size: HistogramVec,
    pub do_requests: IntCounterVec,
    pub cache_hits: IntCounterVec,
    pub cache_misses: IntCounterVec,
    pub cache_requests: IntCounterVec,
    pub cache_prefetch: IntCounterVec,
    pub cache_served_stale: IntCounterVec,
    cache_entries: IntGaugeVec,
    cache_evictions: IntCounterVec,
    cache_bytes: IntGauge,
    cache_capacity: IntGauge,
    evictions_seen: [AtomicU64; 2],
    pub proxy_duration: HistogramVec,
    pub proxy_conn_hits: IntCounterVec,
    pub proxy_conn_misses: IntCounterVec,
    pub upstream_errors: IntCounterVec,
    pub coalesced: IntCounter,
    pub rejected: IntCounterVec,
    pub inflight: IntGauge,
    pub tcp_connections: IntGauge,
    pub tcp_rejected: IntCounter,
    pub tcp_closed: IntCounterVec,
    pub reloads: IntCounterVec,
    pub workers: IntGauge,
    pub upstream_inflight: IntGaugeVec,
    pub upstream_healthy: IntGaugeVec,
    pub health_checks: IntCounterVec,
    pub proxy_healthcheck_failures: IntCounterVec,
    pub pool_connections: IntGaugeVec,
    pub pool_dials: IntCounterVec,
    pub pool_dial_failures: IntCounterVec,
    pub pool_closed: IntCounterVec,
    pub queue_length: IntGaugeVec,
    pub queue_capacity: IntGaugeVec,
    pub queue_wait: HistogramVec,
    pub queue_rejected: IntCounterVec,
    /// The `server` label the cache-wide gauges carry (the first listener).
    cache_server: String,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("valid metric");
    registry
        .register(Box::new(h.clone()))
        .expect("unique metric");
    h
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

/// CoreDNS's duration buckets: 0.25 ms doubling up to about 8 s.
fn duration_buckets() -> Vec<f64> {
    exponential_buckets(0.00025, 2.0, 16).expect("valid buckets")
}

/// CoreDNS's size buckets, in bytes.
fn size_buckets() -> Vec<f64> {
    vec![
        0.0, 100.0, 200.0, 300.0, 400.0, 511.0, 1023.0, 2047.0, 4095.0, 8291.0, 16e3, 32e3, 48e3,
        64e3,
    ]
}

impl Metrics {
    pub fn new(cache_server: String) -> Metrics {
        let r = Registry::new();
        let m = Metrics {
            requests: counter(
                &r,
                "coredns_dns_requests_total",
                "Counter of DNS requests made per zone, protocol and family.",
                &["server", "zone", "view", "proto", "family", "type"],
            ),
            responses: counter(
                &r,
                "coredns_dns_responses_total",
                "Counter of response status codes.",
                &["server", "zone", "view", "rcode", "plugin"],
            ),
            request_duration: histogram(
                &r,
                "coredns_dns_request_duration_seconds",
                "Histogram of the time (in seconds) each request took per zone.",
                &["server", "zone", "view"],
                duration_buckets(),
            ),
            request_size: histogram(
                &r,
                "coredns_dns_request_size_bytes",
                "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol.",
                &["server", "zone", "view", "proto"],
                size_buckets(),
            ),
            response_size: histogram(
                &r,
                "coredns_dns_response_size_bytes",
                "Size of the returned response in bytes.",
                &["server", "zone", "view", "proto"],
                size_buckets(),
            ),
            do_requests: counter(
                &r,
                "coredns_dns_do_requests_total",
                "Counter of DNS requests with DO bit set per zone.",
                &["server", "view", "zone"],
            ),
            cache_hits: counter(
                &r,
                "coredns_cache_hits_total",
                "The count of cache hits.",
                &["server", "type", "zones", "view"],
            ),
            cache_misses: counter(
                &r,
                "coredns_cache_misses_total",
                "The count of cache misses. Deprecated, derive misses from cache hits/requests counters.",
                &["server", "zones", "view"],
            ),
            cache_requests: counter(
                &r,
                "coredns_cache_requests_total",
                "The count of cache requests.",
                &["server", "zones", "view"],
            ),
            cache_prefetch: counter(
                &r,
                "coredns_cache_prefetch_total",
                "The number of times the cache has prefetched a cached item.",
                &["server", "zones", "view"],
            ),
            cache_served_stale: counter(
                &r,
                "coredns_cache_served_stale_total",
                "The number of requests served from stale cache entries.",
                &["server", "zones", "view"],
            ),
            cache_entries: {
                let g = IntGaugeVec::new(
                    Opts::new(
                        "coredns_cache_entries",
                        "The number of elements in the cache.",
                    ),
                    &["server", "type", "zones", "view"],
                )
                .expect("valid metric");
                r.register(Box::new(g.clone())).expect("unique metric");
                g
            },
            cache_evictions: counter(
                &r,
                "coredns_cache_evictions_total",
                "The count of cache evictions.",
                &["server", "type", "zones", "view"],
            ),
            cache_bytes: gauge(
                &r,
                "nodens_cache_bytes",
                "Bytes held by the cache (entries and keys).",
            ),
            cache_capacity: gauge(
                &r,
                "nodens_cache_capacity_bytes",
                "The configured cache capacity in bytes.",
            ),
            evictions_seen: [AtomicU64::new(0), AtomicU64::new(0)],
            proxy_duration: histogram(
                &r,
                "coredns_proxy_request_duration_seconds",
                "Histogram of the time each request took.",
                &["proxy_name", "to", "rcode"],
                duration_buckets(),
            ),
            proxy_conn_hits: counter(
                &r,
                "coredns_proxy_conn_cache_hits_total",
                "Counter of connection cache hits per upstream and protocol.",
                &["proxy_name", "to", "proto"],
            ),
            proxy_conn_misses: counter(
                &r,
                "coredns_proxy_conn_cache_misses_total",
                "Counter of connection cache misses per upstream and protocol.",
                &["proxy_name", "to", "proto"],
            ),
            upstream_errors: counter(
                &r,
                "nodens_upstream_errors_total",
                "Upstream exchanges that failed, by upstream and kind of failure.",
                &["to", "error"],
            ),
            coalesced: gauge_less_counter(
                &r,
                "nodens_coalesced_queries_total",
                "Cache misses that joined an identical query already in flight instead of asking upstream.",
            ),
            rejected: counter(
                &r,
                "nodens_rejected_queries_total",
                "Queries answered with an error or dropped before the cache, by reason.",
                &["reason"],
            ),
            inflight: gauge(
                &r,
                "nodens_inflight_queries",
                "Cache misses being resolved now.",
            ),
            tcp_connections: gauge(
                &r,
                "nodens_tcp_client_connections",
                "Open client TCP connections.",
            ),
            tcp_rejected: gauge_less_counter(
                &r,
                "nodens_tcp_client_rejected_total",
                "Client TCP connections closed at once because tcp_max_connections were open.",
            ),
            tcp_closed: counter(
                &r,
                "nodens_tcp_client_closed_total",
                "Client TCP connections nodens closed, by reason.",
                &["reason"],
            ),
            reloads: counter(
                &r,
                "nodens_config_reloads_total",
                "Configuration reloads (SIGHUP), by result.",
                &["result"],
            ),
            workers: gauge(&r, "nodens_workers", "Worker threads serving queries."),
            upstream_inflight: gauge_vec(
                &r,
                "nodens_upstream_inflight",
                "Queries in flight to an upstream, UDP and TCP.",
                &["to"],
            ),
            upstream_healthy: gauge_vec(
                &r,
                "nodens_upstream_healthy",
                "1 while an upstream is up, 0 while it is marked down and probed.",
                &["to"],
            ),
            health_checks: counter(
                &r,
                "nodens_upstream_health_checks_total",
                "Health probes of upstreams marked down, by result.",
                &["to", "result"],
            ),
            proxy_healthcheck_failures: counter(
                &r,
                "coredns_proxy_healthcheck_failures_total",
                "Count of failed health checks per upstream.",
                &["proxy_name", "to"],
            ),
            pool_connections: gauge_vec(
                &r,
                "nodens_upstream_tcp_connections",
                "Open TCP connections to an upstream, idle (nothing in flight) or busy.",
                &["to", "state"],
            ),
            pool_dials: counter(
                &r,
                "nodens_upstream_tcp_dials_total",
                "TCP connections dialled to an upstream.",
                &["to"],
            ),
            pool_dial_failures: counter(
                &r,
                "nodens_upstream_tcp_dial_failures_total",
                "TCP dials to an upstream that failed or timed out.",
                &["to"],
            ),
            pool_closed: counter(
                &r,
                "nodens_upstream_tcp_closed_total",
                "TCP connections to an upstream closed, by reason.",
                &["to", "reason"],
            ),
            queue_length: gauge_vec(
                &r,
                "nodens_upstream_queue_length",
                "Queries waiting for a TCP connection slot to an upstream.",
                &["to"],
            ),
            queue_capacity: gauge_vec(
                &r,
                "nodens_upstream_queue_capacity",
                "The configured wait queue size (pool.max_queue) of an upstream.",
                &["to"],
            ),
            queue_wait: histogram(
                &r,
                "nodens_upstream_queue_wait_seconds",
                "Time queries waited in the queue for a TCP connection slot.",
                &["to"],
                duration_buckets(),
            ),
            queue_rejected: counter(
                &r,
                "nodens_upstream_queue_rejected_total",
                "Queries failed by the wait queue: it was full, or the wait expired.",
                &["to", "reason"],
            ),
            registry: r,
            cache_server,
        };
        let info = IntGaugeVec::new(
            Opts::new("nodens_build_info", "nodens version."),
            &["version"],
        )
        .expect("valid metric");
        info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        m.registry.register(Box::new(info)).expect("unique metric");
        m
    }

    /// Copies the cache's counts into the gauges; called on each scrape.
    pub fn observe_cache(&self, stats: &CacheStats) {
        let s = self.cache_server.as_str();
        self.cache_entries
            .with_label_values(&[s, "success", ".", VIEW])
            .set(stats.success_entries as i64);
        self.cache_entries
            .with_label_values(&[s, "denial", ".", VIEW])
            .set(stats.denial_entries as i64);
        for (i, (kind, total)) in [
            ("success", stats.success_evictions),
            ("denial", stats.denial_evictions),
        ]
        .into_iter()
        .enumerate()
        {
            let before = self.evictions_seen[i].swap(total, Ordering::Relaxed);
            self.cache_evictions
                .with_label_values(&[s, kind, ".", VIEW])
                .inc_by(total.saturating_sub(before));
        }
        self.cache_bytes.set(stats.bytes as i64);
        self.cache_capacity.set(stats.capacity as i64);
    }

    pub fn encode(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding");
        String::from_utf8(out).expect("prometheus text is UTF-8")
    }
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

fn gauge_less_counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

/// The CoreDNS `type` label: CoreDNS's list of types by name, the rest as "other",
/// so a client asking for random types cannot blow up the series count.
pub fn qtype_label(qtype: u16) -> &'static str {
    match qtype {
        1 => "A",
        2 => "NS",
        5 => "CNAME",
        6 => "SOA",
        12 => "PTR",
        15 => "MX",
        16 => "TXT",
        28 => "AAAA",
        33 => "SRV",
        43 => "DS",
        46 => "RRSIG",
        47 => "NSEC",
        48 => "DNSKEY",
        50 => "NSEC3",
        65 => "HTTPS",
        251 => "IXFR",
        252 => "AXFR",
        255 => "ANY",
        _ => "other",
    }
}

/// What the HTTP endpoints need to see.
pub struct HttpState {
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    pub cache_stats: Box<dyn Fn() -> CacheStats + Send + Sync>,
}

/// Serves /metrics, /health and /ready on `listener` until `stop` fires.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    state: Arc<HttpState>,
    stop: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/health", get(|| async { "OK\n" }))
        .route("/ready", get(ready_page))
        .with_state(state);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(e) = served {
        tracing::error!(error = %e, "metrics server failed");
    }
}

/// Binds the metrics listener; separate so that a bad address fails startup.
pub async fn bind_http(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

async fn metrics_page(
    State(state): State<Arc<HttpState>>,
) -> ([(&'static str, &'static str); 1], String) {
    state.metrics.observe_cache(&(state.cache_stats)());
    (
        [("content-type", "text/plain; version=0.0.4")],
        state.metrics.encode(),
    )
}

async fn ready_page(State(state): State<Arc<HttpState>>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "OK\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
