//! Cached cluster answers that follow the API (`[cluster] follow_api`):
//! what the Service and EndpointSlice watch (`kubernetes::follow`) tells
//! the cache, and what the cache does with it.
//!
//! - A change drops every cached answer at or below the Service's node
//!   (`<svc>.<ns>.svc.<domain>`: its addresses, its endpoints' hostnames,
//!   its SRV records) and the PTR answers of the addresses it added or
//!   removed, in every view ([`Cache::purge`]).
//! - For a while after, an answer for a purged name is not stored if it
//!   was asked for less than [`CLUSTER_DNS_LAG`] after the purge: the
//!   cluster DNS watches the same API and may see the change a little
//!   later than nodens, and a fetch already in flight carries the old
//!   answer ([`Cache::may_store`]).
//! - While the watch is current, an answer it covers may be served up to
//!   `hold_past_ttl` past its TTL ([`Lookup::Held`]): a change to it would
//!   have dropped it. When the watch stops being current, held answers
//!   expire at their TTL again, at once.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use super::{Cache, Key};
use crate::records::hosts::reverse_address;
use crate::wire::name::label_starts;

/// How much later than nodens the cluster DNS may see a change (both
/// watch one API server; a watch event reaches its watchers within
/// milliseconds of each other unless one is busy).
pub(crate) const CLUSTER_DNS_LAG: Duration = Duration::from_secs(1);
/// How long a purge is remembered: past the lag and any query's timeout.
const REMEMBER_PURGE: Duration = Duration::from_secs(10);
/// The TTL a held answer is given: a client that caches it asks again
/// within a second, as it would learn of a change through nodens.
pub(crate) const HELD_TTL: u32 = 1;

/// What the watch covers: the names whose every answer would change only
/// through an object it sees.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    /// `svc.<domain>` in lower-case wire form.
    pub svc_zone: Box<[u8]>,
    /// The nodes (`<svc>.<ns>.svc.<domain>`) of ExternalName Services,
    /// whose answers carry records from outside the cluster.
    pub external: HashSet<Box<[u8]>>,
    /// Every ClusterIP and endpoint address the watch knows.
    pub addresses: HashSet<IpAddr>,
}

impl Coverage {
    /// Whether an answer for `name` (folded wire form) may be held: a name
    /// at or below a Service's node of a cluster domain (no wildcard, not
    /// an ExternalName Service), or the PTR name of an address the watch
    /// knows.
    pub(crate) fn holds(&self, name: &[u8]) -> bool {
        if let Some(node) = service_node(name, &self.svc_zone) {
            return !self.external.contains(&name[node..]) && !has_wildcard(name);
        }
        reverse_address(name).is_some_and(|ip| self.addresses.contains(&ip))
    }
}

/// Where the Service node (`<svc>.<ns>.svc.<domain>`) of `name` starts,
/// if `name` is at or below one.
pub(crate) fn service_node(name: &[u8], svc_zone: &[u8]) -> Option<usize> {
    if svc_zone.is_empty() || name.len() <= svc_zone.len() || !name.ends_with(svc_zone) {
        return None;
    }
    let starts: Vec<usize> = label_starts(name).collect();
    let zone_at = name.len() - svc_zone.len();
    let i = starts.iter().position(|&at| at == zone_at)?;
    // Two labels above `svc.<domain>`: the namespace, then the Service.
    i.checked_sub(2).map(|s| starts[s])
}

fn has_wildcard(name: &[u8]) -> bool {
    label_starts(name).any(|at| name.get(at..at + 2) == Some(b"\x01*"))
}

/// What a change of the API drops.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Purge {
    /// Service nodes, lower-case wire form: every name at or below each.
    pub nodes: HashSet<Box<[u8]>>,
    /// Names dropped themselves, not what is below (the namespace node
    /// above a Service: a cached NXDOMAIN there cuts off every name below).
    pub exact: HashSet<Box<[u8]>>,
    /// Addresses whose PTR answers are dropped.
    pub addresses: HashSet<IpAddr>,
}

impl Purge {
    pub(crate) fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.exact.is_empty() && self.addresses.is_empty()
    }

    /// Whether the cached answers of `name` are dropped.
    pub(crate) fn covers(&self, name: &[u8]) -> bool {
        if name.ends_with(b"\x04arpa\x00")
            && let Some(ip) = reverse_address(name)
        {
            return self.addresses.contains(&ip);
        }
        self.exact.contains(name) || label_starts(name).any(|at| self.nodes.contains(&name[at..]))
    }
}

/// The cache's side of following the API.
#[derive(Default)]
pub(crate) struct Following {
    /// Seconds past its TTL a holdable entry is served now; 0 while the
    /// watch is not current or holding is off.
    hold_secs: AtomicU32,
    /// What the watch covers, while it runs.
    coverage: ArcSwapOption<Coverage>,
    /// Lately purged Service nodes and addresses, with when.
    recent_nodes: Mutex<HashMap<Box<[u8]>, Instant>>,
    recent_addresses: Mutex<HashMap<IpAddr, Instant>>,
}

