//! Unit tests of the decision core: observations in, decisions out, no cluster. The
//! fixtures are here; the tests are grouped by concern in the modules below.

use super::*;
use crate::api::{CHANNEL_LABEL, NO_LONGER_IN_SYNC_ANNOTATION};
use crate::channel::ChannelVersion;
pub(crate) use crate::failure::{ErrorClass, SyncFailure};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
pub(crate) use serde_json::{Value, json};

mod bounds;
mod changelogs;
mod data;
mod json;
mod pod_images;
mod pods;
mod policy;
mod status;
mod timing;

pub(crate) fn channel(spec: Value) -> ManagedOSVersionChannel {
    let mut ch = ManagedOSVersionChannel::new("chan", serde_json::from_value(spec).unwrap());
    ch.metadata.namespace = Some("ns".into());
    ch.metadata.uid = Some("uid-1".into());
    ch.metadata.generation = Some(1);
    // The operator recorded creating the pod `pod_in` makes (the controller writes the
    // uid the API server gave it).
    ch.status = Some(ManagedOSVersionChannelStatus {
        syncer_pod_uid: Some(POD_UID.into()),
        ..Default::default()
    });
    ch
}

/// `managedFields` entries without field sets, as the metadata-only cache keeps them:
/// `(manager, second)` each.
pub(crate) fn writers(at: &[(&str, i64)]) -> Vec<ManagedFieldsEntry> {
    at.iter()
        .map(|(manager, second)| ManagedFieldsEntry {
            manager: Some((*manager).into()),
            operation: Some("Apply".into()),
            time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::from_second(*second).unwrap(),
            )),
            ..Default::default()
        })
        .collect()
}

/// The uid of the pods `pod_in` makes.
pub(crate) const POD_UID: &str = "pod-uid";

/// A version as the API server shows it after the operator applied `v`: with a uid and
/// the operator's `managedFields` entry.
pub(crate) fn existing_version(
    ch: &ManagedOSVersionChannel,
    mut v: ManagedOSVersion,
) -> ManagedOSVersion {
    v.metadata.uid = Some(format!("{}-uid", v.name_any()));
    v.metadata.namespace = ch.namespace();
    v.metadata.managed_fields = Some(vec![applied_by_operator(&v)]);
    v
}

/// Versions as the watch cache shares them.
pub(crate) fn arcs(versions: &[ManagedOSVersion]) -> Vec<Arc<ManagedOSVersion>> {
    versions.iter().cloned().map(Arc::new).collect()
}

/// The `managedFields` entry of an apply of `v` by the operator.
pub(crate) fn applied_by_operator(v: &ManagedOSVersion) -> ManagedFieldsEntry {
    fn field_set(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (format!("f:{k}"), field_set(v)))
                    .collect(),
            ),
            _ => json!({}),
        }
    }
    let fields = json!({
        "f:metadata": {
            "f:labels": field_set(&json!(v.labels())),
            "f:annotations": field_set(&json!(v.annotations())),
        },
        "f:spec": field_set(&serde_json::to_value(&v.spec).unwrap()),
    });
    ManagedFieldsEntry {
        manager: Some(crate::api::FIELD_MANAGER.into()),
        operation: Some("Apply".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        ..Default::default()
    }
}

pub(crate) const SAMPLE: &str = r#"[{"metadata":{"name":"foo"},"spec":{"version":"v1","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v1"}}},{"metadata":{"name":"bar"},"spec":{"version":"v2","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v2"}}}]"#;

/// The decision, the channel's spec resolved as an attempt resolves it.
pub(crate) fn decide(obs: &Observation, settings: &Settings) -> Decision {
    super::decide(obs, settings, &settings.resolve_channel(obs.channel))
}

pub(crate) fn settings() -> Settings {
    Settings {
        operator_image: "rancheros-operator:dev".into(),
        sync_timeout: Duration::from_secs(300),
        max_output_bytes: 1 << 20,
        retry_delay: Duration::from_secs(10),
        max_concurrent_syncs: 10,
        json_cache_bytes: 1 << 20,
        max_versions_per_channel: 10_000,
        syncer_image_pull_secrets: Vec::new(),
        // Requests served at once (the request window has its own test).
        min_request_interval: Duration::ZERO,
        // The flags' defaults: bounds, no privileged runners.
        ..Settings::default()
    }
}

