//! Near endpoints first (`[zone.endpoints] topology`): cross-zone DNS
//! traffic costs money and latency (kubernetes/kubernetes#134457,
//! aws/containers-roadmap#2310). A zone that asks its Service's endpoints
//! asks those on this node first, then those in this node's zone, then
//! the rest, as kube-proxy does for a Service with `trafficDistribution`;
//! an upstream marked down goes last, so when the near ones fail or go
//! away the others take over (the try order in `upstream::forward`).
//!
//! This node's zone is its Node's `topology.kubernetes.io/zone` label,
//! read once when the watch starts (`get` on nodes); an endpoint is in it
//! when its slice's hints say so (`hints.forZones`, `forNodes`), or, with
//! no hints, when its own `zone` is this one.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::Endpoint;

use crate::upstream::Topology;

/// The label that names a node's zone.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Where this nodens runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Here {
    pub node: Option<String>,
    pub zone: Option<String>,
}

impl Here {
    /// This node and its zone (None when it cannot be read: logged, and
    /// only the node's own endpoints count as near).
    pub(crate) async fn find(
        client: &kube::Client,
        node: Option<&str>,
        topology: Topology,
    ) -> Here {
        let Some(node) = node.filter(|_| topology != Topology::Off) else {
            return Here::default();
        };
        let api: kube::Api<Node> = kube::Api::all(client.clone());
        let zone = match api.get(node).await {
            Ok(n) => n.metadata.labels.and_then(|mut l| l.remove(ZONE_LABEL)),
            Err(e) => {
                tracing::warn!(
                    node,
                    "EndpointSlices: cannot read this node's zone ({e}); only endpoints on this node count as near (RBAC: get nodes)"
                );
                None
            }
        };
        Here {
            node: Some(node.to_string()),
            zone,
        }
    }

    /// How near `endpoint` is: 0 on this node, 1 in its zone, 2 elsewhere;
    /// and whether its slice carries hints (the Service asked for them).
    pub(crate) fn tier(&self, endpoint: &Endpoint) -> (u8, bool) {
        let hints = endpoint.hints.as_ref();
        let hinted = hints.is_some_and(|h| h.for_zones.is_some() || h.for_nodes.is_some());
        let is_here = |n: &str| self.node.as_deref() == Some(n);
        let for_this_node = hints
            .and_then(|h| h.for_nodes.as_ref())
            .is_some_and(|nodes| nodes.iter().any(|n| is_here(&n.name)));
        if for_this_node || endpoint.node_name.as_deref().is_some_and(is_here) {
            return (0, hinted);
        }
        let in_zone = match (&self.zone, hints.and_then(|h| h.for_zones.as_ref())) {
            (None, _) => false,
            (Some(zone), Some(zones)) => zones.iter().any(|z| &z.name == zone),
            (Some(zone), None) => endpoint.zone.as_ref() == Some(zone),
        };
        (if in_zone { 1 } else { 2 }, hinted)
    }
}

/// A Service's ready endpoints, nearest first, and how many are on this
/// node and in its zone: what a zone asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub addrs: Vec<SocketAddr>,
    /// On this node, then in this zone (the first `near[0]`, then the
    /// next `near[1]` of `addrs`).
    pub near: [usize; 2],
}

/// Every ready endpoint once, ordered as `topology` says: `(address,
/// tier, hinted)` each, from every slice.
pub(crate) fn order(mut all: Vec<(SocketAddr, u8, bool)>, topology: Topology) -> Found {
    let close = match topology {
        Topology::Off => false,
        Topology::PreferClose => true,
        Topology::Auto => all.iter().any(|&(_, _, hinted)| hinted),
    };
    if !close {
        for e in &mut all {
            e.1 = 2;
        }
    }
    // By address, the nearest tier first, then once per address (one may
    // be in two slices while the controller moves it); then by tier.
    all.sort_by_key(|&(addr, tier, _)| (addr, tier));
    all.dedup_by_key(|e| e.0);
    all.sort_by_key(|&(addr, tier, _)| (tier, addr));
    let count = |t| all.iter().filter(|e| e.1 == t).count();
    Found {
        near: [count(0), count(1)],
        addrs: all.into_iter().map(|e| e.0).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{EndpointHints, ForZone};

    fn endpoint(node: &str, zone: &str, hint: Option<&str>) -> Endpoint {
        Endpoint {
            node_name: Some(node.into()),
            zone: Some(zone.into()),
            hints: hint.map(|z| EndpointHints {
                for_zones: Some(vec![ForZone { name: z.into() }]),
                for_nodes: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn this_node_then_this_zone_then_the_rest() {
        let here = Here {
            node: Some("n1".into()),
            zone: Some("a".into()),
        };
        assert_eq!(here.tier(&endpoint("n1", "a", None)), (0, false));
        assert_eq!(here.tier(&endpoint("n2", "a", None)), (1, false));
        assert_eq!(here.tier(&endpoint("n3", "b", None)), (2, false));
        // Hints, where the Service asked for them, decide the zone.
        assert_eq!(here.tier(&endpoint("n3", "b", Some("a"))), (1, true));
        assert_eq!(here.tier(&endpoint("n2", "a", Some("b"))), (2, true));
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let all = vec![
            (a("10.0.0.9:53"), 2, false),
            (a("10.0.0.5:53"), 1, false),
            (a("10.0.0.7:53"), 0, false),
            (a("10.0.0.5:53"), 2, false),
        ];
        let close = order(all.clone(), Topology::PreferClose);
        assert_eq!(
            close.addrs,
            [a("10.0.0.7:53"), a("10.0.0.5:53"), a("10.0.0.9:53")]
        );
        assert_eq!(close.near, [1, 1]);
        // Auto without hints, and off: no preference, by address.
        for t in [Topology::Auto, Topology::Off] {
            let any = order(all.clone(), t);
            assert_eq!(any.near, [0, 0]);
            assert_eq!(
                any.addrs,
                [a("10.0.0.5:53"), a("10.0.0.7:53"), a("10.0.0.9:53")]
            );
        }
        let mut hinted = all;
        hinted[0].2 = true;
        assert_eq!(order(hinted, Topology::Auto).near, [1, 1]);
    }
}
