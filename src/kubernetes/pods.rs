//! The pods of this node, for autopath: one watch with the field selector
//! `spec.nodeName=<node>`, so what nodens holds and what the API server
//! sends it grow with one node's pods, not the cluster's (CoreDNS's
//! autopath watches every pod of the cluster). Of each pod only its
//! addresses, its namespace and whether its search list is the standard
//! one are kept.
//!
//! Kept compact, for it lives as long as the process while the API's
//! objects pass through by the thousand: a pod is its UID as a number, up
//! to two addresses inline (a pod has one per family) and a shared
//! namespace name; no allocation of its own.
//!
//! An address maps to a namespace only when exactly one pod of the list
//! holds it and that pod is a verified client: not on the host network
//! (its address is the node's, shared by every such pod), DNS policy
//! `ClusterFirst` with no `dnsConfig.searches` (anything else changes the
//! search list), and not terminating. A terminating pod still claims its
//! address (its containers may run), so a new pod given the same address
//! before the old one's deletion reached the watch is not trusted
//! (coredns/coredns#7120); a pod that has finished (Succeeded, Failed) has
//! released its address and claims nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::pod_view::PodView as Pod;

use super::metrics::{KubeMetrics, WatchLabels};
use super::watch::{Follower, Objects, Query, follow};
use crate::search::Clients;
use crate::search::clients::ClientMap;

/// Pods per list request.
const LIST_PAGE: u32 = 50;

/// What the watch keeps of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PodClient {
    namespace: Arc<str>,
    /// The pod's name, for the query log.
    name: Box<str>,
    /// The addresses the pod holds (none once it has finished).
    addresses: Addresses,
    /// Whether its queries may be answered by autopath.
    verified: bool,
}

/// A pod's addresses: one per family at most (Kubernetes' `podIPs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Addresses {
    v4: Option<std::net::Ipv4Addr>,
    v6: Option<std::net::Ipv6Addr>,
}

impl Addresses {
    fn add(&mut self, ip: IpAddr) {
        match ip.to_canonical() {
            IpAddr::V4(a) => self.v4 = self.v4.or(Some(a)),
            IpAddr::V6(a) => self.v6 = self.v6.or(Some(a)),
        }
    }

    fn iter(&self) -> impl Iterator<Item = IpAddr> {
        let v4 = self.v4.map(IpAddr::V4);
        let v6 = self.v6.map(IpAddr::V6);
        v4.into_iter().chain(v6)
    }
}

/// A pod's id in the watch: its UID as a number, else a hash of its
/// namespace and name. Two pods taking one id (a hash collision) can only
/// leave a stale address claim behind, which blocks autopath for that
/// address (two claims), never gives a wrong namespace.
fn pod_id(pod: &Pod) -> Option<u128> {
    let m = &pod.metadata;
    if let Some(uid) = &m.uid {
        let hex: String = uid.chars().filter(|c| *c != '-').collect();
        if let Ok(id) = u128::from_str_radix(&hex, 16) {
            return Some(id);
        }
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (m.namespace.as_deref()?, m.name.as_deref()?).hash(&mut h);
    Some(h.finish().into())
}

/// Watches the pods of `node` into `view`, until aborted.
pub(crate) async fn watch(
    client: kube::Client,
    node: String,
    view: Arc<Clients>,
    metrics: Arc<KubeMetrics>,
    streaming: bool,
) {
    let api: kube::Api<Pod> = kube::Api::all(client);
    let selector = format!("spec.nodeName={node}");
    let labels = WatchLabels {
        resource: "pods",
        watch: &node,
    };
    let mut namespaces = Interner::default();
    follow(
        Objects(api),
        // Small pages: a node's list is a few requests, and no page's
        // body is large enough to leave the allocator holding it.
        Query {
            fields: Some(selector),
            page: LIST_PAGE,
            streaming,
            ..Query::default()
        },
        pod_id,
        |pod| client_of(pod, &mut namespaces),
        labels,
        &metrics,
        &mut Writer(view),
    )
    .await;
}

/// One shared string per namespace name: a node's pods share a handful.
#[derive(Default)]
struct Interner(std::collections::HashSet<Arc<str>>);

impl Interner {
    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.0.get(name) {
            return known.clone();
        }
        if self.0.len() > 4096 {
            // Namespaces come and go: forget the ones no pod holds.
            self.0.retain(|n| Arc::strong_count(n) > 1);
        }
        let new: Arc<str> = name.to_ascii_lowercase().into();
        self.0.insert(new.clone());
        new
    }
}

fn client_of(pod: &Pod, namespaces: &mut Interner) -> PodClient {
    let namespace = namespaces.get(pod.metadata.namespace.as_deref().unwrap_or_default());
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let finished = matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    let mut addresses = Addresses::default();
    if !finished && let Some(status) = status {
        let listed = status.pod_ips.iter().flatten().map(|p| p.ip.as_str());
        for ip in status.pod_ip.as_deref().into_iter().chain(listed) {
            if let Ok(ip) = ip.parse::<IpAddr>() {
                addresses.add(ip);
            }
        }
    }
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let standard_policy = matches!(
        spec.and_then(|s| s.dns_policy.as_deref()),
        None | Some("ClusterFirst" | "ClusterFirstWithHostNet")
    );
    let extra_searches = spec
        .and_then(|s| s.dns_config.as_ref())
        .and_then(|c| c.searches.as_ref())
        .is_some_and(|s| !s.is_empty());
    let terminating = pod.metadata.deletion_timestamp.is_some();
    PodClient {
        namespace,
        name: pod.metadata.name.as_deref().unwrap_or_default().into(),
        addresses,
        verified: !host_network && standard_policy && !extra_searches && !terminating,
    }
}