/// A failure the I/O layer met (an API error), as it reaches the decision core.
pub(crate) fn api_failure(message: &str) -> SyncFailure {
    SyncFailure::Api {
        class: ErrorClass::Retryable,
        message: message.into(),
    }
}

pub(crate) fn sample_channel() -> ManagedOSVersionChannel {
    channel(json!({
        "type": "custom",
        "options": {"image": "runner:1", "command": ["/bin/bash", "-c", "--"], "args": ["echo hi > /output/data"],
                    "mountPath": "/output", "outputFile": "/output/data"},
        "upgradeContainer": {}
    }))
}

pub(crate) fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

pub(crate) fn obs<'a>(ch: &'a ManagedOSVersionChannel, now: Timestamp) -> Observation<'a> {
    Observation::new(ch, now)
}

pub(crate) fn framed(data: &str) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_framed(&mut out, data.as_bytes()).unwrap();
    out
}

pub(crate) fn ready(d: &Decision) -> &Condition {
    d.status
        .as_ref()
        .expect("a status")
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .expect("a Ready condition")
}

/// The condition of this type the decision writes, if any.
pub(crate) fn condition<'a>(d: &'a Decision, type_: &str) -> Option<&'a Condition> {
    d.status.as_ref().expect("a status").condition(type_)
}

/// The decision, at `now`, on `ch`'s syncer pod (made at `created`) whose runner exited
/// with `code` and logged `log`.
pub(crate) fn runner_failed(
    ch: &ManagedOSVersionChannel,
    created: i64,
    code: i32,
    log: &str,
    now: i64,
) -> Decision {
    let pod = pod_in(ch, t(created), runner_failed_status(code));
    decide(
        &Observation {
            pod: Some(&pod),
            runner_log: Some(log),
            ..obs(ch, t(now))
        },
        &settings(),
    )
}

/// A sync of `ch` that starts at `now` and whose runner fails (exit 1, log "boom") a second
/// later: the channel with that sync in its status, and the decision on the failure.
pub(crate) fn failed_run(
    ch: &ManagedOSVersionChannel,
    now: i64,
) -> (ManagedOSVersionChannel, Decision) {
    let ch = started(ch, now);
    let d = runner_failed(&ch, now, 1, "boom", now + 1);
    (ch, d)
}

/// The pod the decision creates first (or a panic that shows the decision).
#[track_caller]
pub(crate) fn created_pod(d: &Decision) -> &Pod {
    let Some(Effect::CreatePod(pod)) = d.effects.first() else {
        panic!("{d:?}")
    };
    pod
}

/// The decision at `at` for `ch` with `allow_privileged_runners` set.
pub(crate) fn privileged_decision(ch: &ManagedOSVersionChannel, at: i64) -> Decision {
    let allowed = Settings {
        allow_privileged_runners: true,
        ..settings()
    };
    decide(&obs(ch, t(at)), &allowed)
}

/// Asserts the status and reason of a condition.
#[track_caller]
pub(crate) fn assert_status_reason(c: &Condition, status: &str, reason: &str) {
    assert_eq!((c.status.as_str(), c.reason.as_str()), (status, reason));
}

/// Asserts that the message of `c` starts with `start`.
#[track_caller]
pub(crate) fn assert_message_starts(c: &Condition, start: &str) {
    assert!(c.message.starts_with(start), "{}", c.message);
}

/// Asserts that the sync failed: its pod goes, nothing else is written, and Ready's message
/// starts with `start`.
#[track_caller]
pub(crate) fn assert_sync_failed(d: &Decision, start: &str) {
    assert_eq!(descriptions(d), ["delete pod chan"]);
    assert_message_starts(ready(d), start);
}

/// Asserts that the message of `c` holds `part`.
#[track_caller]
pub(crate) fn assert_message_has(c: &Condition, part: &str) {
    assert!(c.message.contains(part), "{}", c.message);
}

/// Asserts that the message of `c` ends with `end`.
#[track_caller]
pub(crate) fn assert_message_ends(c: &Condition, end: &str) {
    assert!(c.message.ends_with(end), "{}", c.message);
}

