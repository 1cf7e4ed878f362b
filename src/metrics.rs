//! Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::controller::ErrorClass;
use crate::syncer::{Action, Outcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    pub operation: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub reconciliations: Counter,
    pub reconcile_errors: Family<ClassLabel, Counter>,
    pub reconcile_duration: Histogram,
    pub syncs: Family<ResultLabel, Counter>,
    pub writes: Family<WriteLabel, Counter>,
    pub leader: Gauge,
    /// Set once the controllers run (or wait for leadership): `/readyz` answers 200.
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("rancheros_operator");
        let reconciliations = Counter::default();
        let reconcile_errors = Family::<ClassLabel, Counter>::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let syncs = Family::<ResultLabel, Counter>::default();
        let writes = Family::<WriteLabel, Counter>::default();
        let leader = Gauge::default();
        registry.register(
            "reconciliations",
            "Reconciliations of channels",
            reconciliations.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed sync attempts and reconciliations, by class of error (retryable, refused, input)",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconciliation took",
            reconcile_duration.clone(),
        );
        registry.register(
            "syncs",
            "Finished channel syncs by result (synchronized, failed)",
            syncs.clone(),
        );
        registry.register(
            "writes",
            "Writes to the API server by operation",
            writes.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        Self {
            registry,
            reconciliations,
            reconcile_errors,
            reconcile_duration,
            syncs,
            writes,
            leader,
            ready: AtomicBool::new(false),
        }
    }
}

impl Metrics {
    pub fn sync_finished(&self, outcome: Outcome) {
        let result = match outcome {
            Outcome::Synchronized => "synchronized",
            Outcome::Failed => "failed",
        };
        self.syncs.get_or_create(&ResultLabel { result }).inc();
    }

    pub fn reconcile_error(&self, class: ErrorClass) {
        self.reconcile_errors
            .get_or_create(&ClassLabel {
                class: class.label(),
            })
            .inc();
    }

    pub fn wrote(&self, action: &Action) {
        let operation = match action {
            Action::CreatePod(_) => "create_pod",
            Action::DeletePod { .. } => "delete_pod",
            Action::ApplyVersion(_) => "apply_version",
            Action::MarkVersion { .. } => "mark_version",
            Action::DeleteVersion { .. } => "delete_version",
        };
        self.writes.get_or_create(&WriteLabel { operation }).inc();
    }

    pub fn status_written(&self) {
        self.writes
            .get_or_create(&WriteLabel {
                operation: "status",
            })
            .inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an error would only shorten the page.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

async fn metrics_text(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

/// Serves the endpoints until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(metrics);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_in_the_text_format() {
        let m = Metrics::default();
        m.sync_finished(Outcome::Synchronized);
        m.status_written();
        let text = m.encode();
        assert!(
            text.contains("rancheros_operator_syncs_total{result=\"synchronized\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("rancheros_operator_writes_total{operation=\"status\"} 1"),
            "{text}"
        );
    }
}
