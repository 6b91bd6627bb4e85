//! The client-side TCP metrics.

use prometheus::{IntCounter, IntGauge};

use crate::metrics::{Counters, ReasonLabels, Registry};

pub struct ListenMetrics {
    pub tcp_connections: IntGauge,
    pub tcp_rejected: IntCounter,
    pub tcp_closed: Counters<ReasonLabels<'static>>,
    pub handovers_refused: IntCounter,
    pub strangers: IntGauge,
    pub strangers_seen: IntCounter,
}

impl ListenMetrics {
    pub fn register(r: &Registry) -> ListenMetrics {
        ListenMetrics {
            tcp_connections: r.gauge(
                "nodens_tcp_client_connections",
                "Open client TCP connections.",
            ),
            handovers_refused: r.counter(
                "nodens_handovers_refused_total",
                "Handovers refused, on either side: a peer not running as nodens's uid, a socket file or directory not nodens's alone, a descriptor not the socket it was named, the deadline passed.",
            ),
            tcp_rejected: r.counter(
                "nodens_tcp_client_rejected_total",
                "Client TCP connections closed at once because tcp_max_connections were open.",
            ),
            strangers: r.gauge(
                "nodens_reuseport_strangers",
                "UDP sockets of other processes on a listening address and port, at the last check (every 2 s): they receive nothing, but someone tries to.",
            ),
            strangers_seen: r.counter(
                "nodens_reuseport_strangers_total",
                "UDP sockets of other processes found on a listening address and port.",
            ),
            tcp_closed: r.counters(
                "nodens_tcp_client_closed_total",
                "Client TCP connections nodens closed, by reason.",
            ),
        }
    }

    pub fn closed(&self, reason: &str) {
        self.tcp_closed.get(&ReasonLabels { reason }).inc();
    }
}
