//! UDP: one socket per worker thread, all bound to the same address with
//! SO_REUSEPORT so the kernel spreads queries across them. A worker takes a
//! batch of queries per system call, answers the hits itself and sends those
//! replies in one call; misses become tasks on the runtime, which send their
//! reply through the same socket when it is ready.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::batch::{RecvBatch, SendBatch};
use crate::handler::{Handled, ListenerInfo, Proto, Shared};

/// How often a worker blocked in recv checks whether it should stop.
const STOP_POLL: Duration = Duration::from_millis(100);
/// Receive buffer asked of the kernel per socket, to ride out bursts.
const RECV_BUFFER: usize = 4 << 20;

pub struct UdpWorkers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
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
    socket.set_read_timeout(Some(STOP_POLL))?;
    Ok(socket)
}

impl UdpWorkers {
    pub fn start(
        addr: SocketAddr,
        workers: usize,
        shared: &Arc<Shared>,
        info: &Arc<ListenerInfo>,
    ) -> std::io::Result<UdpWorkers> {
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = (0..workers.max(1))
            .map(|_| bind(addr))
            .collect::<std::io::Result<Vec<_>>>()?;
        let threads = sockets
            .into_iter()
            .enumerate()
            .map(|(i, socket)| {
                let (shared, info, stop) = (shared.clone(), info.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("udp-{i}"))
                    .spawn(move || serve(Arc::new(socket), &shared, &info, &stop))
                    .expect("spawn UDP worker thread")
            })
            .collect();
        Ok(UdpWorkers { stop, threads })
    }

    /// Tells the workers to stop; each exits within [`STOP_POLL`], closing
    /// its socket. Does not wait, so it is safe to call from async code.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.threads);
    }
}

fn serve(
    socket: Arc<UdpSocket>,
    shared: &Arc<Shared>,
    info: &Arc<ListenerInfo>,
    stop: &AtomicBool,
) {
    let mut received = RecvBatch::default();
    let mut replies = SendBatch::default();
    while !stop.load(Ordering::Relaxed) {
        let count = match received.recv(&socket) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "UDP receive failed");
                continue;
            }
        };
        for i in 0..count {
            let Some((packet, peer)) = received.get(i) else {
                continue;
            };
            match shared.handle(packet, info, Proto::Udp, replies.next_buffer()) {
                Handled::Reply => replies.commit(peer),
                Handled::Drop => {}
                Handled::Miss(job) => {
                    let (socket, shared2, info) = (socket.clone(), shared.clone(), info.clone());
                    shared.tasks.spawn_on(
                        async move {
                            let mut out = Vec::new();
                            shared2.resolve(job, &info, &mut out).await;
                            send(&socket, &out, peer);
                        },
                        &shared.runtime,
                    );
                }
            }
        }
        replies.flush(&socket);
    }
}

fn send(socket: &UdpSocket, reply: &[u8], peer: SocketAddr) {
    if let Err(e) = socket.send_to(reply, peer) {
        tracing::debug!(error = %e, %peer, "UDP send failed");
    }
}
