//! Cached cluster answers that follow the API (`[cluster] follow_api`):
//! one cluster-wide watch of Services and one of EndpointSlices, the
//! objects kube-proxy on every node already watches, read as kube-proxy
//! reads them, in protobuf (`watch/protobuf.rs`). Each change the
//! watches hand over is compared with what they knew before, and the
//! cached answers it may have changed are dropped (`cache::follow`): the
//! Service's node and every name below it (its addresses, its endpoints'
//! hostnames, its SRV records), the namespace node above, and the PTR
//! names of the addresses it had and has. A pod asking after the change
//! gets the cluster DNS's new answer, not the cached one, within a watch
//! event's delay instead of the TTL.
//!
//! Of each object only what names need is kept: a Service's addresses and
//! whether it is an ExternalName, a slice's Service and addresses, and for
//! each a digest of the rest DNS answers from (ports, hostnames, readiness),
//! so a change shows without the fields being stored.
//!
//! While both watches are current, covered answers may be held past their
//! TTL (`hold_past_ttl`); while either is not, nothing is held and the
//! cache behaves as without the feature. What was known is kept across an
//! outage or a restart of the watch, so the list taken after it drops
//! what changed meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_pb::api::core::v1::Service;
use k8s_pb::api::discovery::v1::EndpointSlice;
use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::config::{FollowApiPlan, FollowEndpoints};
use super::metrics::{KubeMetrics, WatchLabels};
use super::watch::{Follower, Protobuf, Query, follow};
use crate::cache::follow::Purge;

#[path = "follow_coverage.rs"]
mod coverage;

/// What a change of the API acts on: the cache (its coverage, its hold,
/// the entries a change purges) and the denials the local stage learned.
/// The request path's state implements it (`serve/follow.rs`).
pub(crate) trait Followed: Send + Sync + 'static {
    fn cache(&self) -> &crate::cache::Cache;
    /// Drops what `purge` covers from the cache and from the learned
    /// denials; returns the cache entries dropped.
    fn purge(&self, purge: &Purge) -> usize;
}

/// The label Kubernetes puts on a Service's EndpointSlices.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label the EndpointSlice controller puts on a headless Service's
/// slices (kube-proxy watches the slices without it).
const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// Objects per list request.
const LIST_PAGE: u32 = 500;

/// An object's id: namespace and name.
type Id = (Box<str>, Box<str>);

/// What the watch keeps of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceView {
    /// Its ClusterIPs (none when headless or an ExternalName).
    addresses: Box<[IpAddr]>,
    external: bool,
    /// A digest of the rest its answers come from: ports, type, external
    /// name, publishNotReadyAddresses.
    digest: u64,
}

/// What the watch keeps of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceView {
    /// The Service it belongs to (its `kubernetes.io/service-name`).
    service: Option<Box<str>>,
    addresses: Box<[IpAddr]>,
    /// A digest of its endpoints' hostnames, readiness and ports.
    digest: u64,
}

fn digest(parts: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

fn id_of(meta: Option<&ObjectMeta>) -> Option<Id> {
    let meta = meta?;
    Some((
        meta.namespace.as_deref()?.to_ascii_lowercase().into(),
        meta.name.as_deref()?.to_ascii_lowercase().into(),
    ))
}

fn service_view(s: &Service) -> ServiceView {
    let spec = s.spec.as_ref();
    let external = spec.and_then(|s| s.r#type.as_deref()) == Some("ExternalName");
    let listed = spec.into_iter().flat_map(|s| &s.cluster_ips);
    let mut addresses: Vec<IpAddr> = spec
        .and_then(|s| s.cluster_ip.as_ref())
        .into_iter()
        .chain(listed)
        .filter_map(|ip| ip.parse().ok())
        .collect();
    addresses.sort();
    addresses.dedup();
    let ports: Vec<_> = spec
        .into_iter()
        .flat_map(|s| &s.ports)
        .map(|p| (p.name.as_deref(), p.protocol.as_deref(), p.port))
        .collect();
    let digest = digest((
        ports,
        spec.and_then(|s| s.r#type.as_deref()),
        spec.and_then(|s| s.external_name.as_deref()),
        spec.and_then(|s| s.publish_not_ready_addresses),
    ));
    ServiceView {
        addresses: addresses.into(),
        external,
        digest,
    }
}

fn slice_view(s: &EndpointSlice) -> SliceView {
    let service = s
        .metadata
        .as_ref()
        .and_then(|m| m.labels.get(SERVICE_NAME_LABEL))
        .map(|n| n.to_ascii_lowercase().into());
    let mut addresses: Vec<IpAddr> = s
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| a.parse().ok())
        .collect();
    addresses.sort();
    addresses.dedup();
    let endpoints: Vec<_> = s
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.as_ref();
            (
                &e.addresses,
                e.hostname.as_deref(),
                c.and_then(|c| c.ready),
                c.and_then(|c| c.serving),
                c.and_then(|c| c.terminating),
            )
        })
        .collect();
    let ports: Vec<_> = s
        .ports
        .iter()
        .map(|p| (p.name.as_deref(), p.protocol.as_deref(), p.port))
        .collect();
    SliceView {
        service,
        addresses: addresses.into(),
        digest: digest((endpoints, ports, &s.address_type)),
    }
}

