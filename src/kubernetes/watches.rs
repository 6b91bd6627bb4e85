//! The server's side of the watches: the API client, and which watches run
//! for the configuration in force (started, restarted and stopped as it
//! changes on reload).

use std::collections::HashMap;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::config::{KubernetesPlan, Wanted};
use super::{endpoints, follow, metrics, namespaces, pods};
use crate::search::{Clients, Namespaces};
use crate::tasks::Upkeep;
use crate::upstream::{EndpointsPlan, Policy, ZonePlan};

/// Why no client for the API could be made. Each says its cause in its
/// message (it is logged as one line).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {}: {error}", path.display())]
    Read {
        path: std::path::PathBuf,
        error: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {}: {error}", path.display())]
    Kubeconfig {
        path: std::path::PathBuf,
        error: kube::config::KubeconfigError,
    },
    #[error("no Kubernetes API: neither in a cluster nor a kubeconfig: {0}")]
    NoApi(kube::config::InferConfigError),
    #[error("Kubernetes API client: {0}")]
    Client(kube::Error),
}

/// A client for the API: from the configured kubeconfig, else in-cluster
/// (the pod's service account), else `$KUBECONFIG` / `~/.kube/config`.
pub async fn client(plan: &KubernetesPlan) -> Result<kube::Client, ClientError> {
    let config = match &plan.kubeconfig {
        Some(path) => {
            let file =
                kube::config::Kubeconfig::read_from(path).map_err(|error| ClientError::Read {
                    path: path.clone(),
                    error,
                })?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|error| ClientError::Kubeconfig {
                    path: path.clone(),
                    error,
                })?
        }
        None => kube::Config::infer().await.map_err(ClientError::NoApi)?,
    };
    kube::Client::try_from(config).map_err(ClientError::Client)
}

/// The server's side of the watches: which run, what the EndpointSlice
/// watches found, and the configuration with it in place. (The namespace
/// and pod watches write their views of the request path directly.)
pub(crate) struct Watches {
    metrics: std::sync::Arc<metrics::KubeMetrics>,
    /// The namespaces view and, while it runs, its watch.
    namespaces: std::sync::Arc<Namespaces>,
    namespace_watch: Option<tokio::task::AbortHandle>,
    /// The client map for autopath and the budgets and, while it runs,
    /// the pod watch.
    clients: std::sync::Arc<Clients>,
    pod_watch: Option<tokio::task::AbortHandle>,
    /// The API client and the plan it was made for.
    client: Option<(KubernetesPlan, kube::Client)>,
    watches: HashMap<EndpointsPlan, tokio::task::AbortHandle>,
    found: HashMap<EndpointsPlan, super::near::Found>,
    sender: UnboundedSender<endpoints::Discovery>,
    receiver: UnboundedReceiver<endpoints::Discovery>,
    /// The request path, whose cache the Service and EndpointSlice watch
    /// keeps (`[cluster] follow_api`), what that watch knows (kept across
    /// its restarts) and, while it runs, the watch.
    shared: std::sync::Arc<dyn follow::Followed>,
    follow_state: Option<std::sync::Arc<follow::FollowState>>,
    follow_watch: Option<tokio::task::AbortHandle>,
    /// Whether the startup taint's removal was started (once a process),
    /// and where it stands.
    startup_taint_started: bool,
    startup_taint: std::sync::Arc<super::startup_taint::TaintState>,
}

impl Watches {
    pub(crate) fn new(
        metrics: std::sync::Arc<metrics::KubeMetrics>,
        namespaces: std::sync::Arc<Namespaces>,
        clients: std::sync::Arc<Clients>,
        shared: std::sync::Arc<dyn follow::Followed>,
    ) -> Watches {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        Watches {
            metrics,
            namespaces,
            namespace_watch: None,
            clients,
            pod_watch: None,
            client: None,
            watches: HashMap::new(),
            found: HashMap::new(),
            sender,
            receiver,
            shared,
            follow_state: None,
            follow_watch: None,
            startup_taint_started: false,
            startup_taint: Default::default(),
        }
    }

    /// Where the startup taint's removal stands (the control channel).
    pub(crate) fn startup_taint(&self) -> std::sync::Arc<super::startup_taint::TaintState> {
        self.startup_taint.clone()
    }

