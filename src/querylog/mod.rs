//! The query log (CoreDNS's `log` plugin): one line per answered query of
//! the zones that ask for it, written off the request path.
//!
//! An observer of answers (`answered`): where a reply is counted, a zone
//! that logs checks the reply's class and its sample, takes a fixed-size
//! [`Record`] and offers it to its queue (`answered::queue`): no
//! allocation, no formatting, no system call. A full queue drops the
//! record and counts it (`nodens_query_log_dropped_total`); the query is
//! never slowed. The queue's thread formats and writes (`writer`).
//!
//! A zone that logs nothing holds no [`ZoneLog`]: it is not among the
//! zone's observers. The [`Hub`] (one per request path) keeps the
//! running [`Sink`] and starts a new one when `[query_log]` changes on
//! reload; the old one's thread ends once the last query of the old
//! settings is written.
//!
//! Configuration: `[query_log]` (the sink) and each zone's `query_log`
//! (`config.rs`). Request path: where a reply is counted, one `try_send`.

pub(crate) mod config;
mod format;
mod record;
mod writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::{ArcSwapOption, Guard};
use prometheus::IntCounter;

use crate::answered::queue::Queue;
use crate::answered::{Event, Observer};
use crate::search::Clients;
use config::{QueryLogPlan, ZoneLogPlan};
use record::{Record, class_bit};

/// What the settings say about the query log: the sink and each zone's plan
/// (by zone index).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plans {
    sink: QueryLogPlan,
    zones: Vec<Option<ZoneLogPlan>>,
}

impl Plans {
    /// The sink's plan and each zone's, by zone index.
    pub(crate) fn new(sink: QueryLogPlan, zones: Vec<Option<ZoneLogPlan>>) -> Plans {
        Plans { sink, zones }
    }

    /// Whether the replies to queries that reach no zone are logged.
    pub(crate) fn logs_unzoned(&self) -> bool {
        self.sink.unzoned.is_some()
    }

    fn any(&self) -> bool {
        self.sink.unzoned.is_some() || self.zones.iter().any(Option::is_some)
    }
}

/// A running sink: the queue and its writer thread, which ends when the
/// last sender (each [`ZoneLog`] holds one through its `Arc<Sink>`) is gone.
pub(crate) struct Sink {
    queue: Queue<Record>,
    plan: QueryLogPlan,
}

/// The query log's counters (`serve::metrics`).
pub(crate) struct Counters {
    pub(crate) written: IntCounter,
    pub(crate) dropped: IntCounter,
    pub(crate) errors: IntCounter,
}

/// The request path's handle on the query log: the running sink, started
/// when a zone first logs and replaced when `[query_log]` changes.
pub(crate) struct Hub {
    clients: Arc<Clients>,
    counters: Counters,
    current: Mutex<Option<Arc<Sink>>>,
    unzoned: ArcSwapOption<Unzoned>,
    /// The SIGHUP generation: a log file is opened again when it moves.
    reopen: Arc<AtomicU64>,
}

/// The log of the queries that reach no zone, for one generation of settings.
pub(crate) struct Unzoned {
    generation: u64,
    pub(crate) log: Option<ZoneLog>,
}

impl Hub {
    /// `clients`: the pods the pod watch knows, named on each line.
    pub(crate) fn new(clients: Arc<Clients>, counters: Counters) -> Hub {
        Hub {
            clients,
            counters,
            current: Mutex::new(None),
            unzoned: ArcSwapOption::empty(),
            reopen: Arc::default(),
        }
    }

    /// A log file is opened again before its next write (SIGHUP: an
    /// outside rotation may have moved it away).
    pub(crate) fn reopen(&self) {
        self.reopen.fetch_add(1, Ordering::Relaxed);
    }

