//! What the control channel reads of the request path's state.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::serve::Shared;

/// The control channel's view of the request path's state.
impl crate::control::Served for Shared {
    fn cache(&self) -> &crate::cache::Cache {
        &self.cache
    }

    fn stale_window(&self, view: u8, name: &[u8]) -> Duration {
        self.settings
            .load()
            .router
            .route_in(view, name)
            .map_or(Duration::ZERO, |zone| zone.cache.stale_max_age)
    }

    fn top(&self, limit: usize) -> Option<crate::control::TopView> {
        let workloads = self.settings.load().workloads.clone()?;
        Some(workloads.view(&self.search.clients, limit))
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}
