//! A zone's upstreams from its Service's EndpointSlices: the cluster DNS
//! pods asked directly, not through the ClusterIP, so no DNAT and no
//! conntrack entry pins a node's queries to one pod, and the TCP pools
//! spread over all of them. The watch follows changes without a restart
//! (node-cache reads the Service IP once, at start: kubernetes/dns#596).
//!
//! What it publishes is a whole list or nothing: `Some(addresses)` once a
//! list from the API is complete and names at least one ready endpoint,
//! `None` while it is not (starting, the API unreachable, a watch that
//! expired and lists again, no ready pod), and the zone asks its
//! configured upstreams, the ClusterIP, which kube-proxy keeps right.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedSender;

use super::metrics::{KubeMetrics, WatchLabels};
use crate::config::EndpointsPlan;

/// The label Kubernetes puts on a Service's EndpointSlices.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The DNS port, when the Service's port is not found by name.
const DNS_PORT: u16 = 53;

/// What a watch knows now about one Service's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    pub plan: EndpointsPlan,
    /// The ready endpoints, sorted; None: ask the configured upstreams.
    pub upstreams: Option<Vec<SocketAddr>>,
}

/// First and longest wait before listing again after an error.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Watches `plan`'s EndpointSlices until the receiver of `publish` is gone,
/// sending a [`Discovery`] whenever what it knows changes.
///
/// An error ends the watch: the zone falls back to its configured
/// upstreams at once, and a new list is taken after a backoff. (The
/// watcher would resume from its last resource version and, with nothing
/// changed, say nothing: there would be no moment to trust the old list
/// again.) A watch that expired (410 Gone) lists again by itself, keeping
/// what was published until the new list is complete.
pub async fn watch(
    client: kube::Client,
    plan: EndpointsPlan,
    metrics: Arc<KubeMetrics>,
    publish: UnboundedSender<Discovery>,
) {
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
    let mut retry = RETRY_FIRST;
    loop {
        metrics.synced.get(&labels).set(0);
        let events = watcher(api.clone(), watcher::Config::default().labels(&selector));
        let mut events = std::pin::pin!(events);
        let mut slices = Slices::default();
        let mut listing: Option<Slices> = None;
        let error = loop {
            let Some(event) = events.next().await else {
                break None;
            };
            match event {
                Ok(watcher::Event::Init) => listing = Some(Slices::default()),
                Ok(watcher::Event::InitApply(slice)) => {
                    if let Some(l) = listing.as_mut() {
                        l.apply(&slice, &plan.port);
                    }
                }
                Ok(watcher::Event::InitDone) => slices = listing.take().unwrap_or_default(),
                Ok(watcher::Event::Apply(slice)) => slices.apply(&slice, &plan.port),
                Ok(watcher::Event::Delete(slice)) => slices.delete(&slice),
                // Expired: the watcher lists again by itself (Init next).
                Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                    tracing::info!(watch = %watch_name, "EndpointSlice watch expired (410 Gone); listing again");
                    continue;
                }
                Err(e) => break Some(e),
            }
            if listing.is_some() {
                // Mid-list: what was published stands until the list is whole.
                continue;
            }
            retry = RETRY_FIRST;
            metrics.synced.get(&labels).set(1);
            metrics.objects.get(&labels).set(slices.count() as i64);
            let ready = slices.ready();
            if ready.is_empty() && publisher.last != Some(None) {
                tracing::warn!(watch = %watch_name, "EndpointSlices: no ready endpoint; asking the configured upstreams");
            }
            if !publisher.send(Some(ready).filter(|r| !r.is_empty())) {
                return;
            }
        };
        metrics.errors.get(&labels).inc();
        metrics.synced.get(&labels).set(0);
        match error {
            Some(e) => tracing::warn!(watch = %watch_name, "EndpointSlice watch: {e}; asking the configured upstreams, listing again in {retry:?}"),
            None => tracing::warn!(watch = %watch_name, "EndpointSlice watch ended; listing again in {retry:?}"),
        }
        if !publisher.send(None) {
            return;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// Sends a watch's findings to the server, only when they change.
struct Publisher<'a> {
    plan: &'a EndpointsPlan,
    publish: &'a UnboundedSender<Discovery>,
    last: Option<Option<Vec<SocketAddr>>>,
}

impl Publisher<'_> {
    /// False when nobody listens any more (the server stopped).
    fn send(&mut self, upstreams: Option<Vec<SocketAddr>>) -> bool {
        if self.last.as_ref() == Some(&upstreams) {
            return true;
        }
        if let Some(u) = &upstreams {
            tracing::info!("EndpointSlices: asking {} endpoints directly: {u:?}", u.len());
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

/// The ready endpoints of each slice of one Service, by slice name.
#[derive(Debug, Default)]
struct Slices(BTreeMap<String, Vec<SocketAddr>>);

impl Slices {
    fn apply(&mut self, slice: &EndpointSlice, port_name: &str) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        self.0.insert(name, ready_addresses(slice, port_name));
    }

    fn delete(&mut self, slice: &EndpointSlice) {
        self.0
            .remove(slice.metadata.name.as_deref().unwrap_or_default());
    }

    fn count(&self) -> usize {
        self.0.len()
    }

    /// Every ready endpoint, sorted and once (an address may be in two
    /// slices while the controller moves it).
    fn ready(&self) -> Vec<SocketAddr> {
        let mut all: Vec<SocketAddr> = self.0.values().flatten().copied().collect();
        all.sort();
        all.dedup();
        all
    }
}

/// The slice's ready endpoints at the UDP port named `port_name` (53 when
/// the slice has no such port). An endpoint whose `ready` condition is
/// unset counts as ready, as the API defines it.
fn ready_addresses(slice: &EndpointSlice, port_name: &str) -> Vec<SocketAddr> {
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
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, port))
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
        let got = ready_addresses(&s, "dns");
        assert_eq!(
            got,
            [
                "10.0.0.2:5353".parse().unwrap(),
                "10.0.0.4:5353".parse().unwrap()
            ]
        );
        // No port of that name: 53.
        assert_eq!(ready_addresses(&s, "other")[0].port(), 53);
    }

    #[test]
    fn slices_merge_sorted_and_once() {
        let mut all = Slices::default();
        all.apply(
            &slice("b", &[("10.0.0.9", None), ("10.0.0.1", None)], None),
            "dns",
        );
        all.apply(&slice("a", &[("10.0.0.1", None)], None), "dns");
        let ready: Vec<String> = all.ready().iter().map(|a| a.to_string()).collect();
        assert_eq!(ready, ["10.0.0.1:53", "10.0.0.9:53"]);
        all.delete(&slice("b", &[], None));
        assert_eq!(all.ready().len(), 1);
        assert_eq!(all.count(), 1);
    }
}