    /// nodens serves: the startup taint comes off its node
    /// (`[kubernetes] startup_taint`), once a process.
    pub(crate) fn serving(&mut self, upkeep: &Upkeep) {
        let Some((plan, client)) = &self.client else {
            return;
        };
        let Some(key) = &plan.startup_taint else {
            return;
        };
        if std::mem::replace(&mut self.startup_taint_started, true) {
            return;
        }
        let Some(node) = &plan.node_name else {
            self.startup_taint.begin(key, None);
            self.startup_taint.failed("no node name".into());
            tracing::error!(
                taint = key,
                "startup_taint: no node name (`[kubernetes] node_name` or $NODE_NAME, which the \
                 chart sets from spec.nodeName): the taint stays on the node"
            );
            return;
        };
        self.metrics.startup_taint_pending.set(1);
        upkeep.spawn(super::startup_taint::remove(
            client.clone(),
            node.clone(),
            key.clone(),
            self.metrics.clone(),
            self.startup_taint.clone(),
        ));
    }

    /// Runs the watches `want` asks for (a watch for each Service zones
    /// discover from, of the namespaces, of the node's pods, of the
    /// Services and EndpointSlices) and no other. Without an API client the
    /// zones keep their configured upstreams and nothing is denied from the
    /// namespaces (logged): DNS is served either way.
    pub(crate) async fn watch_for(&mut self, want: &Wanted<'_>, upkeep: &Upkeep) {
        let wanted = &want.endpoints;
        let plan = want.api;
        if !self.startup_taint_started && plan.is_some_and(|p| p.startup_taint.is_some()) {
            // Until it is seen gone: without an API client, for ever.
            self.metrics.startup_taint_pending.set(1);
        }
        if self.client.as_ref().map(|(p, _)| p) != plan {
            // Another API (or none): every watch starts over.
            self.client = None;
            self.stop_where(|_| true);
            self.stop_namespaces();
            self.stop_pods();
            self.stop_follow();
            if let Some(plan) = plan {
                match client(plan).await {
                    Ok(c) => self.client = Some((plan.clone(), c)),
                    Err(e) => tracing::error!(
                        "Kubernetes API: {e:#}; zones ask their configured upstreams"
                    ),
                }
            }
        }
        self.stop_where(|p| !wanted.contains(p));
        let namespaces_wanted = want.namespaces;
        if !namespaces_wanted || self.client.is_none() {
            self.stop_namespaces();
        }
        // The node's pods: for autopath, the budgets, the zones that
        // answer IPv4-only pods' AAAA from the A (`no_aaaa_for_ipv4_pods`),
        // and the workload counters' pod names.
        let pods_users = want.pods_needed;
        // The workload counters name pods when the watch runs, and count
        // by address without it: no error when it cannot.
        let pods_wanted = (pods_users || want.pods_of_use)
            .then(|| plan.and_then(|p| p.node_name.clone()))
            .flatten();
        if pods_users && pods_wanted.is_none() && self.pod_watch.is_none() {
            tracing::error!(
                "autopath, no_aaaa_for_ipv4_pods, budgets: no node name (`[kubernetes] \
                 node_name` or $NODE_NAME, which the chart sets from spec.nodeName); answering \
                 without autopath and AAAA filtering, budgeting clients by address"
            );
        }
        if pods_wanted.is_none() || self.client.is_none() {
            self.stop_pods();
        }
        if want.follow_api.is_none() || self.client.is_none() {
            self.stop_follow();
        }
        if let Some((follow_api, domain)) = want.follow_api
            && self.client.is_some()
        {
            if self
                .follow_state
                .as_ref()
                .is_some_and(|s| !s.made_for(domain, follow_api.endpoints))
            {
                // Another cluster domain (what the watch knew names
                // nothing) or other EndpointSlices: a new watch.
                self.stop_follow();
                self.follow_state = None;
            }
            let state = self.follow_state.get_or_insert_with(|| {
                std::sync::Arc::new(follow::FollowState::new(
                    self.shared.clone(),
                    self.metrics.clone(),
                    domain,
                    follow_api.endpoints,
                ))
            });
            state.set_plan(&follow_api);
            if self.follow_watch.is_none()
                && let Some((api, client)) = &self.client
            {
                let task = follow::watch(client.clone(), state.clone(), api.streaming_lists);
                self.follow_watch = Some(upkeep.spawn_stoppable(task));
            }
        }
        let Some((plan, client)) = &self.client else {
            return;
        };
        let streaming = plan.streaming_lists;
        if namespaces_wanted && self.namespace_watch.is_none() {
            let task = namespaces::watch(
                client.clone(),
                self.namespaces.clone(),
                self.metrics.clone(),
                streaming,
            );
            self.namespace_watch = Some(upkeep.spawn_stoppable(task));
        }
        if let Some(node) = pods_wanted
            && self.pod_watch.is_none()
        {
            let task = pods::watch(
                client.clone(),
                node,
                self.clients.clone(),
                self.metrics.clone(),
                streaming,
            );
            self.pod_watch = Some(upkeep.spawn_stoppable(task));
        }
        let node = plan.node_name.clone();
        for &plan in wanted {
            if !self.watches.contains_key(plan) {
                let task = endpoints::watch(
                    client.clone(),
                    plan.clone(),
                    node.clone(),
                    self.metrics.clone(),
                    self.sender.clone(),
                    streaming,
                );
                self.watches
                    .insert(plan.clone(), upkeep.spawn_stoppable(task));
            }
        }
    }

