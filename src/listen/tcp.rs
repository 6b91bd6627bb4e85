//! TCP per RFC 7766: many queries per connection, read as they come,
//! answered as each is ready (out of order), with a cap on connections,
//! a cap on queries in flight per connection (beyond it we stop reading,
//! which pushes back on the client), and idle connections closed.
//!
//! A connection holds one of a bounded number of slots, so a client that
//! holds slots without asking anything denies TCP to everyone (slowloris).
//! Three bounds stop that: a message must arrive whole within
//! `tcp_read_timeout` of its first byte, and a new connection's first
//! message within `tcp_read_timeout` of the accept (a trickle of bytes or
//! a silent connection does not restart any timer); one client address
//! holds at most `tcp_max_connections_per_client` connections; and when
//! three quarters of the slots are taken, idle connections get
//! `tcp_read_timeout` instead of `tcp_idle_timeout`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Handled, ListenMetrics, ListenerInfo, Proto, Service};
use crate::liveness::Progress;
use crate::liveness::health::DeadIfUnwound;
use crate::wire::framing::{self, take_frame};

/// A reply that cannot be written within this long means a client that
/// stopped reading; the connection is closed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an idle acceptor bumps its progress (a UDP worker's pace).
const TURN: Duration = Duration::from_millis(100);

pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Connections open per client address, for the per-client cap.
#[derive(Default)]
struct PerClient(Mutex<HashMap<IpAddr, usize>>);

impl PerClient {
    /// Counts a connection from `ip`, unless it already has `max`.
    fn try_add(&self, ip: IpAddr, max: usize) -> bool {
        let mut open = crate::lock::lock(&self.0);
        let count = open.entry(ip).or_insert(0);
        if *count >= max {
            return false;
        }
        *count += 1;
        true
    }

    fn remove(&self, ip: IpAddr) {
        let mut open = crate::lock::lock(&self.0);
        if let Some(count) = open.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// Accepts connections on `listener` until `stop`. A panic of the accept
/// loop (a bug) must not leave the listening socket open with nobody
/// accepting (the listener keeps a descriptor for the handover, so the
/// kernel would go on completing handshakes into a backlog nobody reads):
/// it is counted, logged, and the loop starts again on the same socket.
/// A panic of one connection ends that connection only (its task's).
pub(crate) async fn accept<S: Service>(
    listener: std::net::TcpListener,
    service: Arc<S>,
    info: Arc<ListenerInfo<S::PerListener>>,
    metrics: Arc<ListenMetrics>,
    stop: CancellationToken,
    progress: Arc<Progress>,
) {
    let mark = DeadIfUnwound(progress.clone());
    loop {
        let socket = match listener.try_clone().and_then(TcpListener::from_std) {
            Ok(socket) => socket,
            Err(e) => {
                tracing::error!(addr = %info.addr, error = %e, "TCP acceptor lost its socket");
                progress.mark_dead();
                return;
            }
        };
        let run = tokio::spawn(accept_loop(
            socket,
            service.clone(),
            info.clone(),
            metrics.clone(),
            stop.clone(),
            progress.clone(),
        ));
        match run.await {
            Err(e) if e.is_panic() => {
                progress.restarted();
                if let Some(suppressed) = super::RESTART_LOG.allow() {
                    tracing::error!(
                        addr = %info.addr,
                        panic = super::panic_message(&e.into_panic()),
                        suppressed,
                        "TCP acceptor panicked: accepting again"
                    );
                }
            }
            // Stopped, or the runtime shuts down.
            _ => break,
        }
    }
    drop(mark);
}

async fn accept_loop<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    info: Arc<ListenerInfo<S::PerListener>>,
    metrics: Arc<ListenMetrics>,
    stop: CancellationToken,
    progress: Arc<Progress>,
) {
    let open = Arc::new(Semaphore::new(Semaphore::MAX_PERMITS));
    let per_client = Arc::new(PerClient::default());
    // An idle acceptor turns too, so that the heartbeat sees it alive.
    let mut turn = tokio::time::interval(TURN);
    turn.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        progress.bump();
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            _ = turn.tick() => continue,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "TCP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        #[cfg(debug_assertions)]
        super::test_panic::on_accept(peer.ip());
        let limits = service.tcp_limits();
        let in_use = Semaphore::MAX_PERMITS - open.available_permits();
        if in_use >= limits.max_connections {
            metrics.tcp_rejected.inc();
            drop(stream);
            continue;
        }
        let client = peer.ip().to_canonical();
        if !per_client.try_add(client, limits.max_connections_per_client) {
            metrics.closed("per_client_limit");
            drop(stream);
            continue;
        }
        let permit = open
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closed");
        let (service2, info, stop) = (service.clone(), info.clone(), stop.clone());
        let (open, per_client, metrics) = (open.clone(), per_client.clone(), metrics.clone());
        service.tasks().spawn_query(async move {
            // Given back however the task ends, a panic included: a
            // connection that panicked must not keep its client's slot.
            let _held = Held {
                metrics: metrics.clone(),
                per_client,
                client,
            };
            metrics.tcp_connections.inc();
            let busy = move || {
                let in_use = Semaphore::MAX_PERMITS - open.available_permits();
                in_use * 4 >= limits.max_connections * 3
            };
            let reason = serve_connection(stream, peer, &service2, &info, stop, busy).await;
            if let Some(reason) = reason {
                metrics.closed(reason);
            }
            drop(permit);
        });
    }
}

