//! Metric handles for the request path, resolved once per listener and zone.
//!
//! `with_label_values` hashes every label value and takes a lock on each
//! call; seven of those per query cost more than the rest of a cache hit.
//! A [`ListenerStats`] holds, for one listener and the current set of zones,
//! the counters and histograms a query touches, each resolved the first time
//! it is needed. It is rebuilt when a reload changes the zones (the
//! settings' generation changes).

mod ledger;
mod tally;

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use prometheus::{Histogram, IntCounter};

use super::metrics::{
    CacheKindLabels, CacheLabels, DoLabels, PLUGIN_CACHE, PLUGIN_NONE, RequestLabels,
    ResponseLabels, ServeMetrics, SizeLabels, ZoneLabels,
};
use crate::answered::{Answered, Event, Observers};
use crate::listen::Proto;
use crate::querylog::Hub;
use crate::wire::{QTYPE_LABELS, QTYPE_OTHER, qtype_slot};

pub(crate) use ledger::Ledgers;
pub(in crate::serve) use tally::Batch;
pub(crate) use tally::Tally;
pub(crate) use tally::ZoneTally;

/// Query type slots: one per labelled type, and "other".
const TYPES: usize = QTYPE_LABELS.len() + 1;
/// Response codes with a slot: every assigned one, up to BADCOOKIE (23);
/// an unassigned code above shares the last.
const RCODES: usize = 24;
const PROTOS: usize = 2;
/// The protocol of each `proto as usize`.
const PROTO_OF: [Proto; PROTOS] = [Proto::Udp, Proto::Tcp];

/// The slot of a response code and plugin in `coredns_dns_responses_total`.
#[inline]
fn response_slot(rcode: u16, from_cache_plugin: bool) -> usize {
    (rcode as usize).min(RCODES - 1) * 2 + usize::from(from_cache_plugin)
}

/// Handles for one zone as seen by one listener.
pub(crate) struct ZoneStats {
    metrics: Arc<ServeMetrics>,
    server: String,
    zone: String,
    family: &'static str,
    /// The zone's view, CoreDNS's `view` label ("" for every listener).
    view: String,
    requests: [OnceLock<IntCounter>; TYPES * PROTOS],
    responses: [OnceLock<IntCounter>; RCODES * 2],
    request_size: [OnceLock<Histogram>; PROTOS],
    response_size: [OnceLock<Histogram>; PROTOS],
    duration: OnceLock<Histogram>,
    do_requests: OnceLock<IntCounter>,
    cache_requests: OnceLock<IntCounter>,
    cache_hits: [OnceLock<IntCounter>; 2],
    cache_misses: OnceLock<IntCounter>,
    cache_served_stale: OnceLock<IntCounter>,
    /// What observes this zone's replies on this listener: its query log,
    /// the per-workload counters, the listener's dnstap (each when on).
    observers: Observers,
}

impl ZoneStats {
    pub(crate) fn new(
        metrics: &Arc<ServeMetrics>,
        server: &str,
        zone: &str,
        family: &'static str,
        view: &str,
    ) -> ZoneStats {
        ZoneStats {
            metrics: metrics.clone(),
            server: server.to_string(),
            zone: zone.to_string(),
            family,
            view: view.to_string(),
            requests: std::array::from_fn(|_| OnceLock::new()),
            responses: std::array::from_fn(|_| OnceLock::new()),
            request_size: std::array::from_fn(|_| OnceLock::new()),
            response_size: std::array::from_fn(|_| OnceLock::new()),
            duration: OnceLock::new(),
            do_requests: OnceLock::new(),
            cache_requests: OnceLock::new(),
            cache_hits: std::array::from_fn(|_| OnceLock::new()),
            cache_misses: OnceLock::new(),
            cache_served_stale: OnceLock::new(),
            observers: Observers::default(),
        }
    }

    /// With the observers of the zone's replies.
    fn observed_by(mut self, observers: Observers) -> ZoneStats {
        self.observers = observers;
        self
    }

