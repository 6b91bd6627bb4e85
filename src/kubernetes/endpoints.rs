//! A zone's upstreams from its Service's EndpointSlices: the cluster DNS
//! pods asked directly, not through the ClusterIP, so no DNAT and no
//! conntrack entry pins a node's queries to one pod, and the TCP pools
//! spread over all of them. The watch follows changes without a restart
//! (node-cache reads the Service IP once, at start: kubernetes/dns#596).
//!
//! What it publishes is a whole list or nothing: `Some(addresses)` once a
//! list from the API is complete and names at least one ready endpoint,
//! `None` while it is not (before the first list, from a watch error
//! until the next list, no ready pod), and the zone asks its configured
//! upstreams, the ClusterIP, which kube-proxy keeps right. A watch that
//! expired (410 Gone) keeps the pods while it lists again.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::sync::mpsc::UnboundedSender;

use super::metrics::{KubeMetrics, WatchLabels};
use super::near::{Found, Here};
use super::watch::{Follower, Objects, Query, follow};
use crate::upstream::EndpointsPlan;

/// The label Kubernetes puts on a Service's EndpointSlices.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The DNS port, when the Service's port is not found by name.
const DNS_PORT: u16 = 53;

/// What a watch knows now about one Service's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Discovery {
    pub plan: EndpointsPlan,
    /// The ready endpoints, nearest first (`near`); None: ask the
    /// configured upstreams.
    pub upstreams: Option<Found>,
}

/// One slice's ready endpoints: address, how near (`near::Here::tier`),
/// and whether its slice carries topology hints.
type Ready = Vec<(SocketAddr, u8, bool)>;

/// Watches `plan`'s EndpointSlices until the receiver of `publish` is gone,
/// sending a [`Discovery`] whenever what it knows changes (see
/// [`super::watch`] for errors and relists).
pub(crate) async fn watch(
    client: kube::Client,
    plan: EndpointsPlan,
    node: Option<String>,
    metrics: Arc<KubeMetrics>,
    publish: UnboundedSender<Discovery>,
    streaming: bool,
) {
    let here = Here::find(&client, node.as_deref(), plan.topology).await;
    let api: kube::Api<EndpointSlice> = kube::Api::namespaced(client, &plan.namespace);
    let selector = format!("{SERVICE_NAME_LABEL}={}", plan.service);
    let watch_name = format!("{}/{}", plan.namespace, plan.service);
    let labels = WatchLabels {
        resource: "endpointslices",
        watch: &watch_name,
    };
    let mut publisher = Publisher {
        plan: &plan,
        publish: &publish,
        last: None,
    };
    follow(
        Objects(api),
        Query {
            labels: Some(selector),
            streaming,
            ..Query::default()
        },
        |slice: &EndpointSlice| slice.metadata.name.clone(),
        |slice| ready_addresses(slice, &plan.port, &here),
        labels,
        &metrics,
        &mut publisher,
    )
    .await;
}

/// Sends a watch's findings to the server, only when they change.
struct Publisher<'a> {
    plan: &'a EndpointsPlan,
    publish: &'a UnboundedSender<Discovery>,
    last: Option<Option<Found>>,
}

impl Follower<String, Ready> for Publisher<'_> {
    fn publish(&mut self, slices: Option<&BTreeMap<String, Ready>>) -> bool {
        let topology = self.plan.topology;
        let upstreams = slices
            .map(|s| super::near::order(s.values().flatten().copied().collect(), topology))
            .filter(|u| !u.addrs.is_empty());
        if self.last.as_ref() == Some(&upstreams) {
            return true;
        }
        let watch = format!("{}/{}", self.plan.namespace, self.plan.service);
        match (&upstreams, slices) {
            (Some(u), _) => tracing::info!(
                watch,
                "EndpointSlices: asking {} endpoints directly, {} on this node and {} in its zone first: {:?}",
                u.addrs.len(),
                u.near[0],
                u.near[1],
                u.addrs
            ),
            (None, Some(_)) => tracing::warn!(
                watch,
                "EndpointSlices: no ready endpoint; asking the configured upstreams"
            ),
            (None, None) => {}
        }
        self.last = Some(upstreams.clone());
        self.publish
            .send(Discovery {
                plan: self.plan.clone(),
                upstreams,
            })
            .is_ok()
    }
}

/// The slice's ready endpoints at the UDP port named `port_name` (53 when
/// the slice has no such port). An endpoint whose `ready` condition is
/// unset counts as ready, as the API defines it.
fn ready_addresses(slice: &EndpointSlice, port_name: &str, here: &Here) -> Ready {
    let port = slice
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(port_name) && p.protocol.as_deref() == Some("UDP"))
        .and_then(|p| p.port)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(DNS_PORT);
    slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .flat_map(|e| {
            let (tier, hinted) = here.tier(e);
            e.addresses.iter().map(move |a| (a, tier, hinted))
        })
        .filter_map(|(a, tier, hinted)| Some((a.parse::<IpAddr>().ok()?, tier, hinted)))
        .map(|(ip, tier, hinted)| (SocketAddr::new(ip, port), tier, hinted))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    fn slice(
        name: &str,
        endpoints: &[(&str, Option<bool>)],
        port: Option<(&str, i32)>,
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: endpoints
                .iter()
                .map(|&(ip, ready)| Endpoint {
                    addresses: vec![ip.into()],
                    conditions: Some(EndpointConditions {
                        ready,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ports: port.map(|(name, port)| {
                vec![
                    EndpointPort {
                        name: Some(format!("{name}-tcp")),
                        port: Some(port + 1),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    },
                    EndpointPort {
                        name: Some(name.into()),
                        port: Some(port),
                        protocol: Some("UDP".into()),
                        ..Default::default()
                    },
                ]
            }),
        }
    }

    #[test]
    fn ready_endpoints_at_the_named_udp_port() {
        let s = slice(
            "a",
            &[
                ("10.0.0.2", Some(true)),
                ("10.0.0.3", Some(false)),
                ("10.0.0.4", None),
                ("bogus", None),
            ],
            Some(("dns", 5353)),
        );
        let here = Here::default();
        let got: Vec<SocketAddr> = ready_addresses(&s, "dns", &here)
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(
            got,
            [
                "10.0.0.2:5353".parse().unwrap(),
                "10.0.0.4:5353".parse().unwrap()
            ]
        );
        // No port of that name: 53.
        assert_eq!(ready_addresses(&s, "other", &here)[0].0.port(), 53);
    }

    #[test]
    fn slices_merge_sorted_and_once() {
        let here = Here::default();
        let mut all = ready_addresses(
            &slice("b", &[("10.0.0.9", None), ("10.0.0.1", None)], None),
            "dns",
            &here,
        );
        all.extend(ready_addresses(
            &slice("a", &[("10.0.0.1", None)], None),
            "dns",
            &here,
        ));
        let found = crate::kubernetes::near::order(all, crate::upstream::Topology::Auto);
        let got: Vec<String> = found.addrs.iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["10.0.0.1:53", "10.0.0.9:53"]);
    }
}
