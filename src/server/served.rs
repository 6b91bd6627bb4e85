//! What the control channel reads of the running server.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::Config;
use crate::control::{DeprecatedKeyView, StatusView};
use crate::kubernetes::startup_taint::TaintState;
use crate::serve::Shared;

/// The control channel's view: the request path's state, where the
/// startup taint's removal stands, and the running configuration's
/// deprecated keys.
pub(super) struct ControlView {
    pub(super) shared: Arc<Shared>,
    pub(super) startup_taint: Arc<TaintState>,
    pub(super) deprecated: Deprecated,
}

/// The deprecated keys of the configuration in force, set at each load
/// that takes effect.
pub(super) type Deprecated = Arc<ArcSwap<Vec<DeprecatedKeyView>>>;

/// `config`'s deprecated keys as the control channel shows them.
pub(super) fn deprecated_keys(config: &Config) -> Vec<DeprecatedKeyView> {
    config
        .deprecated
        .iter()
        .map(|d| DeprecatedKeyView {
            key: format!("{} {}", d.key.section, d.key.old),
            replacement: d.key.new.to_string(),
            line: d.position.0,
            removed_in: d.key.removed_in.to_string(),
        })
        .collect()
}

impl ControlView {
    /// Each DNS-over-TLS upstream's handshakes, by address.
    fn tls(&self) -> Vec<crate::control::TlsView> {
        let settings = self.shared.settings.load();
        let mut views: Vec<_> = settings
            .router
            .upstreams()
            .filter_map(|u| {
                let c = u.pool.tls_handshakes()?;
                Some(crate::control::TlsView {
                    upstream: u.label.clone(),
                    full: c.full,
                    resumed: c.resumed,
                    certificate: c.certificate,
                    timeout: c.timeout,
                    error: c.error,
                    last_error: c.last_error,
                })
            })
            .collect();
        views.sort_by(|a, b| a.upstream.cmp(&b.upstream));
        views
    }
}

impl crate::control::Served for ControlView {
    fn cache(&self) -> &crate::cache::Cache {
        &self.shared.cache
    }

    fn stale_window(&self, view: u8, name: &[u8]) -> Duration {
        self.shared
            .settings
            .load()
            .router
            .route_in(view, name)
            .map_or(Duration::ZERO, |zone| zone.cache.stale_max_age)
    }

    fn top(&self, limit: usize) -> Option<crate::control::TopView> {
        let workloads = self.shared.settings.load().workloads.clone()?;
        Some(workloads.view(&self.shared.search.clients, limit))
    }

    fn ready(&self) -> bool {
        self.shared.ready.load(Ordering::Relaxed)
    }

    fn status(&self) -> StatusView {
        let last_good = |rule| self.shared.last_good_answers(rule);
        StatusView {
            startup_taint: self.startup_taint.view(),
            last_good_cluster: last_good("cluster"),
            last_good_stale: last_good("stale_over_denial"),
            kept_answers: self.shared.cache.stats().kept_answers as u64,
            zones: self
                .shared
                .settings
                .load()
                .router
                .zones()
                .iter()
                .map(|z| crate::control::ZoneView {
                    zone: z.name.clone(),
                    view: z.view.clone(),
                    in_flight: z.bulkhead.in_flight() as u64,
                    max: z.bulkhead.max() as u64,
                    rejected: z.bulkhead.rejected(),
                })
                .collect(),
            tls: self.tls(),
            deprecated_keys: self.deprecated.load().to_vec(),
        }
    }
}