    /// Whether anything (the query log, dnstap, workload counters) is
    /// told of each of the zone's replies.
    #[inline]
    pub(in crate::serve) fn is_observed(&self) -> bool {
        !self.observers.is_empty()
    }

    /// A query arrived: `coredns_dns_requests_total` and its size.
    #[inline]
    pub(crate) fn request(&self, proto: Proto, qtype: u16, size: usize, dnssec_ok: bool) {
        self.requests_at(qtype_slot(qtype) * PROTOS + proto as usize)
            .inc();
        self.request_size_of(proto).observe(size as f64);
        if dnssec_ok {
            self.do_requests().inc();
        }
        self.cache_requests().inc();
    }

    #[inline]
    pub(crate) fn cache_hit(&self, success: bool) {
        self.cache_hits_at(usize::from(!success)).inc();
    }

    #[inline]
    pub(crate) fn cache_miss(&self) {
        self.cache_misses
            .get_or_init(|| self.metrics.cache_misses.get(&self.cache_labels()))
            .inc();
    }

    /// A stale answer went out (RFC 8767): `coredns_cache_served_stale_total`.
    #[inline]
    pub(crate) fn served_stale(&self) {
        self.cache_served_stale
            .get_or_init(|| self.metrics.cache_served_stale.get(&self.cache_labels()))
            .inc();
    }

    /// A reply went out: `coredns_dns_responses_total`, its size and the
    /// duration; and the query log's record, if the zone logs. Every reply
    /// of a zone is counted here (or in a UDP worker's [`Tally`]), so none
    /// is missing from its log.
    #[inline]
    pub(crate) fn reply(
        &self,
        proto: Proto,
        rcode: u16,
        from_cache_plugin: bool,
        size: usize,
        seconds: f64,
        answered: Answered<'_>,
    ) {
        self.tell_observers(proto, rcode, seconds, answered);
        self.responses_at(response_slot(rcode, from_cache_plugin))
            .inc();
        self.response_size_of(proto).observe(size as f64);
        self.duration().observe(seconds);
    }

    /// The observers of the zone's replies (none when all are off).
    #[inline]
    fn tell_observers(&self, proto: Proto, rcode: u16, seconds: f64, answered: Answered<'_>) {
        self.observers.observe(&Event {
            answered,
            proto,
            rcode,
            seconds,
        });
    }

    /// `coredns_dns_requests_total` of a type and protocol slot
    /// (`qtype_slot * PROTOS + proto`).
    fn requests_at(&self, slot: usize) -> &IntCounter {
        self.requests[slot].get_or_init(|| {
            let proto = PROTO_OF[slot % PROTOS];
            self.metrics.requests.get(&RequestLabels {
                server: &self.server,
                zone: &self.zone,
                view: &self.view,
                proto,
                family: self.family,
                qtype: QTYPE_LABELS
                    .get(slot / PROTOS)
                    .map_or(QTYPE_OTHER, |&(_, label)| label),
            })
        })
    }

    /// `coredns_dns_responses_total` of a [`response_slot`].
    fn responses_at(&self, slot: usize) -> &IntCounter {
        self.responses[slot].get_or_init(|| {
            let plugin = if slot % 2 == 1 {
                PLUGIN_CACHE
            } else {
                PLUGIN_NONE
            };
            self.metrics.responses.get(&ResponseLabels {
                server: &self.server,
                zone: &self.zone,
                view: &self.view,
                rcode: crate::wire::rcode_name((slot / 2) as u16),
                plugin,
            })
        })
    }

    fn request_size_of(&self, proto: Proto) -> &Histogram {
        self.request_size[proto as usize]
            .get_or_init(|| self.metrics.request_size.get(&self.size_labels(proto)))
    }

    fn response_size_of(&self, proto: Proto) -> &Histogram {
        self.response_size[proto as usize]
            .get_or_init(|| self.metrics.response_size.get(&self.size_labels(proto)))
    }

