//! The `/metrics`, `/healthz` and `/readyz` endpoints. The probes answer anyone (the
//! kubelet sends no token); `/metrics` answers only callers the cluster authorises, unless
//! the operator runs with `--metrics-insecure`. The server is bounded
//! ([`crate::http_server`]), and the probes keep a reserve of connections past its cap.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::Metrics;
use super::auth::Verdict;
use super::review::Reviewer;

/// Who may read `/metrics`.
pub enum Access {
    /// Anyone who reaches the port (`--metrics-insecure`).
    Open,
    /// Callers whose bearer token the cluster authenticates and allows `get /metrics`.
    Reviewed(Box<Reviewer>),
}

struct Served {
    metrics: Arc<Metrics>,
    access: Access,
}

async fn metrics_text(State(s): State<Arc<Served>>, headers: HeaderMap) -> Response {
    if let Access::Reviewed(reviewer) = &s.access {
        let verdict = reviewer.verdict(headers.get(header::AUTHORIZATION)).await;
        if verdict != Verdict::Allowed {
            return refusal(&verdict);
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}

fn refusal(verdict: &Verdict) -> Response {
    let status = verdict.status();
    let text = verdict.message();
    if status == StatusCode::UNAUTHORIZED {
        (status, [(header::WWW_AUTHENTICATE, "Bearer")], text).into_response()
    } else {
        (status, text).into_response()
    }
}

async fn readyz(State(s): State<Arc<Served>>) -> impl IntoResponse {
    if s.metrics.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

/// The kubelet's paths: served from the reserved connections too.
const PROBES: &[&str] = &["/healthz", "/readyz"];

/// Serves the endpoints until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    access: Access,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(Served { metrics, access }));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    crate::http_server::serve(
        listener,
        app,
        PROBES,
        crate::http_server::Limits::default(),
        shutdown,
    )
    .await
}
