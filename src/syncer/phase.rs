//! The phase of a channel: the one question every decision starts with, answered up front
//! from what was observed, in the order of precedence (a deletion, then a pause, then a
//! failed attempt, a backoff, a disabled or invalid spec, then the syncer pod, then the
//! clock).

use super::*;

/// Where a channel stands, for this observation.
#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    /// Being deleted: owner references take the pod and the versions with it.
    Deleted,
    /// `spec.suspend`: no sync, no pod, no version touched.
    Suspended,
    /// The I/O layer met a failure in this attempt: it is a failed sync.
    Failed,
    /// A failed attempt's backoff is not over: look again after this long.
    BackingOff(Duration),
    /// `spec.enabled: false`.
    Disabled,
    /// The spec cannot be acted on, and why.
    Invalid(String),
    /// The channel's own syncer pod is there and not terminating: its sync runs.
    Running,
    /// A pod of the channel's name that it does not control stands in the way of a due sync.
    Blocked,
    /// Nothing to do before this long (a pod terminating, or the next sync not due yet).
    Waiting(Duration),
    /// A sync is due now and starts (it needs a sync slot); `first`: no sync of this
    /// spec has finished yet.
    Due { first: bool },
}

impl Phase {
    /// Whether a decision in this phase starts a sync, and so needs a sync slot.
    pub fn starts_sync(&self) -> bool {
        matches!(self, Phase::Due { .. })
    }
}

/// The phase of the observed channel, its spec resolved by the caller.
pub fn phase(obs: &Observation, settings: &Settings, resolved: &Resolved) -> Phase {
    Decider::new(obs, settings, resolved).phase()
}

impl Decider<'_> {
    /// The channel's own pod, if the pod observed is one.
    pub(super) fn our_pod(&self) -> Option<&Pod> {
        self.obs
            .pod
            .filter(|p| versions::controlled_by(&p.metadata, self.ch))
    }

    pub(super) fn phase(&self) -> Phase {
        if self.ch.metadata.deletion_timestamp.is_some() {
            return Phase::Deleted;
        }
        // A pause comes first: whatever else holds.
        if self.ch.spec.suspend == Some(true) {
            return Phase::Suspended;
        }
        if self.obs.error.is_some() {
            return Phase::Failed;
        }
        // After a failed attempt (an API error on a disabled or invalid channel too), wait
        // out the backoff before trying again: no path retries in a tight loop.
        if let Some(wait) = self.backing_off() {
            return Phase::BackingOff(wait);
        }
        if !config::enabled(&self.ch.spec) {
            return Phase::Disabled;
        }
        let config = match &self.resolved.config {
            Ok(c) => c,
            Err(message) => return Phase::Invalid(message.clone()),
        };
        // Only custom channels use a pod; any other pod of that name is not their business.
        let custom = matches!(config.source, Source::Custom(_));
        let due = self.sync_due();
        match (self.obs.pod, self.our_pod()) {
            (Some(pod), Some(_)) if pod.metadata.deletion_timestamp.is_none() => Phase::Running,
            (Some(_), None) if custom && due.is_zero() => Phase::Blocked,
            // Ours and terminating, or someone else's while no sync is due: wait.
            (Some(_), _) if custom => Phase::Waiting(if due.is_zero() { POLL } else { due }),
            _ if !due.is_zero() => Phase::Waiting(due),
            _ => Phase::Due {
                first: self.ready_while_syncing().is_some(),
            },
        }
    }
}
