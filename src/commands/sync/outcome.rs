//! When a requested sync has finished, and how, from what the channel shows.
//!
//! The operator records in `status.syncRequestedAt` the request value a sync serves: when
//! that sync begins (in the same status write that sets `Reconciling`), or with its outcome
//! when it begins and ends in one step (a json fetch, a pod that cannot be created). A sync
//! already running when the request came keeps the value it started with, and the request
//! is served by the next one. So the outcome of a sync that started after the request is
//! the `Ready` condition of a status that records the request and has no `Reconciling`.
//!
//! A value someone else writes to the annotation after ours also counts: the operator may
//! serve it instead of ours (it reads only the latest), and its sync starts after ours was
//! asked for too. Times play no part: they are the API server's and the operator's clocks,
//! at one-second resolution.

use std::collections::BTreeSet;

use crate::api::{ManagedOSVersionChannel, READY, SYNC_REQUESTED_AT_ANNOTATION, reason};

/// Where a requested sync stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Not finished; what the channel says meanwhile, for the progress line.
    Waiting(String),
    /// A sync that started after the request succeeded; the `Ready` message.
    Succeeded(String),
    /// It failed, or no sync will run (suspended, disabled, invalid, deleted).
    Failed { reason: String, message: String },
}

/// One request, and the request values that count as served for it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Ours and any written after it.
    accepted: BTreeSet<String>,
    uid: Option<String>,
    /// A sync that started before the request was seen running after it: its changes
    /// are among those made since the request.
    pub earlier_sync: bool,
}

impl Request {
    /// The request just written with `value` to the channel with this uid (a channel
    /// recreated under the same name is another channel).
    pub fn new(value: &str, uid: Option<String>) -> Self {
        Request {
            accepted: BTreeSet::from([value.to_string()]),
            uid,
            earlier_sync: false,
        }
    }

    /// Looks at a state of the channel written after the request.
    pub fn observe(&mut self, ch: &ManagedOSVersionChannel) -> State {
        if self.uid.is_some() && ch.metadata.uid != self.uid {
            return gone();
        }
        if ch.metadata.deletion_timestamp.is_some() {
            return failed("Deleted", "the channel is being deleted");
        }
        if let Some(value) = ch
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SYNC_REQUESTED_AT_ANNOTATION))
        {
            self.accepted.insert(value.clone());
        }
        // The operator does not serve requests of a channel that does not sync.
        if ch.spec.suspend == Some(true) {
            return failed(
                reason::SUSPENDED,
                "the channel is suspended (spec.suspend is true): no sync runs until it is false",
            );
        }
        if ch.spec.enabled == Some(false) {
            return failed(
                reason::CHANNEL_DISABLED,
                "syncing is disabled (spec.enabled is false)",
            );
        }
        let status = ch.status.clone().unwrap_or_default();
        let ready = status.condition(READY);
        if let Some(r) = ready
            && r.reason == reason::INVALID_CONFIGURATION
            && r.observed_generation.is_some()
            && r.observed_generation == ch.metadata.generation
        {
            return failed(&r.reason, &r.message);
        }
        let reconciling = status.sync_under_way();
        let served = status
            .sync_requested_at
            .as_ref()
            .is_some_and(|v| self.accepted.contains(v));
        match (served, reconciling, ready) {
            (true, None, Some(r)) if r.status == "True" => State::Succeeded(r.message.clone()),
            (true, None, Some(r)) => failed(&r.reason, &r.message),
            (true, None, None) => {
                // The operator always writes Ready with an outcome; wait for it.
                State::Waiting("the sync finished; waiting for its outcome".into())
            }
            (true, Some(c), _) => State::Waiting(one_line(&c.message)),
            (false, Some(c), _) => {
                self.earlier_sync = true;
                State::Waiting(format!(
                    "a sync that started before the request is finishing ({}); the requested one follows",
                    one_line(&c.message)
                ))
            }
            (false, None, _) => {
                State::Waiting("waiting for the operator to pick up the request".into())
            }
        }
    }
}

/// The channel was deleted (or replaced by another of the same name) while we waited.
pub fn gone() -> State {
    failed(
        "Deleted",
        "the channel was deleted while waiting for the sync",
    )
}

fn failed(reason: &str, message: &str) -> State {
    State::Failed {
        reason: reason.into(),
        message: one_line(message),
    }
}

