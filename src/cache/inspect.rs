//! The cache as an operator sees it (`nodens cache show|flush|dump`, over
//! the control socket): which entries a name has, in which state, and
//! dropping them. Off the request path: a walk of the whole cache is fine
//! here, and nothing on the hit path pays for it.
//!
//! The cache is one for every worker, so a flush is seen by the next
//! query on any worker. It goes through the API watch's purge
//! (`follow::purge`): an answer fetched just after a flush of a name the
//! watch covers is not held, as after an API change.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::follow::Purge;
use super::{Cache, Entry, Key};

/// Where an entry stands now, as [`Cache::lookup`] would judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Fresh,
    /// Past its TTL, served while the API watch is current.
    Held,
    /// Past its TTL, served only when every upstream fails.
    Stale,
    /// Past every window: waiting for eviction, never served.
    Expired,
}

impl State {
    pub(crate) fn label(self) -> &'static str {
        match self {
            State::Fresh => "fresh",
            State::Held => "held",
            State::Stale => "stale",
            State::Expired => "expired",
        }
    }
}

/// What to drop: names in lower-case wire form.
pub(crate) enum Flush {
    Name(Box<[u8]>),
    Zone(Box<[u8]>),
    All,
}

impl Cache {
    /// The entries whose key `keep` accepts, from both caches.
    pub(crate) fn entries(&self, mut keep: impl FnMut(&Key) -> bool) -> Vec<(Key, Arc<Entry>)> {
        self.success
            .iter()
            .chain(self.denial.iter())
            .filter(|(key, _)| keep(key))
            .collect()
    }

    /// The state of `entry` at `now` (the lookup's order: fresh, held, stale).
    pub(crate) fn state_of(&self, entry: &Entry, now: Instant, stale_max_age: Duration) -> State {
        if entry.is_fresh(now) {
            State::Fresh
        } else if self.hold_secs() != 0 && entry.is_held(now, self.hold_secs()) {
            State::Held
        } else if entry.is_servable_stale(now, stale_max_age) {
            State::Stale
        } else {
            State::Expired
        }
    }

    /// Drops what `flush` names, in every view; returns the entries dropped.
    pub(crate) fn flush(&self, flush: Flush, now: Instant) -> usize {
        let (nodes, exact) = match flush {
            Flush::All => return self.purge_all(now),
            Flush::Name(name) => (HashSet::new(), HashSet::from([name])),
            Flush::Zone(zone) => (HashSet::from([zone]), HashSet::new()),
        };
        self.purge(
            &Purge {
                nodes,
                exact,
                addresses: HashSet::new(),
            },
            now,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::KeyRef;
    use crate::wire::name::from_text;

    fn store(cache: &Cache, name: &str, qtype: u16, now: Instant) -> Key {
        let wire = from_text(name).unwrap();
        let key = KeyRef {
            name: &wire,
            qtype,
            qclass: 1,
            flags: 0,
        }
        .to_owned();
        cache.insert(
            key.clone(),
            Arc::new(Entry::failure(&key.question(), 60, now)),
        );
        key
    }

    #[test]
    fn a_flush_drops_a_name_a_zone_or_all() {
        let cache = Cache::new(1 << 20);
        let now = Instant::now();
        for name in ["a.example.", "b.a.example.", "other.test."] {
            store(&cache, name, 1, now);
            store(&cache, name, 28, now);
        }
        let name = |t: &str| from_text(t).unwrap().into_boxed_slice();
        assert_eq!(cache.flush(Flush::Name(name("a.example.")), now), 2);
        assert_eq!(cache.entries(|_| true).len(), 4);
        store(&cache, "a.example.", 1, now);
        assert_eq!(cache.flush(Flush::Zone(name("a.example.")), now), 3);
        let left: Vec<_> = cache.entries(|_| true);
        assert!(left.iter().all(|(k, _)| k.name() == &*name("other.test.")));
        assert_eq!(cache.flush(Flush::All, now), 2);
        assert!(cache.entries(|_| true).is_empty());
    }

    #[test]
    fn states_follow_the_lookup() {
        let cache = Cache::new(1 << 20);
        let t0 = Instant::now();
        store(&cache, "a.example.", 1, t0);
        let (_, entry) = cache.entries(|_| true).pop().unwrap();
        let stale = Duration::from_secs(30);
        assert_eq!(cache.state_of(&entry, t0, stale), State::Fresh);
        // A failure is never served stale.
        assert_eq!(
            cache.state_of(&entry, t0 + Duration::from_secs(61), stale),
            State::Expired
        );
    }
}