impl Cache {
    /// Sets how long past its TTL a covered answer is served (zero: as
    /// today). The watch sets it while current, and zero when it is not.
    pub(crate) fn set_hold(&self, hold: Duration) {
        let secs = u32::try_from(hold.as_secs()).unwrap_or(u32::MAX);
        self.following.hold_secs.store(secs, Ordering::Relaxed);
    }

    /// Seconds an expired covered entry may still be served now.
    #[inline]
    pub(super) fn hold_secs(&self) -> u32 {
        self.following.hold_secs.load(Ordering::Relaxed)
    }

    /// Replaces what the watch covers (None: no watch runs).
    pub(crate) fn set_coverage(&self, coverage: Option<Arc<Coverage>>) {
        self.following.coverage.store(coverage);
    }

    /// Whether a watch covers `name`, so its answer may be held.
    pub(crate) fn holds(&self, name: &[u8]) -> bool {
        self.following
            .coverage
            .load()
            .as_ref()
            .is_some_and(|c| c.holds(name))
    }

    /// Whether an answer for `key` asked for at `asked` may be stored: not
    /// if a purge of its name came less than [`CLUSTER_DNS_LAG`] before
    /// it was asked for (or after). Miss path only; free without a watch.
    pub(crate) fn may_store(&self, key: &Key, asked: Instant) -> bool {
        if self.following.coverage.load().is_none() {
            return true;
        }
        let name = key.name();
        let fresh_purge = |at: &Instant| asked < *at + CLUSTER_DNS_LAG;
        {
            let nodes = crate::lock::lock(&self.following.recent_nodes);
            if !nodes.is_empty()
                && label_starts(name).any(|at| nodes.get(&name[at..]).is_some_and(fresh_purge))
            {
                return false;
            }
        }
        if name.ends_with(b"\x04arpa\x00")
            && let Some(ip) = reverse_address(name)
        {
            let addresses = crate::lock::lock(&self.following.recent_addresses);
            return !addresses.get(&ip).is_some_and(fresh_purge);
        }
        true
    }

    /// Drops every entry marked holdable: a new watch does not know
    /// what changed since the last one marked them. One pass, at its start.
    pub(crate) fn forget_holdable(&self) {
        self.set_hold(Duration::ZERO);
        self.success.retain(|_, e| !e.is_holdable());
        self.denial.retain(|_, e| !e.is_holdable());
    }

