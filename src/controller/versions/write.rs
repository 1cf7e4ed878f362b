//! One version write of a sync, typed by what it does to the version as it was before the
//! sync: its dry run, the write itself through the one writer ([`super::writer`]), and how
//! to take it back.

use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::api::{
    FIELD_MANAGER, ManagedOSVersion, NO_LONGER_IN_SYNC_ANNOTATION, ORPHANED_FROM_ANNOTATION,
};
use crate::controller::io::errors::{delete_uid, is_status};
use crate::controller::versions::writer::{Allowance, Op, VersionWriter};
use crate::syncer::Effect;

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
    pub undo: Option<Undo>,
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
            Effect::CreatePod(_) | Effect::DeletePod { .. } | Effect::Changelogs { .. } => {
                return None;
            }
        })
    }

    /// Asks the API server whether it would take a write to an existing version (admission,
    /// validation, a version changed meanwhile), changing nothing.
    pub async fn dry_run(&self, to: &VersionWriter<'_>) -> Result<(), kube::Error> {
        match *self {
            // A new version's dry run is a create: the same admission as the create, so a
            // refusal is found before the first real write and no version ever appears
            // that the sync then takes back (a fleet watching versions could act on it);
            // a version someone else created meanwhile is refused (409), not taken over.
            VersionWrite::Create(version) => {
                let params = PostParams {
                    dry_run: true,
                    ..create_params()
                };
                to.create(Op::DryRun, &params, version).await.map(drop)
            }
            VersionWrite::Update { want, .. } => {
                let mut params = apply_params();
                params.dry_run = true;
                to.patch(Op::DryRun, &want.name_any(), &params, &Patch::Apply(want))
                    .await
                    .map(drop)
            }
            VersionWrite::Mark {
                name,
                uid,
                no_longer_in_sync,
            } => mark(to, Op::DryRun, name, uid, no_longer_in_sync)
                .await
                .map(drop),
            VersionWrite::Delete { name, uid, .. } => {
                match to.delete(Op::DryRun, name, &delete_uid(uid, true)).await {
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
        to: &VersionWriter<'_>,
        room: &UndoRoom,
    ) -> Result<Done, kube::Error> {
        match *self {
            // A plain create (the cheapest write for the API server; its fields are moved
            // into the operator's apply record before the first apply, `syncer::fields`):
            // a version someone else created after the dry run is refused (409), not
            // taken over.
            VersionWrite::Create(version) => {
                let name = version.name_any();
                let written = match to.create(Op::Apply, &create_params(), version).await {
                    Err(e) if is_status(&e, 409) => {
                        return Err(created_meanwhile(to, e, &name).await);
                    }
                    written => written?,
                };
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
                let Some(before) =
                    crate::controller::versions::meta::in_full(to.api(), before).await?
                else {
                    return Err(crate::controller::versions::meta::gone_meanwhile(&name));
                };
                room.keep(&before)?;
                gather(to, &before).await?;
                let written = to
                    .patch(Op::Apply, &name, &apply_params(), &Patch::Apply(want))
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
                let written = mark(to, Op::Mark, name, uid, no_longer_in_sync).await?;
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
                    Some(b) => crate::controller::versions::meta::in_full(to.api(), b).await?,
                    None => None,
                };
                if let Some(b) = &before {
                    room.keep(b)?;
                }
                let undo = match to.delete(Op::Delete, name, &delete_uid(uid, false)).await {
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

    /// When it is made among a sync's writes (after every dry run): creates first, then the
    /// changes to existing versions, deletes last (the one write that cannot be taken back
    /// exactly).
    pub fn stage(&self) -> usize {
        match self {
            VersionWrite::Create(_) => 0,
            VersionWrite::Update { .. } | VersionWrite::Mark { .. } => 1,
            VersionWrite::Delete { .. } => 2,
        }
    }
}

/// A version's server-side apply. Field validation is off: the operator sends its own typed
/// version, which has no unknown or duplicate field to warn of, and the API server's
/// default (`Warn`) parses every apply body a second time, strictly, to look for them.
/// The schema is checked all the same (validation and pruning are not field validation).
fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER)
        .force()
        .validation_ignore()
}

fn create_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.into()),
    }
}

