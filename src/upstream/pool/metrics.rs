//! The series of one upstream's TCP pool (`nodens_upstream_tcp_*`, the
//! queue, and the TCP side of CoreDNS's connection-reuse counters).

use std::sync::Arc;

use prometheus::{Histogram, IntCounter, IntGauge};

use super::config::PoolConfig;
use crate::upstream::metrics::{StateLabels, ToLabels, ToReasonLabels, UpstreamMetrics};

/// The handles of one pool's series, resolved when the pool is made.
pub(super) struct PoolMetrics {
    pub(super) idle: IntGauge,
    pub(super) busy: IntGauge,
    pub(super) dials: IntCounter,
    pub(super) dial_failures: IntCounter,
    pub(super) queue_length: IntGauge,
    pub(super) queue_wait: Histogram,
    pub(super) rejected_full: IntCounter,
    pub(super) rejected_timeout: IntCounter,
    pub(super) reused: IntCounter,
    pub(super) fresh: IntCounter,
    pub(super) mismatch: IntCounter,
    /// Shared with the UDP path: queries sent and not yet answered.
    pub(super) inflight: IntGauge,
    metrics: Arc<UpstreamMetrics>,
    label: String,
}

impl PoolMetrics {
    pub(super) fn new(
        metrics: &Arc<UpstreamMetrics>,
        to: &str,
        config: &PoolConfig,
    ) -> PoolMetrics {
        let one = ToLabels { to };
        metrics
            .queue_capacity
            .get(&one)
            .set(config.max_queue as i64);
        let state = |state| StateLabels { to, state };
        let rejected = |reason| ToReasonLabels { to, reason };
        let (reused, fresh) = metrics.conn_reuse(to, "tcp");
        PoolMetrics {
            idle: metrics.pool_connections.get(&state("idle")),
            busy: metrics.pool_connections.get(&state("busy")),
            dials: metrics.pool_dials.get(&one),
            dial_failures: metrics.pool_dial_failures.get(&one),
            queue_length: metrics.queue_length.get(&one),
            queue_wait: metrics.queue_wait.get(&one),
            rejected_full: metrics.queue_rejected.get(&rejected("full")),
            rejected_timeout: metrics.queue_rejected.get(&rejected("timeout")),
            reused,
            fresh,
            mismatch: metrics.error(to, "mismatch"),
            inflight: metrics.inflight.get(&one),
            metrics: metrics.clone(),
            label: to.to_string(),
        }
    }

    pub(super) fn closed(&self, reason: &str) {
        let labels = ToReasonLabels {
            to: &self.label,
            reason,
        };
        self.metrics.pool_closed.get(&labels).inc();
    }
}
