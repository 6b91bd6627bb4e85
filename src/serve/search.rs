//! Working ahead of a pod's search list.
//!
//! - **Namespace check**: before `X.<ns>.svc.Z` (X of two labels or more,
//!   the shape of an external name's second expansion) goes upstream, the
//!   namespace node `<ns>.svc.Z` is asked for, unless an answer showed
//!   lately that the namespace exists. CoreDNS denies a namespace it does
//!   not have, and that one NXDOMAIN settles every name below it
//!   (`local`'s RFC 8020 cut): `api.example.com.svc.Z` and
//!   `www.example.com.svc.Z` both end at `com.svc.Z`, A and AAAA alike.
//! - **Speculation**: when the first expansion `X.<ns>.svc.Z` arrives, the
//!   pod's walk is made ahead of it (`X.svc.Z`, `X.Z`, the node's search
//!   domains, `X.`), so the client's next queries find their answers in
//!   the cache instead of waiting one round trip each. The walk passes at
//!   once what is known not to exist and stops where the pod's would: at
//!   an expansion that may exist it asks, as the pod will, and goes on
//!   only past an NXDOMAIN. No cluster name reaches another zone's
//!   upstreams on a guess, and no in-cluster lookup costs more queries
//!   than its walk. What the client receives is what it would have
//!   received; only the timing changes. Bounded by `max_speculations`
//!   walks asking at once; what speculation fetched and no client asked
//!   for is counted as wasted.
//!
//! [`SearchState`] owns what this work, the local answers (`local`) and
//! autopath keep between queries.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Settings, Shared};
use crate::cache::key::NameBuf;
use crate::cache::{Entry, Key, KeyRef, Lookup};
use crate::coalesce::Role;
use crate::lock::lock;
use crate::search::rules::FirstExpansion;
use crate::search::{Clients, Learned, Namespaces};
use crate::wire::name::{MAX_NAME_LEN, label_starts};
use crate::wire::{class, rtype};

/// How long a speculative answer may wait for its asker before it counts
/// as wasted: the client asks within a round trip or two if at all.
const USE_WINDOW: Duration = Duration::from_secs(10);
/// Speculative answers tracked for the wasted count at once.
const LEDGER_LEN: usize = 4096;

/// What the search-list work knows and keeps between queries: what the
/// cluster DNS's answers taught, what the API lists, and speculation's
/// own state.
#[derive(Default)]
pub(crate) struct SearchState {
    /// SOAs, denied nodes and known namespaces the local-answer stage and
    /// the namespace check rest on.
    pub(super) learned: Learned,
    /// The namespaces the API lists (`[cluster] namespaces_from_api`).
    pub(crate) namespaces: Arc<Namespaces>,
    /// This node's pods by address (`[cluster] autopath`).
    pub(crate) clients: Arc<Clients>,
    pub(super) speculation: Speculation,
}

/// Speculation's own state: its budget and what it fetched.
#[derive(Default)]
pub(super) struct Speculation {
    in_flight: Arc<AtomicUsize>,
    /// Speculative answers not yet known to be used or wasted.
    ledger: Mutex<VecDeque<(Instant, Arc<Entry>)>>,
    /// Second expansions (`X.svc.Z`) of lookups under way, as speculation
    /// worked them out, with when: for [`Shared::predicted_expansion`].
    predicted: Mutex<HashMap<Box<[u8]>, Instant>>,
}

