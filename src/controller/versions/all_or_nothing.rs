//! The version writes of a sync, all or nothing. Where something can refuse a version
//! write (`crate::admission`), every write is found acceptable by a server-side dry run
//! before the first real write; a real write that fails (a quota only the writes together
//! exceed, admission added a moment ago, a version created meanwhile) undoes the writes
//! before it, newest first, so the versions end as they were. Every request goes through the one writer
//! ([`super::writer`]): paced, counted and budgeted, the undo's as well.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::PostParams;
use tracing::debug;

use crate::controller::io::Written;
use crate::controller::io::errors::{Error, api_message, delete_uid, is_status};
use crate::controller::versions::write::mark;
use crate::controller::versions::write::{Done, Undo, UndoRoom, VersionWrite};
use crate::controller::versions::writer::{Op, VersionWriter};
use crate::syncer::Effect;

/// How many version writes of one sync are in flight at once. Measured on the local cluster
/// (2 cores, its API server shared with everything else): creates went 85/s one by one,
/// 210/s with 8 in flight, 264/s with 16; a 5,000-version first sync took 37 s with 32.
const PARALLEL_WRITES: usize = 32;

/// Makes the version writes among `effects` through `to`, all or nothing, each dry-run
/// first when `dry_run`; what it keeps to undo them comes out of a room of
/// `max_undo_bytes`. Returns each written version's name
/// and resourceVersion (`None`: deleted), for the cache to catch up.
pub async fn write_all(
    to: &VersionWriter<'_>,
    effects: &[Effect],
    max_undo_bytes: usize,
    dry_run: bool,
) -> Result<Vec<Written>, Error> {
    // Each write with the effect it makes, which says what it is (`describe`), in the
    // order they are made.
    let mut writes: Vec<(&Effect, VersionWrite)> = effects
        .iter()
        .filter_map(|e| Some((e, VersionWrite::of(e)?)))
        .collect();
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    writes.sort_by_key(|(_, w)| w.stage());
    // The first refusal in the sync's order, so the message does not depend on timing.
    if dry_run {
        let dry = each(writes.len(), |i| Some(writes.get(i)?.1.dry_run(to))).await;
        if let Some((effect, source)) = first_failure(dry, &writes) {
            return Err(Error::DryRun {
                what: effect.describe(),
                source,
            });
        }
    }
    let mut done: Vec<Done> = Vec::new();
    let room = UndoRoom::new(max_undo_bytes);
    for stage in 0..=2 {
        let batch: Vec<_> = writes.iter().filter(|(_, w)| w.stage() == stage).collect();
        let results = each(batch.len(), |i| Some(batch.get(i)?.1.apply(to, &room))).await;
        let mut failed = None;
        for ((effect, _), result) in batch.iter().zip(results) {
            match result {
                Some(Ok(d)) => {
                    debug!("{}", effect.describe());
                    done.push(d);
                }
                Some(Err(source)) if failed.is_none() => failed = Some((effect, source)),
                _ => {}
            }
        }
        if let Some((effect, source)) = failed {
            let undos: Vec<Undo> = done.into_iter().filter_map(|d| d.undo).collect();
            return Err(Error::Write {
                what: effect.describe(),
                undo: undo_all(undos, to).await,
                source,
            });
        }
    }
    Ok(done
        .into_iter()
        .map(|d| (d.name, d.resource_version))
        .collect())
}

/// The first refusal among `results`, in the writes' order.
fn first_failure<'e>(
    results: Vec<Option<Result<(), kube::Error>>>,
    writes: &[(&'e Effect, VersionWrite)],
) -> Option<(&'e Effect, kube::Error)> {
    results
        .into_iter()
        .zip(writes)
        .find_map(|(result, (e, _))| result?.err().map(|err| (*e, err)))
}

/// Runs the `n` requests `request(0..n)` makes, [`PARALLEL_WRITES`] at a time; the results
/// come in the requests' order. Once one fails, those not started yet are not sent
/// (`None`): the sync fails anyway, and a refusal early in a large batch does not cost the
/// rest of it.
///
/// Each request is made when its turn comes, not all up front: a request in flight is
/// about 5 KiB of client state, and the 5,000 of a 5,000-version sync made at once held
/// 24 MiB until the last was answered. (Made from an index: a closure over a borrowed write
/// held across the awaits makes the reconcile's future not `Send`, a compiler limitation.)
async fn each<T, F>(
    n: usize,
    mut request: impl FnMut(usize) -> Option<F>,
) -> Vec<Option<Result<T, kube::Error>>>
where
    F: Future<Output = Result<T, kube::Error>>,
{
    let failed = AtomicBool::new(false);
    let failed = &failed;
    // The closure is needed: `request` itself in its place trips the same compiler
    // limitation (the reconcile's future is then not `Send`).
    #[allow(clippy::redundant_closure)]
    let guarded = (0..n)
        .map_while(move |i| request(i))
        .map(|request| async move {
            if failed.load(Ordering::Relaxed) {
                return None;
            }
            let result = request.await;
            if result.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            Some(result)
        });
    futures::stream::iter(guarded)
        .buffered(PARALLEL_WRITES)
        .collect()
        .await
}

/// Takes back writes, newest first; says how that went, for the failure message.
async fn undo_all(undos: Vec<Undo>, to: &VersionWriter<'_>) -> String {
    if undos.is_empty() {
        return "nothing was changed".into();
    }
    let count = undos.len();
    let mut failed = Vec::new();
    for undo in undos.into_iter().rev() {
        if let Err((name, e)) = take_back(&undo, to).await {
            failed.push(format!("{name}: {}", api_message(&e)));
        }
    }
    if failed.is_empty() {
        format!("the sync's {count} earlier writes were undone, so nothing was changed")
    } else {
        format!(
            "undoing the sync's earlier writes failed for {}",
            crate::text::list(&failed, "; ")
        )
    }
}

async fn take_back(undo: &Undo, to: &VersionWriter<'_>) -> Result<(), (String, kube::Error)> {
    match undo {
        Undo::Delete { name, uid } => {
            match to.delete(Op::Undo, name, &delete_uid(uid, false)).await {
                Err(e) if !is_status(&e, 404) => Err((name.clone(), e)),
                _ => Ok(()),
            }
        }
        Undo::Restore {
            previous,
            resource_version,
        } => {
            let mut restored = (**previous).clone();
            restored.metadata.resource_version = resource_version.clone();
            // Left out, the API server keeps the managedFields records as they are.
            restored.metadata.managed_fields = None;
            let name = restored.name_any();
            to.replace(Op::Undo, &name, &PostParams::default(), &restored)
                .await
                .map(drop)
                .map_err(|e| (name, e))
        }
        Undo::Mark {
            name,
            uid,
            no_longer_in_sync,
        } => mark(to, Op::Undo, name, uid, *no_longer_in_sync)
            .await
            .map(drop)
            .map_err(|e| (name.clone(), e)),
        Undo::Recreate(previous) => {
            let mut again = (**previous).clone();
            let name = again.name_any();
            again.metadata.uid = None;
            again.metadata.resource_version = None;
            again.metadata.creation_timestamp = None;
            again.metadata.managed_fields = None;
            to.create(Op::Undo, &PostParams::default(), &again)
                .await
                .map(drop)
                .map_err(|e| (name, e))
        }
    }
}

#[cfg(test)]
mod tests;
