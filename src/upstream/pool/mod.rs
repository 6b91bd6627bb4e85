//! A bounded pool of TCP connections (or TLS sessions, `upstream::tls`) to
//! one upstream, with a bounded queue.
//!
//! The field failure this exists for: a node cache that opens a new TCP
//! connection whenever none is free, and expires idle ones on a ticker,
//! drowns a server that serves 20 connections (dnsmasq). Here:
//!
//! - at most `max_connections` connections (dialling ones count), each with at
//!   most `max_in_flight` queries (RFC 7766 pipelining, answers matched by ID);
//! - a query that finds no free slot waits in a FIFO queue of `max_queue`, for
//!   at most `max_queue_wait`; a full queue fails the query at once;
//! - a connection is closed the moment it has had nothing in flight for
//!   `idle_timeout` (a timer per connection, no sweeping ticker);
//! - a connection is retired after `max_queries_per_connection`, when the
//!   peer closes or resets it, or when a query on it gets no answer in time
//!   (a server that stopped reading); its queries fail and are retried.
//!
//! Each connection is a task that owns the socket. The pool's state (which
//! connection has free slots, who waits) is behind one short mutex that is
//! never held across an await.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant as StdInstant;

use prometheus::IntGauge;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, timeout_at};

mod config;
mod connection;
mod metrics;

use super::ExchangeError;
use super::metrics::UpstreamMetrics;
use super::tls::{Handshakes, TlsClient};
use crate::tasks::Upkeep;
pub use config::PoolConfig;
use metrics::PoolMetrics;

/// How often a query is sent again after a reused connection closed under it.
const CLOSED_RETRIES: u32 = 3;

pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    addr: SocketAddr,
    config: PoolConfig,
    /// DNS over TLS: each connection is a TLS session (`upstream::tls`).
    tls: Option<(TlsClient, Handshakes)>,
    /// Connection tasks are upkeep (see `tasks`): on the main runtime, not
    /// the UDP worker's whose miss happened to dial.
    upkeep: Upkeep,
    state: Mutex<State>,
    m: PoolMetrics,
}

#[derive(Default)]
struct State {
    conns: Vec<Conn>,
    dialing: usize,
    queue: VecDeque<Waiter>,
    next_id: u64,
}

/// The pool's view of one connection.
struct Conn {
    id: u64,
    /// Slots handed out and not yet given back.
    inflight: usize,
    /// Queries ever assigned, for `max_queries_per_connection`.
    assigned: u64,
    /// Takes no new queries, and closes for this reason once `inflight` is 0.
    retiring: Option<CloseReason>,
    messages: mpsc::UnboundedSender<Message>,
}

/// What a connection task is told.
enum Message {
    Query(Request),
    /// Look at your state: you may be retiring with nothing in flight.
    Wake,
}

struct Waiter {
    id: u64,
    since: StdInstant,
    slot: oneshot::Sender<Result<Slot, ExchangeError>>,
}

/// The right to send one query on one connection. Given back by the
/// connection when the query is answered or failed, or on drop if the
/// query was never sent.
struct Slot {
    inner: Arc<Inner>,
    conn: u64,
    messages: mpsc::UnboundedSender<Message>,
    /// The connection carried a query before this one.
    reused: bool,
    armed: bool,
}

struct Request {
    query: Vec<u8>,
    question: Vec<u8>,
    deadline: Instant,
    answer: oneshot::Sender<Result<Vec<u8>, ExchangeError>>,
    in_flight: InFlight,
}

/// Counts one query in `nodens_upstream_inflight` for as long as the
/// connection holds it: from the send until its answer is read (or the
/// connection ends). The connection drops it before freeing the slot, so a
/// queued query handed that slot is never counted beside the one it replaces.
struct InFlight(IntGauge);

impl InFlight {
    fn new(gauge: &IntGauge) -> InFlight {
        gauge.inc();
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Why a connection ended, the `reason` label of nodens_upstream_tcp_closed_total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CloseReason {
    Idle,
    MaxQueries,
    PeerClosed,
    Error,
    Stuck,
    /// The pool was dropped (zone reloaded away) and nothing is in flight.
    Unused,
}

impl CloseReason {
    fn label(self) -> &'static str {
        match self {
            CloseReason::Idle => "idle",
            CloseReason::MaxQueries => "max_queries",
            CloseReason::PeerClosed => "peer_closed",
            CloseReason::Error => "error",
            CloseReason::Stuck => "stuck",
            CloseReason::Unused => "unused",
        }
    }

    /// What the queries still in flight on the connection are told.
    fn error(self) -> ExchangeError {
        match self {
            CloseReason::Stuck => ExchangeError::Timeout,
            _ => ExchangeError::Closed,
        }
    }
}

impl Pool {
    pub(crate) fn new(
        addr: SocketAddr,
        config: PoolConfig,
        tls: Option<TlsClient>,
        metrics: &Arc<UpstreamMetrics>,
        label: &str,
        upkeep: Upkeep,
    ) -> Pool {
        let m = PoolMetrics::new(metrics, label, &config);
        Pool {
            inner: Arc::new(Inner {
                addr,
                config,
                tls: tls.map(|client| (client, Handshakes::new(metrics, label))),
                upkeep,
                state: Mutex::new(State::default()),
                m,
            }),
        }
    }

