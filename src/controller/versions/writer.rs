//! The one writer of versions. Every create, patch, flag and delete of a ManagedOSVersion,
//! whatever asks for it (a sync, the undo of a failed one, an adoption, the Orphan
//! finalizer), is sent from here and nowhere else, and each request:
//!
//! - waits for its namespace's turn ([`Pacing`], whose turn it is by [`crate::pace`]), then for one of
//!   the [`WRITES_IN_FLIGHT`] places shared by every namespace (in that order, so a write
//!   waiting for its turn holds no place another namespace's write could use);
//! - is counted (`writes_total{operation}`, and the bytes sent, `write_bytes_total`);
//! - takes its bytes from the session's budget (`--max-sync-write-bytes`), or is refused
//!   before it is sent.
//!
//! A session ([`VersionWriter`]) is one namespace's writes of one task: a sync's writes
//! and their undo, or one finalizer patch.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::api::ManagedOSVersion;
use crate::metrics::Metrics;
use crate::pace::{Pacer, Rates};

/// How many version writes of all namespaces together are in flight at once, so that many
/// syncs at once do not flood the API server (its priority and fairness queues them anyway).
pub const WRITES_IN_FLIGHT: usize = 64;

/// What a write is, for the metrics and the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A server-side dry run (admitted and validated as a write, changes nothing).
    DryRun,
    /// A sync's create or update of a version.
    Apply,
    /// A sync's flag (the no-longer-in-sync annotation) set or removed.
    Mark,
    /// A sync's delete of a version.
    Delete,
    /// Taking back one of a failed sync's writes.
    Undo,
    /// The Orphan finalizer's patch of a version.
    Orphan,
}

impl Op {
    /// The `operation` label of `writes_total`.
    pub fn label(self) -> &'static str {
        match self {
            Op::DryRun => "dry_run_version",
            Op::Apply => "apply_version",
            Op::Mark => "mark_version",
            Op::Delete => "delete_version",
            Op::Undo => "undo_version",
            Op::Orphan => "orphan_version",
        }
    }

    /// Whether its bytes come out of the budget: a dry run writes nothing, and an undo puts
    /// back what the session kept for it, which came out of its room ([`Allowance`]) already.
    fn charged(self) -> bool {
        !matches!(self, Op::DryRun | Op::Undo)
    }
}

/// What the writes of all namespaces share: the pacing and the places in flight.
pub struct Writes {
    pub pacing: Pacing,
    pub in_flight: Semaphore,
}

impl Writes {
    pub fn new(rates: Rates) -> Self {
        Writes {
            pacing: Pacing::new(rates),
            in_flight: Semaphore::new(WRITES_IN_FLIGHT),
        }
    }
}

/// Bytes one session may still use for something; refused once they are used up.
pub struct Allowance {
    left: AtomicUsize,
    limit: usize,
    /// What the refusal says, given the limit.
    refusal: fn(usize) -> String,
}

impl Allowance {
    pub fn new(limit: usize, refusal: fn(usize) -> String) -> Self {
        Allowance {
            left: AtomicUsize::new(limit),
            limit,
            refusal,
        }
    }

    /// Takes `bytes`, or says why not (413, naming the flag).
    pub fn take(&self, bytes: usize) -> Result<(), kube::Error> {
        let taken = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(bytes)
            });
        if taken.is_ok() {
            return Ok(());
        }
        Err(kube::Error::Api(
            kube::core::Status::failure(&(self.refusal)(self.limit), "RequestEntityTooLarge")
                .with_code(413)
                .boxed(),
        ))
    }
}

/// JSON size of what a request sends (`usize::MAX`: cannot be encoded, so never fits).
fn size(value: &impl Serialize) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

/// One namespace's writes of one task (see the module's doc).
pub struct VersionWriter<'a> {
    api: Api<ManagedOSVersion>,
    namespace: &'a str,
    shared: &'a Writes,
    metrics: &'a Metrics,
    /// What the session's writes may send (`--max-sync-write-bytes`).
    written: Allowance,
}

impl<'a> VersionWriter<'a> {
    pub fn new(
        api: Api<ManagedOSVersion>,
        namespace: &'a str,
        shared: &'a Writes,
        metrics: &'a Metrics,
        max_bytes: usize,
    ) -> Self {
        VersionWriter {
            api,
            namespace,
            shared,
            metrics,
            written: Allowance::new(max_bytes, |limit| {
                format!(
                    "the writes of this sync are more than {limit} bytes (--max-sync-write-bytes); nothing more was written"
                )
            }),
        }
    }

    /// For reads (a version in full before it is replaced); writes go through the methods.
    pub fn api(&self) -> &Api<ManagedOSVersion> {
        &self.api
    }

    /// Paces, budgets, sends and counts one request of `bytes`.
    async fn send<T>(
        &self,
        op: Op,
        bytes: usize,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        if op.charged() {
            self.written.take(bytes)?;
        }
        self.shared.pacing.turn(self.namespace, self.metrics).await;
        // Never closed, so a permit always comes.
        let _permit = self.shared.in_flight.acquire().await.ok();
        let result = request.await;
        if result.is_ok() {
            self.metrics.wrote(op.label());
            self.metrics.wrote_bytes(bytes);
        }
        result
    }

    pub async fn create(
        &self,
        op: Op,
        params: &PostParams,
        version: &ManagedOSVersion,
    ) -> Result<ManagedOSVersion, kube::Error> {
        self.send(op, size(version), self.api.create(params, version))
            .await
    }

    pub async fn patch<P: Serialize + std::fmt::Debug>(
        &self,
        op: Op,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<ManagedOSVersion, kube::Error> {
        let bytes = match patch {
            Patch::Apply(p) | Patch::Merge(p) | Patch::Strategic(p) => size(p),
            Patch::Json(p) => size(p),
            _ => 0,
        };
        self.send(op, bytes, self.api.patch(name, params, patch))
            .await
    }

    pub async fn replace(
        &self,
        op: Op,
        name: &str,
        params: &PostParams,
        version: &ManagedOSVersion,
    ) -> Result<ManagedOSVersion, kube::Error> {
        self.send(op, size(version), self.api.replace(name, params, version))
            .await
    }

    /// Deletes; `Ok` also when the API server answers the object itself.
    pub async fn delete(
        &self,
        op: Op,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), kube::Error> {
        self.send(op, 0, self.api.delete(name, params))
            .await
            .map(drop)
    }
}

/// Waits for a write's turn (`crate::pace` decides whose turn it is and how long to wait).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_gives_what_it_has_then_refuses_naming_the_limit() {
        let budget = Allowance::new(10, |limit| format!("more than {limit} (--flag)"));
        assert!(budget.take(6).is_ok());
        assert!(budget.take(4).is_ok());
        let Err(kube::Error::Api(status)) = budget.take(1) else {
            panic!("the 11th byte fits a budget of 10");
        };
        assert_eq!(status.code, 413);
        assert_eq!(status.message, "more than 10 (--flag)");
        assert!(budget.take(0).is_ok(), "nothing always fits");
    }

    #[test]
    fn dry_runs_and_undos_take_nothing_from_the_budget() {
        let charged: Vec<_> = [
            Op::DryRun,
            Op::Apply,
            Op::Mark,
            Op::Delete,
            Op::Undo,
            Op::Orphan,
        ]
        .into_iter()
        .filter(|op| op.charged())
        .collect();
        assert_eq!(charged, [Op::Apply, Op::Mark, Op::Delete, Op::Orphan]);
    }
}
