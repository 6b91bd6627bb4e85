//! The HTTP endpoints: /metrics (Prometheus text), /health (the process
//! answers) and /ready (serving, not draining), on up to two servers: the
//! metrics server (`metrics.listen`: all three) and the probe server
//! (`metrics.probe_listen`: /health and /ready alone, on loopback for the
//! kubelet). Each is bounded ([`serve`]): whoever can reach the metrics
//! port cannot take the probes down with it (docs/security.md).
//!
//! Configuration: `[metrics]` (`config.rs`). Off the request path: tasks on
//! the main runtime.

pub(crate) mod config;
pub(crate) mod metrics;
mod serve;
mod servers;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

pub(crate) use metrics::HttpMetrics;
pub(crate) use servers::{BIND_RETRY, HttpServers};

/// What the endpoints read.
pub(crate) struct HttpState {
    /// Renders the metrics page (refreshing scrape-time gauges first).
    pub metrics: Box<dyn Fn() -> String + Send + Sync>,
    pub ready: Arc<AtomicBool>,
}

/// Which endpoints a server has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// /metrics, /health and /ready.
    Metrics,
    /// /health and /ready.
    Probes,
}

impl Role {
    /// The `listener` label of the HTTP metrics.
    fn label(self) -> &'static str {
        match self {
            Role::Metrics => "metrics",
            Role::Probes => "probes",
        }
    }

    fn router(self, state: Arc<HttpState>) -> Router {
        let probes = Router::new()
            .route("/health", get(health_page))
            .route("/ready", get(ready_page));
        let app = match self {
            Role::Metrics => probes.route("/metrics", get(metrics_page)),
            Role::Probes => probes,
        };
        app.with_state(state)
    }
}

async fn metrics_page(
    State(state): State<Arc<HttpState>>,
) -> ([(&'static str, &'static str); 1], String) {
    (
        [("content-type", "text/plain; version=0.0.4")],
        (state.metrics)(),
    )
}

/// `OK` while every serving thread runs (restarts after a panic are
/// listed, and pass); 503 once one is dead, so that the kubelet restarts
/// nodens rather than let a share of the node's queries go unread.
async fn health_page() -> (StatusCode, String) {
    let health = crate::liveness::health::health();
    let status = if health.ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, health.page())
}

async fn ready_page(State(state): State<Arc<HttpState>>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "OK\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
