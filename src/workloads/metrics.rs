//! The top-K family (`nodens_workload_*`): the [`TOP_K`] busiest workloads
//! of the node by queries a second, so a dashboard can name the noisiest
//! pods. Cardinality is bounded whatever the cluster: at most `TOP_K`
//! series a metric, replaced as the ranking changes.
//!
//! Rates are taken at a scrape, over the time since the last ranking
//! (at least [`MIN_WINDOW`]: a scrape sooner gets the last ranking again,
//! so two Prometheus servers scraping do not cut the window short).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Workloads;
use super::view::{Rates, Workload, group};
use crate::metrics::{FloatGauges, Registry, label_set};
use crate::search::Clients;

/// Workloads exported at most.
pub(crate) const TOP_K: usize = 10;
/// The shortest window a rate is taken over.
const MIN_WINDOW: Duration = Duration::from_secs(5);

label_set! {
    /// The workload a top-K series is about (`namespace` empty and `pod`
    /// the address for a client that is no known pod).
    pub(crate) struct WorkloadLabels { namespace = "namespace", pod = "pod" }
}

/// Workloads by (namespace, pod), as last ranked.
type Ranked = HashMap<(String, String), Workload>;

pub(crate) struct WorkloadMetrics {
    queries: FloatGauges<WorkloadLabels<'static>>,
    hit_ratio: FloatGauges<WorkloadLabels<'static>>,
    nxdomain: FloatGauges<WorkloadLabels<'static>>,
    servfail: FloatGauges<WorkloadLabels<'static>>,
    expansions: FloatGauges<WorkloadLabels<'static>>,
    /// The counts of the last ranking, and when it was taken.
    last: Mutex<Option<(Instant, Ranked)>>,
}

impl WorkloadMetrics {
    pub(crate) fn register(r: &Registry) -> WorkloadMetrics {
        WorkloadMetrics {
            queries: r.float_gauges(
                "nodens_workload_queries_per_second",
                "Queries a second of the node's busiest workloads (top 10 by this rate).",
            ),
            hit_ratio: r.float_gauges(
                "nodens_workload_cache_hit_ratio",
                "Share of the top workloads' queries answered without asking upstream (the cache, or nodens's own answer).",
            ),
            nxdomain: r.float_gauges(
                "nodens_workload_nxdomain_per_second",
                "NXDOMAIN answers a second to the top workloads.",
            ),
            servfail: r.float_gauges(
                "nodens_workload_servfail_per_second",
                "SERVFAIL answers a second to the top workloads.",
            ),
            expansions: r.float_gauges(
                "nodens_workload_search_expansions_per_lookup",
                "NXDOMAIN answers under the cluster domain (search-list expansions) per other query, of the top workloads.",
            ),
            last: Mutex::new(None),
        }
    }

    /// Ranks the workloads by their rate since the last ranking and
    /// exports the top [`TOP_K`] (at a scrape).
    pub(crate) fn publish(&self, workloads: &Workloads, pods: &Clients, now: Instant) {
        let mut last = crate::lock::lock(&self.last);
        if last
            .as_ref()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) < MIN_WINDOW)
        {
            return;
        }
        let current: Ranked = group(workloads.clients(), pods)
            .into_iter()
            .map(|w| ((w.namespace.clone(), w.pod.clone()), w))
            .collect();
        let Some((then, before)) = last.replace((now, current)) else {
            return;
        };
        let (_, current) = last.as_ref().expect("just set");
        let seconds = now.saturating_duration_since(then).as_secs_f64();
        let mut rates: Vec<Rates<'_>> = current
            .iter()
            .map(|(id, w)| Rates::between(before.get(id), w, seconds))
            .filter(|r| r.queries > 0.0)
            .collect();
        rates.sort_by(|a, b| b.queries.total_cmp(&a.queries));
        rates.truncate(TOP_K);
        for family in [
            &self.queries,
            &self.hit_ratio,
            &self.nxdomain,
            &self.servfail,
            &self.expansions,
        ] {
            family.reset();
        }
        for r in rates {
            let labels = WorkloadLabels {
                namespace: &r.workload.namespace,
                pod: &r.workload.pod,
            };
            self.queries.get(&labels).set(r.queries);
            self.hit_ratio.get(&labels).set(r.hit_ratio);
            self.nxdomain.get(&labels).set(r.nxdomain);
            self.servfail.get(&labels).set(r.servfail);
            self.expansions.get(&labels).set(r.expansions_per_lookup);
        }
    }
}
