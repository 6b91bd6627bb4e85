//! The pods of this node as DNS clients, for autopath: which namespace a
//! source address belongs to, for the pods whose search list nodens knows
//! (`<ns>.svc.<zone> svc.<zone> <zone>` and the node's search domains).
//! The pod watch (`kubernetes::pods`) writes it; the request path reads it
//! only for names shaped like a first search-list expansion.
//!
//! Unknown (None) until the watch holds a complete list, and again from a
//! watch error until the next one: while the list may be out of date, an
//! address may have passed to a pod of another namespace unseen, and no
//! query is answered by autopath.

use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

/// Client addresses with their pod's namespace (lower case, shared by the
/// pods of a namespace), name (for the query log) and whether it holds an
/// IPv6 address (`no_aaaa_for_ipv4_pods`), sorted by address: one slot a
/// pod, no table to keep half empty.
#[derive(Debug, Default)]
pub(crate) struct ClientMap(Box<[PodAddress]>);

/// A pod's address, namespace, name, and whether it holds an IPv6 address.
pub(crate) type PodAddress = (IpAddr, Arc<str>, Box<str>, bool);

impl ClientMap {
    pub(crate) fn new(mut pods: Vec<PodAddress>) -> ClientMap {
        pods.sort_unstable_by_key(|p| p.0);
        ClientMap(pods.into_boxed_slice())
    }

    /// The namespace of the pod at `ip`.
    pub(crate) fn namespace_of(&self, ip: IpAddr) -> Option<&str> {
        self.pod_of(ip).map(|(namespace, _)| namespace)
    }

    /// The namespace and name of the pod at `ip`.
    pub(crate) fn pod_of(&self, ip: IpAddr) -> Option<(&str, &str)> {
        let at = self.0.binary_search_by(|(a, ..)| a.cmp(&ip)).ok()?;
        let (_, namespace, name, _) = &self.0[at];
        Some((namespace, name))
    }

    /// Whether the pod at `ip` is known and holds no IPv6 address.
    pub(crate) fn ipv4_only(&self, ip: IpAddr) -> bool {
        self.0
            .binary_search_by(|(a, ..)| a.cmp(&ip))
            .is_ok_and(|at| !self.0[at].3)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[derive(Default)]
pub(crate) struct Clients(ArcSwapOption<ClientMap>);

impl Clients {
    /// Whether `client` is a known pod of namespace `label` (lower case).
    pub(crate) fn is_pod_of(&self, client: IpAddr, label: &[u8]) -> bool {
        let guard = self.0.load();
        let Some(map) = guard.as_ref() else {
            return false;
        };
        map.namespace_of(client.to_canonical())
            .is_some_and(|ns| ns.as_bytes() == label)
    }

    /// What `f` makes of the namespace and name of the pod at `client`,
    /// when the map is known and holds it (the query log's writer).
    pub(crate) fn with_pod<R>(
        &self,
        client: IpAddr,
        f: impl FnOnce(Option<(&str, &str)>) -> R,
    ) -> R {
        let guard = self.0.load();
        f(guard
            .as_ref()
            .and_then(|map| map.pod_of(client.to_canonical())))
    }

    /// Whether `client` is a pod of this node, in a current list, that holds
    /// no IPv6 address: it cannot use an AAAA answer. Unknown clients and
    /// a list that may be out of date: false.
    pub(crate) fn is_ipv4_only_pod(&self, client: IpAddr) -> bool {
        let guard = self.0.load();
        guard
            .as_ref()
            .is_some_and(|map| map.ipv4_only(client.to_canonical()))
    }

    /// What `f` makes of the shared namespace name of the pod at
    /// `client`, when the map is known and holds it (the budgets, which
    /// keep the name without copying it).
    pub(crate) fn with_namespace<R>(
        &self,
        client: IpAddr,
        f: impl FnOnce(Option<&Arc<str>>) -> R,
    ) -> R {
        let guard = self.0.load();
        f(guard.as_ref().and_then(|map| {
            let ip = client.to_canonical();
            let at = map.0.binary_search_by(|(a, ..)| a.cmp(&ip)).ok()?;
            Some(&map.0[at].1)
        }))
    }

    /// Replaces the map (None: not known).
    pub(crate) fn set(&self, map: Option<ClientMap>) {
        self.0.store(map.map(Arc::new));
    }
}
