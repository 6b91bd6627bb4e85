//! A Pod as autopath reads it: the few fields it needs. Everything else in
//! the API's JSON (containers, volumes, conditions, managed fields: a few
//! kilobytes a pod) is skipped while parsing, never allocated, so a list of
//! a node's pods costs the watch little more than what it keeps, and the
//! allocator is not left holding the pages a whole `Pod` would have filled
//! (measured: tests/integration/autopath_memory.rs).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer};

#[derive(Clone, Debug, Deserialize)]
pub(super) struct PodView {
    #[serde(deserialize_with = "slim_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<SpecView>,
    #[serde(default)]
    pub status: Option<StatusView>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SpecView {
    pub host_network: Option<bool>,
    pub dns_policy: Option<String>,
    pub dns_config: Option<DnsConfigView>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct DnsConfigView {
    pub searches: Option<Vec<String>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatusView {
    pub phase: Option<String>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(rename = "podIPs")]
    pub pod_ips: Option<Vec<PodIpView>>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct PodIpView {
    pub ip: String,
}

/// The metadata fields the watch and autopath read; labels, annotations
/// and managed fields are skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
}

fn slim_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

impl k8s_openapi::Resource for PodView {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for PodView {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
