//! The namespaces that exist, for `[cluster] namespaces_from_api`: one
//! cluster-wide watch of Namespace metadata (names only: a few bytes per
//! namespace, whatever the cluster's size), written into the view the
//! local-answer stage reads. Unknown until listed, and from a watch error
//! until listed again ([`super::watch`]): nothing is denied meanwhile.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;

use super::metrics::{KubeMetrics, WatchLabels};
use super::watch::{Follower, Metadata, Query, follow};
use crate::search::Namespaces;

/// Watches the cluster's namespaces into `view`, until aborted.
pub(crate) async fn watch(
    client: kube::Client,
    view: Arc<Namespaces>,
    metrics: Arc<KubeMetrics>,
    streaming: bool,
) {
    // Metadata only: the API answers with names, not whole objects.
    let api: kube::Api<Namespace> = kube::Api::all(client);
    let labels = WatchLabels {
        resource: "namespaces",
        watch: "all",
    };
    follow(
        Metadata(api),
        Query {
            streaming,
            ..Query::default()
        },
        |ns: &PartialObjectMeta<Namespace>| ns.metadata.name.clone(),
        |_| (),
        labels,
        &metrics,
        &mut Writer(view),
    )
    .await;
}

struct Writer(Arc<Namespaces>);

impl Follower<String, ()> for Writer {
    fn publish(&mut self, list: Option<&BTreeMap<String, ()>>) -> bool {
        let names = list.map(|all| {
            all.keys()
                .map(|n| n.to_ascii_lowercase().into_bytes().into_boxed_slice())
                .collect::<HashSet<_>>()
        });
        self.0.set(names);
        true
    }
}
