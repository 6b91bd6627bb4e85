//! One bounded HTTP/1 server: our own accept loop over hyper, because
//! `axum::serve` accepts without limit and never times a client out, so
//! anyone who can reach the port could hold every descriptor and every
//! byte it likes (and, before the probe server, fail the kubelet's
//! liveness probe: a restart of the node's DNS).
//!
//! The bounds (docs/security.md): at most `max_connections` open (one more
//! is accepted and reset at once, so waiting clients never fill the
//! kernel's backlog in front of a scrape); a request head within
//! `header_timeout` of the connection's start or of its previous answer
//! (hyper starts that timer whenever it waits for a head, so it is the
//! keep-alive idle timeout too); a request head of at most
//! [`MAX_HEAD_BYTES`]; a connection's life at most [`MAX_CONNECTION_AGE`]
//! (a client that stops reading an answer).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus::{IntCounter, IntGauge};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::log_limit::LogLimiter;

/// A request head larger than this is refused (hyper answers 431). The
/// endpoints take no input: a GET line and a few headers are all a scrape
/// or a probe sends. (hyper's floor is 8 KiB.)
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Headers in one request head.
const MAX_HEADERS: usize = 32;

/// A connection is wound down (its answer in progress finished) after
/// this long, and dropped `header_timeout` later whatever it is doing.
/// Prometheus reconnects at its next scrape.
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);

/// After an accept error (descriptors exhausted): a pause, not a spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What one server allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bounds {
    pub(super) max_connections: usize,
    pub(super) header_timeout: Duration,
}

/// One server's counters, resolved once.
#[derive(Clone)]
pub(super) struct Counters {
    pub(super) open: IntGauge,
    pub(super) refused: IntCounter,
    pub(super) header_timeouts: IntCounter,
}

/// Serves `app` on `listener` within `bounds` until `stop` fires; then
/// stops accepting and winds its connections down (each finishes the
/// answer it is writing).
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    bounds: Bounds,
    counters: Counters,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(bounds.max_connections));
    let accept_errors = LogLimiter::new(Duration::from_secs(10));
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                if let Some(suppressed) = accept_errors.allow() {
                    tracing::warn!(error = %e, suppressed, "HTTP accept failed");
                }
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            counters.refused.inc();
            refuse(stream);
            continue;
        };
        let (app, counters, stop) = (app.clone(), counters.clone(), stop.clone());
        tokio::spawn(async move {
            counters.open.inc();
            connection(stream, peer, app, bounds, &counters, stop).await;
            counters.open.dec();
            drop(permit);
        });
    }
}

/// Closes a connection over the cap with a reset: no FIN handshake, no
/// TIME_WAIT left on our side, and the client learns at once.
fn refuse(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    bounds: Bounds,
    counters: &Counters,
    stop: CancellationToken,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let mut conn = std::pin::pin!(conn);
    let served = tokio::select! {
        served = conn.as_mut() => Some(served),
        _ = stop.cancelled() => None,
        _ = tokio::time::sleep(MAX_CONNECTION_AGE) => None,
    };
    let served = match served {
        Some(served) => served,
        None => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(bounds.header_timeout, conn).await {
                Ok(served) => served,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = served {
        if e.is_timeout() {
            counters.header_timeouts.inc();
        }
        tracing::debug!(%peer, error = %e, "HTTP connection closed");
    }
}
