//! The cache-wide gauges (`coredns_cache_entries`, evictions, bytes),
//! copied from the cache's own counts on each scrape.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::IntGauge;

use super::CacheStats;
use crate::metrics::label_set;
use crate::metrics::{Counters, Gauges, Registry, VIEW};

label_set! {
    /// CoreDNS's labels on its cache-wide series; `zones` is "." here, the
    /// one cache serving every zone.
    pub struct CacheKindLabels { server = "server", kind = "type", zones = "zones", view = "view" }
}

const KINDS: [&str; 2] = ["success", "denial"];

pub struct CacheGauges {
    entries: Gauges<CacheKindLabels<'static>>,
    evictions: Counters<CacheKindLabels<'static>>,
    bytes: IntGauge,
    capacity: IntGauge,
    /// Eviction totals at the last scrape, to turn them into increments.
    evictions_seen: [AtomicU64; 2],
    /// The `server` label these series carry (the first listener).
    server: String,
}

impl CacheGauges {
    pub fn register(r: &Registry, server: String) -> CacheGauges {
        CacheGauges {
            entries: r.gauges(
                "coredns_cache_entries",
                "The number of elements in the cache.",
            ),
            evictions: r.counters(
                "coredns_cache_evictions_total",
                "The count of cache evictions.",
            ),
            bytes: r.gauge(
                "nodens_cache_bytes",
                "Bytes held by the cache (entries and keys).",
            ),
            capacity: r.gauge(
                "nodens_cache_capacity_bytes",
                "The configured cache capacity in bytes.",
            ),
            evictions_seen: [AtomicU64::new(0), AtomicU64::new(0)],
            server,
        }
    }

    /// Copies the cache's counts into the gauges; called on each scrape.
    pub fn observe(&self, stats: &CacheStats) {
        let entries = [stats.success_entries, stats.denial_entries];
        let evictions = [stats.success_evictions, stats.denial_evictions];
        for (i, kind) in KINDS.into_iter().enumerate() {
            let labels = CacheKindLabels {
                server: &self.server,
                kind,
                zones: ".",
                view: VIEW,
            };
            self.entries.get(&labels).set(entries[i] as i64);
            let before = self.evictions_seen[i].swap(evictions[i], Ordering::Relaxed);
            self.evictions
                .get(&labels)
                .inc_by(evictions[i].saturating_sub(before));
        }
        self.bytes.set(stats.bytes as i64);
        self.capacity.set(stats.capacity as i64);
    }
}
