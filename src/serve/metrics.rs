//! The request path's metrics: CoreDNS's `coredns_dns_*` and the per-zone
//! `coredns_cache_*` counters, and nodens's own counts of rejected,
//! coalesced and in-flight queries.

use std::sync::Arc;

use prometheus::{IntCounter, IntGauge};

use super::stats::Ledgers;

pub(crate) use crate::cache::metrics::CacheKindLabels;
use crate::listen::Proto;
use crate::metrics::label_set;
use crate::metrics::{
    Counters, Histograms, ReasonLabels, Registry, duration_buckets, size_buckets,
};

label_set! {
    /// `coredns_dns_requests_total`.
    pub struct RequestLabels {
        server = "server", zone = "zone", view = "view",
        proto: Proto = "proto", family = "family", qtype = "type",
    }
    /// `coredns_dns_responses_total`.
    pub struct ResponseLabels {
        server = "server", zone = "zone", view = "view", rcode = "rcode", plugin = "plugin",
    }
    /// `coredns_dns_request_duration_seconds`.
    pub struct ZoneLabels { server = "server", zone = "zone", view = "view" }
    /// Request and response sizes.
    pub struct SizeLabels { server = "server", zone = "zone", view = "view", proto: Proto = "proto" }
    /// `coredns_dns_do_requests_total` (CoreDNS orders these labels so).
    pub struct DoLabels { server = "server", view = "view", zone = "zone" }
    /// The cache plugin's per-zone counters (its label is `zones`).
    pub struct CacheLabels { server = "server", zones = "zones", view = "view" }
    /// Local NXDOMAINs, by the schema rule that ruled the name out.
    pub struct RuleLabels { rule = "rule" }
    /// Namespace checks, by what they found.
    pub(crate) struct CheckLabels { result = "result" }
}

/// CoreDNS's `plugin` label on responses: which plugin wrote the reply. In
/// NodeLocal DNSCache's chain every answer passes through `cache`, forwarded
/// ones included; a SERVFAIL written after a forward error has none.
pub(crate) const PLUGIN_CACHE: &str = "cache";
pub(crate) const PLUGIN_NONE: &str = "";
/// CoreDNS's `zone` label for queries that matched no zone (answered REFUSED).
pub(crate) const ZONE_DROPPED: &str = "dropped";

pub struct ServeMetrics {
    pub requests: Counters<RequestLabels<'static>>,
    pub responses: Counters<ResponseLabels<'static>>,
    pub request_duration: Histograms<ZoneLabels<'static>>,
    pub request_size: Histograms<SizeLabels<'static>>,
    pub response_size: Histograms<SizeLabels<'static>>,
    pub do_requests: Counters<DoLabels<'static>>,
    pub cache_hits: Counters<CacheKindLabels<'static>>,
    pub cache_misses: Counters<CacheLabels<'static>>,
    pub cache_requests: Counters<CacheLabels<'static>>,
    pub cache_prefetch: Counters<CacheLabels<'static>>,
    pub cache_prefetch_futile: Counters<CacheLabels<'static>>,
    pub cache_prefetch_skipped: Counters<CacheLabels<'static>>,
    pub cache_served_stale: Counters<CacheLabels<'static>>,
    rejected: Counters<ReasonLabels<'static>>,
    pub local_nxdomain: Counters<RuleLabels<'static>>,
    pub nxdomain_cuts: IntCounter,
    pub rule_without_soa: IntCounter,
    namespace_checks: Counters<CheckLabels<'static>>,
    pub speculation_sent: IntCounter,
    pub speculation_used: IntCounter,
    pub autopath_answers: IntCounter,
    /// AAAA questions of IPv4-only pods answered from the name's A
    /// (`no_aaaa_for_ipv4_pods`): each one an AAAA query not sent.
    pub aaaa_for_ipv4_pods: IntCounter,
    pub speculation_wasted: IntCounter,
    pub speculation_skipped: IntCounter,
    pub coalesced: IntCounter,
    pub inflight: IntGauge,
    /// The query log's lines written, dropped (queue full) and failed.
    pub query_log_written: IntCounter,
    pub query_log_dropped: IntCounter,
    pub query_log_errors: IntCounter,
    /// Answers served past their TTL while the API watch is current.
    pub held_answers: IntCounter,
    /// Denials replaced by a last-known-good answer, by what vouched.
    pub last_good_answers: Counters<RuleLabels<'static>>,
    /// Queries over a namespace's (or unknown client's) budget.
    pub(crate) budget_exceeded: Counters<crate::admission::budget::BudgetLabels<'static>>,
    /// dnstap's messages sent, dropped and its reconnections.
    pub(crate) dnstap: crate::dnstap::Counters,
    /// The UDP workers' counts of cache hits, added at each scrape.
    pub(crate) ledgers: Arc<Ledgers>,
}

