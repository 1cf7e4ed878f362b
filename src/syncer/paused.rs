//! The states in which no sync runs: suspended (a pause), disabled (versions flagged or
//! deleted), invalid (the spec cannot be acted on).

use super::*;

impl Decider<'_> {
    /// `spec.suspend`: a pause. The sync under way stops (its pod goes); versions are left
    /// as they are; `Ready` keeps the last outcome under the reason `Suspended`.
    pub(super) fn suspended(&self, our_pod: Option<&Pod>) -> Decision {
        let effects: Vec<Effect> = our_pod.map(Self::delete_pod).into_iter().collect();
        if self.already(reason::SUSPENDED) {
            return Decision {
                effects,
                ..Default::default()
            };
        }
        let (truth, message) = match self.ready_condition() {
            Some(r) if r.reason == reason::SUSPENDED => (truth_of(&r.status), r.message.clone()),
            Some(r) => (
                // A sync cut short by the pause says nothing: its outcome is unknown.
                if r.reason == reason::SYNCHRONIZING {
                    Truth::Unknown
                } else {
                    truth_of(&r.status)
                },
                format!(
                    "suspended (spec.suspend is true): no syncs until it is false; the last outcome: {}: {}",
                    r.reason, r.message
                ),
            ),
            None => (
                Truth::Unknown,
                "suspended (spec.suspend is true): no syncs until it is false; no sync has run yet"
                    .into(),
            ),
        };
        self.paused(
            effects,
            (truth, reason::SUSPENDED, message),
            "channel suspended: no syncs, versions are left as they are".into(),
        )
    }

    /// No sync is due while paused: `Ready` says why, one Normal Event says it changed.
    fn paused(
        &self,
        effects: Vec<Effect>,
        ready: (Truth, &'static str, String),
        note: String,
    ) -> Decision {
        let reason = ready.1;
        let mut status = self.status_with(Some(ready), None, None);
        status.next_sync_time = None;
        Decision {
            effects,
            status: Some(status),
            events: vec![Note {
                warning: false,
                reason,
                message: note,
            }],
            ..Default::default()
        }
    }

    pub(super) fn disabled(&self, our_pod: Option<&Pod>) -> Decision {
        let mut effects: Vec<Effect> = our_pod.map(Self::delete_pod).into_iter().collect();
        if self.already(reason::CHANNEL_DISABLED) {
            return Decision {
                effects,
                ..Default::default()
            };
        }
        let Some(existing) = self.obs.versions else {
            return needs(Needs {
                versions: true,
                ..Default::default()
            });
        };
        let delete = self
            .ch
            .spec
            .delete_no_longer_in_sync_versions
            .unwrap_or(false);
        // Nothing is listed, so there is nothing to conflict with.
        let plan = versions::plan(self.ch, None, existing, delete).unwrap_or_default();
        let summary = plan.summary();
        effects.extend(plan.effects);
        let ready = (
            Truth::True,
            reason::CHANNEL_DISABLED,
            "syncing is disabled (spec.enabled is false)".into(),
        );
        self.paused(
            effects,
            ready,
            format!("channel disabled; versions: {summary}"),
        )
    }

    pub(super) fn invalid(&self, our_pod: Option<&Pod>, message: String) -> Decision {
        let effects: Vec<Effect> = our_pod.map(Self::delete_pod).into_iter().collect();
        let ready = (Truth::False, reason::INVALID_CONFIGURATION, message.clone());
        let stalled = (reason::INVALID_CONFIGURATION, message.clone());
        let mut status = self.status_with(Some(ready), None, Some(stalled));
        status.next_sync_time = None;
        let events = if self.already(reason::INVALID_CONFIGURATION) {
            vec![]
        } else {
            vec![Note {
                warning: true,
                reason: reason::INVALID_CONFIGURATION,
                message,
            }]
        };
        Decision {
            effects,
            status: Some(status),
            events,
            ..Default::default()
        }
    }
}
