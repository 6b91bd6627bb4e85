//! Who is asking what, per workload (`[server] workload_counters`): the
//! counts behind `nodens top` and the top-K metric family.
//!
//! Counted per client address at the point where every reply is counted
//! (`serve::stats::ZoneStats::reply`), and named by pod only when read:
//! the pod map (`search::Clients`) turns addresses into namespace and pod
//! then, so the request path never copies a name. Memory is fixed whatever
//! the cluster: a table of [`SETS`] sets of [`WAYS`] slots (1,024 clients
//! at once, far above a node's pods). A newcomer takes a free slot of its
//! set, else one idle for [`IDLE`], else the one with the fewest queries:
//! a flood of one-query (or spoofed) addresses evicts idle clients and
//! its own, and a busy workload keeps its counts.
//!
//! A reply from a client that holds a slot counts with relaxed atomic adds,
//! no lock: many threads answer one busy client at once. Taking a slot,
//! and the names sketch, go under the set's lock. Each slot keeps the names
//! its client asks most: a space-saving sketch of [`NAMES`] names, fed by
//! one query in [`NAME_SAMPLE`] (skipped when the set's lock is busy) so
//! the name is folded and compared on that one only.
//!
//! Configuration: `[server] workload_counters` and `workload_metrics`.
//! Request path: an observer of answers (`answered`): where a reply is
//! counted, an add to a fixed table.

mod metrics;
mod view;

use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub(crate) use metrics::WorkloadMetrics;
pub use view::{Rates, TopView, Workload};

use crate::answered::{Answered, Event, Observer, Source};
use crate::cache::key::NameBuf;
use crate::wire::rcode;

/// Sets in the table (a power of two) and slots in a set.
const SETS: usize = 256;
const WAYS: usize = 4;
/// A client not seen for this long gives its slot to a newcomer first.
const IDLE: std::time::Duration = std::time::Duration::from_secs(10);
/// Names kept per client.
const NAMES: usize = 4;
/// One query in this many feeds the names sketch (a power of two).
const NAME_SAMPLE: u64 = 8;

/// A client's counts since its slot was taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) queries: u64,
    /// Answered without asking upstream: from the cache (fresh, held or
    /// stale) or by nodens itself (a local NXDOMAIN, a local record).
    pub(crate) hits: u64,
    pub(crate) nxdomain: u64,
    pub(crate) servfail: u64,
    /// NXDOMAIN answers under the cluster domain: the search-list
    /// expansions a lookup tried before the name that exists (the ndots
    /// tax).
    pub(crate) expansions: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.queries += other.queries;
        self.hits += other.hits;
        self.nxdomain += other.nxdomain;
        self.servfail += other.servfail;
        self.expansions += other.expansions;
    }
}

/// A name in the sketch: folded wire form, and its count (an estimate
/// from above: space-saving's).
#[derive(Clone)]
struct NameCount {
    name: NameBuf,
    len: u8,
    count: u32,
}

/// A client's counters, bumped without a lock: many threads answer one
/// busy client at once (workers, and the tasks that finish misses), and a
/// lock they all take would cost each answer a wait.
#[derive(Default)]
struct Slot {
    /// The owner's hash (never 0); 0: free. Set and cleared under the
    /// set's lock; a reply that finds its hash here counts without it.
    tag: AtomicU64,
    /// Milliseconds after `born` of the owner's last reply.
    seen: AtomicU64,
    queries: AtomicU64,
    hits: AtomicU64,
    nxdomain: AtomicU64,
    servfail: AtomicU64,
    expansions: AtomicU64,
}

impl Slot {
    fn counts(&self) -> Counts {
        Counts {
            queries: self.queries.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            nxdomain: self.nxdomain.load(Ordering::Relaxed),
            servfail: self.servfail.load(Ordering::Relaxed),
            expansions: self.expansions.load(Ordering::Relaxed),
        }
    }

