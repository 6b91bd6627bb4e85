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
//!
//! Configuration: `[cache]` and `[zone.cache]` (`config.rs`); the cache file
//! on the node's disk is `warm.rs`, its format `snapshot_file.rs`, the
//! handover's stream `snapshot.rs`. Request path: looked up in `serve::hit`,
//! filled by `serve::fetch`.

pub(crate) mod config;
pub(crate) mod entry;
pub(crate) mod follow;
pub(crate) mod inspect;
pub(crate) mod key;
pub(crate) mod last_good;
pub(crate) mod metrics;
mod prefetch_gain;
pub(crate) mod snapshot;
pub(crate) mod snapshot_file;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod warm;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quick_cache::sync::Cache as Map;
use quick_cache::{Lifecycle, Weighter};

pub use entry::{Entry, Freshness, Kind, TtlPolicy};
pub use key::KeyRef;
pub(crate) use key::{Key, KeyHashing};
pub(crate) use prefetch_gain::PrefetchGain;

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
    /// Expired, but held while the API watch is current and covers it
    /// (`[cluster] hold_past_ttl`): served as fresh, with a short TTL.
    Held(Arc<Entry>),
    Miss,
}

#[derive(Clone)]
struct EntryWeight;

impl Weighter<Key, Arc<Entry>> for EntryWeight {
    fn weight(&self, key: &Key, entry: &Arc<Entry>) -> u64 {
        (key.weight() + entry.weight()) as u64
    }
}

/// Counts evictions (capacity pressure, not expiry), and retires what
/// leaves: quick_cache reports an entry replaced under its key here too.
#[derive(Clone, Default)]
struct EvictionCounter {
    evictions: Arc<AtomicU64>,
    retirements: Arc<AtomicU64>,
}

impl Lifecycle<Key, Arc<Entry>> for EvictionCounter {
    type RequestState = ();
    fn begin_request(&self) {}
    fn on_evict(&self, _: &mut (), _: Key, entry: Arc<Entry>) {
        retire(&self.retirements, &entry);
        self.evictions.fetch_add(1, Ordering::Relaxed);
    }
}

/// Marks `entry` let go, and counts it where the workers' replays look
/// first (`serve::replay`): while the count stands still, nothing they
/// kept has gone.
fn retire(retirements: &AtomicU64, entry: &Entry) {
    entry.retire();
    retirements.fetch_add(1, Ordering::Release);
}

type Part = Map<Key, Arc<Entry>, EntryWeight, KeyHashing, EvictionCounter>;

pub struct Cache {
    /// Entries let go of so far (evicted, replaced, removed).
    retirements: Arc<AtomicU64>,
    success: Part,
    denial: Part,
    success_evictions: EvictionCounter,
    denial_evictions: EvictionCounter,
    capacity: AtomicU64,
    /// What the API watch tells the cache (`follow`).
    following: follow::Following,
    /// Positive answers a change dropped, for `last_good`.
    kept: last_good::Kept,
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
    /// Positive answers kept aside for `last_good`.
    pub kept_answers: usize,
}

fn part(capacity: u64, evictions: &EvictionCounter) -> Part {
    let items = (capacity / AVERAGE_ENTRY_BYTES).max(16) as usize;
    Map::with(
        items,
        capacity.max(1),
        EntryWeight,
        KeyHashing,
        evictions.clone(),
    )
}

impl Cache {
    pub fn new(capacity_bytes: u64) -> Cache {
        let denial_bytes = capacity_bytes / DENIAL_SHARE;
        let retirements = Arc::new(AtomicU64::new(0));
        let counter = || EvictionCounter {
            evictions: Arc::default(),
            retirements: retirements.clone(),
        };
        let (success_evictions, denial_evictions) = (counter(), counter());
        Cache {
            retirements: retirements.clone(),
            success: part(capacity_bytes - denial_bytes, &success_evictions),
            denial: part(denial_bytes, &denial_evictions),
            success_evictions,
            denial_evictions,
            capacity: AtomicU64::new(capacity_bytes),
            following: follow::Following::default(),
            kept: last_good::Kept::default(),
        }
    }

