//! The I/O of `syncer::orphan`: the finalizer of `versionPolicy.onChannelDelete: Orphan`
//! channels, and the orphaning of a deleted channel's versions. It runs first in every
//! reconciliation, so a channel deleted while the operator was down is finished by the
//! first reconciliation after it comes back (the watch lists it, deletion timestamp and
//! finalizer included).

use std::collections::HashSet;

use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use tracing::info;

use super::Context;
use super::attempt::Apis;
use super::errors::{Error, is_status, kube_err};
use super::slots::Key;
use crate::api::{CHANNEL_LABEL, FIELD_MANAGER, ManagedOSVersion, ManagedOSVersionChannel};
use crate::syncer::Note;
use crate::syncer::orphan::{self, Step};
use crate::syncer::versions::controlled_by;

/// Tries of a conditional patch that meets a concurrent write (409) before the
/// reconciliation gives up and is retried with a backoff.
const TRIES: usize = 3;

/// Does what the finalizer needs. `Some`: the reconciliation ends here (the channel is
/// going); `None`: it goes on (the finalizer is as the policy wants it).
pub async fn reconcile(
    channel: &ManagedOSVersionChannel,
    key: &Key,
    apis: &Apis,
    ctx: &Context,
) -> Result<Option<Action>, Error> {
    match orphan::step(channel) {
        Step::Nothing => Ok(None),
        Step::AddFinalizer | Step::RemoveFinalizer => {
            set_finalizer(channel, &apis.channels).await?;
            Ok(None)
        }
        Step::Release => {
            set_finalizer(channel, &apis.channels).await?;
            Ok(Some(Action::await_change()))
        }
        Step::OrphanThenRelease => {
            let count = orphan_versions(channel, apis, ctx).await?;
            let note = Note {
                warning: false,
                reason: "VersionsOrphaned",
                message: format!(
                    "channel deleted with versionPolicy.onChannelDelete Orphan: {count} versions left in place, flagged no longer in sync"
                ),
            };
            info!(channel = %channel.name_any(), namespace = %channel.namespace().unwrap_or_default(), "{}", note.message);
            let mut reference = channel.object_ref(&());
            reference.resource_version = None;
            // Refused in a namespace that is being deleted; not worth holding the channel.
            if let Err(e) = ctx.events.publish(key, reference, &note).await {
                info!(channel = %channel.name_any(), "could not publish an event: {e}");
            }
            set_finalizer(channel, &apis.channels).await?;
            Ok(Some(Action::await_change()))
        }
    }
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Adds or removes the finalizer as [`orphan::step`] says, from a fresh read after a
/// concurrent write.
async fn set_finalizer(
    channel: &ManagedOSVersionChannel,
    api: &Api<ManagedOSVersionChannel>,
) -> Result<(), Error> {
    let name = channel.name_any();
    let what = || format!("updating the finalizers of channel {name}");
    let mut current = channel.clone();
    for attempt in 1..=TRIES {
        let add = match orphan::step(&current) {
            Step::AddFinalizer => true,
            Step::RemoveFinalizer | Step::Release | Step::OrphanThenRelease => false,
            Step::Nothing => return Ok(()),
        };
        let patch = orphan::finalizers_patch(&current, add);
        match api.patch(&name, &params(), &Patch::Merge(patch)).await {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) if is_status(&e, 409) && attempt < TRIES => {
                match api.get_opt(&name).await.map_err(kube_err(what()))? {
                    Some(fresh) => current = fresh,
                    None => return Ok(()),
                }
            }
            Err(e) => return Err(kube_err(what())(e)),
        }
    }
    Ok(())
}

/// Orphans every version the channel controls; returns how many.
async fn orphan_versions(
    channel: &ManagedOSVersionChannel,
    apis: &Apis,
    ctx: &Context,
) -> Result<usize, Error> {
    let name = channel.name_any();
    let ns = channel.namespace().unwrap_or_default();
    // Read fresh, not from the cache: a version the last sync created a moment ago must
    // not be left to the garbage collector. Every version of the channel carries its label.
    let listed = apis
        .versions
        .list(&ListParams::default().labels(&format!("{CHANNEL_LABEL}={name}")))
        .await
        .map_err(kube_err(format!("listing the versions of channel {name}")))?;
    let mut seen = HashSet::new();
    let mut count = 0_usize;
    for version in listed.items {
        seen.insert(version.name_any());
        if orphan_one(version, channel, &apis.versions).await? {
            count = count.saturating_add(1);
        }
    }
    // One whose label someone removed is still the channel's: the cache knows it.
    let cached = match ctx.scope(&ns) {
        Some(scope) => scope.versions_in(&ns).await.unwrap_or_default(),
        None => Vec::new(),
    };
    for version in cached {
        if seen.contains(&version.name_any()) || !controlled_by(&version.metadata, channel) {
            continue;
        }
        let fresh = apis
            .versions
            .get_opt(&version.name_any())
            .await
            .map_err(kube_err(format!("reading version {}", version.name_any())))?;
        if let Some(fresh) = fresh
            && orphan_one(fresh, channel, &apis.versions).await?
        {
            count = count.saturating_add(1);
        }
    }
    Ok(count)
}

/// Orphans one version, again from a fresh read after a concurrent write. Whether it was
/// the channel's to orphan.
async fn orphan_one(
    mut version: ManagedOSVersion,
    channel: &ManagedOSVersionChannel,
    api: &Api<ManagedOSVersion>,
) -> Result<bool, Error> {
    let name = version.name_any();
    let what = || format!("orphaning version {name}");
    for attempt in 1..=TRIES {
        let Some(patch) = orphan::orphan_patch(&version, channel) else {
            return Ok(false);
        };
        match api.patch(&name, &params(), &Patch::Merge(patch)).await {
            Ok(_) => return Ok(true),
            Err(e) if is_status(&e, 404) => return Ok(false),
            Err(e) if is_status(&e, 409) && attempt < TRIES => {
                match api.get_opt(&name).await.map_err(kube_err(what()))? {
                    Some(fresh) => version = fresh,
                    None => return Ok(false),
                }
            }
            Err(e) => return Err(kube_err(what())(e)),
        }
    }
    Ok(false)
}
