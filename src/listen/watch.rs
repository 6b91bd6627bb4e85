//! A UDP worker's socket is in its event loop's epoll set only while the
//! loop needs it: while misses are in flight, and for a while after.
//!
//! Why: a socket in an epoll set carries the epoll's entry on its wait
//! queues, so the kernel runs the epoll callback for every datagram that
//! arrives and every reply it frees, whether or not anyone waits on the
//! epoll. Beside the kernel's reflector that was about 4 % of a cache hit's
//! CPU (docs/performance.md, "The fourth step"), for nothing: a worker that
//! has only hits to answer blocks in `recvmmsg` and needs no events.
//!
//! Registering costs two system calls (`epoll_ctl` to add, to delete), so
//! the socket stays registered until [`LINGER`] turns of the worker's loop
//! in a row (a batch, or a read timeout that found nothing) have passed
//! without a miss: a node whose misses are steady pays them rarely.

use std::net::UdpSocket;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::STOP_POLL;
use super::batch::SendBatch;
use crate::log_limit::LogLimiter;

/// Turns in a row without a miss after which the socket leaves the epoll
/// set.
const LINGER: u32 = 1024;
/// How long replies wait for room in a full socket buffer, while misses are
/// in flight, before they are dropped (as the network would drop them).
const SEND_WAIT: Duration = Duration::from_secs(1);

/// The socket's registration with the worker's event loop, when it has one.
pub(super) struct Watch<'s> {
    socket: &'s UdpSocket,
    events: Option<AsyncFd<BorrowedFd<'s>>>,
    /// Turns since the last miss.
    quiet: u32,
    /// One line a second at most when the kernel refuses the registration.
    refused_log: LogLimiter,
}

impl<'s> Watch<'s> {
    pub(super) fn new(socket: &'s UdpSocket) -> Watch<'s> {
        Watch {
            socket,
            events: None,
            quiet: 0,
            refused_log: LogLimiter::new(Duration::from_secs(1)),
        }
    }

    /// The socket's readiness, registering it first if it is not. Must be
    /// called inside the worker's runtime. `None` (logged) when the kernel
    /// refuses the epoll entry (out of memory, `max_user_watches`): the
    /// worker then answers its misses without reading new queries
    /// meanwhile, and tries again at the next miss.
    pub(super) fn events(&mut self) -> Option<&AsyncFd<BorrowedFd<'s>>> {
        self.quiet = 0;
        if self.events.is_none() {
            // SAFETY: the descriptor is borrowed from the socket for 's, so
            // it stays open and the same while the AsyncFd lives.
            match unsafe { AsyncFd::register(self.socket.as_fd()) } {
                Ok(events) => self.events = Some(events),
                Err(e) => {
                    if let Some(suppressed) = self.refused_log.allow() {
                        tracing::error!(
                            error = %e,
                            suppressed,
                            "UDP worker cannot add its socket to its event loop: it reads no query while its misses are answered"
                        );
                    }
                    return None;
                }
            }
        }
        self.events.as_ref()
    }

    /// One more turn without a miss: after [`LINGER`] of them the socket
    /// leaves the epoll set.
    pub(super) fn quiet_turn(&mut self) {
        if self.events.is_some() {
            self.quiet += 1;
            if self.quiet >= LINGER {
                self.events = None;
            }
        }
    }
}

/// Sends a batch's replies from the event loop, waiting (a bounded time)
/// for room if the socket's buffer is full.
pub(super) async fn flush(
    events: &AsyncFd<BorrowedFd<'_>>,
    socket: &UdpSocket,
    replies: &mut SendBatch,
    progress: Option<&crate::liveness::Progress>,
) {
    while replies.send(socket, false).is_err() {
        if !wait_writable(events, progress).await {
            tracing::debug!("UDP socket buffer stayed full: replies dropped");
            replies.clear();
            return;
        }
    }
}

/// Waits until the socket can take a datagram again; false after
/// [`SEND_WAIT`]. A wait the worker bounds itself is progress: it is
/// bumped every [`STOP_POLL`] of it.
async fn wait_writable(
    events: &AsyncFd<BorrowedFd<'_>>,
    progress: Option<&crate::liveness::Progress>,
) -> bool {
    let deadline = tokio::time::Instant::now() + SEND_WAIT;
    while tokio::time::Instant::now() < deadline {
        if let Some(progress) = progress {
            progress.bump();
        }
        let slice = deadline.min(tokio::time::Instant::now() + STOP_POLL);
        match tokio::time::timeout_at(slice, events.writable()).await {
            Ok(Ok(mut ready)) => {
                ready.clear_ready();
                return true;
            }
            Ok(Err(_)) => return false,
            Err(_) => {}
        }
    }
    false
}