    /// Finds the entry for `key`, fresh or stale-but-servable.
    #[inline]
    pub fn lookup(&self, key: &KeyRef<'_>, now: Instant, stale_max_age: Duration) -> Lookup {
        let key = key.hashed();
        let found = self.success.get(&key).or_else(|| self.denial.get(&key));
        match found {
            None => Lookup::Miss,
            Some(e) if e.is_fresh(now) => Lookup::Fresh(e),
            // Past the fresh hit: one relaxed load while holding is off.
            Some(e) if self.hold_secs() != 0 && e.is_held(now, self.hold_secs()) => Lookup::Held(e),
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
        if let Some((_, moved)) = other.remove(&key.as_ref()) {
            retire(&self.retirements, &moved);
        }
        into.insert(key, entry);
    }

    /// Drops every answer of a view (`[[zone]] listen`): after a reload
    /// that changed the views, a partition may stand for other listeners.
    pub(crate) fn forget_views(&self) {
        self.retain(&self.success, |key, _| key.view() == 0);
        self.retain(&self.denial, |key, _| key.view() == 0);
    }

    /// Keeps the entries of `part` that `keep` keeps and retires the
    /// others: every removal but eviction and replacement (retired by
    /// [`EvictionCounter`]) goes through here or [`Cache::insert`], so that
    /// no worker replays an answer the cache has dropped.
    fn retain(&self, part: &Part, keep: impl Fn(&Key, &Arc<Entry>) -> bool) {
        part.retain(|key, entry| {
            let kept = keep(key, entry);
            if !kept {
                retire(&self.retirements, entry);
            }
            kept
        });
    }

    /// How many entries the cache has let go of: a worker that kept a
    /// reply checks its entry only when this moved.
    #[inline]
    pub(crate) fn retirements(&self) -> u64 {
        self.retirements.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            success_entries: self.success.len(),
            denial_entries: self.denial.len(),
            success_evictions: self.success_evictions.evictions.load(Ordering::Relaxed),
            denial_evictions: self.denial_evictions.evictions.load(Ordering::Relaxed),
            bytes: self.success.weight() + self.denial.weight(),
            capacity: self.capacity(),
            kept_answers: self.kept.len(),
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

    /// Every way an entry leaves is counted and marks it, so that no
    /// worker replays it (`serve::replay`): replaced, moved to the other
    /// part, flushed, evicted.
    #[test]
    fn every_entry_that_leaves_is_retired() {
        use crate::cache::testing::{answer, key};
        let cache = Cache::new(1 << 20);
        let t0 = Instant::now();
        let name = b"\x01a\x00";
        let first = answer(name, 60, t0);
        cache.insert(key(name).to_owned(), first.clone());
        assert_eq!(cache.retirements(), 0);
        let second = answer(name, 60, t0);
        cache.insert(key(name).to_owned(), second.clone());
        assert!(first.is_retired() && !second.is_retired());
        assert_eq!(cache.retirements(), 1);
        let denial = failure(name, 60, t0);
        cache.insert(key(name).to_owned(), denial.clone());
        assert!(second.is_retired() && !denial.is_retired());
        assert_eq!(cache.retirements(), 2);
        assert_eq!(cache.purge_all(t0), 1);
        assert!(denial.is_retired());
        assert_eq!(cache.retirements(), 3);
        // Evicted: a small cache takes 200 names.
        let small = Cache::new(8 << 10);
        let names: Vec<[u8; 4]> = (0..200u8).map(|n| [2, b'c', n, 0]).collect();
        let entries: Vec<Arc<Entry>> = names.iter().map(|n| answer(n, 60, t0)).collect();
        for (name, entry) in names.iter().zip(&entries) {
            small.insert(key(name).to_owned(), entry.clone());
        }
        let evicted = small.stats().success_evictions;
        assert!(evicted > 0);
        assert_eq!(small.retirements(), evicted);
        for (name, entry) in names.iter().zip(&entries) {
            let held = match small.lookup(&key(name), t0, Duration::ZERO) {
                Lookup::Fresh(e) => Arc::ptr_eq(&e, entry),
                _ => false,
            };
            assert_eq!(entry.is_retired(), !held, "{name:?}");
        }
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

    fn name_of(prefix: u8, i: u32) -> Vec<u8> {
        [&[5u8, prefix][..], &i.to_be_bytes(), &[0]].concat()
    }

    /// A random-name flood on a small cache: half the lookups are for
    /// 1,000 popular names, half for names asked once. The popular set takes
    /// 90 % of the room, and between two lookups of one popular name about
    /// 1,000 one-off names and 630 other popular names pass, more than the
    /// cache holds: an LRU of the same size, fed the same sequence, finds
    /// 47 % of the popular lookups. quick_cache's CLOCK-Pro keeps names
    /// asked again and again (99.7 % here).
    #[test]
    fn names_asked_again_and_again_outlive_a_flood_of_one_off_names() {
        let t0 = Instant::now();
        let entry_bytes = {
            let name = name_of(b'p', 0);
            let key = KeyRef {
                name: &name,
                qtype: 1,
                qclass: 1,
                flags: 0,
            };
            (key.to_owned().weight() + crate::cache::testing::answer(&name, 60, t0).weight()) as u64
        };
        // The success cache holds 3/4 of the capacity: room for 1,111 entries.
        let cache = Cache::new(entry_bytes * 1111 * 4 / 3);
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let (mut popular_lookups, mut popular_hits) = (0u64, 0u64);
        for step in 0..200_000u32 {
            let popular = rng.random_bool(0.5);
            let name = if popular {
                name_of(b'p', rng.random_range(0..1000))
            } else {
                name_of(b'o', step)
            };
            let key = KeyRef {
                name: &name,
                qtype: 1,
                qclass: 1,
                flags: 0,
            };
            let hit = matches!(cache.lookup(&key, t0, Duration::ZERO), Lookup::Fresh(_));
            if !hit {
                cache.insert(key.to_owned(), crate::cache::testing::answer(&name, 60, t0));
            }
            // After the warm-up: every popular name has been asked.
            if popular && step >= 20_000 {
                popular_lookups += 1;
                popular_hits += u64::from(hit);
            }
        }
        let ratio = popular_hits as f64 / popular_lookups as f64;
        eprintln!(
            "popular hit ratio under the flood: {ratio:.4} ({popular_hits}/{popular_lookups})"
        );
        assert!(ratio >= 0.95, "popular hit ratio {ratio:.4}");
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
