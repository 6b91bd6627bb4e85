//! Listeners: for each configured address, UDP worker threads and a TCP
//! acceptor, started and stopped together.
//!
//! A listener knows sockets, batching and framing, not DNS: it hands each
//! message to a [`Service`] (the request path, `serve::Shared`) and sends
//! what comes back. The request path depends on this module, not the other
//! way round.
//!
//! Configuration: `[server] listen`, `workers` and the `tcp_*` bounds
//! (`TcpLimits`). The request path's first and last step: the bytes in, the
//! reply out.

mod batch;
pub(crate) mod handover;
pub(crate) mod metrics;
mod pending;
pub(crate) mod reuseport;
pub(crate) mod tcp;
#[cfg(debug_assertions)]
mod test_panic;
pub(crate) mod udp;
mod watch;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::metrics::LabelValue;
use crate::tasks::Tasks;
pub(crate) use metrics::ListenMetrics;

/// The client TCP bounds (see docs/security.md).
#[derive(Debug, Clone, Copy)]
pub struct TcpLimits {
    pub idle_timeout: Duration,
    pub read_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub max_in_flight: usize,
}

/// The transport a query came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Udp = 0,
    Tcp = 1,
}

impl LabelValue for Proto {
    /// CoreDNS's `proto` label.
    fn label_value(&self) -> &str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

/// Who a listener is, for metrics labels, and the request path's own
/// per-listener state `S` (its resolved metric handles).
pub struct ListenerInfo<S> {
    /// CoreDNS's `server` label: "dns://127.0.0.1:1053".
    pub server: String,
    /// CoreDNS's `family` label: "1" for IPv4, "2" for IPv6.
    pub family: &'static str,
    pub state: S,
    /// The configured listen address, which picks the zones of its view.
    pub addr: SocketAddr,
}

impl<S: Default> ListenerInfo<S> {
    pub fn new(addr: SocketAddr) -> ListenerInfo<S> {
        ListenerInfo {
            server: format!("dns://{addr}"),
            family: if addr.is_ipv4() { "1" } else { "2" },
            state: S::default(),
            addr,
        }
    }
}

/// When a query was read (a UDP batch reads the clock once for all its
/// queries), and the tally of its batch: a UDP worker's, or none where each
/// query is counted as it goes (TCP).
pub struct Arrival<'a, T> {
    pub at: Instant,
    pub tally: Option<&'a mut T>,
}

impl<T> Arrival<'_, T> {
    /// A query read at `at`, counted on its own.
    pub fn alone(at: Instant) -> Self {
        Arrival { at, tally: None }
    }
}

/// What the service decided about one message.
pub enum Handled<J> {
    /// The reply is in the output buffer.
    Reply,
    /// Say nothing.
    Drop,
    /// Waits on upstream (a cache miss, an autopath walk): run
    /// [`Service::resolve`] on the job as query work.
    Upstream(J),
}

/// What a listener needs from the request path.
pub trait Service: Send + Sync + Sized + 'static {
    /// Per-listener state the service keeps in [`ListenerInfo`].
    type PerListener: Default + Send + Sync + 'static;
    /// A query's work that waits on upstream, owned so it can move to a task.
    type Job: Send + 'static;

    /// A UDP worker's own counts, readable between its batches
    /// ([`Service::end_batch`]).
    type Tally: Default + 'static;

    /// Answers `packet` from `client` (address and port) into `out` from
    /// what is at hand, or says it needs upstream. Runs on the listener's
    /// thread; never waits.
    fn handle(
        self: &Arc<Self>,
        packet: &[u8],
        client: SocketAddr,
        listener: &ListenerInfo<Self::PerListener>,
        proto: Proto,
        arrival: Arrival<'_, Self::Tally>,
        out: &mut Vec<u8>,
    ) -> Handled<Self::Job>;

    /// Called for each query of a UDP batch before the first is handled:
    /// a chance to fetch what handling it will read (nothing by default).
    #[inline]
    fn prepare(&self, _packet: &[u8], _tally: &Self::Tally) {}

    /// A UDP worker waited for a query and none came (it idles): a chance
    /// to let go of what it kept between batches (nothing by default).
    #[inline]
    fn idle(&self, _tally: &mut Self::Tally) {}

    /// The end of a UDP batch, at `now`, before its replies are sent:
    /// what `tally` counted becomes readable (a scrape waits for it).
    fn end_batch(&self, tally: &mut Self::Tally, now: Instant);

    /// Does the job's waiting and writes the reply into `out`.
    fn resolve(
        self: &Arc<Self>,
        job: Self::Job,
        listener: &ListenerInfo<Self::PerListener>,
        out: &mut Vec<u8>,
    ) -> impl Future<Output = ()> + Send;

    /// The TCP limits in force now (they change on reload).
    fn tcp_limits(&self) -> TcpLimits;

    fn tasks(&self) -> &Tasks;
}