impl ServeMetrics {
    pub fn register(r: &Registry) -> ServeMetrics {
        let metrics = ServeMetrics {
            requests: r.counters(
                "coredns_dns_requests_total",
                "Counter of DNS requests made per zone, protocol and family.",
            ),
            responses: r.counters(
                "coredns_dns_responses_total",
                "Counter of response status codes.",
            ),
            request_duration: r.histograms(
                "coredns_dns_request_duration_seconds",
                "Histogram of the time (in seconds) each request took per zone.",
                duration_buckets(),
            ),
            request_size: r.histograms(
                "coredns_dns_request_size_bytes",
                "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol.",
                size_buckets(),
            ),
            response_size: r.histograms(
                "coredns_dns_response_size_bytes",
                "Size of the returned response in bytes.",
                size_buckets(),
            ),
            do_requests: r.counters(
                "coredns_dns_do_requests_total",
                "Counter of DNS requests with DO bit set per zone.",
            ),
            cache_hits: r.counters("coredns_cache_hits_total", "The count of cache hits."),
            cache_misses: r.counters(
                "coredns_cache_misses_total",
                "The count of cache misses. Deprecated, derive misses from cache hits/requests counters.",
            ),
            cache_requests: r.counters(
                "coredns_cache_requests_total",
                "The count of cache requests.",
            ),
            cache_prefetch: r.counters(
                "coredns_cache_prefetch_total",
                "The number of times the cache has prefetched a cached item.",
            ),
            cache_prefetch_futile: r.counters(
                "nodens_cache_prefetch_futile_total",
                "Prefetches that moved the entry's expiry on by less than half the time it had lived: the upstream answered from its own cache.",
            ),
            cache_prefetch_skipped: r.counters(
                "nodens_cache_prefetch_skipped_total",
                "Prefetches not sent because the zone's last prefetches were futile (one in 32 is still sent).",
            ),
            cache_served_stale: r.counters(
                "coredns_cache_served_stale_total",
                "The number of requests served from stale cache entries.",
            ),
            rejected: r.counters(
                "nodens_rejected_queries_total",
                "Queries answered with an error or dropped before the cache, by reason.",
            ),
            local_nxdomain: r.counters(
                "nodens_search_local_nxdomain_total",
                "NXDOMAIN answered without asking upstream for names the cluster DNS schema rules out, by rule.",
            ),
            nxdomain_cuts: r.counter(
                "nodens_search_nxdomain_cut_total",
                "NXDOMAIN answered from a cached NXDOMAIN of the namespace or Service node above the name (RFC 8020).",
            ),
            rule_without_soa: r.counter(
                "nodens_search_rule_without_soa_total",
                "Names a schema rule ruled out but forwarded, because the zone's SOA was not learned yet.",
            ),
            namespace_checks: r.counters(
                "nodens_search_namespace_checks_total",
                "Namespace nodes asked for before a name below them went upstream, by result: denied (the cut answers), exists, or cached (an answer was in the cache).",
            ),
            speculation_sent: r.counter(
                "nodens_search_speculation_sent_total",
                "Later search-list expansions resolved upstream ahead of the client.",
            ),
            autopath_answers: r.counter(
                "nodens_autopath_answers_total",
                "First search-list expansions from a verified pod answered with a later name of its search list, behind a CNAME (CoreDNS's coredns_autopath_success_count_total).",
            ),
            aaaa_for_ipv4_pods: r.counter(
                "nodens_aaaa_for_ipv4_pods_total",
                "AAAA questions from pods of this node without an IPv6 address answered from the name's A (NODATA where it exists, its denial where it does not), with no AAAA query upstream (`no_aaaa_for_ipv4_pods`).",
            ),
            speculation_used: r.counter(
                "nodens_search_speculation_used_total",
                "Speculative answers a client then asked for.",
            ),
            speculation_wasted: r.counter(
                "nodens_search_speculation_wasted_total",
                "Speculative answers no client asked for within 10 s.",
            ),
            speculation_skipped: r.counter(
                "nodens_search_speculation_skipped_total",
                "Expansions not resolved ahead because max_speculations were in flight.",
            ),
            coalesced: r.counter(
                "nodens_coalesced_queries_total",
                "Cache misses that joined an identical query already in flight instead of asking upstream.",
            ),
            inflight: r.gauge(
                "nodens_inflight_queries",
                "Cache misses being resolved now.",
            ),
            query_log_written: r.counter(
                "nodens_query_log_written_total",
                "Query log lines written.",
            ),
            query_log_dropped: r.counter(
                "nodens_query_log_dropped_total",
                "Query log records dropped because the writer's queue was full (the queries were answered).",
            ),
            query_log_errors: r.counter(
                "nodens_query_log_errors_total",
                "Query log lines lost to a failed write.",
            ),
            held_answers: r.counter(
                "nodens_cache_held_answers_total",
                "Answers served past their TTL while the Service and EndpointSlice watch was current ([cluster] hold_past_ttl).",
            ),
            last_good_answers: r.counters(
                "nodens_cache_last_good_answers_total",
                "Denials and SERVFAILs from upstream answered with the name's last positive answer instead, by what vouched for it: \"cluster\" (the API watch says the Service exists, [cluster] keep_last_good) or \"stale_over_denial\" ([cache] stale_over_denial).",
            ),
            budget_exceeded: r.counters(
                "nodens_budget_exceeded_total",
                "Queries over their namespace's budget (`[budget]`), by namespace (\"\" for clients that are no known pod), budget (rate, misses) and action (drop, refuse).",
            ),
            dnstap: crate::dnstap::Counters::register(r),
            ledgers: Arc::default(),
        };
        let ledgers = metrics.ledgers.clone();
        r.before_gather(move || ledgers.settle());
        // Every rule's series from the start, so a dashboard sees zeros.
        for rule in crate::search::Rule::ALL {
            metrics
                .local_nxdomain
                .get(&RuleLabels { rule: rule.name() });
        }
        metrics
    }

    /// A namespace check's outcome.
    pub fn namespace_checks(&self, denied: bool, cached: bool) {
        let result = match (denied, cached) {
            (_, true) => "cached",
            (true, false) => "denied",
            (false, false) => "exists",
        };
        self.namespace_checks.get(&CheckLabels { result }).inc();
    }

    /// The query log's counters, for its writer and its queue.
    pub(crate) fn query_log_counters(&self) -> crate::querylog::Counters {
        crate::querylog::Counters {
            written: self.query_log_written.clone(),
            dropped: self.query_log_dropped.clone(),
            errors: self.query_log_errors.clone(),
        }
    }

    /// A query answered with an error or dropped before the cache.
    pub fn rejected(&self, reason: &str) {
        self.rejected.get(&ReasonLabels { reason }).inc();
    }
}
