//! `nodens_kubernetes_*`: whether each watch is synced with the API, how
//! often it had to start over, since when it has been out of date, and how
//! many objects it holds.

use crate::metrics::{Counters, Gauges, Registry, label_set};
use prometheus::{IntCounter, IntGauge};

label_set! {
    pub struct WatchLabels { resource = "resource", watch = "watch" }
    pub struct ZoneLabels { zone = "zone" }
    pub struct ZoneNearLabels { zone = "zone", near = "near" }
}

pub struct KubeMetrics {
    pub synced: Gauges<WatchLabels<'static>>,
    pub errors: Counters<WatchLabels<'static>>,
    pub current_at: Gauges<WatchLabels<'static>>,
    pub objects: Gauges<WatchLabels<'static>>,
    pub lists: Counters<WatchLabels<'static>>,
    pub list_requests: Counters<WatchLabels<'static>>,
    pub resumes: Counters<WatchLabels<'static>>,
    pub discovered_upstreams: Gauges<ZoneLabels<'static>>,
    /// Of those, on this node and in its zone (asked first).
    pub near_upstreams: Gauges<ZoneNearLabels<'static>>,
    /// Names (`[cluster] follow_api`) whose cached answers a change of the
    /// API dropped, and the entries dropped.
    pub purged_names: IntCounter,
    pub purged_entries: IntCounter,
    /// `[kubernetes] startup_taint`: 1 until nodens has seen its node
    /// without the taint, and the failed attempts to get there.
    pub startup_taint_pending: IntGauge,
    pub startup_taint_errors: IntCounter,
}

impl KubeMetrics {
    pub fn register(r: &Registry) -> KubeMetrics {
        KubeMetrics {
            synced: r.gauges(
                "nodens_kubernetes_watch_synced",
                "1 while the watch holds the API's current list, 0 while it lists again or the API cannot be reached.",
            ),
            errors: r.counters(
                "nodens_kubernetes_watch_errors_total",
                "Watch errors (API unreachable, connection lost, the API server restarting, ...): each makes the feature fall back until the watch resumes from its resource version (or, when the API server no longer has it, lists again).",
            ),
            current_at: r.gauges(
                "nodens_kubernetes_watch_current_timestamp_seconds",
                "Unix time at which the watch last knew its list current: a list completed, a change handed over, or the moment it lost the API. While synced is 0, time() minus this is how long the feature has been falling back.",
            ),
            objects: r.gauges(
                "nodens_kubernetes_watch_objects",
                "Objects the watch holds.",
            ),
            lists: r.counters(
                "nodens_kubernetes_watch_lists_total",
                "Whole lists the watch took: at its start, and when the API server no longer had its resource version (410 Gone).",
            ),
            list_requests: r.counters(
                "nodens_kubernetes_watch_list_requests_total",
                "Requests those lists took: one for a streaming list, one per page otherwise.",
            ),
            resumes: r.counters(
                "nodens_kubernetes_watch_resumes_total",
                "Times the watch went on from its resource version after an error, without a list.",
            ),
            discovered_upstreams: r.gauges(
                "nodens_zone_discovered_upstreams",
                "Upstreams of the zone taken from EndpointSlices; 0 while the zone asks its configured upstreams (the ClusterIP).",
            ),
            near_upstreams: r.gauges(
                "nodens_zone_near_upstreams",
                "Of the zone's upstreams taken from EndpointSlices, those on this node (near=\"node\") and in its zone (near=\"zone\"): asked first ([zone.endpoints] topology).",
            ),
            purged_names: r.counter(
                "nodens_cluster_purged_names_total",
                "Names ([cluster] follow_api) whose cached answers a Service or EndpointSlice change dropped: Service nodes with every name below, namespace nodes, addresses' PTR names.",
            ),
            purged_entries: r.counter(
                "nodens_cluster_purged_entries_total",
                "Cached answers dropped because a Service or EndpointSlice change may have changed them.",
            ),
            startup_taint_pending: r.gauge(
                "nodens_kubernetes_startup_taint_pending",
                "1 from the start until nodens has seen its node without its startup taint ([kubernetes] startup_taint; 0 when none is configured): while 1, no pod is scheduled on the node.",
            ),
            startup_taint_errors: r.counter(
                "nodens_kubernetes_startup_taint_errors_total",
                "Failed attempts to read the node or remove its startup taint (no RBAC for nodes get/patch, the node not found, the API unreachable); each is retried after a backoff.",
            ),
        }
    }
}
