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
    /// A denial of a Service the watch says exists is replaced by its
    /// last positive answer (`[cluster] keep_last_good`, `cache::last_good`).
    pub keep_last_good: bool,
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
    /// The taint nodens removes from its node once it serves
    /// (`startup_taint`, `startup_taint.rs`).
    pub startup_taint: Option<String>,
}

/// Whether `key` is a taint key as the API server takes one: a name of at
/// most 63 characters (letters, digits, `-`, `_`, `.`, starting and ending
/// with a letter or digit), with an optional DNS subdomain and `/` before
/// it. A key the API server would refuse is a config error, not a patch
/// that fails on every node.
pub(crate) fn check_taint_key(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if name.is_empty()
        || name.len() > 63
        || !name.starts_with(alnum)
        || !name.ends_with(alnum)
        || !name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
    {
        return Err(
            "not a taint key (a name of letters, digits, '-', '_' and '.', at most 63, after an optional DNS subdomain and '/')",
        );
    }
    if let Some(prefix) = prefix {
        if prefix.len() > 253 || !prefix.split('.').all(crate::vocab::is_dns_label) {
            return Err("its prefix is not a DNS subdomain (lower-case labels joined by '.')");
        }
    }
    Ok(())
}

#[cfg(test)]
mod taint_key_tests {
    use super::check_taint_key;

    #[test]
    fn taint_keys_as_the_api_server_takes_them() {
        for good in [
            "node.nodens.io/agent-not-ready",
            "not-ready",
            "a",
            "x.y/Z_1.b",
        ] {
            assert!(check_taint_key(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/x",
            "a/",
            "Node.io/x",
            "a b",
            "-x",
            "x-",
            &"x".repeat(64),
            "a/b/c",
        ] {
            assert!(check_taint_key(bad).is_err(), "{bad}");
        }
    }
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
