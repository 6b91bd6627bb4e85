//! A UDP worker's own counts of its cache hits, kept in its ledger until
//! a scrape adds them to the shared metrics.
//!
//! A hit counted straight into the shared metrics pays about seventeen
//! atomic read-modify-writes (five counters, three histograms) and a clock
//! read for its duration: about a third of what nodens's own code costs
//! on a hit (`cargo bench --bench hit_path`).
//! A worker is one thread, so its hits are counted in plain cells of its
//! [`Ledger`], which it holds from a batch's first query to its end; a
//! scrape adds them to the shared counters and histograms (`ledger`).
//! The batch's replies all leave in the one `sendmmsg` after it, so each
//! hit's duration is the batch's: from its arrival (the one clock read
//! before it) to its end (the one clock read after it, before the send).
//! Misses, the other stages and TCP count into the shared metrics
//! directly, as before: their counts and a ledger's add up to the same
//! series.

use std::cell::{Cell, OnceCell, RefCell};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::ArcMutexGuard;
use prometheus::local::LocalHistogram;

use super::ledger::{Ledger, Owed};
use super::{ListenerStats, PROTOS, RCODES, TYPES, ZoneStats, response_slot};
use crate::answered::Answered;
use crate::listen::Proto;
use crate::serve::Settings;
use crate::serve::replay::{Counted, Replies};
use crate::wire::qtype_slot;

/// A worker's tally: the settings and stats its current batch runs on,
/// its ledger, and the replies the worker keeps to replay
/// (`serve::replay`), which live as long as the worker.
pub struct Tally {
    /// Brought up to now at a batch's first query and read by the rest
    /// without an atomic (two `ArcSwap` loads a query before), then kept
    /// for the next batch while the settings stand, and let go when the
    /// worker idles. A reload lands between batches: a batch is one
    /// `recvmmsg`'s queries, all of which arrived before it was read.
    batch: Option<Batch>,
    /// The ledger, held while a batch is open (between its first query
    /// and its end).
    open: Option<ArcMutexGuard<parking_lot::RawMutex, Owed>>,
    /// The batch's arrival time.
    arrived: Instant,
    /// The worker's counts not yet added to the shared metrics, which a
    /// scrape reads when no batch holds them.
    ledger: Arc<Ledger>,
    /// Whether the scrapes know of `ledger`.
    joined: bool,
    /// The worker's kept replies.
    replies: RefCell<Replies>,
}

/// What a batch runs on: the settings, and the listener's stats of them.
pub(in crate::serve) struct Batch {
    pub(in crate::serve) settings: Arc<Settings>,
    pub(in crate::serve) stats: Arc<ListenerStats>,
    /// The cache's retirement count at the batch's start (`replay`).
    pub(in crate::serve) retirements: u64,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            batch: None,
            open: None,
            arrived: Instant::now(),
            ledger: Arc::default(),
            joined: false,
            replies: RefCell::default(),
        }
    }
}

impl Tally {
    /// The open batch, opened at its first query (arrived at `received`)
    /// after `refresh` brought what it runs on up to now.
    #[inline]
    pub(in crate::serve) fn open(
        &mut self,
        received: Instant,
        refresh: impl FnOnce(&mut Option<Batch>),
    ) -> &Tally {
        if self.open.is_none() {
            refresh(&mut self.batch);
            let batch = self.batch.as_ref().expect("a refreshed batch");
            if !self.joined {
                batch.stats.ledgers.join(&self.ledger);
                self.joined = true;
            }
            let mut owed = self.ledger.lock_arc();
            owed.made_for(&batch.stats);
            self.open = Some(owed);
            self.arrived = received;
        }
        self
    }

    /// What the open batch runs on.
    #[inline]
    pub(in crate::serve) fn batch(&self) -> &Batch {
        self.batch.as_ref().expect("an open batch")
    }

    /// The worker's kept replies.
    #[inline]
    pub(in crate::serve) fn replies(&self) -> &RefCell<Replies> {
        &self.replies
    }

    /// The cells of zone `index` of the open batch's stats.
    #[inline]
    pub(in crate::serve) fn zone(&self, index: usize) -> &ZoneTally {
        self.open.as_deref().expect("an open batch").zone(index)
    }

    /// Ends the batch at `now`: its replies' durations are counted, and
    /// the ledger is let go (a scrape may read it).
    pub fn end(&mut self, now: Instant) {
        self.replies.get_mut().end_batch();
        let Some(mut owed) = self.open.take() else {
            return;
        };
        owed.end_batch(now.saturating_duration_since(self.arrived).as_secs_f64());
    }

    /// Lets the kept settings and stats go (the worker idles): a reload's
    /// old settings are not held past it.
    pub fn let_go(&mut self) {
        if self.open.is_none() {
            self.batch = None;
            self.ledger.lock().let_go();
        }
    }
}

impl Drop for Tally {
    /// The worker stops: what it owes is added now.
    fn drop(&mut self) {
        self.open = None;
        self.ledger.lock().settle();
    }
}

/// One zone's counts in a batch, in the slots of [`ZoneStats`].
pub(crate) struct ZoneTally {
    /// Whether the ledger lists it as owed.
    pub(super) touched: Cell<bool>,
    requests: Slots<{ TYPES * PROTOS }>,
    do_requests: Cell<u64>,
    cache_requests: Cell<u64>,
    cache_hits: Slots<2>,
    responses: Slots<{ RCODES * 2 }>,
    request_size: [OnceCell<LocalHistogram>; PROTOS],
    response_size: [OnceCell<LocalHistogram>; PROTOS],
    duration: OnceCell<LocalHistogram>,
    /// Replies whose duration is the batch's (observed at its end,
    /// [`ZoneTally::observe_owed`]).
    owed: Cell<u64>,
}

