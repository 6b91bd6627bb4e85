//! A handover to the next process: our sockets, then our cache, to a peer
//! of nodens's uid that asked on the handover socket.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};

use super::Given;
use super::Server;
use crate::cache::snapshot;
use crate::listen::Listener;
use crate::listen::handover;

impl Server {
    /// Gives our sockets to the process that asked for them, on a thread
    /// of its own (a slow or silent peer cannot hold up signals, reloads
    /// and node repairs); [`Server::handed`] takes the outcome. Only a peer
    /// that runs as nodens's uid is served, and one at a time.
    pub(super) fn hand_over(&mut self, stream: tokio::net::UnixStream) {
        if let Err(e) = crate::trust::check_peer(&stream) {
            self.telemetry.listen.handovers_refused.inc();
            tracing::warn!("handover refused: {e}");
            return;
        }
        if self.giving.is_some() {
            tracing::warn!("handover refused: another one is in progress");
            return;
        }
        let mut sockets: Vec<_> = self
            .listeners
            .values()
            .flat_map(Listener::sockets)
            .collect();
        for (addr, fd) in self.http.sockets() {
            let kind = handover::Kind::Http;
            sockets.push((handover::Named { addr, kind }, fd));
        }
        // The descriptors stay ours while the thread sends them: the
        // listeners are stopped only after `handed`, on this thread.
        let sockets: Vec<_> = match sockets
            .into_iter()
            .map(|(name, fd)| {
                // SAFETY: `fd` is open, owned by a listener that outlives
                // this call; the duplicate is owned by the thread.
                let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                borrowed.try_clone_to_owned().map(|owned| (name, owned))
            })
            .collect::<std::io::Result<_>>()
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("handover failed, still serving: {e}");
                return;
            }
        };
        let shared = self.shared.clone();
        let stale_max_age = self.config.cache.stale_max_age;
        let sockets_given = Arc::new(AtomicBool::new(false));
        self.sockets_given = sockets_given.clone();
        let send_cache = move |out: &mut dyn std::io::Write| {
            sockets_given.store(true, Ordering::Release);
            snapshot::write(&shared.cache, std::time::Instant::now(), stale_max_age, out)
        };
        let (done, giving) = tokio::sync::oneshot::channel();
        self.giving = Some(giving);
        let stream = stream.into_std();
        let spawned = std::thread::Builder::new()
            .name("nodens-handover".into())
            .spawn(move || {
                use std::os::fd::AsRawFd;
                let given = stream.map_err(Into::into).and_then(|stream| {
                    stream.set_nonblocking(false)?;
                    let raw: Vec<_> = sockets
                        .iter()
                        .map(|(name, fd)| (*name, fd.as_raw_fd()))
                        .collect();
                    handover::give(&stream, &raw, send_cache)
                });
                let _ = done.send(given);
            });
        if let Err(e) = spawned {
            self.giving = None;
            tracing::warn!("handover failed, still serving: {e}");
        }
    }

    /// Once the new process says it serves our sockets: stops reading
    /// (what is in flight is still answered), leaves the node setup to it,
    /// and waits, not ready, for SIGTERM.
    pub(super) fn handed(&mut self, given: Given) {
        match given {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("handover: the other side did not take over; still serving");
                return;
            }
            Err(e) => {
                tracing::warn!("handover failed, still serving: {e}");
                return;
            }
        }
        tracing::info!("handover: the new process serves our sockets; stopping reading");
        self.shared.ready.store(false, Ordering::Relaxed);
        for (_, l) in self.listeners.drain() {
            l.stop();
        }
        // The new process owns the node setup and the handover path now.
        self.node = None;
        self.handover = None;
        self.keep_node = true;
        self.handed_over = true;
        self.warm.stop();
        self.http.stop();
    }
}

/// Listens on `path` for the process that will replace this one; a socket
/// file left there (by the process this one replaced, or a crash) is
/// replaced. The directory must be nodens's alone (`trust::check_dir`;
/// created so when missing), the socket is made 0600.
pub(super) fn listen_for_successor(path: &Path) -> Result<tokio::net::UnixListener> {
    let listener = crate::trust::listen_private(path).context("the handover socket")?;
    listener.set_nonblocking(true)?;
    Ok(tokio::net::UnixListener::from_std(listener)?)
}

pub(super) async fn accept(
    listener: &Option<tokio::net::UnixListener>,
) -> std::io::Result<tokio::net::UnixStream> {
    match listener {
        Some(l) => l.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

pub(super) async fn given(giving: &mut Option<tokio::sync::oneshot::Receiver<Given>>) -> Given {
    match giving {
        Some(rx) => rx
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("the handover thread ended").into())),
        None => std::future::pending().await,
    }
}