/// The address map of a list: verified pods whose address no other pod claims.
/// Built by sorting the claims: no hash table beside the list while it is
/// built (after each burst of changes).
fn client_map(pods: &BTreeMap<u128, PodClient>) -> ClientMap {
    let mut claims: Vec<(IpAddr, Option<&PodClient>)> = pods
        .values()
        .flat_map(|pod| {
            let claim = pod.verified.then_some(pod);
            pod.addresses
                .iter()
                .map(move |ip| (ip.to_canonical(), claim))
        })
        .collect();
    claims.sort_unstable_by_key(|c| c.0);
    let mut map = Vec::with_capacity(claims.len());
    for same in claims.chunk_by(|a, b| a.0 == b.0) {
        if let [(ip, Some(pod))] = same {
            let v6 = pod.addresses.v6.is_some();
            map.push((*ip, Arc::clone(&pod.namespace), pod.name.clone(), v6));
        }
    }
    drop(claims);
    ClientMap::new(map)
}

struct Writer(Arc<Clients>);

impl Follower<u128, PodClient> for Writer {
    fn publish(&mut self, list: Option<&BTreeMap<u128, PodClient>>) -> bool {
        self.0.set(list.map(client_map));
        // The API's objects, parsed and dropped by the thousand, leave
        // pages behind in this thread's heap: give them back, so that
        // memory follows what is kept (once per burst of changes).
        // SAFETY: mi_collect has no preconditions; with another global
        // allocator (unit tests) it works on an unused heap.
        unsafe { libmimalloc_sys::mi_collect(true) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, ips: &[&str], verified: bool) -> PodClient {
        let mut addresses = Addresses::default();
        for ip in ips {
            addresses.add(ip.parse().unwrap());
        }
        PodClient {
            namespace: ns.into(),
            name: format!("pod-{}", ips[0]).into(),
            addresses,
            verified,
        }
    }

    #[test]
    fn an_address_two_pods_claim_maps_to_neither() {
        let mut list = BTreeMap::new();
        list.insert(1, pod("a", &["10.1.0.5"], false));
        list.insert(2, pod("b", &["10.1.0.5"], true));
        list.insert(3, pod("b", &["10.1.0.6", "fd00::6"], true));
        let map = client_map(&list);
        assert_eq!(map.len(), 2);
        assert_eq!(map.namespace_of("10.1.0.5".parse().unwrap()), None);
        assert_eq!(map.namespace_of("10.1.0.6".parse().unwrap()), Some("b"));
        assert_eq!(map.namespace_of("fd00::6".parse().unwrap()), Some("b"));
        let held = map.pod_of("fd00::6".parse().unwrap());
        assert_eq!(held, Some(("b", "pod-10.1.0.6")));
        // IPv4-only: the one pod that holds just an IPv4 address (the
        // address two pods claim is nobody's).
        assert!(!map.ipv4_only("10.1.0.5".parse().unwrap()));
        assert!(!map.ipv4_only("10.1.0.6".parse().unwrap()));
        list.insert(4, pod("c", &["10.1.0.7"], true));
        assert!(client_map(&list).ipv4_only("10.1.0.7".parse().unwrap()));
    }

    #[test]
    fn what_a_pod_spec_says_about_its_search_list() {
        let parse = |json: serde_json::Value| {
            let pod: Pod = serde_json::from_value(json).unwrap();
            client_of(&pod, &mut Interner::default())
        };
        let base = |spec: serde_json::Value, phase: &str| {
            serde_json::json!({
                "metadata": {"name": "p", "namespace": "Team-A"},
                "spec": spec,
                "status": {"phase": phase, "podIP": "10.1.0.7", "podIPs": [{"ip": "10.1.0.7"}]},
            })
        };
        let c = serde_json::json!({"containers": [{"name": "c"}]});
        let plain = parse(base(c.clone(), "Running"));
        assert!(plain.verified);
        assert_eq!(&*plain.namespace, "team-a");
        let held: Vec<IpAddr> = plain.addresses.iter().collect();
        assert_eq!(held, ["10.1.0.7".parse::<IpAddr>().unwrap()]);
        let with = |extra: serde_json::Value| {
            let mut spec = c.clone();
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            parse(base(spec, "Running")).verified
        };
        assert!(!with(serde_json::json!({"hostNetwork": true})));
        assert!(!with(serde_json::json!({"dnsPolicy": "None"})));
        assert!(!with(serde_json::json!({"dnsPolicy": "Default"})));
        assert!(!with(
            serde_json::json!({"dnsConfig": {"searches": ["x.example"]}})
        ));
        assert!(with(
            serde_json::json!({"dnsConfig": {"options": [{"name": "ndots", "value": "2"}]}})
        ));
        let finished = parse(base(c.clone(), "Succeeded")).addresses;
        assert_eq!(finished.iter().count(), 0);
        assert_eq!(parse(base(c, "Pending")).addresses.iter().count(), 1);
    }
}
