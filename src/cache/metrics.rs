//! The cache-wide gauges (`coredns_cache_entries`, evictions, bytes),
//! copied from the cache's own counts on each scrape.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::IntGauge;

use super::CacheStats;
use super::snapshot::Loaded;
use crate::metrics::label_set;
use crate::metrics::{Counters, Gauges, Registry, ResultLabels, VIEW};

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
    /// Positive answers kept aside for `last_good`.
    kept: IntGauge,
    /// Records of the cache snapshot read at a takeover, loaded or refused.
    snapshot_records: Counters<ResultLabels<'static>>,
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
            kept: r.gauge(
                "nodens_cache_kept_answers",
                "Positive answers a change of the API dropped, kept while the watch says their Service exists ([cluster] keep_last_good).",
            ),
            snapshot_records: r.counters(
                "nodens_cache_snapshot_records_total",
                "Cache snapshot records read from the previous process, by result (loaded, refused).",
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
        self.kept.set(stats.kept_answers as i64);
    }

    /// Counts what a snapshot load did.
    pub fn snapshot_read(&self, loaded: &Loaded) {
        for (result, n) in [("loaded", loaded.loaded), ("refused", loaded.refused)] {
            self.snapshot_records
                .get(&ResultLabels { result })
                .inc_by(n as u64);
        }
    }
}
