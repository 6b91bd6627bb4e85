//! dnstap output: the queries nodens answers (and, if asked, the ones it
//! sends upstream) as dnstap messages over Frame Streams to a reader on a
//! Unix or TCP socket, as CoreDNS's `dnstap` plugin, unbound and dnsdist
//! send them.
//!
//! An observer of answers (`answered`), as the query log is: where a reply
//! is counted a listener's [`ClientTap`] takes a fixed-size [`Record`] and
//! offers it to its queue (`answered::queue`): no formatting, no system
//! call, and no allocation unless the two messages pass 1 KiB. A full
//! queue drops the record and counts its two messages
//! (`nodens_dnstap_dropped_total{reason="queue_full"}`); the query is never
//! slowed. The queue's thread encodes and writes (`writer`), and reconnects
//! when the reader goes away. With dnstap off a listener holds no tap: it
//! is not among the zones' observers.
//!
//! Upstream exchanges (`forwarder = true`) are offered from
//! `upstream::forward` through the request path's [`ForwarderSlot`], which
//! every zone holds: the miss path pays one `ArcSwap` load (per upstream
//! answer) when it is empty.
//!
//! Configuration: `[dnstap]` (`config.rs`). Request path: where a reply is
//! counted, and where an upstream answered (`upstream::forward`), one
//! `try_send` each.

pub(crate) mod config;
mod fstrm;
mod proto;
mod record;
mod writer;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use prometheus::IntCounter;

use super::config::DnstapPlan;
use crate::answered::queue::Queue;
use crate::answered::{Event, Observer};
use crate::metrics::{ReasonLabels, Registry};
use crate::search::Clients;
pub(crate) use record::Carrier;
use record::{Record, Side};

/// dnstap's counters, in messages (two per exchange).
#[derive(Clone)]
pub(crate) struct Counters {
    sent: IntCounter,
    dropped_queue_full: IntCounter,
    dropped_no_reader: IntCounter,
    reconnects: IntCounter,
}

impl Counters {
    pub(crate) fn register(r: &Registry) -> Counters {
        let dropped = r.counters::<ReasonLabels<'static>>(
            "nodens_dnstap_dropped_total",
            "dnstap messages dropped (the queries were answered), by reason: queue_full (the writer's queue was full), no_reader (no reader connected, or lost while writing).",
        );
        Counters {
            sent: r.counter(
                "nodens_dnstap_sent_total",
                "dnstap messages written to the reader.",
            ),
            dropped_queue_full: dropped.get(&ReasonLabels {
                reason: "queue_full",
            }),
            dropped_no_reader: dropped.get(&ReasonLabels {
                reason: "no_reader",
            }),
            reconnects: r.counter(
                "nodens_dnstap_reconnects_total",
                "Connections to the dnstap reader made again after it was lost or absent.",
            ),
        }
    }
}

/// A running sink: the queue and its writer thread, which ends (sending
/// STOP) when the last sender is gone, or at shutdown once the queue is
/// written ([`Hub::finish`], when taps may still be held).
struct Sink {
    queue: Queue<Record>,
    plan: DnstapPlan,
}

/// The request path's handle on dnstap: the running sink, started when
/// the settings first ask for it and replaced when `[dnstap]` changes on
/// reload.
pub(crate) struct Hub {
    clients: Arc<Clients>,
    counters: Counters,
    current: Mutex<Option<Arc<Sink>>>,
    /// The running sink when it takes upstream exchanges
    /// (`forwarder = true`), for the zones' fetches.
    forwarder: ForwarderSlot,
}

impl Hub {
    /// `clients`: the pods the pod watch knows, named in `extra`.
    /// `forwarder`: the slot the zones of this request path offer their
    /// upstream exchanges to (`Router::build`).
    pub(crate) fn new(clients: Arc<Clients>, counters: Counters, forwarder: ForwarderSlot) -> Hub {
        Hub {
            clients,
            counters,
            current: Mutex::new(None),
            forwarder,
        }
    }

    /// The slot the zones offer upstream exchanges to.
    pub(crate) fn forwarder(&self) -> &ForwarderSlot {
        &self.forwarder
    }

