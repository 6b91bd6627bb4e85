//! Where misses go: zones (longest suffix wins), each with its upstream
//! servers, and the transports that carry a query to one of them.
//!
//! Configuration: each `[[zone]]`'s upstream keys (`config.rs`: the zone
//! plan, its policy and transport), `[zone.pool]` (`pool/config.rs`) and
//! `[zone.tls]` (`tls/config.rs`).
//! Request path: a miss (`serve::fetch`) asks the zone the router picked,
//! through `forward` (or `rules` when the zone rewrites).

pub(crate) mod bulkhead;
pub(crate) mod case;
pub(crate) mod config;
mod error;
pub(crate) mod forward;
pub(crate) mod health;
pub(crate) mod metrics;
pub(crate) mod pool;
pub(crate) mod rules;
mod table;
pub(crate) mod tls;
pub(crate) mod udp;
mod views;

pub(crate) use config::Topology;
pub use config::{EndpointsPlan, Policy, Transport, UpstreamSettings, ZonePlan};
pub(crate) use error::ExchangeError;
pub use pool::PoolConfig;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge};

use crate::cache::config::CachePolicy;
use crate::cache::{PrefetchGain, TtlPolicy};
use crate::log_limit::LogLimiter;
use crate::tasks::Upkeep;
use health::Health;
use metrics::{ToLabels, UpstreamMetrics};
use pool::Pool;
use table::Table;

/// One upstream server, shared by every zone that lists its address, so
/// that its connection bound and its health are per server, not per zone.
pub(crate) struct Upstream {
    pub addr: SocketAddr,
    /// The `to` label in metrics and logs.
    pub label: String,
    pub settings: UpstreamSettings,
    pub log_limit: LogLimiter,
    pub pool: Pool,
    /// Its UDP side: the sockets whose query was answered, for the next
    /// queries.
    pub udp: Arc<udp::Sockets>,
    pub health: Health,
    /// Whether this server keeps the letter case of questions (0x20).
    pub case: case::CaseMemory,
    /// Queries sent to this upstream and not yet answered, UDP and TCP.
    pub inflight: IntGauge,
    /// Metric handles the miss path uses on every query, resolved once.
    pub udp_conn_hits: IntCounter,
    pub udp_conn_misses: IntCounter,
    /// Answers that were not to our question (`error="mismatch"`).
    pub mismatched: IntCounter,
    duration_by_rcode: [Histogram; 6],
    healthy: IntGauge,
    /// Health changes down and up ([`health::DOWN`], [`health::UP`]), each
    /// logged at most once per `log_interval`.
    health_log: [LogLimiter; 2],
    /// Where the health probe runs (see `tasks`).
    upkeep: Upkeep,
    metrics: Arc<UpstreamMetrics>,
}

impl Upstream {
    fn new(
        addr: SocketAddr,
        settings: UpstreamSettings,
        metrics: &Arc<UpstreamMetrics>,
        upkeep: &Upkeep,
    ) -> Upstream {
        let label = addr.to_string();
        let to = ToLabels { to: &label };
        let healthy = metrics.healthy.get(&to);
        healthy.set(1);
        let (udp_conn_hits, udp_conn_misses) = metrics.conn_reuse(&label, "udp");
        let udp = Arc::new(udp::Sockets::new(addr));
        upkeep.spawn(udp::sweep(Arc::downgrade(&udp)));
        Upstream {
            addr,
            udp,
            pool: Pool::new(
                addr,
                settings.pool.clone(),
                settings.tls.clone(),
                metrics,
                &label,
                upkeep.clone(),
            ),
            log_limit: LogLimiter::new(settings.log_interval),
            health_log: [
                LogLimiter::new(settings.log_interval),
                LogLimiter::new(settings.log_interval),
            ],
            health: Health::default(),
            case: case::CaseMemory::default(),
            inflight: metrics.inflight.get(&to),
            udp_conn_hits,
            udp_conn_misses,
            mismatched: metrics.error(&label, "mismatch"),
            duration_by_rcode: std::array::from_fn(|rcode| metrics.duration(&label, rcode as u16)),
            healthy,
            upkeep: upkeep.clone(),
            metrics: metrics.clone(),
            label,
            settings,
        }
    }

    /// Records how long an exchange that ended with `rcode` took.
    pub(crate) fn observe_duration(&self, rcode: u16, seconds: f64) {
        match self.duration_by_rcode.get(usize::from(rcode)) {
            Some(h) => h.observe(seconds),
            None => self.metrics.duration(&self.label, rcode).observe(seconds),
        }
    }

