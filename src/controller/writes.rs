//! The version writes of a sync, all or nothing: every write first as a server-side dry
//! run, then for real; a real write that fails (a quota only the writes together exceed)
//! undoes the writes before it, newest first, so the versions end as they were.

use futures::StreamExt;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;
use tracing::debug;

use super::errors::{Error, api_message, delete_uid, is_status};
use crate::api::{
    FIELD_MANAGER, ManagedOSVersion, NO_LONGER_IN_SYNC_ANNOTATION, ORPHANED_FROM_ANNOTATION,
};
use crate::metrics::Metrics;
use crate::syncer::Effect;

/// How many version writes of one sync are in flight at once. Measured on the local cluster
/// (2 cores, its API server shared with everything else): creates went 85/s one by one,
/// 210/s with 8 in flight, 264/s with 16; a 5,000-version first sync took 37 s with 32.
const PARALLEL_WRITES: usize = 32;

/// How many version writes of all syncs together are in flight at once, so that many syncs
/// at once do not flood the API server (its priority and fairness queues them anyway).
pub const WRITES_IN_FLIGHT: usize = 64;

/// The resourceVersion of a create-only apply (the idiom of java-operator-sdk): no object
/// the operator could meet has it, so an apply carrying it creates or fails with 409.
const CREATE_ONLY: &str = "1";

/// One version write, typed by what it does to the version as it was before the sync.
#[derive(Clone, Copy, Debug)]
pub enum VersionWrite<'a> {
    /// A version that does not exist yet.
    Create(&'a ManagedOSVersion),
    /// A version of this channel whose content changes; `want` carries its uid.
    Update {
        want: &'a ManagedOSVersion,
        before: &'a ManagedOSVersion,
    },
    /// Sets or removes the no-longer-in-sync annotation.
    Mark {
        name: &'a str,
        uid: &'a str,
        no_longer_in_sync: bool,
    },
    Delete {
        name: &'a str,
        uid: &'a str,
        before: Option<&'a ManagedOSVersion>,
    },
}

/// How to take back one write.
#[derive(Debug, PartialEq)]
pub enum Undo {
    /// It created the version: delete it.
    Delete { name: String, uid: String },
    /// It changed the version: put back what was there, conditional on the version the
    /// write made (`resource_version`).
    Restore {
        previous: Box<ManagedOSVersion>,
        resource_version: Option<String>,
    },
    /// It flagged or unflagged the version: the opposite.
    Mark {
        name: String,
        uid: String,
        no_longer_in_sync: bool,
    },
    /// It deleted the version: create it again (with a new uid).
    Recreate(Box<ManagedOSVersion>),
}

/// A write made: what the cache must show for it, and how to take it back.
#[derive(Debug)]
pub struct Done {
    pub name: String,
    /// The version's resourceVersion after the write; `None` when it was deleted.
    pub resource_version: Option<String>,
    undo: Option<Undo>,
}

impl<'a> VersionWrite<'a> {
    /// The write an effect makes; `None` for effects that are not version writes.
    pub fn of(effect: &'a Effect) -> Option<Self> {
        Some(match effect {
            Effect::ApplyVersion {
                want,
                replaces: Some(before),
            } => VersionWrite::Update { want, before },
            Effect::ApplyVersion {
                want,
                replaces: None,
            } => VersionWrite::Create(want),
            Effect::MarkVersion {
                name,
                uid,
                no_longer_in_sync,
            } => VersionWrite::Mark {
                name,
                uid,
                no_longer_in_sync: *no_longer_in_sync,
            },
            Effect::DeleteVersion { name, uid, before } => VersionWrite::Delete {
                name,
                uid,
                before: Some(before),
            },
            Effect::CreatePod(_) | Effect::DeletePod { .. } => return None,
        })
    }

