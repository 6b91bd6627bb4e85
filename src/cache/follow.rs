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
//!   answer ([`Cache::settled`]).
//! - Nor is an answer held if it was asked for within the cluster DNS's
//!   TTL after the purge (or after the watch started): the cluster DNS may
//!   cache its own answers (kubeadm's Corefile has `cache 30`) and give
//!   the old one until its entry expires. Stored, it expires at its TTL
//!   as without the feature; held, nothing would ever drop it.
//! - While the watch is current, an answer it covers may be served up to
//!   `hold_past_ttl` past its TTL ([`Lookup::Held`]): a change to it would
//!   have dropped it. When the watch stops being current, held answers
//!   expire at their TTL again, at once.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use super::{Cache, Key};
use crate::wire::name::label_starts;
use crate::wire::read_u32;
use crate::wire::response::{Layout, Section, sane_ttl};
use crate::wire::reverse::address as reverse_address;

/// How much later than nodens the cluster DNS may see a change (both
/// watch one API server; a watch event reaches its watchers within
/// milliseconds of each other unless one is busy).
pub(crate) const CLUSTER_DNS_LAG: Duration = Duration::from_secs(1);
/// How long a purge is remembered at least: past the lag and any query's
/// timeout (and past [`Cache::settle_window`]).
const REMEMBER_PURGE: Duration = Duration::from_secs(10);
/// The cluster DNS's cache is assumed to keep an answer this long until
/// nodens has seen longer TTLs from it: kubeadm's Corefile, `cache 30`.
const MIN_SETTLE: u32 = 30;
/// The longest a cluster DNS answer is trusted to be cached upstream
/// (CoreDNS's `kubernetes` plugin allows a TTL of at most 3600).
const MAX_SETTLE: u32 = 3600;
/// Purges remembered at most, per map: past this, nothing is held until
/// a settle window has passed (memory stays bounded in a rollout storm).
const MAX_REMEMBERED: usize = 65_536;
/// The TTL a held answer is given: a client that caches it asks again
/// within a second, as it would learn of a change through nodens.
pub(crate) const HELD_TTL: u32 = 1;

/// What the watch covers: the names whose every answer would change only
/// through an object it sees.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    /// `svc.<domain>` in lower-case wire form.
    pub svc_zone: Box<[u8]>,
    /// The nodes (`<svc>.<ns>.svc.<domain>`) whose answers the watch
    /// cannot vouch for, at or below: ExternalName Services (records from
    /// outside the cluster), and headless Services none of whose slices
    /// the watch reads.
    pub uncovered: HashSet<Box<[u8]>>,
    /// Every ClusterIP and endpoint address the watch knows.
    pub addresses: HashSet<IpAddr>,
    /// The nodes of Services whose EndpointSlices the watch does not read
    /// (`follow_api_endpoints = "headless"`): their own node and their SRV
    /// names are covered (they come from the Service), the other names
    /// below it (their endpoints' names) are not.
    pub partial: HashSet<Box<[u8]>>,
    /// The node of every Service the watch knows: what it vouches exists
    /// (`cache::last_good`).
    pub services: HashSet<Box<[u8]>>,
    /// The nodes of headless Services whose slices list no endpoint, and
    /// since when: vouched for only [`EMPTY_GRACE`] past that (a rollout's
    /// moment; a Service scaled to zero then gets its NXDOMAIN).
    pub emptied: HashMap<Box<[u8]>, Instant>,
}

/// How long a headless Service whose slices list no endpoint is still
/// vouched for: the gap of a `Recreate` rollout or a StatefulSet pod's
/// restart, between the old pod gone and the new one listed.
pub(crate) const EMPTY_GRACE: Duration = Duration::from_secs(30);

