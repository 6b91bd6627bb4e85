//! The local control channel: a Unix socket where an operator's `nodens
//! cache show|flush|dump` and `nodens top` reach the running server
//! (docs/operations.md).
//!
//! The same trust rule as the handover socket (`crate::trust`,
//! docs/security.md): the socket sits in a directory only nodens's uid can
//! enter, and a peer that does not run as nodens's uid (`SO_PEERCRED`) is
//! refused and counted before its request is looked at. Root on the
//! node reaches it by becoming that uid, which the command line does
//! (`client`), so `kubectl exec` into nodens's container works as is.
//!
//! Off the request path: one accepting thread and one thread per client
//! (at most [`MAX_CLIENTS`] at once), blocking I/O with timeouts. A
//! request is one line of JSON, the reply lines of JSON ([`protocol`]);
//! each command is a file of its own.

mod cache_dump;
mod cache_flush;
mod cache_show;
mod client;
mod metrics;
mod protocol;
mod records;
mod top;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub use crate::workloads::{Rates, TopView, Workload};
pub use client::{Client, ClientError, connect};
pub use metrics::ControlMetrics;
pub use protocol::{
    CachedEntry, DeprecatedKeyView, FlushScope, ProbeKind, Reply, Request, StatusView, TaintView,
    TlsView, ZoneView,
};

use crate::log_limit::LogLimiter;
use protocol::MAX_REQUEST;

/// Clients served at once; one more is told to come back later.
const MAX_CLIENTS: usize = 4;
/// A client must send its request within this long of connecting.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A client that stops reading a reply is dropped after this long.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed accept, before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long the accepting thread waits for a refused client's request.
const DISCARD_TIME: Duration = Duration::from_millis(200);

/// What the control channel reads of the running server, and nothing more
/// of the request path: the cache, the stale window each name's zone gives
/// (as the hit path judges it), the per-workload view and readiness. The
/// server implements it over the request path's state.
pub(crate) trait Served: Send + Sync + 'static {
    fn cache(&self) -> &crate::cache::Cache;
    /// The stale window of the zone that answers `name` (folded wire) in
    /// `view`; zero when no zone does.
    fn stale_window(&self, view: u8, name: &[u8]) -> Duration;
    /// The node's workloads, busiest first, at most `limit`; `None` while
    /// the workload counters are off.
    fn top(&self, limit: usize) -> Option<TopView>;
    fn ready(&self) -> bool;
    /// What `status` reports.
    fn status(&self) -> StatusView;
}

/// What the commands act on.
struct Context {
    shared: Arc<dyn Served>,
    metrics: Arc<ControlMetrics>,
    clients: AtomicUsize,
    refusals: LogLimiter,
}

/// Listens on `path` (its directory must be private to nodens's uid) and
/// serves the control channel on a thread of its own for as long as the
/// process lives. A handover's new process binds the path anew; this
/// one's listener then serves nobody.
pub(crate) fn listen(
    path: &Path,
    shared: Arc<dyn Served>,
    metrics: Arc<ControlMetrics>,
) -> std::io::Result<()> {
    let listener = crate::trust::listen_private(path)?;
    let context = Arc::new(Context {
        shared,
        metrics,
        clients: AtomicUsize::new(0),
        refusals: LogLimiter::new(Duration::from_secs(60)),
    });
    std::thread::Builder::new()
        .name("nodens-control".into())
        .spawn(move || accept(&listener, &context))?;
    Ok(())
}

fn accept(listener: &UnixListener, context: &Arc<Context>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else {
            // Out of descriptors, most often: wait, rather than spin.
            std::thread::sleep(ACCEPT_BACKOFF);
            continue;
        };
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        if let Err(e) = crate::trust::check_peer(&stream) {
            context.metrics.refused.inc();
            if context.refusals.allow().is_some() {
                tracing::warn!("control socket: refused: {e}");
            }
            discard_request(&stream);
            let _ = write_reply(&mut stream, &Reply::Error(format!("refused: {e}")));
            continue;
        }
        if context.clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            context.clients.fetch_sub(1, Ordering::AcqRel);
            discard_request(&stream);
            let _ = write_reply(&mut stream, &Reply::Error("busy: try again".into()));
            continue;
        }
        let context = context.clone();
        let spawned = std::thread::Builder::new()
            .name("nodens-control-client".into())
            .spawn(move || {
                serve(stream, &context);
                context.clients.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            tracing::warn!("control socket: cannot start a thread for a client");
        }
    }
}

/// Reads and drops what a refused client sent (at most a request's
/// length, for at most [`DISCARD_TIME`]) without looking at it: a socket
/// closed with unread bytes resets the connection, and the client would
/// lose the refusal's reason.
fn discard_request(stream: &UnixStream) {
    let _ = stream.set_read_timeout(Some(DISCARD_TIME));
    let mut sink = [0u8; 512];
    let mut left = MAX_REQUEST + 1;
    let mut reader = stream;
    while left > 0 {
        let room = left.min(sink.len());
        match reader.read(&mut sink[..room]) {
            Ok(0) | Err(_) => break,
            Ok(n) if sink[..n].contains(&b'\n') => break,
            Ok(n) => left -= n,
        }
    }
}

/// Why a client's request was not read.
#[derive(Debug, thiserror::Error)]
enum BadRequest {
    #[error("a request is at most {MAX_REQUEST} bytes")]
    TooLong,
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("{0}")]
    Read(std::io::Error),
}

/// Reads the one request of a trusted client and answers it.
fn serve(stream: UnixStream, context: &Context) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut line = String::new();
    let read = BufReader::new(reader.take(MAX_REQUEST as u64 + 1)).read_line(&mut line);
    let mut out = std::io::BufWriter::new(stream);
    let request = match read {
        Ok(_) if line.len() > MAX_REQUEST => Err(BadRequest::TooLong),
        Ok(_) => serde_json::from_str::<Request>(line.trim_end()).map_err(BadRequest::Json),
        Err(e) => Err(BadRequest::Read(e)),
    };
    let request = match request {
        Ok(r) => r,
        Err(why) => {
            context.metrics.request("invalid");
            let _ = write_reply(&mut out, &Reply::Error(format!("bad request: {why}")));
            return;
        }
    };
    let result = match &request {
        Request::CacheShow { name, qtype } => {
            context.metrics.request("cache-show");
            cache_show::run(&*context.shared, name, qtype.as_deref(), &mut out)
        }
        Request::CacheFlush { scope } => {
            context.metrics.request("cache-flush");
            cache_flush::run(&*context.shared, &context.metrics, scope, &mut out)
        }
        Request::CacheDump => {
            context.metrics.request("cache-dump");
            cache_dump::run(&*context.shared, &mut out)
        }
        Request::Top { limit } => {
            context.metrics.request("top");
            top::run(&*context.shared, *limit, &mut out)
        }
        Request::Probe { what } => {
            context.metrics.request("probe");
            let (ok, page) = match what {
                ProbeKind::Health => {
                    let health = crate::liveness::health::health();
                    (health.ok(), health.page())
                }
                ProbeKind::Ready => {
                    let ready = context.shared.ready();
                    (
                        ready,
                        if ready { "OK\n" } else { "not ready\n" }.to_string(),
                    )
                }
            };
            write_reply(&mut out, &Reply::Probe { ok, page })
        }
        Request::Status => {
            context.metrics.request("status");
            write_reply(&mut out, &Reply::Status(context.shared.status()))
        }
    };
    let _ = result.and_then(|()| out.flush());
}

/// Writes one reply line.
fn write_reply(out: &mut impl Write, reply: &Reply) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, reply)?;
    out.write_all(b"\n")
}
