//! The versions of a sync: observed from the cache, those someone else changed read fresh
//! (`syncer::drift`); written all or nothing, what the decision verified remembered first.

use std::sync::Arc;

use tracing::{debug, warn};

use super::{Attempt, ChannelIo, Decision, Effect, Error, kube_err};

impl<I: ChannelIo> Attempt<'_, I> {
    /// The channel's versions as the cache holds them; those someone else changed since
    /// the operator wrote or verified them are read in full, and only those.
    pub(super) async fn observe_versions(&mut self) -> Result<(), Error> {
        let io = &self.ctx.io;
        let ns = &self.namespace;
        let (mut versions, known) = io
            .versions(ns, &self.channel)
            .await
            .map_err(kube_err(format!("listing ManagedOSVersions in {ns}")))?;
        for name in crate::syncer::drift::to_read_fresh(&self.channel, &versions, &known) {
            debug!("version {ns}/{name} was changed by someone else: reading it in full");
            let fresh = io
                .read_version(ns, &name)
                .await
                .map_err(kube_err(format!("reading ManagedOSVersion {ns}/{name}")))?;
            versions.retain(|v| v.metadata.name.as_deref() != Some(name.as_str()));
            versions.extend(fresh.map(Arc::new));
        }
        self.seen.versions = Some(versions);
        Ok(())
    }

    /// The version writes of the decision, all or nothing. What it verified is remembered
    /// first: a write to the same version then replaces it with the resourceVersion it made.
    pub(super) async fn write(&self, decision: &Decision) -> Result<(), Error> {
        let io = &self.ctx.io;
        if !decision.verified.is_empty() {
            io.remember_verified(&self.namespace, &decision.verified);
        }
        if decision.effects.iter().any(is_version_write) {
            io.write_versions(&self.namespace, &decision.effects)
                .await?;
        }
        // After the versions; a refusal (RBAC without ConfigMaps, a quota) is logged, and
        // the sync stands: changelogs are a reader's aid, not the channel's data.
        for effect in &decision.effects {
            if let Effect::Changelogs { name, files } = effect
                && let Err(e) = io
                    .store_changelogs(&self.channel, name, files.as_deref())
                    .await
            {
                warn!(configmap = %name, "the changelogs were not stored: {e}");
            }
        }
        Ok(())
    }
}

fn is_version_write(effect: &Effect) -> bool {
    matches!(
        effect,
        Effect::ApplyVersion { .. } | Effect::MarkVersion { .. } | Effect::DeleteVersion { .. }
    )
}