    fn reset(&self) {
        for c in [
            &self.queries,
            &self.hits,
            &self.nxdomain,
            &self.servfail,
            &self.expansions,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// What a set keeps under its lock: who owns each slot, and its names.
struct Owners {
    clients: [Option<IpAddr>; WAYS],
    names: [[NameCount; NAMES]; WAYS],
}

struct Set {
    slots: [Slot; WAYS],
    owners: Mutex<Owners>,
}

/// One client's counts and most asked names, copied out of the table.
#[derive(Debug, Clone)]
pub(crate) struct ClientCounts {
    pub(crate) client: IpAddr,
    pub(crate) counts: Counts,
    /// Folded wire names with their sampled counts, most asked first.
    pub(crate) names: Vec<(Box<[u8]>, u32)>,
}

pub(crate) struct Workloads {
    sets: Box<[Set]>,
    hasher: ahash::RandomState,
    /// `<domain>.` of `[cluster] domain`, lower-case wire form.
    cluster_domain: arc_swap::ArcSwap<Box<[u8]>>,
    /// When counting started: a view's clock.
    born: Instant,
}

impl Workloads {
    pub(crate) fn new(cluster_domain: &[u8]) -> Workloads {
        let empty = || NameCount {
            name: [0; crate::wire::name::MAX_NAME_LEN],
            len: 0,
            count: 0,
        };
        Workloads {
            sets: (0..SETS)
                .map(|_| Set {
                    slots: Default::default(),
                    owners: Mutex::new(Owners {
                        clients: [None; WAYS],
                        names: std::array::from_fn(|_| std::array::from_fn(|_| empty())),
                    }),
                })
                .collect(),
            hasher: ahash::RandomState::new(),
            cluster_domain: arc_swap::ArcSwap::from_pointee(cluster_domain.into()),
            born: Instant::now(),
        }
    }

    /// On reload: the cluster domain may have changed.
    pub(crate) fn set_cluster_domain(&self, domain: &[u8]) {
        if &***self.cluster_domain.load() != domain {
            self.cluster_domain
                .store(std::sync::Arc::new(domain.into()));
        }
    }

    /// Counts one reply to `answered` with response code `code`.
    #[inline]
    pub(crate) fn count(&self, answered: &Answered<'_>, code: u16) {
        let client = answered.client.ip().to_canonical();
        let hash = self.hasher.hash_one(client);
        let tag = hash | 1;
        let set = &self.sets[(hash >> 1) as usize & (SETS - 1)];
        let now = answered
            .started
            .saturating_duration_since(self.born)
            .as_millis() as u64;
        let way = match set
            .slots
            .iter()
            .position(|s| s.tag.load(Ordering::Acquire) == tag)
        {
            Some(way) => way,
            None => self.take_slot(set, client, tag, now),
        };
        let slot = &set.slots[way];
        slot.seen.store(now, Ordering::Relaxed);
        let queries = slot.queries.fetch_add(1, Ordering::Relaxed) + 1;
        if answered.source != Source::Upstream {
            slot.hits.fetch_add(1, Ordering::Relaxed);
        }
        match code {
            rcode::NXDOMAIN => {
                slot.nxdomain.fetch_add(1, Ordering::Relaxed);
                if self.under_cluster_domain(answered.query.name()) {
                    slot.expansions.fetch_add(1, Ordering::Relaxed);
                }
            }
            rcode::SERVFAIL => {
                slot.servfail.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        // A sample: skipped, not waited for, when another thread holds the set.
        if queries % NAME_SAMPLE == 1
            && let Ok(mut owners) = set.owners.try_lock()
            && owners.clients[way] == Some(client)
        {
            note_name(&mut owners.names[way], answered.query.name());
        }
    }

    /// Gives `client` a slot of `set` (under the set's lock): a free one,
    /// else one idle for [`IDLE`], else the one with the fewest queries.
    #[cold]
    fn take_slot(&self, set: &Set, client: IpAddr, tag: u64, now: u64) -> usize {
        let mut owners = crate::lock::lock(&set.owners);
        if let Some(way) = set
            .slots
            .iter()
            .position(|s| s.tag.load(Ordering::Acquire) == tag)
        {
            return way;
        }
        let idle = IDLE.as_millis() as u64;
        let way = (0..WAYS)
            .min_by_key(|&w| {
                let s = &set.slots[w];
                if s.tag.load(Ordering::Relaxed) == 0 {
                    (0, 0, 0)
                } else if now.saturating_sub(s.seen.load(Ordering::Relaxed)) > idle {
                    (1, 0, s.seen.load(Ordering::Relaxed))
                } else {
                    (2, s.queries.load(Ordering::Relaxed), 0)
                }
            })
            .unwrap_or(0);
        let slot = &set.slots[way];
        slot.tag.store(0, Ordering::Release);
        slot.reset();
        owners.clients[way] = Some(client);
        for n in &mut owners.names[way] {
            n.count = 0;
            n.len = 0;
        }
        slot.tag.store(tag, Ordering::Release);
        way
    }

    fn under_cluster_domain(&self, name: &[u8]) -> bool {
        let domain = self.cluster_domain.load();
        name.len().checked_sub(domain.len()).is_some_and(|at| {
            name[at..].eq_ignore_ascii_case(&domain)
                && crate::wire::name::label_starts(name).any(|s| s == at)
        })
    }

    /// The counts grouped by workload, busiest first, at most `limit`.
    pub(crate) fn view(&self, pods: &crate::search::Clients, limit: usize) -> TopView {
        let at_ms = self.born.elapsed().as_millis() as u64;
        let mut workloads = view::group(self.clients(), pods);
        workloads.truncate(limit);
        TopView { at_ms, workloads }
    }

    /// Every client counted, with its counts and names.
    pub(crate) fn clients(&self) -> Vec<ClientCounts> {
        let mut all = Vec::new();
        for set in &self.sets {
            let owners = crate::lock::lock(&set.owners);
            for (way, slot) in set.slots.iter().enumerate() {
                let Some(client) = owners.clients[way] else {
                    continue;
                };
                let mut names: Vec<(Box<[u8]>, u32)> = owners.names[way]
                    .iter()
                    .filter(|n| n.count > 0)
                    .map(|n| (n.name[..usize::from(n.len)].into(), n.count))
                    .collect();
                names.sort_by_key(|n| std::cmp::Reverse(n.1));
                all.push(ClientCounts {
                    client,
                    counts: slot.counts(),
                    names,
                });
            }
        }
        all
    }
}

/// Space-saving: a name in the sketch counts one more; a new one replaces
/// the least counted and starts from its count plus one.
fn note_name(names: &mut [NameCount; NAMES], wire: &[u8]) {
    let mut folded: NameBuf = [0; crate::wire::name::MAX_NAME_LEN];
    let len = crate::wire::name::fold_into(wire, &mut folded);
    let name = &folded[..len];
    if let Some(n) = names
        .iter_mut()
        .find(|n| n.count > 0 && &n.name[..usize::from(n.len)] == name)
    {
        n.count += 1;
        return;
    }
    let least = names.iter_mut().min_by_key(|n| n.count).expect("NAMES > 0");
    least.name[..len].copy_from_slice(name);
    least.len = len as u8;
    least.count += 1;
}

/// The workload counters are an observer of answers: one add to a fixed
/// table per reply.
impl Observer for Workloads {
    #[inline]
    fn observe(&self, event: &Event<'_>) {
        self.count(&event.answered, event.rcode);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sketch() -> [NameCount; NAMES] {
        std::array::from_fn(|_| NameCount {
            name: [0; crate::wire::name::MAX_NAME_LEN],
            len: 0,
            count: 0,
        })
    }

    fn wire(text: &str) -> Vec<u8> {
        crate::wire::name::from_text(text).unwrap()
    }

    #[test]
    fn the_sketch_keeps_the_most_asked_names() {
        let mut names = sketch();
        for i in 0..200 {
            note_name(&mut names, &wire("Popular.example."));
            if i % 2 == 0 {
                note_name(&mut names, &wire("second.example."));
            }
            note_name(&mut names, &wire(&format!("noise{i}.example.")));
        }
        let mut kept: Vec<_> = names
            .iter()
            .map(|n| (n.name[..n.len as usize].to_vec(), n.count))
            .collect();
        kept.sort_by_key(|n| std::cmp::Reverse(n.1));
        assert_eq!(kept[0].0, wire("popular.example."));
        assert_eq!(kept[0].1, 200);
        assert_eq!(kept[1].0, wire("second.example."));
    }

    #[test]
    fn the_table_is_bounded() {
        let size = std::mem::size_of::<Set>() * SETS;
        assert!(size < 1_200_000, "{size} bytes");
    }
}
