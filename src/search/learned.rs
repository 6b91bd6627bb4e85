//! What the cluster DNS has told nodens that local answers rest on: the SOA
//! records of the zones whose impossible names nodens answers (a local
//! NXDOMAIN carries the same SOA and negative TTL the cluster DNS would
//! have sent), and the namespace and service nodes it denied (RFC 8020: a
//! denied node denies every name below it).
//!
//! Both tables are small and bounded; they are read on cache misses only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::wire::soa::Soa;

/// Zones whose SOA is remembered: the cluster domain plus a few cloud zones.
const MAX_ZONES: usize = 64;
/// Denied nodes remembered at once; when full, expired ones are dropped,
/// and a new node is not remembered if none had expired.
const MAX_DENIED_NODES: usize = 4096;

/// Namespaces remembered as existing, and for how long after the last
/// answer that showed it: a namespace lives for months, and forgetting one
/// costs a single extra query.
const MAX_NAMESPACES: usize = 4096;
const NAMESPACE_MEMORY: Duration = Duration::from_secs(600);

/// A node the cluster DNS answered NXDOMAIN for.
#[derive(Debug, Clone)]
pub(crate) struct DeniedNode {
    pub soa: Arc<Soa>,
    expires: Instant,
}

impl DeniedNode {
    /// Seconds the denial has left, for the TTL of a reply it makes.
    pub(crate) fn ttl_left(&self, now: Instant) -> u32 {
        self.expires.saturating_duration_since(now).as_secs() as u32
    }
}

#[derive(Debug, Default)]
pub(crate) struct Learned {
    /// SOA records by their owner (lower-case wire form).
    soas: Mutex<HashMap<Box<[u8]>, Arc<Soa>>>,
    denied: Mutex<HashMap<Box<[u8]>, DeniedNode>>,
    /// Namespace nodes an answer showed to exist, with when.
    namespaces: Mutex<HashMap<Box<[u8]>, Instant>>,
}

impl Learned {
    /// Remembers (or refreshes) a zone's SOA.
    pub(crate) fn learn_soa(&self, soa: Soa) {
        let mut soas = crate::lock::lock(&self.soas);
        if soas.len() >= MAX_ZONES && !soas.contains_key(soa.owner()) {
            return;
        }
        soas.insert(soa.owner().into(), Arc::new(soa));
    }

    /// The SOA of zone `owner`, if one was learned.
    pub(crate) fn soa(&self, owner: &[u8]) -> Option<Arc<Soa>> {
        crate::lock::lock(&self.soas).get(owner).cloned()
    }

    /// The learned SOA of the closest zone above `name` (never the root),
    /// given the offsets where each of its labels starts.
    pub(crate) fn closest_soa(&self, name: &[u8]) -> Option<Arc<Soa>> {
        let soas = crate::lock::lock(&self.soas);
        crate::wire::name::label_starts(name)
            .skip(1)
            .map(|at| &name[at..])
            .take_while(|zone| *zone != b"\x00")
            .find_map(|zone| soas.get(zone).cloned())
    }

    /// Remembers that `node` does not exist for `ttl` from `now`.
    pub(crate) fn deny(&self, node: &[u8], soa: Arc<Soa>, ttl: Duration, now: Instant) {
        let mut denied = crate::lock::lock(&self.denied);
        if denied.len() >= MAX_DENIED_NODES && !denied.contains_key(node) {
            denied.retain(|_, d| d.expires > now);
            if denied.len() >= MAX_DENIED_NODES {
                return;
            }
        }
        let expires = now + ttl;
        denied.insert(node.into(), DeniedNode { soa, expires });
    }

    /// The denial of `node`, while it lasts.
    pub(crate) fn denied(&self, node: &[u8], now: Instant) -> Option<DeniedNode> {
        let denied = crate::lock::lock(&self.denied);
        denied.get(node).filter(|d| d.expires > now).cloned()
    }

    /// Forgets every denial `purge` covers (an API change may have made
    /// the node exist).
    pub(crate) fn forget(&self, purge: &crate::cache::follow::Purge) {
        crate::lock::lock(&self.denied).retain(|node, _| !purge.covers(node));
    }

    /// Forgets a denial (the node was found to exist after all).
    pub(crate) fn undeny(&self, node: &[u8]) {
        crate::lock::lock(&self.denied).remove(node);
    }

    /// Remembers that the namespace node `node` exists (an answer other
    /// than NXDOMAIN was given for it or a name below it).
    pub(crate) fn namespace_seen(&self, node: &[u8], now: Instant) {
        let mut seen = crate::lock::lock(&self.namespaces);
        if let Some(at) = seen.get_mut(node) {
            *at = now;
            return;
        }
        if seen.len() >= MAX_NAMESPACES {
            seen.retain(|_, at| now.saturating_duration_since(*at) < NAMESPACE_MEMORY);
            if seen.len() >= MAX_NAMESPACES {
                return;
            }
        }
        seen.insert(node.into(), now);
    }

    /// Whether the namespace node `node` was seen to exist lately.
    pub(crate) fn namespace_known(&self, node: &[u8], now: Instant) -> bool {
        let seen = crate::lock::lock(&self.namespaces);
        seen.get(node)
            .is_some_and(|at| now.saturating_duration_since(*at) < NAMESPACE_MEMORY)
    }
}
