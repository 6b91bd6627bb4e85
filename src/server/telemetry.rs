//! Every metric set, registered in one registry.

use std::sync::Arc;

use prometheus::IntGauge;

use crate::cache::metrics::CacheGauges;
use crate::http::HttpMetrics;
use crate::kubernetes::metrics::KubeMetrics;
use crate::listen::ListenMetrics;
use crate::metrics::Counters;
use crate::metrics::Registry;
use crate::metrics::ResultLabels;
use crate::node::metrics::NodeMetrics;
use crate::serve::metrics::ServeMetrics;
use crate::upstream::metrics::UpstreamMetrics;

/// Every metric set, registered in one registry: the one place that knows
/// all areas' metrics.
pub struct Telemetry {
    pub registry: Registry,
    pub serve: Arc<ServeMetrics>,
    pub upstream: Arc<UpstreamMetrics>,
    pub listen: Arc<ListenMetrics>,
    pub http: Arc<HttpMetrics>,
    pub cache: CacheGauges,
    pub node: Arc<NodeMetrics>,
    pub kubernetes: Arc<KubeMetrics>,
    pub reloads: Counters<ResultLabels<'static>>,
    /// Inputs others edit that a start skipped (`Config::load_to_start`).
    pub skipped_inputs: prometheus::IntCounter,
    /// Deprecated keys the configuration in force writes.
    pub deprecated_keys: IntGauge,
    pub workers: IntGauge,
    pub control: Arc<crate::control::ControlMetrics>,
    pub(crate) workloads: crate::workloads::WorkloadMetrics,
    /// The cache file on the node's disk (`warm`).
    pub warm: Arc<crate::cache::warm::WarmMetrics>,
}

impl Telemetry {
    /// `cache_server`: the `server` label of the cache-wide series.
    pub fn register(cache_server: String) -> Telemetry {
        let registry = Registry::new();
        // Process-wide counters, bumped where no registry reaches.
        registry.adopt(&crate::liveness::health::PANICS);
        registry.adopt(&crate::liveness::health::RESTARTS);
        registry.adopt_gauge(&crate::liveness::health::DEAD);
        Telemetry {
            serve: Arc::new(ServeMetrics::register(&registry)),
            upstream: Arc::new(UpstreamMetrics::register(&registry)),
            listen: Arc::new(ListenMetrics::register(&registry)),
            http: Arc::new(HttpMetrics::register(&registry)),
            cache: CacheGauges::register(&registry, cache_server),
            node: Arc::new(NodeMetrics::register(&registry)),
            kubernetes: Arc::new(KubeMetrics::register(&registry)),
            reloads: registry.counters(
                "nodens_config_reloads_total",
                "Configuration reloads (SIGHUP), by result.",
            ),
            workers: registry.gauge("nodens_workers", "Worker threads serving queries."),
            skipped_inputs: registry.counter(
                "nodens_config_inputs_skipped_total",
                "Inputs other parties edit (the kube-dns ConfigMap, hosts files) that were bad at start and skipped: nodens served without them.",
            ),
            deprecated_keys: registry.gauge(
                "nodens_config_deprecated_keys",
                "Deprecated keys the configuration in force writes (each logged at its load; nodens check-config names them).",
            ),
            control: Arc::new(crate::control::ControlMetrics::register(&registry)),
            workloads: crate::workloads::WorkloadMetrics::register(&registry),
            warm: Arc::new(crate::cache::warm::WarmMetrics::register(&registry)),
            registry,
        }
    }
}