/// How often a UDP worker's loop turns when nothing comes: it checks
/// whether it should stop (a worker blocked in `recvmmsg` wakes from its
/// read timeout) and shows progress to the fail-open supervisor.
const STOP_POLL: Duration = Duration::from_millis(100);

/// One log line a second at most for serving loops that panic again and
/// again.
static RESTART_LOG: std::sync::LazyLock<crate::log_limit::LogLimiter> =
    std::sync::LazyLock::new(|| crate::log_limit::LogLimiter::new(Duration::from_secs(1)));

/// A panic's message, when it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The UDP and TCP side of one address.
pub(crate) struct Listener {
    pub addr: SocketAddr,
    udp: udp::UdpWorkers,
    /// A second descriptor of the TCP listening socket, for a handover.
    tcp: std::net::TcpListener,
    tcp_stop: CancellationToken,
    /// The TCP acceptor's progress, held here as well as by the acceptor:
    /// an acceptor that ended while the listener serves reads as stalled.
    _acceptor: Arc<crate::liveness::Progress>,
}

impl Listener {
    /// Binds UDP and TCP on `addr` (or serves the sockets `inherited` from
    /// the process this one takes over from); fails if either cannot be bound.
    pub(crate) fn start<S: Service>(
        addr: SocketAddr,
        workers: usize,
        inherited: (Vec<std::net::UdpSocket>, Option<std::net::TcpListener>),
        service: &Arc<S>,
        metrics: &Arc<ListenMetrics>,
    ) -> std::io::Result<Listener> {
        let info = Arc::new(ListenerInfo::new(addr));
        let (inherited_udp, inherited_tcp) = inherited;
        let tcp_listener = match inherited_tcp {
            Some(listener) => {
                listener.set_nonblocking(true)?;
                listener
            }
            None => tcp::bind(addr)?,
        };
        let tcp_copy = tcp_listener.try_clone()?;
        let udp = udp::UdpWorkers::start(addr, workers, inherited_udp, service, &info)?;
        let tcp_stop = CancellationToken::new();
        let acceptor = crate::liveness::register(format!("tcp {addr}"));
        service.tasks().upkeep().spawn(tcp::accept(
            tcp_listener,
            service.clone(),
            info,
            metrics.clone(),
            tcp_stop.clone(),
            acceptor.clone(),
        ));
        tracing::info!(%addr, workers, "listening on UDP and TCP");
        Ok(Listener {
            addr,
            udp,
            tcp: tcp_copy,
            tcp_stop,
            _acceptor: acceptor,
        })
    }

    /// Every socket of this listener, named, for a handover.
    pub(crate) fn sockets(&self) -> Vec<(handover::Named, std::os::fd::RawFd)> {
        use std::os::fd::AsRawFd;
        let name = |kind| handover::Named {
            addr: self.addr,
            kind,
        };
        let mut all: Vec<_> = self
            .udp
            .sockets()
            .iter()
            .map(|s| (name(handover::Kind::Udp), s.as_raw_fd()))
            .collect();
        all.push((name(handover::Kind::Tcp), self.tcp.as_raw_fd()));
        all
    }

    /// The sockets on this listener's address and port that are not
    /// nodens's (`ours`: every listener's socket inodes), after attaching
    /// the selector again (a member may have replaced it): the server's
    /// check every [`reuseport::CHECK_EVERY`].
    pub(crate) fn strangers(&self, ours: &[u64]) -> std::io::Result<Vec<reuseport::Stranger>> {
        self.udp.select_ours(self.addr);
        reuseport::strangers(self.addr, ours)
    }

    /// The inodes of this listener's UDP sockets.
    pub(crate) fn inodes(&self) -> Vec<u64> {
        self.udp
            .sockets()
            .iter()
            .filter_map(|s| reuseport::inode(s).ok())
            .collect()
    }

    /// Stops reading new queries; queries in flight still get their answers.
    pub(crate) fn stop(self) {
        self.tcp_stop.cancel();
        self.udp.stop();
        tracing::info!(addr = %self.addr, "stopped listening");
    }
}
