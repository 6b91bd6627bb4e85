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