impl Default for ZoneTally {
    fn default() -> ZoneTally {
        ZoneTally {
            touched: Cell::new(false),
            requests: Slots::default(),
            do_requests: Cell::new(0),
            cache_requests: Cell::new(0),
            cache_hits: Slots::default(),
            responses: Slots::default(),
            request_size: Default::default(),
            response_size: Default::default(),
            duration: OnceCell::new(),
            owed: Cell::new(0),
        }
    }
}

/// Counters by slot, with a bit for each slot that is not 0, so that the
/// batch's end reads those alone.
struct Slots<const N: usize> {
    counts: [Cell<u64>; N],
    set: Cell<u64>,
}

impl<const N: usize> Default for Slots<N> {
    fn default() -> Self {
        const { assert!(N <= 64, "one bit per slot") };
        Slots {
            counts: std::array::from_fn(|_| Cell::new(0)),
            set: Cell::new(0),
        }
    }
}

impl<const N: usize> Slots<N> {
    #[inline]
    fn bump(&self, slot: usize) {
        bump(&self.counts[slot]);
        self.set.set(self.set.get() | 1 << slot);
    }

    /// Each slot that is not 0 and its count, emptied.
    fn drain(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let mut bits = self.set.take();
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let slot = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some((slot, self.counts[slot].take()))
        })
    }
}

/// One more in a cell (the worker's own: no atomic).
#[inline]
fn bump(cell: &Cell<u64>) {
    cell.set(cell.get() + 1);
}

impl ZoneTally {
    /// [`ZoneStats::request`], into the tally.
    #[inline]
    pub(crate) fn request(
        &self,
        stats: &ZoneStats,
        proto: Proto,
        qtype: u16,
        size: usize,
        dnssec_ok: bool,
    ) {
        self.requests
            .bump(qtype_slot(qtype) * PROTOS + proto as usize);
        self.request_size[proto as usize]
            .get_or_init(|| stats.request_size_of(proto).local())
            .observe(size as f64);
        if dnssec_ok {
            bump(&self.do_requests);
        }
        bump(&self.cache_requests);
    }

    /// [`ZoneStats::cache_hit`], into the tally.
    #[inline]
    pub(crate) fn cache_hit(&self, success: bool) {
        self.cache_hits.bump(usize::from(!success));
    }

    /// [`ZoneStats::reply`], into the tally: the duration is the batch's,
    /// unless an observer (the query log, dnstap) needs it now.
    #[inline]
    pub(crate) fn reply(
        &self,
        stats: &ZoneStats,
        proto: Proto,
        rcode: u16,
        from_cache_plugin: bool,
        size: usize,
        answered: Answered<'_>,
    ) {
        if stats.observers.is_empty() {
            bump(&self.owed);
        } else {
            let seconds = answered.started.elapsed().as_secs_f64();
            stats.tell_observers(proto, rcode, seconds, answered);
            self.duration
                .get_or_init(|| stats.duration().local())
                .observe(seconds);
        }
        self.response(stats, proto, rcode, from_cache_plugin, size);
    }

    /// A replayed reply (`serve::replay`): counted as the cache hit it
    /// replays was, request, hit and reply. Replies are kept only where
    /// nothing observes them, so the duration is the batch's.
    #[inline]
    pub(in crate::serve) fn replayed(
        &self,
        stats: &ZoneStats,
        counted: Counted,
        size: usize,
        reply: usize,
    ) {
        self.request(stats, Proto::Udp, counted.qtype, size, counted.dnssec_ok);
        self.cache_hit(counted.success);
        bump(&self.owed);
        self.response(stats, Proto::Udp, counted.rcode, true, reply);
    }

    #[inline]
    fn response(
        &self,
        stats: &ZoneStats,
        proto: Proto,
        rcode: u16,
        from_cache_plugin: bool,
        size: usize,
    ) {
        self.responses.bump(response_slot(rcode, from_cache_plugin));
        self.response_size[proto as usize]
            .get_or_init(|| stats.response_size_of(proto).local())
            .observe(size as f64);
    }
}

impl ZoneTally {
    /// The batch's replies that owe their duration took `seconds`.
    pub(super) fn observe_owed(&self, stats: &ZoneStats, seconds: f64) {
        let owed = self.owed.take();
        if owed > 0 {
            let duration = self.duration.get_or_init(|| stats.duration().local());
            for _ in 0..owed {
                duration.observe(seconds);
            }
        }
    }
}

impl ZoneStats {
    /// Adds what `tally` counted of this zone to the shared metrics, and
    /// empties it.
    pub(super) fn add(&self, tally: &ZoneTally) {
        for (slot, n) in tally.requests.drain() {
            self.requests_at(slot).inc_by(n);
        }
        for (slot, n) in tally.responses.drain() {
            self.responses_at(slot).inc_by(n);
        }
        for (slot, n) in tally.cache_hits.drain() {
            self.cache_hits_at(slot).inc_by(n);
        }
        match tally.do_requests.take() {
            0 => {}
            n => self.do_requests().inc_by(n),
        }
        match tally.cache_requests.take() {
            0 => {}
            n => self.cache_requests().inc_by(n),
        }
        let histograms = tally.request_size.iter().chain(&tally.response_size);
        for histogram in histograms.chain([&tally.duration]) {
            if let Some(h) = histogram.get() {
                h.flush();
            }
        }
    }
}
