//! What the watches are asked for: how to reach the API (`[kubernetes]`),
//! and which watches the configuration's features need ([`Wanted`], built
//! by `config` from every section that reads the API).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::upstream::EndpointsPlan;

/// Cached cluster answers follow the API (`[cluster] follow_api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowApiPlan {
    /// How long past its TTL a covered answer may be served while the
    /// watch is current (zero: not at all).
    pub hold_past_ttl: Duration,
    /// Which EndpointSlices the watch reads.
    pub endpoints: FollowEndpoints,
}

/// Which EndpointSlices `follow_api` watches (`[cluster]
/// follow_api_endpoints`). Headless Services' by default: by the
/// Kubernetes DNS specification only a headless Service's endpoints have
/// names, so those slices and the Services are what the specification's
/// answers are made of, and together with kube-proxy's watch (every
/// other slice) each slice is read once per node (docs/scale.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FollowEndpoints {
    /// Every Service's: a change of any endpoint also drops the answers
    /// CoreDNS makes of a ClusterIP Service's endpoints beyond the
    /// specification (their hostnames below its name, their addresses'
    /// PTRs), at the price of reading every slice kube-proxy reads.
    All,
    /// Headless Services' only (the slices kube-proxy does not watch):
    /// the answers made of a ClusterIP Service's endpoints then follow
    /// their TTL, and are never held past it.
    #[default]
    Headless,
}

/// How to reach the Kubernetes API (`[kubernetes]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesPlan {
    /// None: in-cluster, then `$KUBECONFIG` / `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// This node's name (`cluster.autopath`'s pod watch).
    pub node_name: Option<String>,
    /// Lists are asked as streaming lists first (`streaming_lists`).
    pub streaming_lists: bool,
}

/// The watches a configuration needs, and what each feature behind them
/// asks.
#[derive(Debug, Default)]
pub(crate) struct Wanted<'a> {
    /// How to reach the API; `None`: no feature reads it.
    pub api: Option<&'a KubernetesPlan>,
    /// The Services whose ready endpoints zones ask (`[zone.endpoints]`).
    pub endpoints: HashSet<&'a EndpointsPlan>,
    /// The namespaces (`[cluster] namespaces_from_api`).
    pub namespaces: bool,
    /// The node's pods are needed (autopath, budgets,
    /// `no_aaaa_for_ipv4_pods`): without a node name, an error.
    pub pods_needed: bool,
    /// The node's pods are of use (the workload counters name pods when
    /// the watch runs, and count by address without it).
    pub pods_of_use: bool,
    /// The Services and EndpointSlices, and the cluster domain
    /// (`[cluster] follow_api`).
    pub follow_api: Option<(FollowApiPlan, &'a [u8])>,
}