impl Coverage {
    /// Whether an answer for `name` (folded wire form) may be held: a name
    /// at or below a Service's node of a cluster domain (no wildcard, not
    /// an uncovered node), or the PTR name of an address the watch knows.
    pub(crate) fn holds(&self, name: &[u8]) -> bool {
        if let Some(node) = service_node(name, &self.svc_zone) {
            let below_partial = node > 0
                && self.partial.contains(&name[node..])
                && !is_port_protocol(&name[..node]);
            return !self.uncovered.contains(&name[node..])
                && !has_wildcard(name)
                && !below_partial;
        }
        reverse_address(name).is_some_and(|ip| self.addresses.contains(&ip))
    }

    /// Whether the watch vouches that `name` exists: the node of a Service
    /// it knows (not one whose answers come from elsewhere), or one of its
    /// SRV names, which the Service's ports make.
    pub(crate) fn vouches_for(&self, name: &[u8], now: Instant) -> bool {
        service_node(name, &self.svc_zone).is_some_and(|node| {
            let service = &name[node..];
            (node == 0 || is_port_protocol(&name[..node]))
                && self.services.contains(service)
                && !self.uncovered.contains(service)
                && self
                    .emptied
                    .get(service)
                    .is_none_or(|&at| now.saturating_duration_since(at) < EMPTY_GRACE)
        })
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

/// Whether `labels` (the wire form below a Service's node) is
/// `_<port>._<protocol>`: an SRV name made of the Service's own ports,
/// which the Service watch covers without its slices.
fn is_port_protocol(labels: &[u8]) -> bool {
    let mut starts = label_starts(labels);
    match (starts.next(), starts.next(), starts.next()) {
        (Some(a), Some(b), None) => [a, b].iter().all(|&at| labels.get(at + 1) == Some(&b'_')),
        _ => false,
    }
}

fn has_wildcard(name: &[u8]) -> bool {
    label_starts(name).any(|at| name.get(at..at + 2) == Some(b"\x01*"))
}

/// The TTL of a response as the cluster DNS sent it (before nodens's
/// clamps): the least of its answer and authority records', or the
/// negative TTL of a denial.
pub(crate) fn received_ttl(msg: &[u8], layout: &Layout) -> u32 {
    if layout.answer_count == 0 {
        return layout.soa_negative_ttl.unwrap_or(0);
    }
    layout
        .ttls
        .iter()
        .filter(|(at, section)| *section != Section::Additional && at + 4 <= msg.len())
        .map(|(at, _)| sane_ttl(read_u32(msg, *at)))
        .min()
        .unwrap_or(0)
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
    /// Whether the watch is current and its word replaces a denial
    /// (`cache::last_good`).
    vouching: AtomicBool,
    /// What the watch covers, while it runs.
    coverage: ArcSwapOption<Coverage>,
    /// Lately purged Service nodes and addresses, with when.
    recent_nodes: Mutex<HashMap<Box<[u8]>, Instant>>,
    recent_addresses: Mutex<HashMap<IpAddr, Instant>>,
    /// The largest TTL (seconds) of a covered answer seen from the
    /// cluster DNS: how long its own cache may keep an answer.
    cluster_ttl: AtomicU32,
    /// When every covered name counts as just purged: the watch started
    /// (it does not know what changed just before), or too many purges
    /// to remember each.
    all_purged_at: Mutex<Option<Instant>>,
}

/// Whether an answer fetched after a purge may be stored, and held
/// (ordered: the strictest of several purges wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Settled {
    /// Asked for within [`CLUSTER_DNS_LAG`] of a purge of its name: it may
    /// predate the change. Passed on, neither stored nor learned from.
    No,
    /// Asked for within the cluster DNS's TTL of a purge (or of the
    /// watch's start): it may come from the cluster DNS's own cache.
    /// Stored with its TTL, never held.
    Settling,
    /// Stored, and held if the watch covers it.
    Yes,
}

impl Cache {
    /// Sets how long past its TTL a covered answer is served (zero: as
    /// today). The watch sets it while current, and zero when it is not.
    pub(crate) fn set_hold(&self, hold: Duration) {
        let secs = u32::try_from(hold.as_secs()).unwrap_or(u32::MAX);
        self.following.hold_secs.store(secs, Ordering::Relaxed);
    }