/// A place within the speculation budget, given back on drop.
struct Ticket(Arc<AtomicUsize>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Speculation {
    /// Remembers `name` as a lookup's coming second expansion.
    fn predict(&self, name: &[u8], now: Instant) {
        let mut predicted = lock(&self.predicted);
        if predicted.len() >= LEDGER_LEN {
            predicted.retain(|_, at| now.saturating_duration_since(*at) < USE_WINDOW);
            if predicted.len() >= LEDGER_LEN {
                // A flood of first expansions: forget the oldest half at once.
                let mut ages: Vec<Instant> = predicted.values().copied().collect();
                ages.sort_unstable();
                let cut = ages[ages.len() / 2];
                predicted.retain(|_, at| *at > cut);
            }
        }
        predicted.insert(name.into(), now);
    }

    fn was_predicted(&self, name: &[u8], now: Instant) -> bool {
        let predicted = lock(&self.predicted);
        predicted
            .get(name)
            .is_some_and(|at| now.saturating_duration_since(*at) < USE_WINDOW)
    }

    /// Whether a walk is asking upstream now: a miss may then race one of
    /// its fetches for the same name.
    pub(super) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }

    fn ticket(&self, max: usize) -> Option<Ticket> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Ticket(self.in_flight.clone()))
    }

    /// Tracks a speculative answer; returns how many older ones expired
    /// unused (wasted).
    fn track(&self, entry: Arc<Entry>, now: Instant) -> u64 {
        let mut ledger = lock(&self.ledger);
        let mut wasted = 0;
        while let Some((at, _)) = ledger.front() {
            if now.saturating_duration_since(*at) < USE_WINDOW && ledger.len() < LEDGER_LEN {
                break;
            }
            let (_, old) = ledger.pop_front().expect("a front");
            if old.take_speculative() {
                wasted += 1;
            }
        }
        ledger.push_back((now, entry));
        wasted
    }
}

impl Shared {
    /// Whether `name` is the second expansion (`X.svc.Z`) of a lookup whose
    /// first expansion speculation saw: the shape of an external name's
    /// `api.example.com.svc.Z`, whose namespace (`com`) most likely does
    /// not exist. Such a miss waits for the namespace check, which saves
    /// asking the name; any other name below an unknown namespace (most
    /// often a pod's first expansion in its own namespace, which exists) is
    /// asked together with the check, so the check costs no round trip.
    pub(super) fn predicted_expansion(&self, name: &[u8]) -> bool {
        self.search.speculation.was_predicted(name, Instant::now())
    }

    /// The namespace check before `key` goes upstream: `true` when the
    /// namespace turned out not to exist (the caller answers from the cut).
    pub(super) async fn namespace_denied(
        self: &Arc<Self>,
        key: &Key,
        settings: &Settings,
        deadline: Instant,
    ) -> bool {
        if !super::local::may_answer_locally(key.qtype(), key.qclass()) {
            return false;
        }
        let name = key.name();
        let Some(at) = settings.cluster.namespace_to_check(name) else {
            return false;
        };
        if settings
            .router
            .route_in(key.view(), name)
            .is_some_and(|zone| zone.rewrites())
        {
            return false;
        }
        let node = &name[at..];
        let now = Instant::now();
        if self.search.learned.namespace_known(node, now) || self.listed(node) == Some(true) {
            return false;
        }
        if self.search.learned.denied(node, now).is_some() {
            return true;
        }
        let Some(zone) = settings.router.route_in(key.view(), node) else {
            return false;
        };
        let node_key = KeyRef {
            name: node,
            qtype: rtype::A,
            qclass: class::IN,
            flags: 0,
        }
        .in_view(key.view());
        let cached = self.cache.lookup(&node_key, now, Duration::ZERO).is_fresh();
        // Boxed: the check's future is part of every miss's, and most
        // misses have no namespace to check; a fetch inline would double
        // the memory each miss in flight holds.
        let asked = !cached
            && Box::pin(self.fetch_as(&node_key.to_owned(), zone, settings, deadline))
                .await
                .1
                == Role::Leader;
        let denied = self.search.learned.denied(node, Instant::now()).is_some();
        // Counted once per check, not once per query that waited on it.
        if cached || asked {
            self.metrics.namespace_checks(denied, cached);
        }
        denied
    }

    /// Whether the namespace of node `<ns>.svc.Z` is in the API's list,
    /// when nodens watches it (`namespaces_from_api`) and holds a current list.
    fn listed(&self, node: &[u8]) -> Option<bool> {
        let label = node.get(1..=usize::from(*node.first()?))?;
        self.search.namespaces.exists(label)
    }

