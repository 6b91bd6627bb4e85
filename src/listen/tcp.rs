//! TCP per RFC 7766: many queries per connection, read as they come,
//! answered as each is ready (out of order), with a cap on connections,
//! a cap on queries in flight per connection (beyond it we stop reading,
//! which pushes back on the client), and idle connections closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::handler::{Handled, ListenerInfo, Proto, Shared};
use crate::wire::framing::{self, take_frame};

/// A reply that cannot be written within this long means a client that
/// stopped reading; the connection is closed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
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

pub async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    info: Arc<ListenerInfo>,
    stop: CancellationToken,
) {
    let open = Arc::new(Semaphore::new(Semaphore::MAX_PERMITS));
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
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
        let limits = shared.settings.load().tcp;
        let in_use = Semaphore::MAX_PERMITS - open.available_permits();
        if in_use >= limits.max_connections {
            shared.metrics.tcp_rejected.inc();
            drop(stream);
            continue;
        }
        let permit = open
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closed");
        let (shared2, info, stop) = (shared.clone(), info.clone(), stop.clone());
        shared.tasks.spawn(async move {
            shared2.metrics.tcp_connections.inc();
            serve_connection(stream, peer, &shared2, &info, stop).await;
            shared2.metrics.tcp_connections.dec();
            drop(permit);
        });
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    info: &Arc<ListenerInfo>,
    stop: CancellationToken,
) {
    let limits = shared.settings.load().tcp;
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let (replies, outbox) = mpsc::channel::<Vec<u8>>(limits.max_inflight);
    let writing = tokio::spawn(write_replies(writer, outbox));
    let slots = Arc::new(Semaphore::new(limits.max_inflight));
    let mut pending: Vec<u8> = Vec::with_capacity(1024);
    let mut out = Vec::new();
    'connection: loop {
        while let Some(query) = take_frame(&mut pending) {
            // At the in-flight cap, wait here: we read nothing more until a slot frees up.
            let slot = tokio::select! {
                _ = stop.cancelled() => break 'connection,
                slot = slots.clone().acquire_owned() => slot.expect("semaphore never closed"),
            };
            match shared.handle(&query, info, Proto::Tcp, &mut out) {
                Handled::Reply => {
                    if replies.send(std::mem::take(&mut out)).await.is_err() {
                        break 'connection;
                    }
                }
                Handled::Drop => {}
                Handled::Miss(job) => {
                    let (shared2, info, replies) = (shared.clone(), info.clone(), replies.clone());
                    shared.tasks.spawn(async move {
                        let mut out = Vec::new();
                        shared2.resolve(job, &info, &mut out).await;
                        let _ = replies.send(out).await;
                        drop(slot);
                    });
                }
            }
        }
        let read = tokio::select! {
            _ = stop.cancelled() => break,
            read = tokio::time::timeout(limits.idle_timeout, reader.read_buf(&mut pending)) => read,
        };
        match read {
            Ok(Ok(0)) => break,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TCP read failed");
                break;
            }
            // Idle only counts when nothing is in flight: a client waiting
            // for a slow answer is not idle.
            Err(_) if slots.available_permits() == limits.max_inflight => break,
            Err(_) => {}
        }
    }
    // Answers still in flight hold a sender; the writer ends after the last.
    drop(replies);
    let _ = writing.await;
}

async fn write_replies(mut writer: OwnedWriteHalf, mut outbox: mpsc::Receiver<Vec<u8>>) {
    let mut framed = Vec::new();
    while let Some(reply) = outbox.recv().await {
        framing::frame(&reply, &mut framed);
        match tokio::time::timeout(WRITE_TIMEOUT, writer.write_all(&framed)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
    let _ = writer.shutdown().await;
}