/// A connection's hold on the counts, given back when its task ends.
struct Held {
    metrics: Arc<ListenMetrics>,
    per_client: Arc<PerClient>,
    client: IpAddr,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics.tcp_connections.dec();
        self.per_client.remove(self.client);
    }
}

/// Serves one connection until it ends; says why if nodens ended it.
async fn serve_connection<S: Service>(
    stream: TcpStream,
    peer: SocketAddr,
    service: &Arc<S>,
    info: &Arc<ListenerInfo<S::PerListener>>,
    stop: CancellationToken,
    busy: impl Fn() -> bool,
) -> Option<&'static str> {
    let limits = service.tcp_limits();
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let (replies, outbox) = mpsc::channel::<Vec<u8>>(limits.max_in_flight);
    let writing = tokio::spawn(write_replies(writer, outbox));
    let slots = Arc::new(Semaphore::new(limits.max_in_flight));
    let mut pending: Vec<u8> = Vec::with_capacity(1024);
    let mut out = Vec::new();
    // When the message being read (the first one, from the accept) must
    // be complete.
    let mut message_deadline = Some(Instant::now() + limits.read_timeout);
    let mut closed_by_us = None;
    'connection: loop {
        while let Some(query) = take_frame(&mut pending) {
            #[cfg(debug_assertions)]
            super::test_panic::on_query(&query);
            // At the in-flight cap, wait here: we read nothing more until a slot frees up.
            let slot = tokio::select! {
                _ = stop.cancelled() => break 'connection,
                slot = slots.clone().acquire_owned() => slot.expect("semaphore never closed"),
            };
            match service.handle(
                &query,
                peer,
                info,
                Proto::Tcp,
                super::Arrival::alone(std::time::Instant::now()),
                &mut out,
            ) {
                Handled::Reply => {
                    if replies.send(std::mem::take(&mut out)).await.is_err() {
                        break 'connection;
                    }
                }
                Handled::Drop => {}
                Handled::Upstream(job) => {
                    let (service2, info, replies) =
                        (service.clone(), info.clone(), replies.clone());
                    service.tasks().spawn_query(async move {
                        let mut out = Vec::new();
                        service2.resolve(job, &info, &mut out).await;
                        let _ = replies.send(out).await;
                        drop(slot);
                    });
                }
            }
            message_deadline = None;
        }
        if !pending.is_empty() && message_deadline.is_none() {
            message_deadline = Some(Instant::now() + limits.read_timeout);
        }
        let nothing_in_flight = slots.available_permits() == limits.max_in_flight;
        // Idle only counts when nothing is in flight: a client waiting
        // for a slow answer is not idle.
        let idle_deadline = nothing_in_flight.then(|| {
            let idle = if busy() {
                limits.idle_timeout.min(limits.read_timeout)
            } else {
                limits.idle_timeout
            };
            Instant::now() + idle
        });
        let deadline = match (message_deadline, idle_deadline) {
            (Some(m), Some(i)) => Some(m.min(i)),
            (m, i) => m.or(i),
        };
        // With answers in flight there is no idle deadline yet: wake up
        // when the last is sent, to start one.
        let all_answered = async {
            if nothing_in_flight {
                std::future::pending::<()>().await;
            }
            let _ = slots.acquire_many(limits.max_in_flight as u32).await;
        };
        let read = tokio::select! {
            _ = stop.cancelled() => break,
            read = reader.read_buf(&mut pending) => read,
            _ = all_answered => continue,
            _ = sleep_until_some(deadline) => {
                closed_by_us = Some(if message_deadline == deadline {
                    "read_timeout"
                } else {
                    "idle"
                });
                break;
            }
        };
        match read {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(%peer, error = %e, "TCP read failed");
                break;
            }
        }
    }
    // Answers still in flight hold a sender; the writer ends after the last.
    drop(replies);
    let _ = writing.await;
    closed_by_us
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn write_replies(mut writer: OwnedWriteHalf, mut outbox: mpsc::Receiver<Vec<u8>>) {
    let mut framed = Vec::new();
    while let Some(reply) = outbox.recv().await {
        if !framing::frame(&reply, &mut framed) {
            // Nothing the request path builds is this long (`wire::MAX_MESSAGE`).
            tracing::error!(
                len = reply.len(),
                "a reply longer than 65,535 bytes was not sent"
            );
            continue;
        }
        match tokio::time::timeout(WRITE_TIMEOUT, writer.write_all(&framed)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
    let _ = writer.shutdown().await;
}