    /// The zones' logs (`None` where a zone logs nothing), for one
    /// generation of settings. Runs when a listener first sees the
    /// settings (after a reload).
    pub(crate) fn zone_logs(
        &self,
        plans: &Plans,
        zone_names: impl Iterator<Item = String>,
    ) -> Vec<Option<ZoneLog>> {
        let sink = self.sink(plans);
        zone_names
            .zip(&plans.zones)
            .map(|(name, plan)| ZoneLog::new(sink.as_ref(), Some(name.into()), *plan))
            .collect()
    }

    /// The log of the queries that reach no zone, for settings
    /// `generation`: made by the first such query after a reload.
    pub(crate) fn unzoned(&self, plans: &Plans, generation: u64) -> Guard<Option<Arc<Unzoned>>> {
        let guard = self.unzoned.load();
        if guard.as_ref().is_some_and(|u| u.generation == generation) {
            return guard;
        }
        drop(guard);
        let sink = self.sink(plans);
        let log = ZoneLog::new(sink.as_ref(), None, plans.sink.unzoned);
        self.unzoned
            .store(Some(Arc::new(Unzoned { generation, log })));
        self.unzoned.load()
    }

    /// The sink for `plans`: the running one if `[query_log]` is unchanged,
    /// else a new one; none when nothing is logged or the output cannot
    /// be opened (logged).
    fn sink(&self, plans: &Plans) -> Option<Arc<Sink>> {
        let mut current = crate::lock::lock(&self.current);
        if !plans.any() {
            *current = None;
            return None;
        }
        if let Some(sink) = current.as_ref().filter(|s| s.plan == plans.sink) {
            return Some(sink.clone());
        }
        match self.start(&plans.sink) {
            Ok(sink) => {
                let sink = Arc::new(sink);
                *current = Some(sink.clone());
                Some(sink)
            }
            Err(e) => {
                tracing::error!(output = ?plans.sink.output, "query log not written: {e}");
                *current = None;
                None
            }
        }
    }

    fn start(&self, plan: &QueryLogPlan) -> std::io::Result<Sink> {
        let output = writer::Output::open(&plan.output, plan.max_size, &self.reopen)?;
        let counts = writer::Counts {
            written: self.counters.written.clone(),
            errors: self.counters.errors.clone(),
        };
        let lines = writer::Lines::new(output, plan.format, self.clients.clone(), counts);
        let queue = Queue::start(
            "query-log",
            plan.queue,
            self.counters.dropped.clone(),
            1,
            lines,
        )?;
        Ok(Sink {
            queue,
            plan: plan.clone(),
        })
    }

    /// At shutdown, once no query is in flight: lets the writer write what
    /// is queued, waiting `within` at most.
    pub(crate) fn finish(&self, within: Duration) {
        let sink = crate::lock::lock(&self.current).take();
        self.unzoned.store(None);
        if let Some(sink) = sink
            && !sink.queue.finish(within)
        {
            tracing::warn!(
                output = ?sink.plan.output,
                "query log: the queue was not written within {within:?} of the shutdown"
            );
        }
    }
}

/// One zone's query log, as the request path holds it.
pub(crate) struct ZoneLog {
    sink: Arc<Sink>,
    /// `None`: the log of the queries that reach no zone.
    zone: Option<Arc<str>>,
    plan: ZoneLogPlan,
}

impl ZoneLog {
    fn new(
        sink: Option<&Arc<Sink>>,
        zone: Option<Arc<str>>,
        plan: Option<ZoneLogPlan>,
    ) -> Option<ZoneLog> {
        Some(ZoneLog {
            sink: sink?.clone(),
            zone,
            plan: plan?,
        })
    }
}

impl Observer for ZoneLog {
    /// Offers the reply to the log, if its class and the sample say so.
    #[inline]
    fn observe(&self, event: &Event<'_>) {
        if self.plan.classes & class_bit(event.rcode, event.answered.reply) == 0 {
            return;
        }
        if self.plan.threshold < 1 << 32 && u64::from(rand::random::<u32>()) >= self.plan.threshold
        {
            return;
        }
        self.sink
            .queue
            .offer(Record::take(self.zone.clone(), event));
    }
}
