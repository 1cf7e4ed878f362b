//! The write pacer's metrics: totals, never per namespace or per channel, so that the
//! series do not grow with the tenants.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Default)]
pub struct PacingMetrics {
    /// Writes that waited for their namespace's turn.
    pub delayed: Counter,
    /// Their waits together, in seconds.
    pub delay_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Namespaces that wrote lately (those with a bucket).
    pub namespaces: Gauge,
}

impl PacingMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "writes_paced",
            "Version writes that waited for their namespace's turn (--namespace-write-qps, --write-qps)",
            self.delayed.clone(),
        );
        registry.register(
            "write_pacing_delay_seconds",
            "Time the paced version writes waited, together",
            self.delay_seconds.clone(),
        );
        registry.register(
            "write_pacing_namespaces",
            "Namespaces with a pacing bucket at the last version write (those that wrote in the moment before it)",
            self.namespaces.clone(),
        );
    }

    /// One write waited `wait`, with `active` namespaces writing.
    pub fn paced(&self, wait: std::time::Duration, active: usize) {
        if !wait.is_zero() {
            self.delayed.inc();
            self.delay_seconds.inc_by(wait.as_secs_f64());
        }
        self.namespaces
            .set(i64::try_from(active).unwrap_or(i64::MAX));
    }
}