    /// Asks the API server whether it would take the write (admission, validation, a
    /// version created meanwhile), changing nothing.
    pub async fn dry_run(&self, api: &Api<ManagedOSVersion>) -> Result<(), kube::Error> {
        match *self {
            // A new version's dry run is a create: the same admission as the apply that will
            // create it, without the apply's read and merge (about half the API server's
            // work in a big first sync), and a version someone else created meanwhile is
            // refused (409) instead of being taken over.
            VersionWrite::Create(version) => {
                let params = PostParams {
                    dry_run: true,
                    field_manager: Some(FIELD_MANAGER.into()),
                };
                api.create(&params, version).await.map(drop)
            }
            VersionWrite::Update { want, .. } => {
                let mut params = apply_params();
                params.dry_run = true;
                api.patch(&want.name_any(), &params, &Patch::Apply(want))
                    .await
                    .map(drop)
            }
            VersionWrite::Mark {
                name,
                uid,
                no_longer_in_sync,
            } => mark(api, name, uid, no_longer_in_sync, true)
                .await
                .map(drop),
            VersionWrite::Delete { name, uid, .. } => {
                match api.delete(name, &delete_uid(uid, true)).await {
                    Err(e) if !is_status(&e, 404) => Err(e),
                    _ => Ok(()),
                }
            }
        }
    }

    /// Makes the write, and says how to take it back; what it keeps to take it back comes
    /// out of `room`.
    pub async fn apply(
        &self,
        api: &Api<ManagedOSVersion>,
        room: &UndoRoom,
    ) -> Result<Done, kube::Error> {
        match *self {
            // A create-only apply: a placeholder resourceVersion, which the API server
            // checks only against an object that exists, refuses a version someone else
            // created after the dry run (409) instead of taking it over.
            VersionWrite::Create(version) => {
                let name = version.name_any();
                let mut create = version.clone();
                create.metadata.resource_version = Some(CREATE_ONLY.into());
                let written = api
                    .patch(&name, &apply_params(), &Patch::Apply(&create))
                    .await
                    .map_err(|e| created_meanwhile(e, &name))?;
                Ok(Done {
                    undo: Some(Undo::Delete {
                        name: name.clone(),
                        uid: written.uid().unwrap_or_default(),
                    }),
                    resource_version: written.resource_version(),
                    name,
                })
            }
            VersionWrite::Update { want, before } => {
                let name = want.name_any();
                // What to put back should a later write be refused: the cache has no spec.
                let Some(before) = super::version_meta::in_full(api, before).await? else {
                    return Err(super::version_meta::gone_meanwhile(&name));
                };
                room.keep(&before)?;
                let written = api
                    .patch(&name, &apply_params(), &Patch::Apply(want))
                    .await?;
                Ok(Done {
                    undo: Some(Undo::Restore {
                        previous: Box::new(before),
                        resource_version: written.resource_version(),
                    }),
                    resource_version: written.resource_version(),
                    name,
                })
            }
            VersionWrite::Mark {
                name,
                uid,
                no_longer_in_sync,
            } => {
                let written = mark(api, name, uid, no_longer_in_sync, false).await?;
                Ok(Done {
                    name: name.to_string(),
                    resource_version: written.resource_version(),
                    undo: Some(Undo::Mark {
                        name: name.to_string(),
                        uid: uid.to_string(),
                        no_longer_in_sync: !no_longer_in_sync,
                    }),
                })
            }
            VersionWrite::Delete { name, uid, before } => {
                let before = match before {
                    Some(b) => super::version_meta::in_full(api, b).await?,
                    None => None,
                };
                if let Some(b) = &before {
                    room.keep(b)?;
                }
                let undo = match api.delete(name, &delete_uid(uid, false)).await {
                    Ok(_) => before.map(|b| Undo::Recreate(Box::new(b))),
                    // Already gone: nothing to take back.
                    Err(e) if is_status(&e, 404) => None,
                    Err(e) => return Err(e),
                };
                Ok(Done {
                    name: name.to_string(),
                    resource_version: None,
                    undo,
                })
            }
        }
    }