    /// Counts a failed exchange in `nodens_upstream_errors_total`.
    pub(crate) fn count_error(&self, e: &ExchangeError) {
        self.metrics.error(&self.label, e.label()).inc();
    }
}

/// A forwarding zone, ready to use.
pub(crate) struct Zone {
    /// Position in the router's zone list (indexes per-zone metric handles).
    pub index: usize,
    /// Presentation form, the `zone` label in metrics ("cluster.local.").
    pub name: String,
    pub upstreams: Vec<Arc<Upstream>>,
    pub policy: Policy,
    pub transport: Transport,
    /// Randomise the letter case of questions sent over UDP (0x20).
    pub randomize_case: bool,
    pub upstream_timeout: Duration,
    pub ttl: TtlPolicy,
    /// What the cache keeps and serves for this zone (`[zone.cache]`):
    /// read through the zone the query is routed to, no other lookup.
    pub cache: CachePolicy,
    /// `round_robin`: the upstream the next query starts at.
    pub next_first: AtomicUsize,
    /// The `view` label in metrics: its listen addresses, or "" for a zone
    /// every listener serves.
    pub view: String,
    /// `except`, `rewrite`, `dns64`: `None` on a zone without any.
    pub rules: Option<Arc<rules::ZoneRules>>,
    /// AAAA from a pod of this node without IPv6: NODATA (`serve::aaaa`),
    /// with this SOA where none was learned for the name; `None`: off.
    pub no_aaaa_for_ipv4_pods: Option<crate::wire::soa::Soa>,
    /// Answers keep only their answer section (`minimal`).
    pub minimal: bool,
    /// Whether this zone's prefetches bring new TTLs, or only a caching
    /// upstream's seconds left (`cache::PrefetchGain`).
    pub prefetch_gain: PrefetchGain,
    /// Where its upstream exchanges go to dnstap (the request path's slot).
    pub dnstap: crate::dnstap::ForwarderSlot,
    /// The request path's upstream metrics.
    pub metrics: Arc<UpstreamMetrics>,
    /// The misses this zone may have waiting at once (`bulkhead`).
    pub bulkhead: bulkhead::Bulkhead,
    /// How many upstreams, at the front, are on this node and then in its
    /// zone: tried first (`kubernetes::near`).
    pub near: [usize; 2],
}

impl Zone {
    /// The zone rewrites questions: whether a name asked exists is then
    /// its rewritten name's upstream answer, not the schema's to say (no
    /// local NXDOMAIN, namespace check or cut, nothing learned from it).
    pub(crate) fn rewrites(&self) -> bool {
        self.rules.as_ref().is_some_and(|r| r.rewrites())
    }

    /// Every upstream of the zone is marked down: a miss would wait out
    /// its timeouts before failing.
    pub(crate) fn all_down(&self) -> bool {
        self.upstreams.iter().all(|u| !u.health.is_up())
    }
}

/// Maps a query name, asked on a listener, to its zone.
pub(crate) struct Router {
    zones: Vec<Arc<Zone>>,
    /// The zone tables, one per view (see [`Router::view_of`]); one table
    /// of every zone when no zone is restricted to some listen addresses.
    tables: Vec<Table>,
    /// With views: each listen address and its view (an index of `tables`,
    /// and the cache partition of its answers). Empty without views.
    listeners: Vec<(SocketAddr, u8)>,
    upstreams: HashMap<SocketAddr, Arc<Upstream>>,
}

/// Views at most: a view is a cache partition, kept in six bits of the
/// cache key's flag byte (`cache::key`), and 0 is "no views".
pub(crate) const MAX_VIEWS: usize = 63;

