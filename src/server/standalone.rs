//! A request path of its own, without listeners, for the benchmarks, the
//! fuzz targets and the tests that drive `Service::handle` directly.

use std::sync::Arc;

use crate::config::Config;
use crate::metrics::Registry;
use crate::serve::Shared;
use crate::serve::metrics::ServeMetrics;
use crate::upstream::metrics::UpstreamMetrics;

impl Shared {
    /// A request path with a registry of its own, for benchmarks and tests
    /// that drive [`crate::Service::handle`] directly. Call inside a
    /// runtime.
    pub fn standalone(config: &Config) -> Shared {
        Shared::standalone_with_metrics(config).0
    }

    /// [`Shared::standalone`], and what its metrics say (the Prometheus
    /// text), for tests that must see a count move.
    pub fn standalone_with_metrics(config: &Config) -> (Shared, impl Fn() -> String) {
        let registry = Registry::new();
        let shared = super::settings::request_path(
            config,
            &Arc::new(UpstreamMetrics::register(&registry)),
            Arc::new(ServeMetrics::register(&registry)),
        );
        (shared, move || registry.encode())
    }
}
