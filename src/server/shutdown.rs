//! A shutdown (SIGTERM, SIGINT): lameduck, then the drain of what is in
//! flight, the last write of the cache file, the node setup withdrawn
//! unless kept.

use std::sync::atomic::Ordering;

use super::OBSERVERS_END;
use super::Server;

impl Server {
    /// Answers, not ready, for `lameduck`; then stops reading, answers
    /// what is in flight (up to `shutdown_grace`), exits.
    pub(super) async fn shutdown(mut self) {
        self.shared.ready.store(false, Ordering::Relaxed);
        let lameduck = self.config.server.lameduck;
        if !lameduck.is_zero() && !self.handed_over {
            tracing::info!(
                ?lameduck,
                "shutting down: answering, not ready, for the lameduck time"
            );
            tokio::time::sleep(lameduck).await;
        }
        tracing::info!("shutting down: draining queries in flight");
        for (_, l) in self.listeners.drain() {
            l.stop();
        }
        let grace = self.config.server.shutdown_grace;
        if tokio::time::timeout(grace, self.shared.tasks.drain())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.shared.tasks.running(),
                "shutdown grace period over with queries still in flight"
            );
        }
        self.http.stop();
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || shared.finish_observers(OBSERVERS_END)).await;
        if !self.handed_over {
            self.warm
                .last_write(&self.shared, &self.telemetry.warm)
                .await;
        }
        if let Some(node) = self.node.take() {
            let plan = node.plan();
            let overruled = self
                .presence
                .as_ref()
                .is_some_and(|p| !p.current(&plan.state_dir, &plan.interface));
            if self.keep_node || node.keep_on_exit() {
                tracing::info!("node: interface and rules kept for the next process");
            } else if overruled {
                // A server that found us silent took the claim over (a drain
                // longer than HOLDER_SILENCE): the setup is its now.
                tracing::warn!(
                    "node: our claim was taken over; the interface and rules are left to its holder"
                );
            } else if let Err(e) = node.tear_down().await {
                tracing::error!("node: cannot remove the interface and rules: {e}");
            }
        }
        tracing::info!("stopped");
    }
}