/// How often the move of a version's field record is tried when the version changed
/// between its read and the move (the same sync's flag patch of it runs beside).
const GATHER_ATTEMPTS: usize = 3;

/// Moves the fields the operator's create (or an undo's put) recorded into its apply
/// record ([`crate::syncer::fields::gathered`]), so that the apply that follows removes
/// what the channel no longer sets; nothing when there is nothing to move. Conditional on
/// the version read: the patched object carries its resourceVersion, and on a conflict
/// the version is read again and the move made from that (never from a stale record);
/// a version re-created meanwhile (another uid) is left to the apply, which refuses it.
async fn gather(to: &VersionWriter<'_>, before: &ManagedOSVersion) -> Result<(), kube::Error> {
    let name = before.name_any();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut read = std::borrow::Cow::Borrowed(before);
    for attempt in 1..=GATHER_ATTEMPTS {
        let Some(entries) = crate::syncer::fields::gathered(&read) else {
            return Ok(());
        };
        let ops = json!([
            {"op": "replace", "path": "/metadata/resourceVersion", "value": read.resource_version()},
            {"op": "replace", "path": "/metadata/managedFields", "value": entries},
        ]);
        let patch = serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
        match to
            .patch(Op::Apply, &name, &params, &Patch::Json::<()>(patch))
            .await
        {
            Err(e) if is_status(&e, 409) && attempt < GATHER_ATTEMPTS => {
                match to.api().get_opt(&name).await? {
                    Some(v) if v.uid() == before.uid() => read = std::borrow::Cow::Owned(v),
                    _ => return Ok(()),
                }
            }
            written => return written.map(drop),
        }
    }
    Ok(())
}

/// A create's 409: someone else created the version after the sync looked, or before the
/// operator's cache saw it. Said as the sync says any name it does not hold
/// ([`crate::syncer::versions::conflict`], the version read once).
async fn created_meanwhile(to: &VersionWriter<'_>, e: kube::Error, name: &str) -> kube::Error {
    let kube::Error::Api(mut s) = e else {
        return e;
    };
    let holder = match to.api().get_opt(name).await {
        Ok(Some(v)) => crate::syncer::versions::conflict("version", &v.metadata),
        _ => format!("version {name:?} exists"),
    };
    s.reason = "AlreadyExists".into();
    s.message = format!("{holder}; the sync had not seen it");
    kube::Error::Api(s)
}

/// Sets or removes the no-longer-in-sync annotation (as a dry run for [`Op::DryRun`]); the
/// uid in the patch is a precondition (the API server refuses to change it).
pub async fn mark(
    to: &VersionWriter<'_>,
    op: Op,
    name: &str,
    uid: &str,
    no_longer_in_sync: bool,
) -> Result<ManagedOSVersion, kube::Error> {
    let value = no_longer_in_sync.then_some("true");
    let mut annotations = json!({NO_LONGER_IN_SYNC_ANNOTATION: value});
    if !no_longer_in_sync {
        // A version listed again is no orphan either (see `syncer::orphan`).
        annotations[ORPHANED_FROM_ANNOTATION] = Value::Null;
    }
    let patch = json!({"metadata": {"uid": uid, "annotations": annotations}});
    let params = PatchParams {
        dry_run: op == Op::DryRun,
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    to.patch(op, name, &params, &Patch::Merge(patch)).await
}

/// What one sync may keep of the versions it replaces or deletes, to put them back should
/// a later write fail: the same bound as what it writes (`--max-sync-write-bytes`), since a
/// tenant's versions may be many and each up to the API server's object size.
pub struct UndoRoom(Allowance);

impl UndoRoom {
    pub fn new(limit: usize) -> Self {
        UndoRoom(Allowance::new(limit, |limit| {
            format!(
                "the versions this sync replaces or deletes are more than {limit} bytes to keep for undoing it (--max-sync-write-bytes); nothing more was written"
            )
        }))
    }

    /// Takes room for `version` (its JSON size), or refuses the write before it is made.
    fn keep(&self, version: &ManagedOSVersion) -> Result<(), kube::Error> {
        self.0
            .take(serde_json::to_vec(version).map_or(usize::MAX, |v| v.len()))
    }
}
