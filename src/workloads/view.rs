//! The table's counts grouped by workload: a pod (its addresses together)
//! when the pod map knows the address, else the address itself. What
//! `nodens top` receives, and what the top-K metrics are taken from.

use std::collections::HashMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{ClientCounts, Counts};
use crate::search::Clients;

/// Cumulative counts per workload at one moment; `nodens top` turns two
/// into rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopView {
    /// Milliseconds since nodens started, when the counts were taken.
    pub at_ms: u64,
    pub workloads: Vec<Workload>,
}

/// One workload's counts since nodens first counted it (or since its slot
/// was last taken over: then they restart from 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Empty for a client that is no known pod.
    pub namespace: String,
    /// The pod's name, or the client's address when no pod is known.
    pub pod: String,
    pub queries: u64,
    pub hits: u64,
    pub nxdomain: u64,
    pub servfail: u64,
    /// NXDOMAIN answers under the cluster domain (search-list expansions).
    pub expansions: u64,
    /// The names it asks most (sampled counts), most asked first.
    pub names: Vec<(String, u32)>,
}

impl Workload {
    /// The key two views are matched on.
    pub fn id(&self) -> (&str, &str) {
        (&self.namespace, &self.pod)
    }
}

/// One workload's rates between two views: what `nodens top` shows and
/// the top-K metrics export, computed one way.
#[derive(Debug, Clone, Copy)]
pub struct Rates<'a> {
    pub workload: &'a Workload,
    pub queries: f64,
    /// Share answered without an upstream query.
    pub hit_ratio: f64,
    pub nxdomain: f64,
    pub servfail: f64,
    /// Search-list expansions per other query (at least one query counted
    /// as the lookup, so a bounded number).
    pub expansions_per_lookup: f64,
    /// Every query of the window was an expansion: no lookup reached its name.
    pub only_expansions: bool,
}

impl<'a> Rates<'a> {
    /// From the counts `before` (none: the workload is new) to `now`, over
    /// `seconds`. A count that went down restarted (its slot was taken
    /// over): all of `now` is new.
    pub fn between(before: Option<&Workload>, now: &'a Workload, seconds: f64) -> Rates<'a> {
        let restarted = before.is_none_or(|b| now.queries < b.queries);
        let delta = |f: fn(&Workload) -> u64| {
            let was = if restarted { 0 } else { before.map_or(0, f) };
            f(now).saturating_sub(was) as f64
        };
        let queries = delta(|w| w.queries);
        let expansions = delta(|w| w.expansions);
        let per = |n: f64| if seconds > 0.0 { n / seconds } else { 0.0 };
        Rates {
            workload: now,
            queries: per(queries),
            hit_ratio: if queries > 0.0 {
                delta(|w| w.hits) / queries
            } else {
                0.0
            },
            nxdomain: per(delta(|w| w.nxdomain)),
            servfail: per(delta(|w| w.servfail)),
            expansions_per_lookup: expansions / (queries - expansions).max(1.0),
            only_expansions: expansions > 0.0 && queries <= expansions,
        }
    }
}

/// Groups `clients` by pod, busiest first.
pub(crate) fn group(clients: Vec<ClientCounts>, pods: &Clients) -> Vec<Workload> {
    type Names = HashMap<Box<[u8]>, u32>;
    let mut by_pod: HashMap<(String, String), (Counts, Names)> = HashMap::new();
    for c in clients {
        let id = pods.with_pod(c.client, |pod| match pod {
            Some((namespace, name)) => (namespace.to_string(), name.to_string()),
            None => (String::new(), address(c.client)),
        });
        let (counts, names) = by_pod.entry(id).or_default();
        counts.add(&c.counts);
        for (name, n) in c.names {
            *names.entry(name).or_default() += n;
        }
    }
    let mut all: Vec<Workload> = by_pod
        .into_iter()
        .map(|((namespace, pod), (c, names))| {
            let mut names: Vec<(String, u32)> = names
                .into_iter()
                .map(|(n, count)| (crate::wire::name::to_text(&n), count))
                .collect();
            names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            names.truncate(super::NAMES);
            Workload {
                namespace,
                pod,
                queries: c.queries,
                hits: c.hits,
                nxdomain: c.nxdomain,
                servfail: c.servfail,
                expansions: c.expansions,
                names,
            }
        })
        .collect();
    all.sort_by(|a, b| b.queries.cmp(&a.queries).then_with(|| a.id().cmp(&b.id())));
    all
}

fn address(ip: IpAddr) -> String {
    ip.to_canonical().to_string()
}
