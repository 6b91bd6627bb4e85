//! The request path's view of the configuration, replaced whole on reload
//! so that a query sees one consistent version from start to end. Built
//! from a configuration in one place: `server/settings.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::admission::{Acl, Budgets, RateLimiter};
use crate::listen::TcpLimits;
use crate::search::ClusterRules;
use crate::upstream::Router;

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
    pub dnstap: Option<crate::dnstap::config::DnstapPlan>,
}

impl Settings {
    /// A new generation number, for settings built anew.
    pub(crate) fn next_generation() -> u64 {
        static GENERATION: AtomicU64 = AtomicU64::new(0);
        GENERATION.fetch_add(1, Ordering::Relaxed)
    }
}
