//! Upstream health: consecutive failed exchanges mark an upstream down; a
//! down upstream is skipped while another is up, and probed (". IN NS",
//! any answer will do) with exponential backoff until it answers again.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::metrics::{PROXY_NAME, ProxyLabels, ToResultLabels};
use super::{Upstream, udp};
use crate::wire::build;
use crate::wire::response::Case;

/// The longest wait between two probes of a down upstream.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The question of a probe: the root zone's NS set, as CoreDNS asks.
const PROBE_QUESTION: &[u8] = &[0, 0, 2, 0, 1];

#[derive(Default)]
pub struct Health {
    failures: AtomicU32,
    down: AtomicBool,
}

impl Health {
    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }
}

impl Upstream {
    /// An exchange with this upstream worked (whatever the answer's rcode).
    pub fn record_success(&self) {
        self.health.failures.store(0, Ordering::Relaxed);
        if self.health.down.swap(false, Ordering::Relaxed) {
            self.healthy.set(1);
            tracing::info!(upstream = %self.label, "upstream is answering again");
        }
    }

    /// An exchange with this upstream failed at the transport level.
    pub fn record_failure(self: &Arc<Self>) {
        let failures = self.health.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= self.settings.max_fails && !self.health.down.swap(true, Ordering::Relaxed) {
            self.healthy.set(0);
            tracing::warn!(upstream = %self.label, failures, "upstream marked down; probing it with backoff");
            self.upkeep.spawn(probe_until_up(Arc::downgrade(self)));
        }
    }
}

async fn probe_until_up(upstream: Weak<Upstream>) {
    let mut wait = match upstream.upgrade() {
        Some(u) => u.settings.health_check,
        None => return,
    };
    loop {
        tokio::time::sleep(wait).await;
        // The upstream was reloaded away: nothing left to probe.
        let Some(up) = upstream.upgrade() else { return };
        if up.health.is_up() {
            return;
        }
        let answered = probe(&up).await;
        let result = if answered { "success" } else { "failure" };
        up.metrics
            .health_checks
            .get(&ToResultLabels {
                to: &up.label,
                result,
            })
            .inc();
        if answered {
            up.record_success();
            return;
        }
        up.metrics
            .proxy_healthcheck_failures
            .get(&ProxyLabels {
                proxy_name: PROXY_NAME,
                to: &up.label,
            })
            .inc();
        wait = (wait * 2).min(MAX_BACKOFF);
    }
}

/// One probe over the upstream's transport; true if a well-formed answer came.
async fn probe(up: &Upstream) -> bool {
    let id: u16 = rand::rng().random();
    let query = build::upstream_query(id, PROBE_QUESTION, false, false);
    let deadline = Instant::now() + up.settings.probe_timeout;
    if up.settings.probe_over_tcp {
        up.pool
            .exchange(&query, PROBE_QUESTION, deadline)
            .await
            .is_ok()
    } else {
        udp::exchange(up.addr, &query, id, PROBE_QUESTION, Case::Ignore, deadline)
            .await
            .result
            .is_ok()
    }
}
