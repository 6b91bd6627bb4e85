//! Upstream health: consecutive failed exchanges mark an upstream down; a
//! down upstream is skipped while another is up, and probed (". IN NS",
//! any answer will do) with exponential backoff until it answers again.
//!
//! Only evidence newer than the last change of state counts: an exchange
//! sent before the upstream was marked down cannot mark it up, and one sent
//! before it came back cannot mark it down. After an outage the backlog of
//! queries sent during it ends in a burst of late answers and timeouts;
//! taken at face value they flip the state once per pair (measured: 1,500
//! flips in 2.5 s), and each flip wrote a log line.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant as StdInstant};

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

/// The two log limiters of an upstream's health changes: each direction
/// is logged at most once per `log_interval`, so that the change back up
/// is never hidden behind the change down that came just before it.
pub(crate) const DOWN: usize = 0;
pub(crate) const UP: usize = 1;

/// The origin of the health timestamps.
static EPOCH: LazyLock<StdInstant> = LazyLock::new(StdInstant::now);

fn nanos_since_epoch(t: StdInstant) -> u64 {
    t.saturating_duration_since(*EPOCH).as_nanos() as u64
}

#[derive(Default)]
pub(crate) struct Health {
    failures: AtomicU32,
    down: AtomicBool,
    /// When the state last changed (ns since [`EPOCH`]); exchanges sent
    /// before it say nothing about the state now.
    changed_at: AtomicU64,
}

impl Health {
    pub(crate) fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// Whether an exchange sent at `sent` began after the last change.
    fn is_news(&self, sent: StdInstant) -> bool {
        nanos_since_epoch(sent) >= self.changed_at.load(Ordering::Relaxed)
    }

    fn changed_now(&self) {
        self.changed_at
            .store(nanos_since_epoch(StdInstant::now()), Ordering::Relaxed);
    }
}

impl Upstream {
    /// An exchange sent at `sent` worked (whatever the answer's rcode).
    pub(crate) fn record_success(&self, sent: StdInstant) {
        self.health.failures.store(0, Ordering::Relaxed);
        if self.health.is_up() || !self.health.is_news(sent) {
            return;
        }
        if self.health.down.swap(false, Ordering::Relaxed) {
            self.health.changed_now();
            self.healthy.set(1);
            self.metrics.transition(&self.label, "up").inc();
            if let Some(suppressed) = self.health_log[UP].allow() {
                tracing::info!(upstream = %self.label, suppressed, "upstream is answering again");
            }
        }
    }

    /// An exchange sent at `sent` failed at the transport level.
    pub(crate) fn record_failure(self: &Arc<Self>, sent: StdInstant) {
        if !self.health.is_news(sent) {
            return;
        }
        let failures = self.health.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= self.settings.max_fails && !self.health.down.swap(true, Ordering::Relaxed) {
            self.health.changed_now();
            self.healthy.set(0);
            self.metrics.transition(&self.label, "down").inc();
            if let Some(suppressed) = self.health_log[DOWN].allow() {
                tracing::warn!(upstream = %self.label, failures, suppressed, "upstream marked down; probing it with backoff");
            }
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
        let sent = StdInstant::now();
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
            up.record_success(sent);
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
    let now = Instant::now();
    let deadline = now + up.settings.probe_timeout;
    if up.settings.probe_through_pool {
        up.pool
            .exchange(&query, PROBE_QUESTION, deadline)
            .await
            .is_ok()
    } else {
        udp::exchange(
            &up.udp,
            &query,
            id,
            PROBE_QUESTION,
            Case::Ignore,
            now,
            deadline,
        )
        .await
        .result
        .is_ok()
    }
}
