//! The client-side TCP metrics.

use prometheus::{IntCounter, IntGauge};

use crate::metrics::{Counters, ReasonLabels, Registry};

pub struct ListenMetrics {
    pub tcp_connections: IntGauge,
    pub tcp_rejected: IntCounter,
    pub tcp_closed: Counters<ReasonLabels<'static>>,
}

impl ListenMetrics {
    pub fn register(r: &Registry) -> ListenMetrics {
        ListenMetrics {
            tcp_connections: r.gauge(
                "nodens_tcp_client_connections",
                "Open client TCP connections.",
            ),
            tcp_rejected: r.counter(
                "nodens_tcp_client_rejected_total",
                "Client TCP connections closed at once because tcp_max_connections were open.",
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
