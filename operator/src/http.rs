//! HTTP endpoints: `/metrics` (Prometheus text), `/livez`, `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::context::Readiness;
use crate::metrics::Metrics;

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// The router (separate from serving so tests can call it).
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/livez", get(|| async { "ok" }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(AppState { metrics, readiness })
}

async fn metrics_handler(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn ready_handler(State(s): State<AppState>) -> impl IntoResponse {
    match s.readiness.check() {
        Ok(msg) => (StatusCode::OK, format!("ok: {msg}\n")),
        Err(msg) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {msg}\n"),
        ),
    }
}

/// Binds `addr` (fails early if taken) and serves until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /livez, /readyz");
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "http server");
        }
    }))
}
