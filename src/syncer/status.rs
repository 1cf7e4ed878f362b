//! The channel's conditions, as kstatus-based tools (Flux, Argo CD, `kubectl wait`) read
//! them: `Ready` for the last finished sync, `Reconciling` while a sync is under way,
//! `Stalled` when a human must act. A condition that does not hold is left out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::Decider;
use crate::api::{ManagedOSVersionChannelStatus, READY, RECONCILING, STALLED, reason};

/// `status` of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    fn as_str(self) -> &'static str {
        match self {
            Truth::True => "True",
            Truth::False => "False",
            Truth::Unknown => "Unknown",
        }
    }
}

/// Sets the condition `type_`; its transition time moves only when its status does.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: Truth,
    reason: &str,
    message: String,
    generation: i64,
    now: &Time,
) {
    let previous = conditions.iter().position(|c| c.type_ == type_);
    let last_transition_time = match previous.and_then(|i| conditions.get(i)) {
        Some(p) if p.status == status.as_str() => p.last_transition_time.clone(),
        _ => now.clone(),
    };
    let condition = Condition {
        type_: type_.into(),
        status: status.as_str().into(),
        reason: reason.into(),
        // The one place every condition message passes: bounded, no control characters.
        message: crate::text::message(&message),
        observed_generation: Some(generation),
        last_transition_time,
    };
    match previous.and_then(|i| conditions.get_mut(i)) {
        Some(slot) => *slot = condition,
        None => conditions.push(condition),
    }
}

/// Leaves the condition out: it does not hold.
pub fn clear(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

impl Decider<'_> {
    /// The current status with `Ready` set (kept as it is when `None`), `Reconciling` True
    /// with the message given (else left out), `Stalled` True with the reason and message
    /// given (else left out), for this generation.
    pub(super) fn status_with(
        &self,
        ready: Option<(Truth, &str, String)>,
        reconciling: Option<String>,
        stalled: Option<(&str, String)>,
    ) -> ManagedOSVersionChannelStatus {
        let mut s = self.status.clone();
        s.observed_generation = Some(self.generation);
        let now = self.timestamp();
        let generation = self.generation;
        if let Some((truth, reason, message)) = ready {
            set(
                &mut s.conditions,
                READY,
                truth,
                reason,
                message,
                generation,
                &now,
            );
        }
        match reconciling {
            Some(m) => set(
                &mut s.conditions,
                RECONCILING,
                Truth::True,
                reason::SYNCHRONIZING,
                m,
                generation,
                &now,
            ),
            None => clear(&mut s.conditions, RECONCILING),
        }
        match stalled {
            Some((r, m)) => set(
                &mut s.conditions,
                STALLED,
                Truth::True,
                r,
                m,
                generation,
                &now,
            ),
            None => clear(&mut s.conditions, STALLED),
        }
        s
    }

    /// `Ready` while a sync runs: kept during a routine resync, `Unknown` on a first sync
    /// and after a spec change (its last outcome says nothing of this spec).
    pub(super) fn ready_while_syncing(&self) -> Option<(Truth, &'static str, String)> {
        // An invalid spec that the operator now accepts (its flags changed) has no outcome
        // to keep either.
        let routine = self.ready_condition().is_some_and(|r| {
            r.observed_generation == Some(self.generation)
                && r.reason != reason::SYNCHRONIZING
                && r.reason != reason::INVALID_CONFIGURATION
        });
        (!routine).then(|| {
            (
                Truth::Unknown,
                reason::SYNCHRONIZING,
                "the first sync of this spec is under way".to_string(),
            )
        })
    }

    /// A sync begins (its pod is created, or it waits for a slot): `Reconciling` says so.
    pub(super) fn sync_begins(&self, what: String) -> ManagedOSVersionChannelStatus {
        let mut status = self.status_with(self.ready_while_syncing(), Some(what), None);
        status.sync_requested_at = self.requested_at().or(status.sync_requested_at);
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let mut c = Vec::new();
        set(&mut c, "Ready", Truth::True, "A", "one".into(), 1, &at(10));
        set(&mut c, "Ready", Truth::True, "B", "two".into(), 2, &at(20));
        assert_eq!(c[0].last_transition_time, at(10));
        assert_eq!(
            (c[0].reason.as_str(), c[0].observed_generation),
            ("B", Some(2))
        );
        set(
            &mut c,
            "Ready",
            Truth::Unknown,
            "C",
            "three".into(),
            2,
            &at(30),
        );
        assert_eq!(c[0].last_transition_time, at(30));
        set(
            &mut c,
            "Stalled",
            Truth::True,
            "D",
            "four".into(),
            2,
            &at(40),
        );
        assert_eq!(c.len(), 2);
        clear(&mut c, "Stalled");
        assert_eq!(c.len(), 1);
    }
}
