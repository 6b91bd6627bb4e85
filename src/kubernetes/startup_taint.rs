//! The startup taint (`[kubernetes] startup_taint`): pods scheduled on a
//! new node before its DNS cache serves fail their first lookups
//! (cilium/cilium#43080, kubernetes/dns#648, Karpenter nodes on AKS). The
//! node joins with a `NoSchedule` taint of this key (the kubelet's
//! `--register-with-taints`, a node pool's or Karpenter's startup taints),
//! and nodens removes it from its own node once it serves, as Cilium's
//! agent removes `node.cilium.io/agent-not-ready`.
//!
//! Only that key, only this node, and only over the taints it read: the
//! patch carries the node's resource version, so a change by another party
//! in between (409 Conflict) makes it read again instead of writing back
//! an old list. A failure (no RBAC, the node not found, the API away) is
//! counted, logged and retried after a full-jitter backoff; DNS is served
//! either way: the taint only holds pods back.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};

use super::metrics::KubeMetrics;
use super::watch::Backoff;
use crate::control::TaintView;

/// Where the removal stands, for `nodens doctor` (the control channel's
/// `status`): a taint nodens cannot remove keeps every pod off the node,
/// and only the logs and a gauge would say why.
#[derive(Default)]
pub(crate) struct TaintState(Mutex<Option<TaintView>>);

impl TaintState {
    pub(crate) fn view(&self) -> Option<TaintView> {
        crate::lock::lock(&self.0).clone()
    }

    pub(super) fn begin(&self, key: &str, node: Option<&str>) {
        *crate::lock::lock(&self.0) = Some(TaintView {
            key: key.to_string(),
            node: node.map(str::to_string),
            ..TaintView::default()
        });
    }

    fn update(&self, change: impl FnOnce(&mut TaintView)) {
        if let Some(view) = crate::lock::lock(&self.0).as_mut() {
            change(view);
        }
    }

    pub(super) fn failed(&self, error: String) {
        self.update(|v| {
            v.errors += 1;
            v.last_error = Some(error);
        });
    }
}

/// Removes taint `key` from node `node`, retrying until it is gone (or was
/// never there).
pub(crate) async fn remove(
    client: kube::Client,
    node: String,
    key: String,
    metrics: Arc<KubeMetrics>,
    state: Arc<TaintState>,
) {
    state.begin(&key, Some(&node));
    let api: Api<Node> = Api::all(client);
    let mut backoff = Backoff::default();
    let mut conflicts = 0;
    loop {
        match remove_once(&api, &node, &key).await {
            Ok(Outcome::Removed) => {
                tracing::info!(
                    node,
                    taint = key,
                    "startup taint removed: pods may be scheduled here"
                );
                break;
            }
            Ok(Outcome::Absent) => {
                tracing::debug!(node, taint = key, "startup taint not on the node");
                break;
            }
            // Another party changed the node since it was read: read again
            // at once, three times in a row at most, then after a backoff
            // (a node that changes all the time is not asked in a loop).
            Err(kube::Error::Api(e)) if e.code == 409 && conflicts < 3 => conflicts += 1,
            Err(e) => {
                conflicts = 0;
                metrics.startup_taint_errors.inc();
                state.failed(match &e {
                    kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
                    other => other.to_string(),
                });
                let wait = backoff.next();
                tracing::warn!(
                    node,
                    taint = key,
                    error = %e,
                    retry_in = ?wait,
                    "startup taint: cannot remove it (RBAC: nodes get and patch); pods stay off this node until it is gone"
                );
                tokio::time::sleep(wait).await;
            }
        }
    }
    metrics.startup_taint_pending.set(0);
    state.update(|v| v.removed = true);
}

enum Outcome {
    Removed,
    Absent,
}

async fn remove_once(api: &Api<Node>, node: &str, key: &str) -> Result<Outcome, kube::Error> {
    let current = api.get(node).await?;
    let taints = current
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !taints.iter().any(|t| t.key == key) {
        return Ok(Outcome::Absent);
    }
    let kept: Vec<_> = taints.iter().filter(|t| t.key != key).collect();
    // A merge patch replaces the list whole; the resource version makes it
    // apply only to the node as read.
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": current.metadata.resource_version },
        "spec": { "taints": kept },
    });
    api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(Outcome::Removed)
}
