//! Waits for a write's turn (`crate::pace` decides whose turn it is and how long to wait).

use std::sync::Mutex;
use std::time::Instant;

use crate::metrics::Metrics;
use crate::pace::{Pacer, Rates};

pub struct Pacing {
    pacer: Mutex<Pacer>,
}

impl Pacing {
    pub fn new(rates: Rates) -> Self {
        Pacing {
            pacer: Mutex::new(Pacer::new(rates)),
        }
    }

    /// Returns when a write of `namespace` may be sent.
    pub async fn turn(&self, namespace: &str, metrics: &Metrics) {
        // A poisoned lock (a panic elsewhere) paces nothing rather than stopping writes.
        let Some((wait, active)) = self
            .pacer
            .lock()
            .ok()
            .map(|mut p| (p.reserve(namespace, Instant::now()), p.active()))
        else {
            return;
        };
        metrics.pacing.paced(wait, active);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}
