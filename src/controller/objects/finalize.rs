//! The I/O of `syncer::orphan`: the finalizer of `versionPolicy.onChannelDelete: Orphan`
//! channels, and the orphaning of a deleted channel's versions. The pipeline runs it
//! before anything else, so a channel deleted while the operator was down is finished by
//! the first reconciliation after it comes back (the watch lists it, deletion timestamp
//! and finalizer included).

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::info;

use crate::api::ManagedOSVersionChannel;
use crate::controller::Context;
use crate::controller::Key;
use crate::controller::io::ChannelIo;
use crate::controller::io::errors::{Error, is_status, kube_err};
use crate::syncer::Note;
use crate::syncer::orphan::{self, Step};
use crate::syncer::versions::controlled_by;

/// Tries of a conditional patch that meets a concurrent write (409) before the
/// reconciliation gives up and is retried with a backoff.
const TRIES: usize = 3;

impl<I: ChannelIo> Context<I> {
    /// Does what the finalizer needs. `Some`: the reconciliation ends here (the channel is
    /// going); `None`: it goes on (the finalizer is as the policy wants it).
    pub(in crate::controller) async fn finalize(
        &self,
        channel: &ManagedOSVersionChannel,
        key: &Key,
    ) -> Result<Option<Action>, Error> {
        match orphan::step(channel) {
            Step::Nothing => Ok(None),
            Step::AddFinalizer | Step::RemoveFinalizer => {
                self.set_finalizer(channel, key).await?;
                Ok(None)
            }
            Step::Release => {
                self.set_finalizer(channel, key).await?;
                Ok(Some(Action::await_change()))
            }
            Step::OrphanThenRelease => {
                let count = self.orphan_versions(channel, key).await?;
                let note = Note {
                    warning: false,
                    reason: "VersionsOrphaned",
                    message: format!(
                        "channel deleted with versionPolicy.onChannelDelete Orphan: {count} versions left in place, flagged no longer in sync"
                    ),
                };
                info!("{}", note.message);
                let mut reference = channel.object_ref(&());
                reference.resource_version = None;
                let uid = channel.uid().unwrap_or_default();
                // Refused in a namespace that is being deleted; not worth holding the channel.
                if let Err(e) = self.publish(key, &uid, reference, &note).await {
                    info!("could not publish an event: {e}");
                }
                self.set_finalizer(channel, key).await?;
                Ok(Some(Action::await_change()))
            }
        }
    }

    /// Adds or removes the finalizer as [`orphan::step`] says, from a fresh read after a
    /// concurrent write.
    async fn set_finalizer(
        &self,
        channel: &ManagedOSVersionChannel,
        key: &Key,
    ) -> Result<(), Error> {
        let what = || format!("updating the finalizers of channel {}", key.name);
        let mut current = channel.clone();
        for attempt in 1..=TRIES {
            let add = match orphan::step(&current) {
                Step::AddFinalizer => true,
                Step::RemoveFinalizer | Step::Release | Step::OrphanThenRelease => false,
                Step::Nothing => return Ok(()),
            };
            let patch = orphan::finalizers_patch(&current, add);
            match self.io.patch_channel(key, &patch).await {
                Ok(()) => return Ok(()),
                Err(e) if is_status(&e, 404) => return Ok(()),
                Err(e) if is_status(&e, 409) && attempt < TRIES => {
                    match self.io.read_channel(key).await.map_err(kube_err(what()))? {
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
        &self,
        channel: &ManagedOSVersionChannel,
        key: &Key,
    ) -> Result<usize, Error> {
        let ns = key.namespace.clone().unwrap_or_default();
        // Read fresh, not from the cache: a version the last sync created a moment ago must
        // not be left to the garbage collector. Every version of the channel carries its label.
        // Page by page, metadata only: what is held at once is one page, however many and
        // however large the namespace's versions are.
        let mut seen = HashSet::new();
        let mut count = 0_usize;
        let mut page_token = None;
        loop {
            let (page, next) = self
                .io
                .labelled_versions(key, page_token.take())
                .await
                .map_err(kube_err(format!(
                    "listing the versions of channel {}",
                    key.name
                )))?;
            for meta in page {
                seen.insert(meta.name.clone().unwrap_or_default());
                if self.orphan_one(meta, channel, &ns).await? {
                    count = count.saturating_add(1);
                }
            }
            match next {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
        // One whose label someone removed is still the channel's: the cache knows it.
        // Not read: the finalizer stays and the attempt is retried, rather than letting the
        // channel go with a version the garbage collector would then take.
        let (cached, _) = self
            .io
            .versions(&ns, channel)
            .await
            .map_err(kube_err(format!("listing ManagedOSVersions in {ns}")))?;
        for version in cached {
            if seen.contains(&version.name_any()) || !controlled_by(&version.metadata, channel) {
                continue;
            }
            let name = version.name_any();
            let fresh = self
                .io
                .read_version(&ns, &name)
                .await
                .map_err(kube_err(format!("reading version {name}")))?;
            if let Some(fresh) = fresh
                && self.orphan_one(fresh.metadata, channel, &ns).await?
            {
                count = count.saturating_add(1);
            }
        }
        Ok(count)
    }

    /// Orphans one version, again from a fresh read after a concurrent write. Whether it
    /// was the channel's to orphan.
    async fn orphan_one(
        &self,
        mut version: ObjectMeta,
        channel: &ManagedOSVersionChannel,
        ns: &str,
    ) -> Result<bool, Error> {
        let name = version.name.clone().unwrap_or_default();
        let what = || format!("orphaning version {name}");
        for attempt in 1..=TRIES {
            let Some(patch) = orphan::orphan_patch(&version, channel) else {
                return Ok(false);
            };
            match self.io.patch_version(ns, &name, &patch).await {
                Ok(()) => return Ok(true),
                Err(e) if is_status(&e, 404) => return Ok(false),
                Err(e) if is_status(&e, 409) && attempt < TRIES => {
                    match self
                        .io
                        .read_version(ns, &name)
                        .await
                        .map_err(kube_err(what()))?
                    {
                        Some(fresh) => version = fresh.metadata,
                        None => return Ok(false),
                    }
                }
                Err(e) => return Err(kube_err(what())(e)),
            }
        }
        Ok(false)
    }
}
