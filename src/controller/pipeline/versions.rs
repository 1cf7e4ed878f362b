//! The versions of a sync: observed from the cache, those someone else changed read fresh
//! (`syncer::drift`); written all or nothing, what the decision verified remembered first.

use std::sync::Arc;

use tracing::{debug, warn};

use super::{Attempt, ChannelIo, Decision, Effect, Error, kube_err};
use crate::api::{ManagedOSVersionChannel, READY};
use crate::controller::objects::owned::{self, Done};
use crate::syncer::Note;

/// The reason of the Event that says a changelogs ConfigMap's name is held by someone else.
pub const CHANGELOGS_CONFLICT: &str = "ChangelogsConflict";

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
    /// Then the changelogs, through `owned`: a name held by someone else is said in `Ready`
    /// and an Event, as a version's is, and the sync stands.
    pub(super) async fn write(&mut self, decision: &mut Decision) -> Result<(), Error> {
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
        let mut conflicts = Vec::new();
        for effect in &decision.effects {
            let Effect::Changelogs { name, files } = effect else {
                continue;
            };
            let metrics = &self.ctx.metrics;
            match owned::store_changelogs(io, metrics, &self.channel, name, files.as_deref()).await
            {
                Ok(Done::Conflict(why)) => conflicts.push(why),
                Ok(Done::Changed | Done::Nothing) => {}
                Ok(Done::Replaced) => {
                    warn!(configmap = %name, "the changelogs were not stored: the ConfigMap was replaced meanwhile");
                    self.seen.changelogs_unstored = true;
                }
                Err(e) => warn!(configmap = %name, "the changelogs were not stored: {e}"),
            }
        }
        for why in conflicts {
            // The data is read again at the next sync (not kept), so that the changelogs
            // are stored, or the conflict said again, until it is resolved.
            self.seen.changelogs_unstored = true;
            report_conflict(&self.channel, decision, why);
        }
        Ok(())
    }
}

/// A changelogs ConfigMap held by someone else: a line in `Ready` and a warning Event, the
/// sync standing.
fn report_conflict(channel: &ManagedOSVersionChannel, decision: &mut Decision, why: String) {
    let message = format!(
        "the changelogs were not stored: {why} (remove or rename it, and the next sync stores them)"
    );
    let status = decision
        .status
        .get_or_insert_with(|| channel.status.clone().unwrap_or_default());
    if let Some(ready) = status.conditions.iter_mut().find(|c| c.type_ == READY) {
        ready.message = format!("{}; {message}", ready.message);
    }
    decision.events.push(Note {
        warning: true,
        reason: CHANGELOGS_CONFLICT,
        message,
    });
}

fn is_version_write(effect: &Effect) -> bool {
    matches!(
        effect,
        Effect::ApplyVersion { .. } | Effect::MarkVersion { .. } | Effect::DeleteVersion { .. }
    )
}
