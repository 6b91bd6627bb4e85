//! The HTTP endpoints: /metrics (Prometheus text), /health (the process
//! answers) and /ready (serving, not draining).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

/// What the endpoints read.
pub struct HttpState {
    /// Renders the metrics page (refreshing scrape-time gauges first).
    pub metrics: Box<dyn Fn() -> String + Send + Sync>,
    pub ready: Arc<AtomicBool>,
}

/// Serves the endpoints on `listener` until `stop` fires.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<HttpState>,
    stop: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/health", get(|| async { "OK\n" }))
        .route("/ready", get(ready_page))
        .with_state(state);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(e) = served {
        tracing::error!(error = %e, "metrics server failed");
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

async fn ready_page(State(state): State<Arc<HttpState>>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "OK\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
