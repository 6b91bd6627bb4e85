//! Prefetch: a popular entry is refreshed shortly before it expires, so
//! that its askers never see a miss (CoreDNS's `prefetch`). A zone whose
//! prefetches bring back no new TTL (its upstream is a cache) stops
//! prefetching but for probes (`cache::PrefetchGain`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::hit::Request;
use super::metrics::CacheLabels;
use super::{ListenerView, Shared};
use crate::cache::{Entry, Kind};

impl Shared {
    /// Counts a hit on `entry` and starts its refresh when it is popular
    /// enough and close enough to expiry.
    pub(super) fn maybe_prefetch(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        request: &Request<'_, '_>,
        listener: &ListenerView,
    ) {
        if entry.kind == Kind::Failure {
            return;
        }
        let settings = request.settings;
        let policy = &request.zone.cache;
        // Counted up to the threshold only: past it a hit writes nothing
        // shared (an atomic add on every hit of a hot entry, its cache line
        // passed between the workers that serve it).
        if entry.hits.load(Ordering::Relaxed) < policy.prefetch_min_hits
            && entry.hits.fetch_add(1, Ordering::Relaxed) + 1 < policy.prefetch_min_hits
        {
            return;
        }
        let threshold = Duration::from_millis(
            u64::from(entry.original_ttl) * 10 * u64::from(policy.prefetch_percent),
        );
        // Held answers are kept right by the API watch, not by refreshes.
        if entry.remaining(request.started) > threshold
            || self.cache.will_hold(entry)
            || entry.prefetch_started.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let zone = &request.zone;
        let labels = CacheLabels {
            server: &listener.server,
            zones: &zone.name,
            view: &zone.view,
        };
        if !zone.prefetch_gain.worth_trying() {
            self.metrics.cache_prefetch_skipped.get(&labels).inc();
            return;
        }
        self.metrics.cache_prefetch.get(&labels).inc();
        // Counted where the prefetch was decided: the task holds no label.
        let futile = self.metrics.cache_prefetch_futile.get(&labels);
        let (this, key, zone, settings) = (
            self.clone(),
            request.key.to_owned(),
            Arc::clone(zone),
            settings.clone(),
        );
        let old = (entry.stored_at(), entry.expires_at());
        let refresh = async move {
            let deadline = Instant::now() + settings.query_timeout;
            let fresh = this.refresh(&key, &zone, &settings, deadline).await;
            if let Some(fresh) = fresh.filter(|e| e.kind != Kind::Failure)
                && zone
                    .prefetch_gain
                    .learn(old, fresh.expires_at(), Instant::now())
            {
                futile.inc();
            }
        };
        self.tasks.spawn_query_on_main(refresh);
    }
}