    fn stop_namespaces(&mut self) {
        if let Some(watch) = self.namespace_watch.take() {
            watch.abort();
        }
        self.namespaces.set(None);
    }

    fn stop_follow(&mut self) {
        if let Some(watch) = self.follow_watch.take() {
            watch.abort();
        }
        if let Some(state) = &self.follow_state {
            state.stopped();
        }
        for resource in ["services", "endpointslices"] {
            let labels = metrics::WatchLabels {
                resource,
                watch: "follow_api",
            };
            self.metrics.synced.get(&labels).set(0);
        }
    }

    fn stop_pods(&mut self) {
        if let Some(watch) = self.pod_watch.take() {
            watch.abort();
        }
        self.clients.set(None);
    }

    fn stop_where(&mut self, stop: impl Fn(&EndpointsPlan) -> bool) {
        self.watches.retain(|plan, watch| {
            let keep = !stop(plan);
            if !keep {
                watch.abort();
            }
            keep
        });
        let watches = &self.watches;
        self.found.retain(|plan, _| watches.contains_key(plan));
    }

    /// The next change a watch found (pending forever while none runs).
    pub(crate) async fn changed(&mut self) -> endpoints::Discovery {
        match self.receiver.recv().await {
            Some(d) => d,
            // Unreachable: `self` holds a sender.
            None => std::future::pending().await,
        }
    }

    /// Records `d`; false when it is stale (from a watch since stopped).
    pub(crate) fn record(&mut self, d: endpoints::Discovery) -> bool {
        if !self.watches.contains_key(&d.plan) {
            return false;
        }
        match d.upstreams {
            Some(u) => self.found.insert(d.plan, u),
            None => self.found.remove(&d.plan),
        };
        true
    }

    /// Each discovering zone of `zones` made to ask its Service's ready
    /// endpoints, in random order (which pod is first means nothing), where
    /// they are known.
    pub(crate) fn apply(&self, zones: &mut [ZonePlan]) {
        for zone in zones {
            let found = zone.endpoints.as_ref().and_then(|p| self.found.get(p));
            if let Some(found) = found {
                zone.upstreams = found.addrs.clone();
                zone.near = found.near;
                zone.policy = Policy::Random;
            }
            if zone.endpoints.is_some() {
                let labels = metrics::ZoneLabels { zone: &zone.name };
                let n = found.map_or(0, |f| f.addrs.len());
                let near = found.map_or([0, 0], |f| f.near);
                for (i, near_label) in ["node", "zone"].into_iter().enumerate() {
                    let labels = metrics::ZoneNearLabels {
                        zone: &zone.name,
                        near: near_label,
                    };
                    self.metrics.near_upstreams.get(&labels).set(near[i] as i64);
                }
                self.metrics.discovered_upstreams.get(&labels).set(n as i64);
            }
        }
    }
}