    /// Starts resolving the later search expansions of `key` if it looks
    /// like a first expansion; whether it did (the walk may then fetch
    /// `key` itself, joined with the pod's own miss).
    pub(super) fn maybe_speculate(
        self: &Arc<Self>,
        key: &KeyRef<'_>,
        settings: &Arc<Settings>,
    ) -> bool {
        if key.qclass != class::IN {
            return false;
        }
        let rules = &settings.cluster;
        let Some(first) = rules.first_expansion(key.name) else {
            return false;
        };
        // A lookup's second expansion can look like a first one
        // (`kubernetes.default.svc.cluster.local.svc.cluster.local`, as if
        // from namespace `local`): worked already, it starts nothing.
        if self.predicted_expansion(key.name) {
            return false;
        }
        if self.worked_already(key, first) {
            return false;
        }
        // `a.b.<ns>.svc.Z` from a namespace the API does not list is
        // `a.b.<ns>`'s second expansion, worked already. Without the list
        // it is taken for a first expansion at once: a second expansion
        // whose first was seen is predicted and starts nothing, and waiting
        // for a namespace check here would make the pod wait one round trip
        // more for its next expansion.
        if !first.certain
            && rules
                .namespace_node(key.name)
                .and_then(|at| self.listed(&key.name[at..]))
                == Some(false)
        {
            return false;
        }
        // Predicted here, before the pod has this answer: its second
        // expansion, which may follow within microseconds, must find it.
        let base = &key.name[..first.namespace_at];
        let svc_zone = suffix_of_kind(key.name, first.namespace_at);
        self.search
            .speculation
            .predict(&[base, svc_zone].concat(), Instant::now());
        let (this, key, settings) = (self.clone(), key.to_owned(), settings.clone());
        self.tasks.spawn_query_on_main(async move {
            this.speculate(key, first, settings).await;
        });
        true
    }

    /// Whether this lookup was worked lately: its final name `X.` is in
    /// the cache and the namespace node its second expansion asks about
    /// (`<last label of X>.svc.Z`) is denied or known. Then the client's
    /// expansions are answered without waiting, and a hot lookup (whose
    /// first expansion is answered locally, never from the cache) does not
    /// start a speculation for every query. Allocates nothing.
    fn worked_already(&self, key: &KeyRef<'_>, first: FirstExpansion) -> bool {
        let name = key.name;
        let base = &name[..first.namespace_at];
        let now = Instant::now();
        let mut buf: NameBuf = [0; MAX_NAME_LEN];
        // X. : the labels of X and the root label.
        buf[..base.len()].copy_from_slice(base);
        buf[base.len()] = 0;
        let last = KeyRef {
            name: &buf[..=base.len()],
            ..*key
        };
        if !self.cache.lookup(&last, now, Duration::ZERO).is_fresh() {
            return false;
        }
        // <tld>.svc.Z : X's last label, then the name from `svc` on.
        let Some(tld_at) = label_starts(base).last() else {
            return false;
        };
        let tld = &base[tld_at..];
        let svc_zone = suffix_of_kind(name, first.namespace_at);
        let node_len = tld.len() + svc_zone.len();
        if node_len > MAX_NAME_LEN {
            return false;
        }
        buf[..tld.len()].copy_from_slice(tld);
        buf[tld.len()..node_len].copy_from_slice(svc_zone);
        let node = &buf[..node_len];
        self.search.learned.denied(node, now).is_some()
            || self.search.learned.namespace_known(node, now)
    }

    async fn speculate(self: Arc<Self>, key: Key, first: FirstExpansion, settings: Arc<Settings>) {
        let name = key.name();
        let rules = &settings.cluster;
        let deadline = Instant::now() + settings.query_timeout;
        let base = &name[..first.namespace_at];
        let svc_zone = suffix_of_kind(name, first.namespace_at);
        let mut suffixes: Vec<&[u8]> = vec![svc_zone, rules.domain()];
        suffixes.extend(rules.search().search_domains.iter().map(|d| &d[..]));
        suffixes.push(b"\x00");
        let expansions = suffixes.into_iter().filter_map(|suffix| {
            let expansion = [base, suffix].concat();
            (expansion.len() <= MAX_NAME_LEN)
                .then(|| Key::from_parts(&expansion, key.qtype(), key.qclass(), key.flags()))
        });
        // The walk: the pod's own first expansion, then the later ones in
        // the order its resolver asks them.
        let mut ticket = None;
        for (step, next) in std::iter::once(key.clone()).chain(expansions).enumerate() {
            if self.certainly_absent(&next, &settings) {
                continue;
            }
            let denied = if step == 0 {
                // The pod is asking this one now: wait for its answer
                // (joined, never asked twice).
                self.joined_denial(&next, &settings, deadline).await
            } else {
                if ticket.is_none() {
                    // The budget covers the namespace check too: a flood of
                    // names shaped like first expansions never asks more
                    // than it allows.
                    ticket = self
                        .search
                        .speculation
                        .ticket(rules.search().max_speculations);
                    if ticket.is_none() {
                        self.metrics.speculation_skipped.inc();
                        return;
                    }
                }
                self.speculate_one(next, &settings, deadline).await
            };
            // An expansion that may exist ends the pod's walk: it goes no
            // further, and neither does speculation.
            if !denied {
                return;
            }
        }
    }