/// The decision with only the pod observed.
pub(crate) fn at_pod(ch: &ManagedOSVersionChannel, pod: &Pod, now: Timestamp) -> Decision {
    decide(
        &Observation {
            pod: Some(pod),
            ..obs(ch, now)
        },
        &settings(),
    )
}

/// The decision once the display log and the versions are read too.
pub(crate) fn reading(
    ch: &ManagedOSVersionChannel,
    pod: &Pod,
    log: &[u8],
    versions: &[ManagedOSVersion],
    now: Timestamp,
) -> Decision {
    let versions = arcs(versions);
    decide(
        &Observation {
            versions: Some(&versions),
            ..log_read(ch, pod, log, now)
        },
        &settings(),
    )
}

/// What is observed once the display log is read too, with no versions.
pub(crate) fn log_read<'a>(
    ch: &'a ManagedOSVersionChannel,
    pod: &'a Pod,
    log: &'a [u8],
    now: Timestamp,
) -> Observation<'a> {
    Observation {
        pod: Some(pod),
        display_log: Some(log),
        versions: Some(&[]),
        ..obs(ch, now)
    }
}

/// The sample channel, and its syncer pod made at t(0) with its output ready.
pub(crate) fn sample_ready() -> (ManagedOSVersionChannel, Pod) {
    let ch = sample_channel();
    let pod = ready_pod(&ch, 0);
    (ch, pod)
}

/// [`sample_ready`], the channel's status recording the sync started at t(0).
pub(crate) fn started_ready() -> (ManagedOSVersionChannel, Pod) {
    let ch = started(&sample_channel(), 0);
    let pod = ready_pod(&ch, 0);
    (ch, pod)
}

/// The syncer pod of `ch`'s sync started at `created`, its output ready.
pub(crate) fn ready_pod(ch: &ManagedOSVersionChannel, created: i64) -> Pod {
    pod_in(ch, t(created), ready_pod_status())
}

pub(crate) fn descriptions(d: &Decision) -> Vec<String> {
    d.effects.iter().map(Effect::describe).collect()
}

/// Runs `decide` like the controller does: applies the status it writes to the channel.
pub(crate) fn with_status(ch: &ManagedOSVersionChannel, d: &Decision) -> ManagedOSVersionChannel {
    let mut ch = ch.clone();
    if let Some(s) = &d.status {
        ch.status = Some(s.clone());
    }
    ch
}

/// The channel once the decision at `at` started a sync (its status written).
pub(crate) fn started(ch: &ManagedOSVersionChannel, at: i64) -> ManagedOSVersionChannel {
    with_status(ch, &decide(&obs(ch, t(at)), &settings()))
}

/// The channel with an on-demand sync request (`value`) in its annotation.
pub(crate) fn with_request(ch: &ManagedOSVersionChannel, value: &str) -> ManagedOSVersionChannel {
    let mut ch = ch.clone();
    ch.annotations_mut()
        .insert(SYNC_REQUESTED_AT_ANNOTATION.into(), value.into());
    ch
}

/// The syncer pod as the API would show it, `age` seconds after `created`.
pub(crate) fn pod_in(ch: &ManagedOSVersionChannel, created: Timestamp, status: Value) -> Pod {
    let d = decide(&obs(ch, created), &settings());
    let Some(Effect::CreatePod(pod)) = d.effects.first() else {
        panic!("expected a pod to be created: {d:?}")
    };
    let mut pod = (**pod).clone();
    pod.metadata.uid = Some(POD_UID.into());
    pod.metadata.creation_timestamp = Some(Time(created));
    pod.status = Some(serde_json::from_value(status).unwrap());
    pod
}

pub(crate) fn ready_pod_status() -> Value {
    json!({
        "phase": "Running",
        "initContainerStatuses": [{"name": "runner", "ready": true, "restartCount": 0, "image": "", "imageID": "",
            "state": {"terminated": {"exitCode": 0}}}],
        "containerStatuses": [{"name": "display", "ready": true, "restartCount": 0, "image": "", "imageID": "",
            "state": {"running": {}}}]
    })
}

pub(crate) fn runner_failed_status(code: i32) -> Value {
    json!({
        "phase": "Failed",
        "initContainerStatuses": [{"name": "runner", "ready": false, "restartCount": 0, "image": "", "imageID": "",
            "state": {"terminated": {"exitCode": code, "reason": "Error"}}}]
    })
}