    /// Sends `query` (whose question is `question`) and returns the answer.
    /// A query that fails on a reused connection because the peer closed it
    /// (dnsmasq closes every connection after 100 queries, whatever is in
    /// flight) is tried again on another, a few times, within the deadline.
    /// A fresh connection that closes is not retried: that is the upstream
    /// refusing service, and the next upstream should be asked instead.
    pub(crate) async fn exchange(
        &self,
        query: &[u8],
        question: &[u8],
        deadline: Instant,
    ) -> Result<Vec<u8>, ExchangeError> {
        let mut retries_left = CLOSED_RETRIES;
        loop {
            let slot = self.inner.acquire(deadline).await?;
            let reused = slot.reused;
            let (answer, answered) = oneshot::channel();
            let request = Request {
                query: query.to_vec(),
                question: question.to_vec(),
                deadline,
                answer,
                in_flight: InFlight::new(&self.inner.m.inflight),
            };
            let result = match slot.send(request) {
                Ok(()) => self.wait_for(answered, deadline).await,
                Err(e) => Err(e),
            };
            match result {
                Err(ExchangeError::Closed)
                    if reused && retries_left > 0 && Instant::now() < deadline =>
                {
                    retries_left -= 1
                }
                other => return other,
            }
        }
    }
}

impl Pool {
    /// How its TLS handshakes went; `None` for a plain TCP pool.
    pub(crate) fn tls_handshakes(&self) -> Option<super::tls::HandshakeCounts> {
        self.inner.tls.as_ref().map(|(_, counts)| counts.counts())
    }

    /// Waits until `deadline` for the answer to a query handed to a connection.
    async fn wait_for(
        &self,
        answered: oneshot::Receiver<Result<Vec<u8>, ExchangeError>>,
        deadline: Instant,
    ) -> Result<Vec<u8>, ExchangeError> {
        match timeout_at(deadline, answered).await {
            Err(_) => Err(ExchangeError::Timeout),
            Ok(Err(_)) => Err(ExchangeError::Closed),
            Ok(Ok(result)) => result,
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Idle connections of a pool nobody uses any more close now; busy
        // ones when their last answer is in.
        let mut st = self.inner.lock();
        for conn in &mut st.conns {
            conn.retiring.get_or_insert(CloseReason::Unused);
            let _ = conn.messages.send(Message::Wake);
        }
    }
}

impl Slot {
    /// Hands `request` to the connection; `Closed` if its task has ended.
    fn send(mut self, request: Request) -> Result<(), ExchangeError> {
        self.armed = false;
        if self.messages.send(Message::Query(request)).is_ok() {
            Ok(())
        } else {
            self.inner.release(self.conn);
            Err(ExchangeError::Closed)
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.armed {
            self.inner.release(self.conn);
        }
    }
}

impl State {
    /// A slot on the first connection with room: filling the oldest
    /// connections first lets the others go idle and close.
    fn take_slot(&mut self, inner: &Arc<Inner>) -> Option<Slot> {
        let config = &inner.config;
        let conn = self
            .conns
            .iter_mut()
            .find(|c| c.retiring.is_none() && c.inflight < config.max_in_flight)?;
        conn.inflight += 1;
        conn.assigned += 1;
        if config.max_queries_per_connection > 0
            && conn.assigned >= config.max_queries_per_connection
        {
            conn.retiring = Some(CloseReason::MaxQueries);
        }
        Some(Slot {
            inner: inner.clone(),
            conn: conn.id,
            messages: conn.messages.clone(),
            reused: conn.assigned > 1,
            armed: true,
        })
    }

