//! Last-known-good answers: a denial (NXDOMAIN, NODATA) or a SERVFAIL
//! fetched for a name that had a positive answer is replaced by that
//! answer, and not stored over it, where something vouches for the name:
//!
//! - **the API watch** (`[cluster] follow_api`, on unless `[cluster]
//!   keep_last_good = false`): a Service's own name and its SRV names
//!   (`_port._proto.<svc>.<ns>.svc.<domain>`) while the watch is current
//!   and says the Service exists (with a ClusterIP; a headless one while
//!   its slices list an endpoint, ready or not, and for a rollout's moment
//!   after they list none: not one scaled to zero). The cluster DNS answers them NXDOMAIN
//!   for a moment when a headless Service's slice is empty in a rollout,
//!   or when it restarts with a cold cache; a deleted Service is never
//!   bridged: its deletion drops its answers and the watch no longer
//!   vouches for it. The positive answers a change of a Service that
//!   still exists drops (`Cache::purge`) are kept aside for this.
//! - **the zone's policy** (`stale_over_denial`, opt-in): an answer within
//!   `stale_max_age`, as CoreDNS's `serve_stale` but over a denial too.
//!
//! Names below a Service's node (its endpoints' hostnames) are not bridged:
//! their existence is their endpoint's, not the Service's.
//!
//! Request path: `serve::fetch` does not store the denial, `serve::miss`
//! writes the kept answer instead (counted in
//! `nodens_cache_last_good_answers_total`). Miss path only; a hit never
//! comes here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::config::CachePolicy;
use super::{Cache, Entry, Key, Kind};

/// Positive answers a purge dropped kept at most: past this, the oldest
/// are not kept (a rollout storm keeps memory bounded).
const MAX_KEPT: usize = 65_536;

/// Why an answer was kept over a denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vouched {
    /// The API watch says the Service exists.
    Cluster,
    /// The zone's `stale_over_denial`, within `stale_max_age`.
    Stale,
}

impl Vouched {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Vouched::Cluster => "cluster",
            Vouched::Stale => "stale_over_denial",
        }
    }
}

/// The positive answers a purge dropped while their Service exists.
#[derive(Default)]
pub(crate) struct Kept {
    entries: Mutex<HashMap<Key, Arc<Entry>>>,
}

impl Kept {
    pub(super) fn keep(&self, dropped: Vec<(Key, Arc<Entry>)>) {
        if dropped.is_empty() {
            return;
        }
        let mut entries = crate::lock::lock(&self.entries);
        for (key, entry) in dropped {
            if entries.len() >= MAX_KEPT && !entries.contains_key(&key) {
                break;
            }
            entries.insert(key, entry);
        }
    }

    /// Forgets the kept answers `keep` no longer vouches for.
    pub(super) fn retain(&self, keep: impl Fn(&Key) -> bool) {
        crate::lock::lock(&self.entries).retain(|key, _| keep(key));
    }

    pub(super) fn clear(&self) {
        crate::lock::lock(&self.entries).clear();
    }

    fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        crate::lock::lock(&self.entries).get(key).cloned()
    }

    pub(crate) fn len(&self) -> usize {
        crate::lock::lock(&self.entries).len()
    }
}

impl Cache {
    /// The positive answer to give for `key` instead of the denial or
    /// failure upstream gave, if something vouches for it now.
    pub(crate) fn last_good(
        &self,
        key: &Key,
        policy: &CachePolicy,
        now: Instant,
    ) -> Option<(Arc<Entry>, Vouched)> {
        let positive = || {
            self.success
                .peek(&key.as_ref().hashed())
                .filter(|e| e.kind == Kind::Success)
        };
        if self.vouches_for(key.name(), now) {
            if let Some(entry) = positive().or_else(|| self.kept.get(key)) {
                return Some((entry, Vouched::Cluster));
            }
        }
        if policy.enabled && policy.stale_over_denial {
            let window = policy.stale_window();
            return positive()
                .filter(|e| e.is_fresh(now) || e.is_servable_stale(now, window))
                .map(|e| (e, Vouched::Stale));
        }
        None
    }
}

#[cfg(test)]
#[path = "last_good_tests.rs"]
mod tests;