impl Router {
    /// Builds `zones` for the listen addresses `listen`, reusing the
    /// upstreams of `previous` (the running configuration) whose settings
    /// are unchanged. Zones that list the same server share it (the config
    /// guarantees they agree on its settings).
    pub(crate) fn build(
        zones: &[ZonePlan],
        listen: &[SocketAddr],
        metrics: &Arc<UpstreamMetrics>,
        upkeep: &Upkeep,
        previous: Option<&Router>,
        dnstap: &crate::dnstap::ForwarderSlot,
    ) -> Router {
        let mut router = Router {
            zones: Vec::new(),
            tables: Vec::new(),
            listeners: Vec::new(),
            upstreams: HashMap::new(),
        };
        let views = views::Views::of(zones, listen);
        for (index, plan) in zones.iter().enumerate() {
            let upstreams = plan
                .upstreams
                .iter()
                .map(|&addr| router.upstream(addr, &plan.upstream, metrics, upkeep, previous))
                .collect();
            let view = views::label(&plan.listen);
            router.zones.push(Arc::new(Zone {
                index,
                bulkhead: bulkhead::Bulkhead::after(previous, plan, &view, metrics),
                near: plan.near,
                name: plan.name.clone(),
                upstreams,
                policy: plan.policy,
                transport: plan.transport,
                randomize_case: plan.randomize_case,
                upstream_timeout: plan.upstream_timeout,
                ttl: plan.ttl,
                cache: plan.cache.clone(),
                next_first: AtomicUsize::new(0),
                view,
                rules: plan.rules.clone(),
                minimal: plan.minimal,
                no_aaaa_for_ipv4_pods: plan.no_aaaa_for_ipv4_pods.then(|| {
                    let zone = crate::wire::name::from_text(&plan.name).unwrap_or_else(|_| vec![0]);
                    crate::wire::soa::Soa::synthesized(&zone, plan.ttl.negative_max_ttl.min(30))
                }),
                prefetch_gain: PrefetchGain::default(),
                dnstap: dnstap.clone(),
                metrics: metrics.clone(),
            }));
        }
        for members in &views.tables {
            let mut table = Table::default();
            for &i in members {
                table.insert(&router.zones[i]);
            }
            router.tables.push(table);
        }
        router.listeners = views.listeners;
        router
    }

    /// Whether the cache's view partitions stand for the same listeners in
    /// `other`. A view's zones may change (their answers stay cached, as
    /// every zone's do across a reload); which listeners share a partition
    /// may not, or one listener would get another's answers.
    pub(crate) fn same_views(&self, other: &Router) -> bool {
        self.listeners == other.listeners
    }

    /// The view of the listener at `addr`: 0 without views (one
    /// predictable branch), else its table and cache partition.
    #[inline]
    pub(crate) fn view_of(&self, addr: SocketAddr) -> u8 {
        if self.listeners.is_empty() {
            return 0;
        }
        self.listeners
            .iter()
            .find(|(a, _)| *a == addr)
            .map_or(0, |&(_, view)| view)
    }

    /// The zone for a query name (folded to lower case) in `view`, longest
    /// suffix first.
    #[inline]
    pub(crate) fn route_in(&self, view: u8, folded_name: &[u8]) -> Option<&Arc<Zone>> {
        let table = self.tables.get(usize::from(view))?;
        table.route(folded_name).map(|i| &self.zones[i])
    }

    /// The zone for a name asked outside any view (view 0): every zone
    /// without views, none with them.
    #[inline]
    pub(crate) fn route(&self, folded_name: &[u8]) -> Option<&Arc<Zone>> {
        self.route_in(0, folded_name)
    }

    /// The zone of the first view that has one for the name: for work that
    /// is not a client's query (learning a zone's SOA).
    pub(crate) fn route_any(&self, folded_name: &[u8]) -> Option<&Arc<Zone>> {
        (0..self.tables.len()).find_map(|v| self.route_in(v as u8, folded_name))
    }

    /// The longest an answer of any zone lives in the cache: its largest
    /// TTL plus its stale window (`stale_max_age`: the global one, which a
    /// zone may lengthen). A cache file older than that holds nothing of use.
    pub(crate) fn longest_life(&self, stale_max_age: Duration) -> Duration {
        let zones = self.zones();
        let longest_ttl = zones
            .iter()
            .map(|z| z.ttl.max_ttl.max(z.ttl.negative_max_ttl))
            .max()
            .unwrap_or(0);
        let longest_stale = zones
            .iter()
            .map(|z| z.cache.stale_max_age)
            .fold(stale_max_age, Duration::max);
        longest_stale + Duration::from_secs(longest_ttl.into())
    }

    /// Every upstream server, once (zones share them).
    pub(crate) fn upstreams(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        self.upstreams.values()
    }

    pub(crate) fn zones(&self) -> &[Arc<Zone>] {
        &self.zones
    }

