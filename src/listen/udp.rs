//! UDP: one socket per worker thread, all bound to the same address with
//! SO_REUSEPORT so the kernel spreads queries across them.
//!
//! A worker takes a batch of queries per system call, answers the hits
//! itself and sends those replies in one call. Each miss becomes a future
//! the worker's own event loop (a single-threaded runtime) polls, not a task
//! of its own; the loop also waits on the miss's upstream socket, and the
//! replies of the misses answered in one turn of it go out through the
//! worker's socket in one call. A miss never crosses to another thread, so
//! on a node where the cache has one core it costs no context switch.
//!
//! The worker has two modes. While it has no miss in flight (the steady
//! state of a node cache) it blocks in `recvmmsg`: one system call per
//! wake-up, as cheap as UDP gets. While misses are in flight it runs its
//! event loop, which waits on the listening socket and the upstream sockets
//! together, until the last miss is answered. The socket is in that loop's
//! epoll set only while misses come (`watch`): an epoll entry costs the
//! kernel a callback per datagram in and out.
//!
//! Each turn of either mode bumps the worker's progress counter
//! (`liveness`): a worker blocked for good stops it, and the fail-open
//! supervisor then kills the server. A flood only makes it turn faster.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::BorrowedFd;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio_util::task::task_tracker::TaskTrackerToken;

use super::batch::{BATCH, RecvBatch, SendBatch, enable_destination_info};
use super::pending::Pending;
use super::watch::{Watch, flush};
use super::{Arrival, Handled, ListenerInfo, Proto, STOP_POLL, Service};
use crate::liveness::health::DeadIfUnwound;

/// Receive buffer asked of the kernel per socket, to ride out bursts.
const RECV_BUFFER: usize = 4 << 20;

pub(crate) struct UdpWorkers {
    stop: Arc<AtomicBool>,
    /// A second descriptor for each worker's socket, to hand the sockets
    /// to the process that takes over (`handover`).
    sockets: Vec<UdpSocket>,
    /// Each worker's progress counter, held here as well as by the worker:
    /// a worker whose thread ended reads as stalled (its socket is still in
    /// the `SO_REUSEPORT` group, taking its share of the queries), not as
    /// a loop that is gone. Dropped when the listener stops.
    _progress: Vec<Arc<crate::liveness::Progress>>,
}

fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // Best effort: the kernel caps it at net.core.rmem_max.
    let _ = socket.set_recv_buffer_size(RECV_BUFFER);
    socket.bind(&addr.into())?;
    let socket: UdpSocket = socket.into();
    if addr.ip().is_unspecified() {
        enable_destination_info(&socket, addr.is_ipv6())?;
    }
    socket.set_read_timeout(Some(STOP_POLL))?;
    Ok(socket)
}

impl UdpWorkers {
    /// One worker per socket: the `inherited` ones (from the process this
    /// one takes over from), and new ones up to `workers`.
    pub(crate) fn start<S: Service>(
        addr: SocketAddr,
        workers: usize,
        mut inherited: Vec<UdpSocket>,
        service: &Arc<S>,
        info: &Arc<ListenerInfo<S::PerListener>>,
    ) -> std::io::Result<UdpWorkers> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut sockets = Vec::new();
        let mut progress = Vec::new();
        for i in 0..workers.max(1).max(inherited.len()) {
            let socket = match inherited.pop() {
                Some(socket) => {
                    socket.set_read_timeout(Some(STOP_POLL))?;
                    socket
                }
                None => bind(addr)?,
            };
            sockets.push(socket.try_clone()?);
            // After the socket: a runtime dropped here, on the main
            // runtime, by a bind that failed would panic (tokio forbids
            // it) instead of saying why nodens cannot listen.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let worker = Worker {
                runtime,
                socket,
                service: service.clone(),
                info: info.clone(),
                stop: stop.clone(),
                wildcard: addr.ip().is_unspecified(),
                alive: service.tasks().token(),
                progress: crate::liveness::register(format!("udp {addr} #{i}")),
            };
            progress.push(worker.progress.clone());
            std::thread::Builder::new()
                .name(format!("udp-{i}"))
                .spawn(move || worker.run())?;
        }
        let workers = UdpWorkers {
            stop,
            sockets,
            _progress: progress,
        };
        workers.select_ours(addr);
        Ok(workers)
    }

    /// Makes the kernel deliver only to these workers' sockets, whoever
    /// else joins their group (`reuseport`). A kernel that refuses the
    /// program still serves, without that defence: logged.
    pub(crate) fn select_ours(&self, addr: SocketAddr) {
        if let Some(first) = self.sockets.first()
            && let Err(e) = super::reuseport::attach_selector(first, self.sockets.len())
        {
            tracing::warn!(%addr, "cannot attach the reuseport selector: {e}; another socket of nodens's uid could take a share of the queries");
        }
    }

    /// The workers' sockets, for a handover.
    pub(crate) fn sockets(&self) -> &[UdpSocket] {
        &self.sockets
    }

    /// Tells the workers to stop reading; each answers the misses it has in
    /// flight, then exits (within [`STOP_POLL`]), closing its socket. Does
    /// not wait.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One worker thread: its socket and its event loop.
