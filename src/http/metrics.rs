//! The HTTP servers' own metrics, by server (`listener`: "metrics" or
//! "probes").

use crate::metrics::{Counters, Gauges, Registry, label_set};

label_set! {
    /// Which HTTP server.
    pub(crate) struct ListenerLabels { listener = "listener" }
}

pub struct HttpMetrics {
    connections: Gauges<ListenerLabels<'static>>,
    refused: Counters<ListenerLabels<'static>>,
    header_timeouts: Counters<ListenerLabels<'static>>,
    bind_failures: Counters<ListenerLabels<'static>>,
}

impl HttpMetrics {
    pub fn register(r: &Registry) -> HttpMetrics {
        HttpMetrics {
            connections: r.gauges(
                "nodens_http_connections",
                "Open connections to an HTTP server.",
            ),
            refused: r.counters(
                "nodens_http_connections_refused_total",
                "HTTP connections closed at once because metrics.max_connections were open.",
            ),
            header_timeouts: r.counters(
                "nodens_http_header_timeouts_total",
                "HTTP connections closed because no whole request head came within metrics.header_timeout.",
            ),
            bind_failures: r.counters(
                "nodens_http_bind_failures_total",
                "Attempts to bind an HTTP server's address that failed (taken by another process); DNS is served meanwhile and the address tried again.",
            ),
        }
    }

    pub(super) fn connections(&self, listener: &str) -> prometheus::IntGauge {
        self.connections.get(&ListenerLabels { listener })
    }

    pub(super) fn refused(&self, listener: &str) -> prometheus::IntCounter {
        self.refused.get(&ListenerLabels { listener })
    }

    pub(super) fn header_timeouts(&self, listener: &str) -> prometheus::IntCounter {
        self.header_timeouts.get(&ListenerLabels { listener })
    }

    pub(super) fn bind_failed(&self, listener: &str) {
        self.bind_failures.get(&ListenerLabels { listener }).inc();
    }
}