    /// The tap of the listener at `listener` for one generation of
    /// settings; `None` when client messages are off. Runs when a listener
    /// first sees the settings (after a reload).
    pub(crate) fn client_tap(
        &self,
        plan: Option<&DnstapPlan>,
        listener: SocketAddr,
    ) -> Option<ClientTap> {
        let sink = self.sink(plan)?;
        sink.plan.client.then_some(ClientTap { sink, listener })
    }

    /// The sink for `plan`: the running one if `[dnstap]` is unchanged,
    /// else a new one; none when dnstap is off or its thread cannot start.
    fn sink(&self, plan: Option<&DnstapPlan>) -> Option<Arc<Sink>> {
        let mut current = crate::lock::lock(&self.current);
        let Some(plan) = plan.filter(|p| p.client || p.forwarder) else {
            *current = None;
            self.forwarder.0.store(None);
            return None;
        };
        if let Some(sink) = current.as_ref().filter(|s| s.plan == *plan) {
            return Some(sink.clone());
        }
        let sink = match self.start(plan) {
            Ok(sink) => Some(Arc::new(sink)),
            Err(e) => {
                tracing::error!(socket = %plan.socket, "dnstap not sent: {e}");
                None
            }
        };
        current.clone_from(&sink);
        self.forwarder
            .0
            .store(sink.clone().filter(|s| s.plan.forwarder));
        sink
    }

    fn start(&self, plan: &DnstapPlan) -> std::io::Result<Sink> {
        let frames = writer::Frames::new(plan.clone(), self.clients.clone(), self.counters.clone());
        // A dropped record is two messages, as the counters count.
        let queue = Queue::start(
            "dnstap",
            plan.queue,
            self.counters.dropped_queue_full.clone(),
            2,
            frames,
        )?;
        Ok(Sink {
            queue,
            plan: plan.clone(),
        })
    }

    /// At shutdown, once no query is in flight: lets the writer write what
    /// is queued and end the stream (STOP, then the reader's FINISH), so a
    /// reader gets every message of the last seconds and a clean end.
    /// Waits `within` at most: a reader that does not take them is left.
    pub(crate) fn finish(&self, within: Duration) {
        let sink = crate::lock::lock(&self.current).take();
        self.forwarder.0.store(None);
        let Some(sink) = sink else {
            return;
        };
        if sink.queue.finish(within) {
            tracing::debug!(socket = %sink.plan.socket, "dnstap: queue written, stream ended")
        } else {
            tracing::warn!(
                socket = %sink.plan.socket,
                "dnstap: the queue was not written within {within:?} of the shutdown"
            )
        }
    }
}

/// One listener's tap: where its zones' replies are offered.
pub(crate) struct ClientTap {
    sink: Arc<Sink>,
    listener: SocketAddr,
}

impl Observer for ClientTap {
    /// Offers a query and its reply (CLIENT_QUERY, CLIENT_RESPONSE).
    #[inline]
    fn observe(&self, event: &Event<'_>) {
        let answered = &event.answered;
        let messages = self
            .sink
            .plan
            .full
            .then_some((answered.query.packet, answered.reply));
        let replied = answered.started + Duration::from_secs_f64(event.seconds.max(0.0));
        self.sink.queue.offer(Record::take(
            Side::Client,
            event.proto.into(),
            Some(answered.client),
            self.listener,
            answered.started,
            replied,
            messages,
        ));
    }
}

/// Where a request path's upstream exchanges go when `forwarder = true`:
/// one slot per request path (not per process), filled by its [`Hub`] and
/// held by every zone its settings build (`upstream::Zone::dnstap`).
#[derive(Clone, Default)]
pub(crate) struct ForwarderSlot(Arc<ArcSwapOption<Sink>>);

impl ForwarderSlot {
    /// Offers an upstream exchange (FORWARDER_QUERY, FORWARDER_RESPONSE),
    /// if upstream exchanges are sent: one `ArcSwap` load when they are not.
    pub(crate) fn offer(
        &self,
        proto: Carrier,
        upstream: SocketAddr,
        asked: Instant,
        query: &[u8],
        reply: &[u8],
    ) {
        let guard = self.0.load();
        let Some(sink) = guard.as_ref() else {
            return;
        };
        let messages = sink.plan.full.then_some((query, reply));
        sink.queue.offer(Record::take(
            Side::Forwarder,
            proto,
            None,
            upstream,
            asked,
            Instant::now(),
            messages,
        ));
    }
}