/// Messages are printed on one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn channel(annotation: &str, status: serde_json::Value) -> ManagedOSVersionChannel {
        serde_json::from_value(json!({
            "apiVersion": "rancheros.cattle.io/v1",
            "kind": "ManagedOSVersionChannel",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "generation": 2,
                         "annotations": {SYNC_REQUESTED_AT_ANNOTATION: annotation}},
            "spec": {"type": "custom"},
            "status": status,
        }))
        .unwrap()
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "observedGeneration": 2, "lastTransitionTime": "2025-01-01T00:00:00Z"})
    }

    fn ready_ok() -> serde_json::Value {
        cond(
            "Ready",
            "True",
            "Synchronized",
            "synchronized 2 versions (2 created)",
        )
    }

    fn ready_failed(reason: &str, message: &str) -> serde_json::Value {
        cond("Ready", "False", reason, message)
    }

    fn running(message: &str) -> serde_json::Value {
        cond("Reconciling", "True", "Synchronizing", message)
    }

    fn failure(reason: &str, message: &str) -> State {
        State::Failed {
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// The channel with request `annotation`, whose status records the request value
    /// `served` and shows `conditions`.
    fn served(
        annotation: &str,
        served: &str,
        conditions: &[serde_json::Value],
    ) -> ManagedOSVersionChannel {
        channel(
            annotation,
            json!({"syncRequestedAt": served, "conditions": conditions}),
        )
    }

    #[test]
    fn the_last_outcome_before_the_request_is_not_ours() {
        let mut r = Request::new("B", Some("u1".into()));
        // Served "A" earlier, nothing running: the operator has not picked B up yet.
        let ch = served("B", "A", &[ready_ok()]);
        assert_eq!(
            r.observe(&ch),
            State::Waiting("waiting for the operator to pick up the request".into())
        );
        // Never synced on request at all.
        let ch = channel("B", json!({"conditions": [ready_ok()]}));
        assert!(matches!(r.observe(&ch), State::Waiting(_)));
    }

    #[test]
    fn a_sync_that_began_before_the_request_does_not_count() {
        let mut r = Request::new("B", Some("u1".into()));
        let ch = served("B", "A", &[ready_ok(), running("syncer pod c started")]);
        let State::Waiting(text) = r.observe(&ch) else {
            panic!()
        };
        assert!(text.contains("started before the request"), "{text}");
        assert!(r.earlier_sync);
        // It ends, still recording A: not ours either.
        let ch = served("B", "A", &[ready_ok()]);
        assert!(matches!(r.observe(&ch), State::Waiting(_)));
    }

    #[test]
    fn ours_running_then_finished() {
        let mut r = Request::new("B", Some("u1".into()));
        let ch = served("B", "B", &[ready_ok(), running("syncer pod c\nstarted")]);
        assert_eq!(
            r.observe(&ch),
            State::Waiting("syncer pod c started".into())
        );
        let ch = served("B", "B", &[ready_ok()]);
        assert_eq!(
            r.observe(&ch),
            State::Succeeded("synchronized 2 versions (2 created)".into())
        );
    }

    #[test]
    fn a_failure_names_its_reason_and_message() {
        let mut r = Request::new("B", None);
        let ready = ready_failed(
            "FailedToSync",
            "the runner exited with code 3:\nboom (attempt 1; retrying in 1m)",
        );
        let ch = served("B", "B", &[ready]);
        assert_eq!(
            r.observe(&ch),
            failure(
                "FailedToSync",
                "the runner exited with code 3: boom (attempt 1; retrying in 1m)"
            )
        );
    }

    #[test]
    fn a_later_request_of_someone_else_counts() {
        let mut r = Request::new("B", Some("u1".into()));
        // Someone asked again ("C") before the operator picked ours up...
        let ch = served("C", "A", &[ready_ok()]);
        assert!(matches!(r.observe(&ch), State::Waiting(_)));
        // ...and the operator served only the latest.
        let ch = served("C", "C", &[ready_ok()]);
        assert!(matches!(r.observe(&ch), State::Succeeded(_)));
    }

    #[test]
    fn channels_that_do_not_sync_fail_at_once() {
        let mut r = Request::new("B", Some("u1".into()));
        let mut ch = served("B", "A", &[ready_ok()]);
        ch.spec.suspend = Some(true);
        assert!(matches!(r.observe(&ch), State::Failed { reason, .. } if reason == "Suspended"));
        ch.spec.suspend = None;
        ch.spec.enabled = Some(false);
        assert!(
            matches!(r.observe(&ch), State::Failed { reason, .. } if reason == "ChannelDisabled")
        );
        // Invalid for this generation: the operator will not sync it.
        let invalid = ready_failed("InvalidConfiguration", "spec.type is empty");
        let ch = served("B", "A", &[invalid]);
        assert_eq!(
            r.observe(&ch),
            failure("InvalidConfiguration", "spec.type is empty")
        );
        // Invalid for an older generation: the new spec has not been looked at yet.
        let mut ch = ch;
        ch.metadata.generation = Some(3);
        assert!(matches!(r.observe(&ch), State::Waiting(_)));
    }

    #[test]
    fn a_deleted_or_replaced_channel_fails() {
        let mut r = Request::new("B", Some("u1".into()));
        let mut ch = channel("B", json!({}));
        ch.metadata.uid = Some("u2".into());
        assert!(matches!(r.observe(&ch), State::Failed { reason, .. } if reason == "Deleted"));
        let mut ch = channel("B", json!({}));
        ch.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(matches!(r.observe(&ch), State::Failed { reason, .. } if reason == "Deleted"));
    }
}
