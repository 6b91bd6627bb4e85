//! A UDP worker's ledger: the cache hits it counted that no scrape has
//! added to the shared metrics yet.
//!
//! Adding a batch's hits to the shared counters and histograms at its end
//! cost about eighteen atomic read-modify-writes a batch (four counters,
//! three histograms of four or five each). The ledger keeps them instead,
//! under a lock its worker takes at a batch's first query and lets go at
//! its end (four atomics a batch: the lock, its release and the reference
//! the held guard keeps, on cache lines only that worker and a scrape
//! touch); a scrape (`Registry::encode`) takes each worker's lock in turn
//! and adds what it holds, as dnsdist sums its per-thread counters when
//! asked. A batch ends before its replies are sent and a scrape waits for
//! an open batch to end, so a client that has its answer still finds it
//! counted.

use std::sync::{Arc, Mutex, Weak};

use super::ListenerStats;
use super::tally::ZoneTally;

/// A worker's ledger: its counts and the stats they are of.
pub(crate) type Ledger = parking_lot::Mutex<Owed>;

/// What a worker has counted and not yet added to the shared metrics.
#[derive(Default)]
pub(crate) struct Owed {
    /// The stats the counts are of (their zones, their histograms'
    /// handles); kept until the counts are added.
    stats: Option<Arc<ListenerStats>>,
    /// One per zone of `stats`.
    zones: Vec<ZoneTally>,
    /// Indices into `zones` counted since the last scrape.
    dirty: std::cell::RefCell<Vec<usize>>,
}

impl Owed {
    /// Counts of `stats` from now: what was counted of other stats (a
    /// reload's) is added to those first.
    pub(super) fn made_for(&mut self, stats: &Arc<ListenerStats>) {
        if self
            .stats
            .as_ref()
            .is_some_and(|s| s.generation == stats.generation)
        {
            return;
        }
        self.settle();
        self.zones = stats.zones.iter().map(|_| ZoneTally::default()).collect();
        self.stats = Some(stats.clone());
    }

    /// The cells of zone `index`, marked as owed.
    #[inline]
    pub(super) fn zone(&self, index: usize) -> &ZoneTally {
        let zone = &self.zones[index];
        if !zone.touched.replace(true) {
            self.dirty.borrow_mut().push(index);
        }
        zone
    }

    /// A batch ended `seconds` after it arrived: each reply of it that
    /// owes its duration took that long.
    pub(super) fn end_batch(&mut self, seconds: f64) {
        let Some(stats) = &self.stats else {
            return;
        };
        for &index in self.dirty.get_mut().iter() {
            self.zones[index].observe_owed(stats.zone(index), seconds);
        }
    }

    /// Adds everything owed to the shared metrics.
    pub(super) fn settle(&mut self) {
        let Some(stats) = &self.stats else {
            return;
        };
        for index in self.dirty.get_mut().drain(..) {
            let zone = &self.zones[index];
            zone.touched.set(false);
            stats.zone(index).add(zone);
        }
    }

    /// Settles, then lets the stats go (the worker idles): a reload's old
    /// zones and their observers are not held past it.
    pub(super) fn let_go(&mut self) {
        self.settle();
        self.stats = None;
        self.zones = Vec::new();
    }
}

/// Every worker's ledger, for the scrape.
#[derive(Default)]
pub(crate) struct Ledgers(Mutex<Vec<Weak<Ledger>>>);

impl Ledgers {
    /// `ledger` is settled at each scrape from now on.
    pub(super) fn join(&self, ledger: &Arc<Ledger>) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|l| l.strong_count() > 0);
        all.push(Arc::downgrade(ledger));
    }

    /// Adds what every worker owes to the shared metrics (before they are
    /// read). Waits for each worker's open batch to end.
    pub(crate) fn settle(&self) {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for ledger in all.iter().filter_map(Weak::upgrade) {
            ledger.lock().settle();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::listen::Proto;
    use crate::metrics::Registry;
    use crate::serve::metrics::ServeMetrics;
    use crate::serve::stats::ZoneStats;

    fn stats(generation: u64, metrics: &Arc<ServeMetrics>) -> Arc<ListenerStats> {
        Arc::new(ListenerStats {
            generation,
            zones: vec![ZoneStats::new(metrics, "dns://:53", ".", "1", "")],
            ledgers: metrics.ledgers.clone(),
        })
    }

    /// `coredns_cache_requests_total` of the zone, as a scrape reads it.
    fn scraped(registry: &Registry) -> u64 {
        let text = registry.encode();
        text.lines()
            .find(|l| l.starts_with("coredns_cache_requests_total{"))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0, |n| n.parse().expect("a count"))
    }

    fn count_a_hit(owed: &Owed) {
        let stats = owed.stats.as_ref().expect("stats");
        owed.zone(0)
            .request(stats.zone(0), Proto::Udp, 1, 40, false);
    }

    #[test]
    fn a_scrape_adds_what_a_worker_owes_and_waits_for_its_batch() {
        let registry = Registry::new();
        let metrics = Arc::new(ServeMetrics::register(&registry));
        let ledger: Arc<Ledger> = Arc::default();
        metrics.ledgers.join(&ledger);
        let mut batch = ledger.lock_arc();
        batch.made_for(&stats(1, &metrics));
        count_a_hit(&batch);
        count_a_hit(&batch);
        // The batch is open: a scrape waits for its end.
        let scrape = std::thread::spawn(move || scraped(&registry));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!scrape.is_finished(), "a scrape read an open batch");
        drop(batch);
        assert_eq!(scrape.join().unwrap(), 2);
    }

    #[test]
    fn a_reload_adds_the_old_counts_to_the_old_series() {
        let registry = Registry::new();
        let metrics = Arc::new(ServeMetrics::register(&registry));
        let ledger: Arc<Ledger> = Arc::default();
        let mut owed = ledger.lock();
        owed.made_for(&stats(1, &metrics));
        count_a_hit(&owed);
        // Not yet added: the shared series has not seen it.
        assert_eq!(scraped(&registry), 0, "no scrape knows the ledger");
        owed.made_for(&stats(2, &metrics));
        assert_eq!(scraped(&registry), 1);
        count_a_hit(&owed);
        owed.let_go();
        assert_eq!(scraped(&registry), 2);
        assert!(owed.stats.is_none(), "an idle worker holds no stats");
    }
}
