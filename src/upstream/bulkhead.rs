//! A zone's bulkhead (`[[zone]] max_misses_in_flight`, `[server]
//! max_misses_in_flight_per_zone`): the cache misses one zone may have
//! waiting on its upstreams at once. A silent or slow upstream zone (a
//! blackholed stub domain, a slow corporate resolver) holds each of its
//! misses for the whole query timeout; without a bound of its own, a flood
//! of them fills the server's `max_misses_in_flight` and every other zone's
//! misses are turned away with it (node-local-dns retries blackholed names
//! forever: kubernetes-sigs/node-local-dns#12). A miss beyond its zone's
//! bound is answered at once (stale if the cache has it, else SERVFAIL),
//! and counted per zone.
//!
//! The count survives a reload (a zone of the same name and view takes
//! over its predecessor's), so the misses in flight across one are not
//! forgotten. Request path: taken in `serve::miss` beside the server's own
//! bound; a hit never comes here.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prometheus::{IntCounter, IntGauge};

use super::metrics::{UpstreamMetrics, ZoneViewLabels};

pub(crate) struct Bulkhead {
    count: Arc<Count>,
    /// 0: no bound but the server's.
    max: usize,
    rejected: IntCounter,
}

/// The misses in flight and their gauge, behind one pointer: a ticket
/// costs one reference count.
struct Count {
    in_flight: AtomicUsize,
    gauge: IntGauge,
}

/// A place among the zone's misses in flight, given back when dropped.
pub(crate) struct ZoneTicket(Arc<Count>);

impl Drop for ZoneTicket {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.gauge.dec();
    }
}

impl Bulkhead {
    /// The bulkhead of zone `zone` in view `view`, bounded at `max`,
    /// counting on from `previous` (the same zone before a reload).
    pub(crate) fn new(
        max: usize,
        previous: Option<&Bulkhead>,
        metrics: &UpstreamMetrics,
        zone: &str,
        view: &str,
    ) -> Bulkhead {
        let labels = ZoneViewLabels { zone, view };
        let count = previous.map_or_else(
            || {
                Arc::new(Count {
                    in_flight: AtomicUsize::new(0),
                    gauge: metrics.zone_misses.get(&labels),
                })
            },
            |p| p.count.clone(),
        );
        Bulkhead {
            count,
            max,
            rejected: metrics.zone_rejected.get(&labels),
        }
    }

    /// The bulkhead of `plan`'s zone in `view`, counting on from the same
    /// zone of the router it replaces.
    pub(crate) fn after(
        previous: Option<&super::Router>,
        plan: &super::ZonePlan,
        view: &str,
        metrics: &UpstreamMetrics,
    ) -> Bulkhead {
        let before = previous
            .and_then(|p| {
                p.zones()
                    .iter()
                    .find(|z| z.name == plan.name && z.view == view)
            })
            .map(|z| &z.bulkhead);
        Bulkhead::new(plan.max_misses_in_flight, before, metrics, &plan.name, view)
    }

    /// A place for one more miss, or none (counted) when the zone has
    /// its bound's worth in flight.
    #[inline]
    pub(crate) fn enter(&self) -> Option<ZoneTicket> {
        let max = if self.max == 0 { usize::MAX } else { self.max };
        let taken = self
            .count
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            self.rejected.inc();
            return None;
        }
        self.count.gauge.inc();
        Some(ZoneTicket(self.count.clone()))
    }

    /// Misses in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.count.in_flight.load(Ordering::Relaxed)
    }

    /// The bound (0: none but the server's).
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Misses turned away since the zone's series began.
    pub(crate) fn rejected(&self) -> u64 {
        self.rejected.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Registry;

    #[test]
    fn a_zone_takes_its_bound_and_gives_it_back_across_a_reload() {
        let metrics = UpstreamMetrics::register(&Registry::new());
        let zone = Bulkhead::new(2, None, &metrics, "corp.example.", "");
        let (a, b) = (zone.enter().unwrap(), zone.enter().unwrap());
        assert!(zone.enter().is_none(), "over its bound");
        assert_eq!(zone.rejected.get(), 1);
        // Reloaded: the misses in flight still count.
        let reloaded = Bulkhead::new(3, Some(&zone), &metrics, "corp.example.", "");
        let c = reloaded.enter().unwrap();
        assert!(reloaded.enter().is_none());
        drop((a, b, c));
        assert_eq!(reloaded.in_flight(), 0);
        assert_eq!(reloaded.count.gauge.get(), 0);
        let unbounded = Bulkhead::new(0, None, &metrics, "other.", "");
        let many: Vec<_> = (0..100).map(|_| unbounded.enter().unwrap()).collect();
        assert_eq!(unbounded.in_flight(), 100);
        drop(many);
    }
}
