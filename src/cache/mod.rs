//! The response cache.
//!
//! Two byte-bounded caches, like CoreDNS's: `success` for answers and
//! `denial` for NXDOMAIN, NODATA and failures, so that a flood of
//! non-existent names (the `ndots:5` search-list tax) cannot push answers
//! out, and so that the entry counts per type are exact. A key lives in at
//! most one of them. Eviction is quick_cache's CLOCK-Pro-like policy: a
//! name seen once is evicted before a name seen again.
//!
//! Expired entries stay until evicted, so they can be served stale
//! (RFC 8767) when every upstream fails.

pub mod entry;
pub mod key;
pub mod metrics;
pub mod snapshot;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quick_cache::sync::Cache as Map;
use quick_cache::{DefaultHashBuilder, Lifecycle, Weighter};

pub use entry::{Entry, Freshness, Kind, TtlPolicy};
pub use key::{Key, KeyRef};

/// Share of the capacity given to the denial cache.
const DENIAL_SHARE: u64 = 4;
/// Average bytes per entry assumed when sizing the hash tables.
const AVERAGE_ENTRY_BYTES: u64 = 256;

/// What a lookup found.
#[derive(Debug)]
pub enum Lookup {
    Fresh(Arc<Entry>),
    /// Expired, but within the stale window: refresh, and serve it if that fails.
    Stale(Arc<Entry>),
    Miss,
}

#[derive(Clone)]
struct EntryWeight;

impl Weighter<Key, Arc<Entry>> for EntryWeight {
    fn weight(&self, key: &Key, entry: &Arc<Entry>) -> u64 {
        (key.weight() + entry.weight()) as u64
    }
}

/// Counts evictions (capacity pressure, not expiry).
#[derive(Clone, Default)]
struct EvictionCounter(Arc<AtomicU64>);

impl Lifecycle<Key, Arc<Entry>> for EvictionCounter {
    type RequestState = ();
    fn begin_request(&self) {}
    fn on_evict(&self, _: &mut (), _: Key, _: Arc<Entry>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

type Part = Map<Key, Arc<Entry>, EntryWeight, DefaultHashBuilder, EvictionCounter>;

pub struct Cache {
    success: Part,
    denial: Part,
    success_evictions: EvictionCounter,
    denial_evictions: EvictionCounter,
    capacity: AtomicU64,
}

/// Counts for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheStats {
    pub success_entries: usize,
    pub denial_entries: usize,
    pub success_evictions: u64,
    pub denial_evictions: u64,
    pub bytes: u64,
    pub capacity: u64,
}

fn part(capacity: u64, evictions: &EvictionCounter) -> Part {
    let items = (capacity / AVERAGE_ENTRY_BYTES).max(16) as usize;
    Map::with(
        items,
        capacity.max(1),
        EntryWeight,
        DefaultHashBuilder::default(),
        evictions.clone(),
    )
}

impl Cache {
    pub fn new(capacity_bytes: u64) -> Cache {
        let denial_bytes = capacity_bytes / DENIAL_SHARE;
        let success_evictions = EvictionCounter::default();
        let denial_evictions = EvictionCounter::default();
        Cache {
            success: part(capacity_bytes - denial_bytes, &success_evictions),
            denial: part(denial_bytes, &denial_evictions),
            success_evictions,
            denial_evictions,
            capacity: AtomicU64::new(capacity_bytes),
        }
    }

    /// Finds the entry for `key`, fresh or stale-but-servable.
    #[inline]
    pub fn lookup(&self, key: &KeyRef<'_>, now: Instant, stale_max_age: Duration) -> Lookup {
        let found = self.success.get(key).or_else(|| self.denial.get(key));
        match found {
            None => Lookup::Miss,
            Some(e) if e.is_fresh(now) => Lookup::Fresh(e),
            Some(e) if e.is_servable_stale(now, stale_max_age) => Lookup::Stale(e),
            Some(_) => Lookup::Miss,
        }
    }

    /// Stores `entry` under `key`, replacing whatever the key held in
    /// either cache. Entries with a zero lifetime are not stored.
    pub fn insert(&self, key: Key, entry: Arc<Entry>) {
        if !entry.is_cacheable() {
            return;
        }
        let (into, other) = match entry.kind {
            Kind::Success => (&self.success, &self.denial),
            Kind::Denial | Kind::Failure => (&self.denial, &self.success),
        };
        other.remove(&key.as_ref());
        into.insert(key, entry);
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            success_entries: self.success.len(),
            denial_entries: self.denial.len(),
            success_evictions: self.success_evictions.0.load(Ordering::Relaxed),
            denial_evictions: self.denial_evictions.0.load(Ordering::Relaxed),
            bytes: self.success.weight() + self.denial.weight(),
            capacity: self.capacity(),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Changes the capacity in place (on reload), evicting if it shrank.
    pub fn set_capacity(&self, capacity_bytes: u64) {
        if capacity_bytes == self.capacity() {
            return;
        }
        let denial_bytes = capacity_bytes / DENIAL_SHARE;
        self.success
            .set_capacity((capacity_bytes - denial_bytes).max(1));
        self.denial.set_capacity(denial_bytes.max(1));
        self.capacity.store(capacity_bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(name: &[u8], ttl: u32, now: Instant) -> Arc<Entry> {
        let mut q = name.to_vec();
        q.extend([0, 1, 0, 1]);
        Arc::new(Entry::failure(&q, ttl, now))
    }

    #[test]
    fn fresh_then_stale_then_gone() {
        let cache = Cache::new(1 << 20);
        let t0 = Instant::now();
        let key = KeyRef {
            name: b"\x01a\x00",
            qtype: 1,
            qclass: 1,
            flags: 0,
        };
        cache.insert(key.to_owned(), failure(b"\x01a\x00", 5, t0));
        assert!(matches!(
            cache.lookup(&key, t0, Duration::from_secs(60)),
            Lookup::Fresh(_)
        ));
        // Failures are never served stale.
        assert!(matches!(
            cache.lookup(&key, t0 + Duration::from_secs(6), Duration::from_secs(60)),
            Lookup::Miss
        ));
        assert_eq!(cache.stats().denial_entries, 1);
    }

    #[test]
    fn capacity_bounds_bytes() {
        let cache = Cache::new(64 * 1024);
        let t0 = Instant::now();
        for i in 0..5000u32 {
            let name = [&[4u8][..], &i.to_be_bytes(), &[0]].concat();
            let key = KeyRef {
                name: &name,
                qtype: 1,
                qclass: 1,
                flags: 0,
            };
            cache.insert(key.to_owned(), failure(&name, 60, t0));
        }
        let s = cache.stats();
        assert!(s.bytes <= 16 * 1024, "{s:?}");
        assert!(s.denial_evictions > 0);
    }
}
