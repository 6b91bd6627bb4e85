//! The request path's view of the configuration, replaced whole on reload
//! so that a query sees one consistent version from start to end.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::admission::{Acl, Budgets, RateLimiter};
use crate::config::{Config, TcpLimits};
use crate::search::ClusterRules;
use crate::tasks::Upkeep;
use crate::upstream::Router;
use crate::upstream::metrics::UpstreamMetrics;

use super::identity::Identity;

pub(crate) struct Settings {
    /// Changes on every reload; per-listener metric handles follow it.
    pub generation: u64,
    pub router: Router,
    pub acl: Acl,
    pub rate_limit: Option<RateLimiter>,
    pub max_udp_payload: u16,
    pub query_timeout: Duration,
    pub max_misses_in_flight: usize,
    pub tcp: TcpLimits,
    /// The cluster DNS schema rules of the local-answer stage.
    pub cluster: ClusterRules,
    /// What the CHAOS identity names answer; `None`: REFUSED.
    pub identity: Option<Identity>,
    /// The zones' local answers (`records`); `None` when no zone has any.
    pub records: Option<crate::records::Stage>,
    /// What the query log writes, and of which zones.
    pub query_log: crate::querylog::Plans,
    /// The per-namespace budgets (`[budget]`); `None`: off. Rebuilt on
    /// reload: buckets start full, and misses in flight count from zero
    /// (the old ones give back to the old table).
    pub budgets: Option<Arc<Budgets>>,
    /// The per-workload counters (`[server] workload_counters`); `None`:
    /// off. Kept across reloads while on.
    pub workloads: Option<Arc<crate::workloads::Workloads>>,
    /// Publish their top-K series on /metrics (`[server] workload_metrics`).
    pub workload_metrics: bool,
    /// dnstap output (`[dnstap]`); `None`: off.
    pub dnstap: Option<crate::config::DnstapPlan>,
}

impl Settings {
    /// Builds the settings for `config`; `previous` lets unchanged upstreams
    /// keep their connections and health across a reload.
    pub(crate) fn build(
        config: &Config,
        metrics: &Arc<UpstreamMetrics>,
        upkeep: &Upkeep,
        previous: Option<&Settings>,
    ) -> Settings {
        static GENERATION: AtomicU64 = AtomicU64::new(0);
        Settings {
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
            router: Router::build(
                &config.zones,
                &config.listen,
                metrics,
                upkeep,
                previous.map(|p| &p.router),
            ),
            acl: Acl::new(&config.server.allow),
            rate_limit: config
                .server
                .rate_limit
                .map(|r| RateLimiter::new(r.per_second, r.burst)),
            max_udp_payload: config.server.max_udp_payload,
            query_timeout: config.server.query_timeout,
            max_misses_in_flight: config.server.max_misses_in_flight,
            tcp: config.server.tcp,
            cluster: config.cluster.clone(),
            identity: config.server.identity.then(Identity::of_this_node),
            records: crate::records::Stage::build(
                &config
                    .zones
                    .iter()
                    .map(|z| z.records.as_ref())
                    .collect::<Vec<_>>(),
                upkeep,
            ),
            query_log: crate::querylog::Plans::new(
                config.query_log.clone(),
                config.zones.iter().map(|z| z.query_log).collect(),
            ),
            budgets: config.budget.as_ref().map(|p| Arc::new(Budgets::new(p))),
            workloads: config.server.workload_counters.then(|| {
                let domain = config.cluster.domain();
                match previous.and_then(|p| p.workloads.clone()) {
                    Some(kept) => {
                        kept.set_cluster_domain(domain);
                        kept
                    }
                    None => Arc::new(crate::workloads::Workloads::new(domain)),
                }
            }),
            workload_metrics: config.server.workload_metrics,
            dnstap: config.dnstap.clone(),
        }
    }
}
