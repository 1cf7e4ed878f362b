//! Step 6 of an attempt: the status written, the outcome counted, the Events published, and
//! when to look again.

use kube::Resource;
use kube::runtime::controller::Action;
use tracing::{info, warn};

use super::{Attempt, ChannelIo, Decision, Error, kube_err};

impl<I: ChannelIo> Attempt<'_, I> {
    /// Writes the status and events, counts the outcome, and says when to look again.
    pub(super) async fn finish(&self, decision: Decision) -> Result<Action, Error> {
        let ctx = self.ctx;
        if let Some(status) = &decision.status {
            let shown = ctx
                .io
                .patch_status(self.key, status)
                .await
                .map_err(kube_err(format!(
                    "writing the status of channel {}",
                    self.name()
                )))?;
            ctx.metrics.status_written();
            if !shown {
                self.mark_stale();
            }
        }
        if let Some(outcome) = &decision.outcome {
            ctx.metrics.sync_finished(outcome);
        }
        let status = decision.status.as_ref().or(self.channel.status.as_ref());
        if let Some(status) = status {
            ctx.metrics
                .observe_channel(self.key, status, self.resolved.sync_interval());
        }
        // Events name the channel, not one version of it.
        let mut reference = self.channel.object_ref(&());
        reference.resource_version = None;
        for note in &decision.events {
            if note.warning {
                warn!(
                    reason = note.reason,
                    "{}",
                    crate::text::message(&note.message)
                );
            } else {
                info!(
                    reason = note.reason,
                    "{}",
                    crate::text::message(&note.message)
                );
            }
            // An event that cannot be published is not worth failing the sync for.
            if let Err(e) = ctx
                .publish(self.key, &self.uid, reference.clone(), note)
                .await
            {
                warn!("could not publish an event: {e}");
            }
        }
        Ok(match decision.requeue {
            Some(after) => Action::requeue(after.min(crate::config::MAX_DURATION)),
            None => Action::await_change(),
        })
    }
}