    /// Whether the watch's word on which Services exist replaces a denial
    /// now (`cache::last_good`): set while the watch is current, unless
    /// `[cluster] keep_last_good` is off.
    pub(crate) fn set_vouching(&self, on: bool) {
        self.following.vouching.store(on, Ordering::Relaxed);
    }

    /// Whether the watch vouches now that `name` exists.
    pub(super) fn vouches_for(&self, name: &[u8], now: Instant) -> bool {
        self.following.vouching.load(Ordering::Relaxed)
            && self
                .following
                .coverage
                .load()
                .as_ref()
                .is_some_and(|c| c.vouches_for(name, now))
    }

    /// Seconds an expired covered entry may still be served now.
    #[inline]
    pub(super) fn hold_secs(&self) -> u32 {
        self.following.hold_secs.load(Ordering::Relaxed)
    }

    /// Whether `entry` will be held once it expires (marked holdable, and
    /// a hold set now): then a prefetch would only ask the cluster DNS
    /// again for what the watch keeps right.
    #[inline]
    pub(crate) fn will_hold(&self, entry: &super::Entry) -> bool {
        entry.is_holdable() && self.hold_secs() != 0
    }

    /// Replaces what the watch covers (None: no watch runs). A watch
    /// that starts (or starts again) does not know what changed just
    /// before: every name counts as purged at that moment.
    pub(crate) fn set_coverage(&self, coverage: Option<Arc<Coverage>>, now: Instant) {
        let starts = coverage.is_some() && self.following.coverage.load().is_none();
        if starts {
            *crate::lock::lock(&self.following.all_purged_at) = Some(now);
        }
        if coverage.is_none() {
            self.kept.clear();
        }
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

    /// Whether an answer for `key` asked for at `asked`, `ttl` its TTL as
    /// received ([`received_ttl`]), may be stored and held, given the
    /// purges of its name ([`Settled`]). Miss path only; free without a
    /// watch.
    ///
    /// The cluster DNS's cache ages what it serves: an answer with `ttl`
    /// left of at most `longest` was stored there no earlier than
    /// `longest - ttl` (and a second of rounding) before it was asked for.
    /// Asked for later than that after the purge, it was made after it.
    pub(crate) fn settled(&self, key: &Key, asked: Instant, ttl: impl Fn() -> u32) -> Settled {
        let Some(coverage) = self.following.coverage.load_full() else {
            return Settled::Yes;
        };
        let name = key.name();
        let ttl = ttl();
        let covered = coverage.holds(name);
        if covered {
            self.saw_cluster_ttl(ttl);
        }
        let cached_for = self
            .settle_window()
            .saturating_sub(Duration::from_secs(ttl.into()));
        let judge = |at: &Instant| match asked.checked_duration_since(*at) {
            Some(d) if d >= cached_for + CLUSTER_DNS_LAG => Settled::Yes,
            Some(d) if d >= CLUSTER_DNS_LAG => Settled::Settling,
            _ => Settled::No,
        };
        // A start is not a change: nothing to refuse, only not to hold
        // (and only what the watch covers is ever held).
        let mut settled = if covered {
            crate::lock::lock(&self.following.all_purged_at)
                .as_ref()
                .map_or(Settled::Yes, |at| judge(at).max(Settled::Settling))
        } else {
            Settled::Yes
        };
        {
            let nodes = crate::lock::lock(&self.following.recent_nodes);
            if !nodes.is_empty() {
                for at in label_starts(name).filter_map(|at| nodes.get(&name[at..])) {
                    settled = settled.min(judge(at));
                }
            }
        }
        if name.ends_with(b"\x04arpa\x00")
            && let Some(ip) = reverse_address(name)
            && let Some(at) = crate::lock::lock(&self.following.recent_addresses).get(&ip)
        {
            settled = settled.min(judge(at));
        }
        settled
    }

    /// Notes a TTL of the cluster DNS: the longest seen bounds how long
    /// its own cache keeps an answer.
    fn saw_cluster_ttl(&self, ttl: u32) {
        self.following
            .cluster_ttl
            .fetch_max(ttl.min(MAX_SETTLE), Ordering::Relaxed);
    }

    /// How long the cluster DNS's cache may keep an answer: the longest
    /// TTL seen from it, at least kubeadm's 30 s (until one of its fresh
    /// answers is seen, those seen may have aged in its cache).
    fn settle_window(&self) -> Duration {
        let seen = self.following.cluster_ttl.load(Ordering::Relaxed);
        Duration::from_secs(seen.clamp(MIN_SETTLE, MAX_SETTLE).into())
    }

    /// Drops every cached entry (`nodens cache flush --all`): every
    /// covered name counts as just purged, so none is held before the
    /// cluster DNS's own cache has turned over.
    pub(crate) fn purge_all(&self, now: Instant) -> usize {
        *crate::lock::lock(&self.following.all_purged_at) = Some(now);
        let before = self.success.len() + self.denial.len();
        self.retain(&self.success, |_, _| false);
        self.retain(&self.denial, |_, _| false);
        before
    }

    /// Drops every entry marked holdable: a new watch does not know
    /// what changed since the last one marked them. One pass, at its start.
    pub(crate) fn forget_holdable(&self) {
        self.set_hold(Duration::ZERO);
        self.retain(&self.success, |_, e| !e.is_holdable());
        self.retain(&self.denial, |_, e| !e.is_holdable());
    }

    /// Drops every cached answer `purge` covers, in every view, and
    /// remembers the purge for [`Cache::may_store`]. Returns the entries
    /// dropped. One pass over each part of the cache.
    pub(crate) fn purge(&self, purge: &Purge, now: Instant) -> usize {
        if purge.is_empty() {
            return 0;
        }
        {
            let remember = REMEMBER_PURGE.max(self.settle_window() + CLUSTER_DNS_LAG);
            let recent = |at: &Instant| now.saturating_duration_since(*at) < remember;
            let mut nodes = crate::lock::lock(&self.following.recent_nodes);
            nodes.retain(|_, at| recent(at));
            nodes.extend(purge.nodes.iter().map(|n| (n.clone(), now)));
            nodes.extend(purge.exact.iter().map(|n| (n.clone(), now)));
            let mut addresses = crate::lock::lock(&self.following.recent_addresses);
            addresses.retain(|_, at| recent(at));
            addresses.extend(purge.addresses.iter().map(|a| (*a, now)));
            if nodes.len() > MAX_REMEMBERED || addresses.len() > MAX_REMEMBERED {
                // Too many to remember each: every name counts as purged
                // now, so none is held before a window has passed (the
                // lag's refusal to store is lost for this one burst).
                nodes.clear();
                addresses.clear();
                nodes.shrink_to(MAX_REMEMBERED);
                addresses.shrink_to(MAX_REMEMBERED);
                *crate::lock::lock(&self.following.all_purged_at) = Some(now);
            }
        }
        let before = self.success.len() + self.denial.len();
        // The positive answers of Services that still exist (the coverage
        // is the new one) are kept aside for `last_good`; those of Services
        // gone are forgotten.
        let coverage = self.following.coverage.load_full();
        let vouched = |name: &[u8]| coverage.as_ref().is_some_and(|c| c.vouches_for(name, now));
        let dropped = Mutex::new(Vec::new());
        self.retain(&self.success, |key, entry| {
            let covered = purge.covers(key.name());
            if covered && vouched(key.name()) {
                crate::lock::lock(&dropped).push((key.clone(), entry.clone()));
            }
            !covered
        });
        self.retain(&self.denial, |key, _| !purge.covers(key.name()));
        self.kept.retain(|key| vouched(key.name()));
        self.kept.keep(dropped.into_inner().unwrap_or_default());
        before.saturating_sub(self.success.len() + self.denial.len())
    }
}

#[cfg(test)]
#[path = "follow_tests.rs"]
mod tests;