    /// Whether `key`'s name is known not to exist without asking: the
    /// schema rules it out, a node above it was denied, the API does not
    /// list its namespace, or a fresh NXDOMAIN for it is cached. What is
    /// not certain is asked, in the pod's order, or not at all: a guess
    /// would send a cluster name (`kubernetes.default`) to the upstreams
    /// of the other zones.
    fn certainly_absent(&self, key: &Key, settings: &Settings) -> bool {
        let name = key.name();
        let rules = &settings.cluster;
        let now = Instant::now();
        rules.cannot_exist(name).is_some()
            || rules
                .cut_points(name)
                .any(|at| self.search.learned.denied(&name[at..], now).is_some())
            || rules
                .namespace_node(name)
                .and_then(|at| self.listed(&name[at..]))
                == Some(false)
            || self.cached_nxdomain(key, now)
    }

    fn cached_nxdomain(&self, key: &Key, now: Instant) -> bool {
        matches!(
            self.cache.lookup(&key.as_ref(), now, Duration::ZERO),
            Lookup::Fresh(e) if e.rcode == crate::wire::rcode::NXDOMAIN
        )
    }

    /// The answer to the pod's own first expansion, joined while in
    /// flight: whether it was NXDOMAIN.
    async fn joined_denial(
        self: &Arc<Self>,
        key: &Key,
        settings: &Settings,
        deadline: Instant,
    ) -> bool {
        let Some(zone) = settings.router.route_in(key.view(), key.name()) else {
            return false;
        };
        let (entry, _) = self.fetch_as(key, zone, settings, deadline).await;
        entry.is_some_and(|e| e.rcode == crate::wire::rcode::NXDOMAIN)
    }

    /// Resolves one expansion ahead of its asker, unless the cache or the
    /// local rules already answer it: whether it turned out not to exist.
    async fn speculate_one(
        self: &Arc<Self>,
        key: Key,
        settings: &Settings,
        deadline: Instant,
    ) -> bool {
        let now = Instant::now();
        let name = key.name();
        match self.cache.lookup(&key.as_ref(), now, Duration::ZERO) {
            Lookup::Fresh(e) if e.kind != crate::cache::Kind::Failure => {
                return e.rcode == crate::wire::rcode::NXDOMAIN;
            }
            _ => {}
        }
        let Some(zone) = settings.router.route_in(key.view(), name) else {
            return false;
        };
        // An answer the zone would not keep is a query for nothing.
        if !zone.cache.enabled {
            return false;
        }
        if self.namespace_denied(&key, settings, deadline).await {
            return true;
        }
        self.metrics.speculation_sent.inc();
        let (entry, role) = self.fetch_as(&key, zone, settings, deadline).await;
        let Some(entry) = entry else {
            return false;
        };
        let denied = entry.rcode == crate::wire::rcode::NXDOMAIN;
        if role == Role::Leader {
            entry.mark_speculative();
            let wasted = self.search.speculation.track(entry, Instant::now());
            self.metrics.speculation_wasted.inc_by(wasted);
        }
        denied
    }
}

/// `<ns>.svc.Z` of a name whose namespace node starts at `namespace_at`,
/// without its namespace label: `svc.Z`.
fn suffix_of_kind(name: &[u8], namespace_at: usize) -> &[u8] {
    let ns_len = name[namespace_at] as usize;
    &name[namespace_at + 1 + ns_len..]
}

impl Lookup {
    /// A fresh entry that is no failure.
    fn is_fresh(&self) -> bool {
        matches!(self, Lookup::Fresh(e) | Lookup::Held(e) if e.kind != crate::cache::Kind::Failure)
    }
}