    /// Takes back a slot that was never used, under the lock already held.
    fn undo(&mut self, mut slot: Slot) {
        slot.armed = false;
        if let Some(conn) = self.conns.iter_mut().find(|c| c.id == slot.conn) {
            conn.inflight -= 1;
            conn.assigned -= 1;
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock::lock(&self.state)
    }

    async fn acquire(self: &Arc<Self>, deadline: Instant) -> Result<Slot, ExchangeError> {
        let (id, mut handed) = {
            let mut st = self.lock();
            if let Some(slot) = st.take_slot(self) {
                self.count_slot(&slot);
                self.publish(&st);
                return Ok(slot);
            }
            // Queries that connections yet to be dialled will take are not
            // queued behind busy ones: they do not use up `max_queue`.
            let dial_slots =
                (self.config.max_connections - st.conns.len()) * self.config.max_in_flight;
            if st.queue.len() >= self.config.max_queue + dial_slots {
                self.m.rejected_full.inc();
                return Err(ExchangeError::QueueFull);
            }
            let (tx, rx) = oneshot::channel();
            let id = st.next_id();
            st.queue.push_back(Waiter {
                id,
                since: StdInstant::now(),
                slot: tx,
            });
            self.pump(&mut st);
            self.publish(&st);
            (id, rx)
        };
        let wait_until = (Instant::now() + self.config.max_queue_wait).min(deadline);
        match timeout_at(wait_until, &mut handed).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ExchangeError::Closed),
            Err(_) => {
                let mut st = self.lock();
                if let Some(at) = st.queue.iter().position(|w| w.id == id) {
                    st.queue.remove(at);
                    self.publish(&st);
                    self.m.rejected_timeout.inc();
                    return Err(ExchangeError::QueueTimeout);
                }
                drop(st);
                // Handed a slot (or an error) just as the wait ran out: take it.
                handed
                    .try_recv()
                    .unwrap_or(Err(ExchangeError::QueueTimeout))
            }
        }
    }

    fn count_slot(&self, slot: &Slot) {
        if slot.reused {
            self.m.reused.inc();
        } else {
            self.m.fresh.inc();
        }
    }

    /// Hands free slots to waiters in order, and dials when waiters remain
    /// and the bound allows: no more dials than the queue can fill.
    fn pump(self: &Arc<Self>, st: &mut State) {
        loop {
            while st.queue.front().is_some_and(|w| w.slot.is_closed()) {
                st.queue.pop_front();
            }
            if st.queue.is_empty() {
                return;
            }
            let Some(slot) = st.take_slot(self) else {
                break;
            };
            let waiter = st.queue.pop_front().expect("queue is not empty");
            self.m
                .queue_wait
                .observe(waiter.since.elapsed().as_secs_f64());
            self.count_slot(&slot);
            if let Err(Ok(slot)) = waiter.slot.send(Ok(slot)) {
                st.undo(slot);
            }
        }
        let per_conn = self.config.max_in_flight;
        while st.dialing * per_conn < st.queue.len()
            && st.conns.len() + st.dialing < self.config.max_connections
        {
            st.dialing += 1;
            self.upkeep.spawn(self.clone().dial());
        }
    }

    /// Gives a slot back: the query on it was answered or failed.
    fn release(self: &Arc<Self>, conn_id: u64) {
        let mut st = self.lock();
        if let Some(conn) = st.conns.iter_mut().find(|c| c.id == conn_id) {
            conn.inflight -= 1;
            if conn.retiring.is_some() && conn.inflight == 0 {
                let _ = conn.messages.send(Message::Wake);
            }
        }
        self.pump(&mut st);
        self.publish(&st);
    }

    /// Removes a connection from the pool, if `allowed` says so under the lock.
    fn remove_if(self: &Arc<Self>, conn_id: u64, allowed: impl FnOnce(&Conn) -> bool) -> bool {
        let mut st = self.lock();
        let Some(at) = st.conns.iter().position(|c| c.id == conn_id) else {
            return true;
        };
        if !allowed(&st.conns[at]) {
            return false;
        }
        st.conns.remove(at);
        self.pump(&mut st);
        self.publish(&st);
        true
    }

    /// Removes a retiring connection with nothing in flight; says why it retired.
    fn remove_if_retired(self: &Arc<Self>, conn_id: u64) -> Option<CloseReason> {
        let mut reason = None;
        self.remove_if(conn_id, |c| {
            reason = c.retiring.filter(|_| c.inflight == 0);
            reason.is_some()
        });
        reason
    }

    fn publish(&self, st: &State) {
        let busy = st.conns.iter().filter(|c| c.inflight > 0).count();
        self.m.busy.set(busy as i64);
        self.m.idle.set((st.conns.len() - busy) as i64);
        self.m.queue_length.set(st.queue.len() as i64);
    }
}