    /// The metrics label of the write.
    fn operation(&self) -> &'static str {
        match self {
            VersionWrite::Create(_) | VersionWrite::Update { .. } => "apply_version",
            VersionWrite::Mark { .. } => "mark_version",
            VersionWrite::Delete { .. } => "delete_version",
        }
    }

    fn is_delete(&self) -> bool {
        matches!(self, VersionWrite::Delete { .. })
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// A create-only apply's 409 says the object "has been modified"; say what happened.
fn created_meanwhile(e: kube::Error, name: &str) -> kube::Error {
    match e {
        kube::Error::Api(mut s) if s.code == 409 => {
            s.reason = "AlreadyExists".into();
            s.message = format!("version {name} was created by someone else during the sync");
            kube::Error::Api(s)
        }
        e => e,
    }
}

/// Sets or removes the no-longer-in-sync annotation; the uid in the patch is a
/// precondition (the API server refuses to change it).
async fn mark(
    api: &Api<ManagedOSVersion>,
    name: &str,
    uid: &str,
    no_longer_in_sync: bool,
    dry_run: bool,
) -> Result<ManagedOSVersion, kube::Error> {
    let value = no_longer_in_sync.then_some("true");
    let mut annotations = json!({NO_LONGER_IN_SYNC_ANNOTATION: value});
    if !no_longer_in_sync {
        // A version listed again is no orphan either (see `syncer::orphan`).
        annotations[ORPHANED_FROM_ANNOTATION] = Value::Null;
    }
    let patch = json!({"metadata": {"uid": uid, "annotations": annotations}});
    let params = PatchParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(name, &params, &Patch::Merge(patch)).await
}

/// What one sync may keep of the versions it replaces or deletes, to put them back should
/// a later write fail: the same bound as what it writes (`--max-sync-write-bytes`), since a
/// tenant's versions may be many and each up to the API server's object size.
pub struct UndoRoom {
    left: AtomicUsize,
    limit: usize,
}

impl UndoRoom {
    pub fn new(limit: usize) -> Self {
        UndoRoom {
            left: AtomicUsize::new(limit),
            limit,
        }
    }

    /// Takes room for `version` (its JSON size), or refuses the write before it is made.
    fn keep(&self, version: &ManagedOSVersion) -> Result<(), kube::Error> {
        let size = serde_json::to_vec(version).map_or(usize::MAX, |v| v.len());
        let taken = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(size)
            });
        if taken.is_ok() {
            return Ok(());
        }
        let limit = self.limit;
        Err(kube::Error::Api(
            kube::core::Status::failure(
                &format!(
                    "the versions this sync replaces or deletes are more than {limit} bytes to keep for undoing it (--max-sync-write-bytes); nothing more was written"
                ),
                "RequestEntityTooLarge",
            )
            .with_code(413)
            .boxed(),
        ))
    }
}

/// Everything the writes of a sync need.
pub struct Writer<'a> {
    pub api: &'a Api<ManagedOSVersion>,
    /// The namespace whose turns the writes take ([`super::pacing`]).
    pub namespace: &'a str,
    pub pacing: &'a super::pacing::Pacing,
    /// Writes in flight across all syncs ([`WRITES_IN_FLIGHT`]).
    pub in_flight: &'a Semaphore,
    pub metrics: &'a Metrics,
    /// `--max-sync-write-bytes`: also what the sync may keep to undo its writes.
    pub max_undo_bytes: usize,
}