struct Worker<S: Service> {
    runtime: tokio::runtime::Runtime,
    /// In blocking mode: calls made while the event loop runs pass
    /// `MSG_DONTWAIT`. In the loop's epoll set only while it needs it
    /// ([`Watch`]).
    socket: UdpSocket,
    service: Arc<S>,
    info: Arc<ListenerInfo<S::PerListener>>,
    stop: Arc<AtomicBool>,
    /// Bound to 0.0.0.0 or ::: replies name their source address.
    wildcard: bool,
    /// Keeps the shutdown drain waiting until this worker has exited. A
    /// worker blocked in `recvmmsg` when told to stop may still read a
    /// batch (a handover shares the socket with the next process); it
    /// answers it, and the misses in flight, before it exits. Without the
    /// token the process could exit between that read and the reply.
    alive: TaskTrackerToken,
    /// Bumped as the worker's loop turns, at least every [`STOP_POLL`].
    progress: Arc<crate::liveness::Progress>,
}

impl<S: Service> Worker<S> {
    fn run(self) {
        crate::privileges::drop_all_in_this_thread();
        let _dead_if_unwound = DeadIfUnwound(self.progress.clone());
        let _entered = self.runtime.enter();
        let mut received = RecvBatch::new(self.wildcard);
        let mut replies = SendBatch::default();
        let mut pending = Pending::default();
        let mut tally = S::Tally::default();
        let mut watch = Watch::new(&self.socket);
        // Wakes the event loop while misses wait on a quiet socket, so that
        // its progress shows; one timer for the worker's life.
        let mut turn = tokio::time::interval(STOP_POLL);
        turn.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // A panic on the request path (a bug) costs the batch and the
        // misses in flight of this worker, never the worker: it is
        // counted, logged, and the loop starts again on the same socket.
        while let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.serve(
                &mut received,
                &mut replies,
                &mut pending,
                &mut tally,
                &mut turn,
                &mut watch,
            )
        })) {
            self.progress.restarted();
            if let Some(suppressed) = super::RESTART_LOG.allow() {
                tracing::error!(
                    worker = %self.info.server,
                    panic = super::panic_message(&panic),
                    suppressed,
                    "UDP worker panicked: serving again (its batch and misses in flight are lost)"
                );
            }
            pending = Pending::default();
            replies.clear();
            // What the lost batch counted still happened.
            self.service
                .end_batch(&mut tally, std::time::Instant::now());
        }
        // Stopped reading: answer what is in flight, then close. The
        // drain is bounded by the misses' own timeouts; it is no longer a
        // serving loop.
        drop(_dead_if_unwound);
        drop(self.progress);
        if !pending.is_empty() {
            Self::drain(
                &self.runtime,
                &self.socket,
                &mut pending,
                &mut replies,
                &mut watch,
                None,
            );
        }
        drop(watch);
        drop(self.alive);
    }

    /// Answers the misses in flight, waiting for nothing else: at shutdown,
    /// and while serving if the kernel refuses the socket's epoll entry.
    /// While serving (`progress`), the wait shows progress every
    /// [`STOP_POLL`], as the loop's turns do: a miss waits up to its
    /// timeout, longer than the supervisor's patience.
    fn drain(
        runtime: &tokio::runtime::Runtime,
        socket: &UdpSocket,
        pending: &mut Pending,
        replies: &mut SendBatch,
        watch: &mut Watch<'_>,
        progress: Option<&crate::liveness::Progress>,
    ) {
        let events = watch.events();
        runtime.block_on(async {
            loop {
                let next = match progress {
                    Some(progress) => {
                        progress.bump();
                        match tokio::time::timeout(STOP_POLL, pending.next()).await {
                            Ok(next) => next,
                            Err(_) => continue,
                        }
                    }
                    None => pending.next().await,
                };
                let Some(reply) = next else { break };
                pending.take_ready(reply, replies);
                match events {
                    Some(events) => flush(events, socket, replies, progress).await,
                    None => {
                        if replies.send(socket, false).is_err() {
                            tracing::debug!("UDP socket buffer full: replies dropped");
                        }
                        replies.clear();
                    }
                }
            }
        });
    }

    /// The serving loop, until the worker is told to stop.
    fn serve(
        &self,
        received: &mut RecvBatch,
        replies: &mut SendBatch,
        pending: &mut Pending,
        tally: &mut S::Tally,
        turn: &mut tokio::time::Interval,
        watch: &mut Watch<'_>,
    ) {
        while !self.stop.load(Ordering::Relaxed) {
            self.progress.bump();
            if pending.is_empty() {
                self.serve_blocking(received, replies, pending, tally);
                if pending.is_empty() {
                    watch.quiet_turn();
                }
            } else {
                match watch.events() {
                    Some(events) => self.runtime.block_on(
                        self.serve_with_misses(events, received, replies, pending, tally, turn),
                    ),
                    // Cannot wait on the socket and the misses together
                    // (the kernel refused the epoll entry): answer the
                    // misses, then read again.
                    None => Self::drain(
                        &self.runtime,
                        &self.socket,
                        pending,
                        replies,
                        watch,
                        Some(&self.progress),
                    ),
                }
            }
        }
    }

    /// One batch, waiting for it in `recvmmsg`.
    fn serve_blocking(
        &self,
        received: &mut RecvBatch,
        replies: &mut SendBatch,
        pending: &mut Pending,
        tally: &mut S::Tally,
    ) {
        let count = match received.recv(&self.socket, true) {
            Ok(n) => n,
            Err(e) => {
                if is_quiet(&e) {
                    // The read timeout: nothing came for a while.
                    self.service.idle(tally);
                } else {
                    tracing::debug!(error = %e, "UDP receive failed");
                }
                return;
            }
        };
        self.answer(received, count, replies, pending, tally);
        if let Err(e) = replies.send(&self.socket, true) {
            tracing::debug!(error = %e, "UDP send failed");
            replies.clear();
        }
    }

    /// Runs the event loop, reading queries as they come, until the last
    /// miss in flight is answered (or the worker is told to stop).
    async fn serve_with_misses(
        &self,
        events: &AsyncFd<BorrowedFd<'_>>,
        received: &mut RecvBatch,
        replies: &mut SendBatch,
        pending: &mut Pending,
        tally: &mut S::Tally,
        turn: &mut tokio::time::Interval,
    ) {
        loop {
            self.progress.bump();
            let mut ready = tokio::select! {
                biased;
                reply = pending.next() => {
                    if let Some(reply) = reply {
                        pending.take_ready(reply, replies);
                        flush(events, &self.socket, replies, Some(&self.progress)).await;
                    }
                    if pending.is_empty() {
                        return;
                    }
                    continue;
                }
                ready = events.readable() => match ready {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "UDP worker lost its socket");
                        return;
                    }
                },
                _ = turn.tick() => continue,
            };
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            let count = match received.recv(&self.socket, false) {
                Ok(n) => n,
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::WouldBlock {
                        ready.clear_ready();
                    } else if !is_quiet(&e) {
                        tracing::debug!(error = %e, "UDP receive failed");
                    }
                    continue;
                }
            };
            if count < BATCH {
                // The socket is empty now. Forgetting its readiness here saves
                // the call that would say so: a datagram arriving from now on
                // is a new edge, which the event loop reports.
                ready.clear_ready();
            }
            drop(ready);
            self.answer(received, count, replies, pending, tally);
            flush(events, &self.socket, replies, Some(&self.progress)).await;
            if count == BATCH {
                // More may be waiting: let the misses make progress first.
                tokio::task::yield_now().await;
            }
        }
    }

    /// Answers the hits of a batch into `replies` and starts the misses.
    /// The batch's queries share one arrival time and its hits one end: two
    /// clock reads per batch, none per query, and the hits counted in the
    /// worker's `tally`, made visible at the end (before the send).
    fn answer(
        &self,
        received: &RecvBatch,
        count: usize,
        replies: &mut SendBatch,
        pending: &mut Pending,
        tally: &mut S::Tally,
    ) {
        let arrived = std::time::Instant::now();
        for i in 0..count {
            if let Some(packet) = received.packet(i) {
                self.service.prepare(packet, tally);
            }
        }
        for i in 0..count {
            let Some((packet, peer, local)) = received.get(i) else {
                continue;
            };
            #[cfg(debug_assertions)]
            super::test_panic::on_query(packet);
            match self.service.handle(
                packet,
                peer,
                &self.info,
                Proto::Udp,
                Arrival {
                    at: arrived,
                    tally: Some(&mut *tally),
                },
                replies.next_buffer(),
            ) {
                Handled::Reply => replies.commit(peer, local),
                Handled::Drop => {}
                Handled::Upstream(job) => {
                    let (service, info) = (self.service.clone(), self.info.clone());
                    pending.push(Box::pin(async move {
                        let mut out = Vec::new();
                        service.resolve(job, &info, &mut out).await;
                        (out, peer, local)
                    }));
                }
            }
        }
        self.service.end_batch(tally, std::time::Instant::now());
    }
}

/// A receive error that only means "nothing yet".
fn is_quiet(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}
