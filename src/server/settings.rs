//! The one place the request path's settings are built from a
//! configuration: at start, on reload, and when the API's watches found
//! other upstreams for a zone.

use std::sync::Arc;

use crate::admission::{Acl, Budgets, RateLimiter};
use crate::config::Config;
use crate::dnstap::ForwarderSlot;
use crate::serve::identity::Identity;
use crate::serve::metrics::ServeMetrics;
use crate::serve::{Settings, Shared};
use crate::tasks::Upkeep;
use crate::upstream::Router;
use crate::upstream::metrics::UpstreamMetrics;

/// The request path for `config`, at a start: its settings built with the
/// dnstap slot its hub fills. Call on the main runtime.
pub(crate) fn request_path(
    config: &Config,
    upstream: &Arc<UpstreamMetrics>,
    serve: Arc<ServeMetrics>,
) -> Shared {
    let forwarder = ForwarderSlot::default();
    let settings = build(config, upstream, &Upkeep::current(), None, &forwarder);
    Shared::new(settings, config.cache.capacity, serve, forwarder)
}

/// Builds the request path's settings for `config`; `previous` lets
/// unchanged upstreams keep their connections and health across a reload;
/// `dnstap`: the request path's slot for upstream exchanges, which every
/// zone holds.
pub(crate) fn build(
    config: &Config,
    metrics: &Arc<UpstreamMetrics>,
    upkeep: &Upkeep,
    previous: Option<&Settings>,
    dnstap: &ForwarderSlot,
) -> Settings {
    Settings {
        generation: Settings::next_generation(),
        router: Router::build(
            &config.zones,
            &config.listen,
            metrics,
            upkeep,
            previous.map(|p| &p.router),
            dnstap,
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
