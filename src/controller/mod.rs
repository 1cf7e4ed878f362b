//! The thin I/O layer: a `kube::runtime::Controller` over channels (and the syncer pods
//! they own) whose `reconcile` runs one `pipeline::Attempt`: observe, ask
//! `syncer::decide`, perform the decision.
//!
//! Rooms, each a folder with its own map, from the bottom up (each imports only rooms
//! below it; `tests/module_graph.rs` holds the line):
//! - `io`: the I/O boundary, one trait per thing it serves (pods, versions, the channel and
//!   its Events, owned objects, sources), and API errors with their classes (`errors`);
//! - `versions`: the metadata-only version cache and its index, the one writer of versions
//!   (paced per namespace, budgeted, counted) and a sync's writes, all or nothing;
//! - `records`: what is kept per channel between reconciliations, and the sync slots
//!   (`slots`: who may sync, who waits, who is next);
//! - `objects`: Events, the other objects a channel owns (`owned`), the Orphan finalizer;
//! - `pods`: the syncer pod;
//! - `caches`: the shared watch caches, what triggers a reconciliation, and decoding that no
//!   single object can break (`decoding`);
//! - `cluster`: the I/O boundary implemented over the API server and the watch caches;
//! - `pipeline`: one reconciliation's steps, the controller wiring that runs them (`run`),
//!   and json and oci data (`remote`);
//! - `context` (the one file beside this one): the state every reconciliation shares, and
//!   `Context`'s methods live with what they serve (`objects`, `pipeline::remote`);
//! - `tests`: the pipeline's unit tests over an in-memory fake of `io` (`tests::fake`).
//!
//! Failure model: whatever fails in an attempt (an API error while observing, a write the
//! API server refuses, channel data that breaks a rule) is decided like any failed sync:
//! counted in `failedSynchronizationAttempts`, backed off, published as an Event and
//! written to the status. Only when even the status cannot be written does the error reach
//! `error_policy`, which backs off per channel in memory, by the same policy.

mod caches;
mod cluster;
mod context;
mod io;
mod objects;
mod pipeline;
mod pods;
mod records;
pub mod versions;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, warn};

use crate::api::ManagedOSVersionChannel;
pub use caches::decoding::Lenient;
use context::Context;
use io::ChannelIo;
use io::errors::Error;
pub use pipeline::run::{Clients, Watched, run};

/// A channel, as the controller's queue and memory name it.
use crate::api::ChannelKey as Key;

/// Reached only when an attempt's failure could not even be written to the status (the API
/// server is unreachable or refuses status writes): backs off per channel in memory, by the
/// policy of failed syncs (`syncer::backoff`).
fn error_policy<I: ChannelIo>(
    channel: Arc<ManagedOSVersionChannel>,
    error: &Error,
    ctx: Arc<Context<I>>,
) -> Action {
    let key = ObjectRef::from_obj(channel.as_ref());
    let uid = channel.uid().unwrap_or_default();
    let failures = ctx
        .with_record(&key, &uid, |r| {
            r.errors = r.errors.saturating_add(1);
            r.errors
        })
        .unwrap_or(1);
    let wait = ctx
        .settings
        .resolve_channel(&channel)
        .retry_wait(i64::from(failures));
    warn!(
        channel = %channel.name_any(),
        namespace = %channel.namespace().unwrap_or_default(),
        "reconcile failed ({failures} in a row), retrying in {}: {error}",
        crate::duration::format(wait)
    );
    Action::requeue(wait.min(crate::config::MAX_DURATION))
}

/// One reconciliation: the pipeline's steps, in one span that names the channel.
#[tracing::instrument(skip_all, fields(
    namespace = %channel.namespace().unwrap_or_default(),
    channel = %channel.name_any(),
))]
async fn reconcile<I: ChannelIo>(
    channel: Arc<ManagedOSVersionChannel>,
    ctx: Arc<Context<I>>,
) -> Result<Action, Error> {
    reconcile_counted(channel, &ctx)
        .await
        .map(|(action, _)| action)
}

/// `reconcile`, saying how many decisions and observations it took.
async fn reconcile_counted<I: ChannelIo>(
    channel: Arc<ManagedOSVersionChannel>,
    ctx: &Context<I>,
) -> Result<(Action, pipeline::Counts), Error> {
    let started = Instant::now();
    ctx.metrics.reconciliations.inc();
    let key = ObjectRef::from_obj(channel.as_ref());
    let uid = channel.uid().unwrap_or_default();
    let result = pipeline::Attempt::run(ctx, &key, channel).await;
    ctx.wake_waiting();
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    match &result {
        Ok((_, counts)) => {
            debug!(
                decisions = counts.decisions,
                observations = counts.observations,
                "decided"
            );
            ctx.clear_errors(&key, &uid);
        }
        Err(e) => ctx.metrics.reconcile_error(e.class()),
    }
    result
}