/// What the watches know, kept by the server across restarts of the
/// watch (an outage, a reload), so a new list is compared with the last.
pub(crate) struct FollowState {
    shared: Arc<dyn Followed>,
    metrics: Arc<KubeMetrics>,
    /// Which EndpointSlices the watch reads.
    endpoints: FollowEndpoints,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `svc.<domain>`, lower-case wire form.
    svc_zone: Box<[u8]>,
    hold: Duration,
    /// `[cluster] keep_last_good`.
    keep_last_good: bool,
    services: BTreeMap<Id, ServiceView>,
    slices: BTreeMap<Id, SliceView>,
    services_current: bool,
    slices_current: bool,
    /// Headless Services whose slices list no endpoint, since when
    /// (`cache::follow::Coverage::emptied`).
    emptied: HashMap<Id, Instant>,
}

impl FollowState {
    /// A state for cluster domain `domain` (lower-case wire form). Answers
    /// marked holdable by an earlier watch are forgotten: what changed
    /// between the two is not known.
    pub(crate) fn new(
        shared: Arc<dyn Followed>,
        metrics: Arc<KubeMetrics>,
        domain: &[u8],
        endpoints: FollowEndpoints,
    ) -> FollowState {
        shared.cache().forget_holdable();
        FollowState {
            shared,
            metrics,
            endpoints,
            inner: Mutex::new(Inner {
                svc_zone: [b"\x03svc", domain].concat().into(),
                ..Inner::default()
            }),
        }
    }

    /// Whether this state was made for cluster domain `domain` and these
    /// EndpointSlices.
    pub(crate) fn made_for(&self, domain: &[u8], endpoints: FollowEndpoints) -> bool {
        let inner = crate::lock::lock(&self.inner);
        inner.svc_zone.get(4..) == Some(domain) && self.endpoints == endpoints
    }

    /// Sets how long covered answers are held while current, and whether
    /// the watch's word replaces a denial (on reload).
    pub(crate) fn set_plan(&self, plan: &FollowApiPlan) {
        let mut inner = crate::lock::lock(&self.inner);
        inner.hold = plan.hold_past_ttl;
        inner.keep_last_good = plan.keep_last_good;
        self.apply_hold(&inner);
    }

    /// The watch stopped: nothing is held or covered.
    pub(crate) fn stopped(&self) {
        let mut inner = crate::lock::lock(&self.inner);
        inner.services_current = false;
        inner.slices_current = false;
        self.shared.cache().set_hold(Duration::ZERO);
        self.shared.cache().set_vouching(false);
        self.shared.cache().set_coverage(None, Instant::now());
    }

    fn apply_hold(&self, inner: &Inner) {
        let current = inner.services_current && inner.slices_current;
        let hold = if current { inner.hold } else { Duration::ZERO };
        self.shared.cache().set_hold(hold);
        self.shared
            .cache()
            .set_vouching(current && inner.keep_last_good);
    }

    fn service_node(svc_zone: &[u8], namespace: &str, name: &str) -> Box<[u8]> {
        let mut w = Vec::with_capacity(name.len() + namespace.len() + 2 + svc_zone.len());
        for label in [name, namespace] {
            w.push(label.len().min(63) as u8);
            w.extend(label.as_bytes().iter().take(63));
        }
        w.extend_from_slice(svc_zone);
        w.into()
    }

    /// Adds a Service's names to `purge`: its node and below, and the
    /// namespace node above (a denial cut there would hide it).
    fn add_service(purge: &mut Purge, svc_zone: &[u8], namespace: &str, name: &str) {
        let node = Self::service_node(svc_zone, namespace, name);
        let namespace_at = usize::from(node[0]) + 1;
        purge.exact.insert(node[namespace_at..].into());
        purge.nodes.insert(node);
    }

    /// Drops what `purge` covers and counts it.
    fn purge(&self, purge: &Purge) {
        if purge.is_empty() {
            return;
        }
        let started = Instant::now();
        let entries = self.shared.purge(purge);
        let names = purge.nodes.len() + purge.exact.len() + purge.addresses.len();
        self.metrics.purged_names.inc_by(names as u64);
        self.metrics.purged_entries.inc_by(entries as u64);
        tracing::debug!(
            names,
            entries,
            took = ?started.elapsed(),
            "follow_api: dropped cached answers the API changed"
        );
    }