    fn duration(&self) -> &Histogram {
        self.duration.get_or_init(|| {
            self.metrics.request_duration.get(&ZoneLabels {
                server: &self.server,
                zone: &self.zone,
                view: &self.view,
            })
        })
    }

    fn do_requests(&self) -> &IntCounter {
        self.do_requests.get_or_init(|| {
            self.metrics.do_requests.get(&DoLabels {
                server: &self.server,
                view: &self.view,
                zone: &self.zone,
            })
        })
    }

    fn cache_requests(&self) -> &IntCounter {
        self.cache_requests
            .get_or_init(|| self.metrics.cache_requests.get(&self.cache_labels()))
    }

    /// `coredns_cache_hits_total`: slot 0 "success", 1 "denial".
    fn cache_hits_at(&self, slot: usize) -> &IntCounter {
        self.cache_hits[slot].get_or_init(|| {
            self.metrics.cache_hits.get(&CacheKindLabels {
                server: &self.server,
                kind: if slot == 0 { "success" } else { "denial" },
                zones: &self.zone,
                view: &self.view,
            })
        })
    }

    fn size_labels(&self, proto: Proto) -> SizeLabels<'_> {
        SizeLabels {
            server: &self.server,
            zone: &self.zone,
            view: &self.view,
            proto,
        }
    }

    /// The labels of the cache plugin's per-zone counters.
    fn cache_labels(&self) -> CacheLabels<'_> {
        CacheLabels {
            server: &self.server,
            zones: &self.zone,
            view: &self.view,
        }
    }
}

/// The handles of every zone for one listener, for one generation of settings.
pub(crate) struct ListenerStats {
    generation: u64,
    zones: Vec<ZoneStats>,
    /// Where a UDP worker counting of these stats enters its ledger.
    ledgers: Arc<Ledgers>,
}

impl ListenerStats {
    #[inline]
    pub(crate) fn zone(&self, index: usize) -> &ZoneStats {
        &self.zones[index]
    }
}

/// Per-listener holder of [`ListenerStats`], replaced when the settings change.
#[derive(Default)]
pub struct StatsSlot(ArcSwapOption<ListenerStats>);

/// A borrowed [`ListenerStats`]; cheap to take on every query.
pub(crate) type StatsGuard = arc_swap::Guard<Option<Arc<ListenerStats>>>;

impl StatsSlot {
    /// The stats for settings `generation`, made by `build` (one per zone
    /// of those settings, in index order) on the first query after a reload.
    #[inline]
    pub(crate) fn current(
        &self,
        generation: u64,
        ledgers: &Arc<Ledgers>,
        build: impl FnOnce() -> Vec<ZoneStats>,
    ) -> StatsGuard {
        let guard = self.0.load();
        if guard.as_ref().is_some_and(|s| s.generation == generation) {
            return guard;
        }
        drop(guard);
        self.0.store(Some(Arc::new(ListenerStats {
            generation,
            zones: build(),
            ledgers: ledgers.clone(),
        })));
        self.0.load()
    }
}

/// The stats of `listener` for the current settings, built on the first
/// query after a reload, with the zones' query logs.
#[inline]
pub(super) fn for_listener(
    listener: &super::ListenerView,
    settings: &super::Settings,
    metrics: &Arc<ServeMetrics>,
    query_log: &Hub,
    dnstap: &crate::dnstap::Hub,
) -> StatsGuard {
    listener
        .state
        .current(settings.generation, &metrics.ledgers, || {
            let zones = settings.router.zones();
            let names = zones.iter().map(|z| z.name.clone());
            let logs = query_log.zone_logs(&settings.query_log, names);
            zones
                .iter()
                .zip(logs)
                .map(|(z, log)| {
                    let observers = Observers::default()
                        .with(log)
                        .with(settings.workloads.clone())
                        .with(dnstap.client_tap(settings.dnstap.as_ref(), listener.addr));
                    ZoneStats::new(metrics, &listener.server, &z.name, listener.family, &z.view)
                        .observed_by(observers)
                })
                .collect()
        })
}