impl Writer<'_> {
    /// Makes the version writes among `effects`, all or nothing. Returns each written
    /// version's name and resourceVersion (`None`: deleted), for the cache to catch up.
    pub async fn write_all(
        &self,
        effects: &[Effect],
    ) -> Result<Vec<(String, Option<String>)>, Error> {
        // Each write with the effect it makes, which says what it is (`describe`).
        let writes: Vec<(&Effect, VersionWrite)> = effects
            .iter()
            .filter_map(|e| Some((e, VersionWrite::of(e)?)))
            .collect();
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        // The first refusal in the sync's order, so the message does not depend on timing.
        let dry = self
            .each(writes.iter().map(|(_, w)| w.dry_run(self.api)))
            .await;
        if let Some((effect, source)) = dry
            .into_iter()
            .zip(&writes)
            .find_map(|(result, (e, _))| result.err().map(|err| (e, err)))
        {
            return Err(Error::DryRun {
                what: effect.describe(),
                source,
            });
        }
        // Deletes last: the one write that cannot be taken back exactly.
        let (deletes, others): (Vec<_>, Vec<_>) =
            writes.into_iter().partition(|(_, w)| w.is_delete());
        let mut done: Vec<Done> = Vec::new();
        let room = UndoRoom::new(self.max_undo_bytes);
        for batch in [others, deletes] {
            let results = self
                .each(batch.iter().map(|(_, w)| w.apply(self.api, &room)))
                .await;
            let mut failed = None;
            for ((effect, write), result) in batch.iter().zip(results) {
                match result {
                    Ok(d) => {
                        debug!("{}", effect.describe());
                        self.metrics.wrote(write.operation());
                        done.push(d);
                    }
                    Err(source) if failed.is_none() => failed = Some((effect, source)),
                    Err(_) => {}
                }
            }
            if let Some((effect, source)) = failed {
                let undos: Vec<Undo> = done.into_iter().filter_map(|d| d.undo).collect();
                return Err(Error::Write {
                    what: effect.describe(),
                    undo: undo_all(undos, self.api).await,
                    source,
                });
            }
        }
        Ok(done
            .into_iter()
            .map(|d| (d.name, d.resource_version))
            .collect())
    }

    /// Runs the requests [`PARALLEL_WRITES`] at a time within the shared bound; the results
    /// come in the requests' order.
    async fn each<T>(&self, requests: impl Iterator<Item = impl Future<Output = T>>) -> Vec<T> {
        let limited: Vec<_> = requests.map(|r| self.limited(r)).collect();
        futures::stream::iter(limited)
            .buffered(PARALLEL_WRITES)
            .collect()
            .await
    }

    async fn limited<T>(&self, request: impl Future<Output = T>) -> T {
        // The namespace's turn first, then a permit: a write waiting for its turn holds no
        // permit another namespace's write could use.
        self.pacing.turn(self.namespace, self.metrics).await;
        // Never closed, so a permit always comes.
        let _permit = self.in_flight.acquire().await.ok();
        request.await
    }
}

/// Takes back writes, newest first; says how that went, for the failure message.
async fn undo_all(undos: Vec<Undo>, api: &Api<ManagedOSVersion>) -> String {
    if undos.is_empty() {
        return "nothing was changed".into();
    }
    let count = undos.len();
    let mut failed = Vec::new();
    for undo in undos.into_iter().rev() {
        if let Err((name, e)) = take_back(&undo, api).await {
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

async fn take_back(undo: &Undo, api: &Api<ManagedOSVersion>) -> Result<(), (String, kube::Error)> {
    match undo {
        Undo::Delete { name, uid } => match api.delete(name, &delete_uid(uid, false)).await {
            Err(e) if !is_status(&e, 404) => Err((name.clone(), e)),
            _ => Ok(()),
        },
        Undo::Restore {
            previous,
            resource_version,
        } => {
            let mut restored = (**previous).clone();
            restored.metadata.resource_version = resource_version.clone();
            // Left out, the API server keeps the managedFields records as they are.
            restored.metadata.managed_fields = None;
            let name = restored.name_any();
            api.replace(&name, &PostParams::default(), &restored)
                .await
                .map(drop)
                .map_err(|e| (name, e))
        }
        Undo::Mark {
            name,
            uid,
            no_longer_in_sync,
        } => mark(api, name, uid, *no_longer_in_sync, false)
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
            api.create(&PostParams::default(), &again)
                .await
                .map(drop)
                .map_err(|e| (name, e))
        }
    }
}

#[cfg(test)]
mod tests;