    /// Drops every cached answer `purge` covers, in every view, and
    /// remembers the purge for [`Cache::may_store`]. Returns the entries
    /// dropped. One pass over each part of the cache.
    pub(crate) fn purge(&self, purge: &Purge, now: Instant) -> usize {
        if purge.is_empty() {
            return 0;
        }
        {
            let mut nodes = crate::lock::lock(&self.following.recent_nodes);
            nodes.retain(|_, at| now.saturating_duration_since(*at) < REMEMBER_PURGE);
            nodes.extend(purge.nodes.iter().map(|n| (n.clone(), now)));
            nodes.extend(purge.exact.iter().map(|n| (n.clone(), now)));
            let mut addresses = crate::lock::lock(&self.following.recent_addresses);
            addresses.retain(|_, at| now.saturating_duration_since(*at) < REMEMBER_PURGE);
            addresses.extend(purge.addresses.iter().map(|a| (*a, now)));
        }
        let before = self.success.len() + self.denial.len();
        self.success.retain(|key, _| !purge.covers(key.name()));
        self.denial.retain(|key, _| !purge.covers(key.name()));
        before.saturating_sub(self.success.len() + self.denial.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{KeyRef, Lookup};
    use crate::wire::name::from_text;

    fn wire(s: &str) -> Box<[u8]> {
        from_text(s).unwrap().into_boxed_slice()
    }

    #[test]
    fn service_nodes_and_coverage() {
        let zone = wire("svc.cluster.local.");
        let name = wire("_http._tcp.web.team-a.svc.cluster.local.");
        let at = service_node(&name, &zone).unwrap();
        assert_eq!(&name[at..], &*wire("web.team-a.svc.cluster.local."));
        assert_eq!(
            service_node(&wire("team-a.svc.cluster.local."), &zone),
            None
        );
        assert_eq!(service_node(&wire("svc.cluster.local."), &zone), None);
        assert_eq!(
            service_node(&wire("web.team-a.xsvc.cluster.local."), &zone),
            None
        );
        let coverage = Coverage {
            svc_zone: zone,
            external: [wire("ext.team-a.svc.cluster.local.")].into(),
            addresses: ["10.96.0.20".parse().unwrap()].into(),
        };
        assert!(coverage.holds(&name));
        assert!(coverage.holds(&wire("nope.team-b.svc.cluster.local.")));
        assert!(!coverage.holds(&wire("ext.team-a.svc.cluster.local.")));
        assert!(!coverage.holds(&wire("*.team-a.svc.cluster.local.")));
        assert!(!coverage.holds(&wire("team-a.svc.cluster.local.")));
        assert!(coverage.holds(&wire("20.0.96.10.in-addr.arpa.")));
        assert!(!coverage.holds(&wire("21.0.96.10.in-addr.arpa.")));
        assert!(!coverage.holds(&wire("example.com.")));
    }

    fn failure(cache: &Cache, name: &str, view: u8) -> Key {
        let name = wire(name);
        let key = KeyRef {
            name: &name,
            qtype: 1,
            qclass: 1,
            flags: 0,
        }
        .in_view(view)
        .to_owned();
        let mut q = name.to_vec();
        q.extend([0, 1, 0, 1]);
        let entry = crate::cache::Entry::failure(&q, 60, Instant::now());
        cache.insert(key.clone(), Arc::new(entry));
        key
    }

    #[test]
    fn a_purge_drops_the_names_below_a_node_and_the_ptrs_in_every_view() {
        let cache = Cache::new(1 << 20);
        let t0 = Instant::now();
        let gone = [
            failure(&cache, "web.team-a.svc.cluster.local.", 0),
            failure(&cache, "web.team-a.svc.cluster.local.", 3),
            failure(&cache, "_http._tcp.web.team-a.svc.cluster.local.", 0),
            failure(&cache, "20.0.96.10.in-addr.arpa.", 0),
        ];
        let kept = [
            failure(&cache, "db.team-a.svc.cluster.local.", 0),
            failure(&cache, "21.0.96.10.in-addr.arpa.", 0),
            failure(&cache, "team-a.svc.cluster.local.", 0),
        ];
        let purge = Purge {
            nodes: [wire("web.team-a.svc.cluster.local.")].into(),
            exact: HashSet::new(),
            addresses: ["10.96.0.20".parse().unwrap()].into(),
        };
        assert_eq!(cache.purge(&purge, t0), gone.len());
        let found =
            |k: &Key| !matches!(cache.lookup(&k.as_ref(), t0, Duration::ZERO), Lookup::Miss);
        assert!(gone.iter().all(|k| !found(k)));
        assert!(kept.iter().all(found));
        // Without a watch nothing holds storing back.
        assert!(cache.may_store(&gone[0], t0));
        cache.set_coverage(Some(Arc::default()));
        assert!(!cache.may_store(&gone[0], t0 + Duration::from_millis(500)));
        assert!(!cache.may_store(&gone[3], t0));
        assert!(cache.may_store(&gone[0], t0 + CLUSTER_DNS_LAG));
        assert!(cache.may_store(&kept[0], t0));
    }

    /// An A answer for `name` with TTL 5.
    fn answer(name: &[u8], now: Instant) -> Arc<crate::cache::Entry> {
        let mut m = vec![0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
        m.extend(name);
        m.extend([
            0, 1, 0, 1, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 192, 0, 2, 1,
        ]);
        let layout = crate::wire::response::layout(&m).unwrap();
        let policy = crate::cache::TtlPolicy {
            min_ttl: 0,
            max_ttl: 3600,
            negative_max_ttl: 3600,
            failure_ttl: 5,
        };
        Arc::new(crate::cache::Entry::from_response(
            &m, &layout, &policy, now,
        ))
    }

    #[test]
    fn only_marked_answers_are_held_and_only_while_a_hold_is_set() {
        let cache = Cache::new(1 << 20);
        let t0 = Instant::now();
        let (covered, other) = (wire("web.a.svc.cluster.local."), wire("example.com."));
        let key = |name: &[u8]| {
            KeyRef {
                name,
                qtype: 1,
                qclass: 1,
                flags: 0,
            }
            .to_owned()
        };
        let marked = answer(&covered, t0);
        marked.mark_holdable();
        cache.insert(key(&covered), marked);
        cache.insert(key(&other), answer(&other, t0));
        let at = |k: &Key, secs| {
            cache.lookup(&k.as_ref(), t0 + Duration::from_secs(secs), Duration::ZERO)
        };
        // Holding off (the watch not current): expired is expired.
        assert!(matches!(at(&key(&covered), 6), Lookup::Miss));
        cache.set_hold(Duration::from_secs(60));
        assert!(matches!(at(&key(&covered), 2), Lookup::Fresh(_)));
        assert!(matches!(at(&key(&covered), 6), Lookup::Held(_)));
        assert!(matches!(at(&key(&covered), 64), Lookup::Held(_)));
        assert!(matches!(at(&key(&covered), 66), Lookup::Miss));
        assert!(matches!(at(&key(&other), 6), Lookup::Miss), "not marked");
        cache.set_hold(Duration::ZERO);
        assert!(matches!(at(&key(&covered), 6), Lookup::Miss));
        // A new watch forgets the marks.
        cache.set_hold(Duration::from_secs(60));
        cache.forget_holdable();
        assert!(matches!(at(&key(&covered), 2), Lookup::Miss));
    }
}
