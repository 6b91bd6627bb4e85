//! DNS over TLS to upstreams (RFC 7858): a zone with `transport = "tls"`
//! sends every query through its upstreams' connection pools (`pool`),
//! whose connections are TLS sessions: dialled and handshaken within
//! `[zone.pool] connect_timeout`, pipelined, reused and bounded as plain
//! TCP connections are. The certificate must carry `[zone.tls]
//! server_name` (or the upstream's IP address) and chain to `ca` or the
//! system's roots; there is no fallback to plain DNS (RFC 7858's strict
//! profile: a query that cannot go encrypted fails).
//!
//! Configuration: `[zone.tls]` (`config.rs`). Metrics:
//! `nodens_upstream_tls_handshakes_total{to, result}`.

pub(crate) mod config;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use prometheus::IntCounter;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{self, ClientConfig, HandshakeKind};

use super::metrics::{ToResultLabels, UpstreamMetrics};

/// A zone's TLS client: shared by its upstreams' pools, so that a
/// reconnection resumes an earlier session (rustls keeps them in memory)
/// rather than paying a full handshake.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
    /// The section and the files it was built from: a reload that changes
    /// none of them keeps the upstream's pool and its sessions.
    identity: Arc<[u8]>,
}

impl TlsClient {
    pub(super) fn new(
        config: Arc<ClientConfig>,
        server_name: Option<ServerName<'static>>,
        identity: Vec<u8>,
    ) -> TlsClient {
        TlsClient {
            connector: TlsConnector::from(config),
            server_name,
            identity: identity.into(),
        }
    }

    /// The name `addr`'s certificate must carry.
    fn name_for(&self, addr: SocketAddr) -> ServerName<'static> {
        self.server_name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()))
    }

    /// The TLS session over `tcp` to `addr`, handshaken by `deadline`;
    /// counted by how it ended.
    pub(crate) async fn handshake(
        &self,
        addr: SocketAddr,
        tcp: TcpStream,
        deadline: Instant,
        counts: &Handshakes,
    ) -> io::Result<TlsStream<TcpStream>> {
        match timeout_at(deadline, self.connector.connect(self.name_for(addr), tcp)).await {
            Ok(Ok(stream)) => {
                let resumed = stream.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
                if resumed {
                    &counts.resumed
                } else {
                    &counts.full
                }
                .inc();
                Ok(stream)
            }
            Ok(Err(e)) => {
                if refused_certificate(&e) {
                    counts.certificate.inc();
                } else {
                    counts.error.inc();
                }
                *crate::lock::lock(&counts.last_error) = Some(e.to_string());
                Err(e)
            }
            Err(_) => {
                counts.timeout.inc();
                *crate::lock::lock(&counts.last_error) =
                    Some("no handshake within connect_timeout".into());
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ))
            }
        }
    }
}

/// Has the kernel acknowledge at once what next arrives on a TLS
/// session's socket, once its first query is written. A TLS 1.3 server
/// sends its session tickets after the handshake; an OpenSSL server that
/// does not set TCP_NODELAY (unbound) then holds the first answer behind
/// them until they are acknowledged, and a delayed ACK waits 40 ms: every
/// new connection's first answer came 42 ms late whenever the query beat
/// the tickets (Python's ssl client sees the same against unbound).
/// bench/dot's `tls-fresh` (a connection per miss, release build): 3,000
/// misses in 31.9 s before, 1.1 s after. One `setsockopt` per connection,
/// none per query.
pub(crate) fn ack_tickets_at_once(socket: std::os::fd::BorrowedFd<'_>) {
    let _ = socket2::SockRef::from(&socket).set_tcp_quickack(true);
}

/// Whether `e` is a TLS error (a refused certificate, a failed handshake),
/// not a network one: `nodens_upstream_errors_total{error="tls"}`.
pub(crate) fn is_tls_error(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
}

fn refused_certificate(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        })
}

impl PartialEq for TlsClient {
    fn eq(&self, other: &TlsClient) -> bool {
        self.identity == other.identity
    }
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// `nodens_upstream_tls_handshakes_total{to, result}` of one upstream,
/// and its last failure's words (for `nodens doctor`).
pub(crate) struct Handshakes {
    full: IntCounter,
    resumed: IntCounter,
    certificate: IntCounter,
    timeout: IntCounter,
    error: IntCounter,
    last_error: Mutex<Option<String>>,
}

/// How an upstream's handshakes ended since it was built.
#[derive(Debug, Clone, Default)]
pub(crate) struct HandshakeCounts {
    pub(crate) full: u64,
    pub(crate) resumed: u64,
    pub(crate) certificate: u64,
    pub(crate) timeout: u64,
    pub(crate) error: u64,
    pub(crate) last_error: Option<String>,
}

impl Handshakes {
    pub(crate) fn new(metrics: &UpstreamMetrics, to: &str) -> Handshakes {
        let count = |result| metrics.tls_handshakes.get(&ToResultLabels { to, result });
        Handshakes {
            full: count("full"),
            resumed: count("resumed"),
            certificate: count("certificate"),
            timeout: count("timeout"),
            error: count("error"),
            last_error: Mutex::new(None),
        }
    }

    pub(crate) fn counts(&self) -> HandshakeCounts {
        HandshakeCounts {
            full: self.full.get(),
            resumed: self.resumed.get(),
            certificate: self.certificate.get(),
            timeout: self.timeout.get(),
            error: self.error.get(),
            last_error: crate::lock::lock(&self.last_error).clone(),
        }
    }
}