    fn publish_services(&self, list: Option<&BTreeMap<Id, ServiceView>>) {
        let mut inner = crate::lock::lock(&self.inner);
        let Some(list) = list else {
            inner.services_current = false;
            self.apply_hold(&inner);
            return;
        };
        let mut purge = Purge::default();
        for_changed(&inner.services, list, |(ns, name), old, new| {
            Self::add_service(&mut purge, &inner.svc_zone, ns, name);
            for view in [old, new].into_iter().flatten() {
                purge.addresses.extend(view.addresses.iter().copied());
            }
        });
        inner.services = list.clone();
        self.updated(&mut inner, &purge, |i| i.services_current = true);
    }

    fn publish_slices(&self, list: Option<&BTreeMap<Id, SliceView>>) {
        let mut inner = crate::lock::lock(&self.inner);
        let Some(list) = list else {
            inner.slices_current = false;
            self.apply_hold(&inner);
            return;
        };
        let mut purge = Purge::default();
        for_changed(&inner.slices, list, |(ns, _), old, new| {
            for view in [old, new].into_iter().flatten() {
                if let Some(service) = &view.service {
                    Self::add_service(&mut purge, &inner.svc_zone, ns, service);
                }
                purge.addresses.extend(view.addresses.iter().copied());
            }
        });
        inner.slices = list.clone();
        self.updated(&mut inner, &purge, |i| i.slices_current = true);
    }

    /// After a list changed: the new coverage first (so no answer is
    /// marked holdable by the old one after the purge), then the purge,
    /// then holding, if both watches are current.
    fn updated(&self, inner: &mut Inner, purge: &Purge, current: impl FnOnce(&mut Inner)) {
        Self::note_emptied(inner, Instant::now());
        self.shared.cache().set_coverage(
            Some(Arc::new(Self::coverage(inner, self.endpoints))),
            Instant::now(),
        );
        self.purge(purge);
        current(inner);
        self.apply_hold(inner);
    }
}

/// Calls `changed(id, old, new)` for each object added, removed or changed
/// from `old` to `new`.
fn for_changed<V: PartialEq>(
    old: &BTreeMap<Id, V>,
    new: &BTreeMap<Id, V>,
    mut changed: impl FnMut(&Id, Option<&V>, Option<&V>),
) {
    for (id, v) in new {
        let before = old.get(id);
        if before != Some(v) {
            changed(id, before, Some(v));
        }
    }
    for (id, v) in old {
        if !new.contains_key(id) {
            changed(id, Some(v), None);
        }
    }
}

struct Services(Arc<FollowState>);

impl Follower<Id, ServiceView> for Services {
    fn publish(&mut self, list: Option<&BTreeMap<Id, ServiceView>>) -> bool {
        self.0.publish_services(list);
        true
    }
}

struct Slices(Arc<FollowState>);

impl Follower<Id, SliceView> for Slices {
    fn publish(&mut self, list: Option<&BTreeMap<Id, SliceView>>) -> bool {
        self.0.publish_slices(list);
        true
    }
}

/// Watches every Service and EndpointSlice into `state`, until aborted.
pub(crate) async fn watch(client: kube::Client, state: Arc<FollowState>, streaming: bool) {
    let metrics = state.metrics.clone();
    // Lists from the API server's watch cache, as kube-proxy's informers
    // do (resourceVersion=0, or a streaming list): 5,000 nodes listing at
    // once read no quorum from etcd. An older list is caught up by the
    // events after it, and a purge too many is harmless.
    let query = Query {
        page: LIST_PAGE,
        streaming,
        ..Query::default()
    };
    let slice_query = Query {
        labels: (state.endpoints == FollowEndpoints::Headless).then(|| HEADLESS_LABEL.into()),
        ..query.clone()
    };
    let service_labels = WatchLabels {
        resource: "services",
        watch: "follow_api",
    };
    let slice_labels = WatchLabels {
        resource: "endpointslices",
        watch: "follow_api",
    };
    let (mut to_services, mut to_slices) = (Services(state.clone()), Slices(state.clone()));
    let follow_services = follow(
        Protobuf::<Service>::all(client.clone()),
        query.clone(),
        |s: &Service| id_of(s.metadata.as_ref()),
        service_view,
        service_labels,
        &metrics,
        &mut to_services,
    );
    let follow_slices = follow(
        Protobuf::<EndpointSlice>::all(client),
        slice_query,
        |s: &EndpointSlice| id_of(s.metadata.as_ref()),
        slice_view,
        slice_labels,
        &metrics,
        &mut to_slices,
    );
    tokio::join!(follow_services, follow_slices);
}

#[cfg(test)]
#[path = "follow_tests.rs"]
mod tests;