    /// The upstream for `addr`: already built for an earlier zone, kept
    /// from the previous configuration, or new.
    fn upstream(
        &mut self,
        addr: SocketAddr,
        settings: &UpstreamSettings,
        metrics: &Arc<UpstreamMetrics>,
        upkeep: &Upkeep,
        previous: Option<&Router>,
    ) -> Arc<Upstream> {
        if let Some(shared) = self.upstreams.get(&addr) {
            return shared.clone();
        }
        let reused = previous
            .and_then(|p| p.upstreams.get(&addr))
            .filter(|u| u.settings == *settings);
        let upstream = reused
            .cloned()
            .unwrap_or_else(|| Arc::new(Upstream::new(addr, settings.clone(), metrics, upkeep)));
        self.upstreams.insert(addr, upstream.clone());
        upstream
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::name;

    /// The router of a config's zones (built on a runtime of its own).
    fn router(config: &str) -> Router {
        let config = crate::config::Config::parse(config).unwrap();
        let metrics = Arc::new(UpstreamMetrics::register(&crate::metrics::Registry::new()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _main = runtime.enter();
        Router::build(
            &config.zones,
            &config.listen,
            &metrics,
            &Upkeep::current(),
            None,
            &crate::dnstap::ForwarderSlot::default(),
        )
    }

    #[test]
    fn longest_suffix_wins() {
        let text = "[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1\"]\n\
                    [[zone]]\nname = \"cluster.local\"\nupstreams = [\"127.0.0.1:2\"]\n\
                    [[zone]]\nname = \"svc.cluster.local\"\nupstreams = [\"127.0.0.1:3\"]\n";
        let router = router(text);
        let zone = |n: &str| {
            router
                .route(&name::from_text(n).unwrap())
                .unwrap()
                .name
                .clone()
        };
        assert_eq!(zone("a.b.svc.cluster.local"), "svc.cluster.local.");
        assert_eq!(zone("pod.cluster.local"), "cluster.local.");
        assert_eq!(zone("cluster.local"), "cluster.local.");
        assert_eq!(zone("xcluster.local"), ".");
        assert_eq!(zone("example.com"), ".");
        assert_eq!(zone("."), ".");
    }

    #[test]
    fn each_listener_routes_in_its_view() {
        let a: SocketAddr = "127.0.0.1:1053".parse().unwrap();
        let b: SocketAddr = "127.0.0.2:1053".parse().unwrap();
        let c: SocketAddr = "127.0.0.3:1053".parse().unwrap();
        let text = "[server]\nlisten = [\"127.0.0.1:1053\", \"127.0.0.2:1053\", \"127.0.0.3:1053\"]\n\
                    [[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1\"]\n\
                    [[zone]]\nname = \"example\"\nupstreams = [\"127.0.0.1:2\"]\nlisten = [\"127.0.0.1:1053\", \"127.0.0.3:1053\"]\n\
                    [[zone]]\nname = \"example\"\nupstreams = [\"127.0.0.1:3\"]\nlisten = [\"127.0.0.2:1053\"]\n";
        let router = router(text);
        let (va, vb, vc) = (router.view_of(a), router.view_of(b), router.view_of(c));
        assert!(va != 0 && vb != 0 && va != vb, "{va} {vb}");
        assert_eq!(va, vc, "listeners that see the same zones share a view");
        let upstream = |view, n: &str| {
            let zone = router.route_in(view, &name::from_text(n).unwrap()).unwrap();
            (zone.upstreams[0].addr.port(), zone.view.clone())
        };
        assert_eq!(
            upstream(va, "x.example"),
            (2, "127.0.0.1:1053,127.0.0.3:1053".into())
        );
        assert_eq!(upstream(vb, "x.example"), (3, "127.0.0.2:1053".into()));
        assert_eq!(upstream(vb, "x.other"), (1, String::new()));
        assert!(
            router.route(&name::from_text("x.other").unwrap()).is_none(),
            "view 0 is empty"
        );
    }

    #[test]
    fn without_views_every_listener_is_view_0() {
        let router = router("[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:1\"]\n");
        assert_eq!(router.view_of("127.0.0.1:1053".parse().unwrap()), 0);
        assert!(router.route(&name::from_text("a").unwrap()).is_some());
    }

    #[test]
    fn a_suffix_of_a_zone_names_length_is_still_compared() {
        let text = "[[zone]]\nname = \"cluster.local\"\nupstreams = [\"127.0.0.1:2\"]\n";
        let router = router(text);
        let routed = |n: &str| router.route(&name::from_text(n).unwrap()).is_some();
        assert!(routed("a.cluster.local"));
        // Same wire length as cluster.local, other bytes: no zone.
        assert!(!routed("a.abcdefg.local"));
        assert!(!routed("example.com"));
        assert!(!routed("."));
    }
}
