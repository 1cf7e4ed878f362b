//! Unit tests of the decision core: observations in, decisions out, no cluster.

use super::*;
use crate::api::{CHANNEL_LABEL, NO_LONGER_IN_SYNC_ANNOTATION};
use crate::channel::ChannelVersion;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::{Value, json};

pub(crate) fn channel(spec: Value) -> ManagedOSVersionChannel {
    let mut ch = ManagedOSVersionChannel::new("chan", serde_json::from_value(spec).unwrap());
    ch.metadata.namespace = Some("ns".into());
    ch.metadata.uid = Some("uid-1".into());
    ch.metadata.generation = Some(1);
    ch
}

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

const SAMPLE: &str = r#"[{"metadata":{"name":"foo"},"spec":{"version":"v1","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v1"}}},{"metadata":{"name":"bar"},"spec":{"version":"v2","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v2"}}}]"#;

fn settings() -> Settings {
    Settings {
        operator_image: "rancheros-operator:dev".into(),
        sync_timeout: Duration::from_secs(300),
        max_output_bytes: 1 << 20,
        retry_delay: Duration::from_secs(10),
        max_concurrent_syncs: 10,
    }
}

fn sample_channel() -> ManagedOSVersionChannel {
    channel(json!({
        "type": "custom",
        "options": {"image": "runner:1", "command": ["/bin/bash", "-c", "--"], "args": ["echo hi > /output/data"],
                    "mountPath": "/output", "outputFile": "/output/data"},
        "upgradeContainer": {}
    }))
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn obs<'a>(ch: &'a ManagedOSVersionChannel, now: Timestamp) -> Observation<'a> {
    Observation {
        channel: ch,
        pod: None,
        display_log: None,
        runner_log: None,
        fetched: None,
        versions: None,
        pod_create_error: None,
        error: None,
        queued: false,
        now,
    }
}

fn framed(data: &str) -> Vec<u8> {
    let mut out = Vec::new();
    display::write_framed(&mut out, data.as_bytes()).unwrap();
    out
}

fn ready(d: &Decision) -> &Condition {
    d.status
        .as_ref()
        .expect("a status")
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .expect("a Ready condition")
}

/// The decision with only the pod observed.
fn at_pod(ch: &ManagedOSVersionChannel, pod: &Pod, now: Timestamp) -> Decision {
    decide(
        &Observation {
            pod: Some(pod),
            ..obs(ch, now)
        },
        &settings(),
    )
}

/// The decision once the display log and the versions are read too.
fn reading(
    ch: &ManagedOSVersionChannel,
    pod: &Pod,
    log: &[u8],
    versions: &[ManagedOSVersion],
    now: Timestamp,
) -> Decision {
    decide(
        &Observation {
            pod: Some(pod),
            display_log: Some(log),
            versions: Some(&arcs(versions)),
            ..obs(ch, now)
        },
        &settings(),
    )
}

fn descriptions(d: &Decision) -> Vec<String> {
    d.actions.iter().map(Action::describe).collect()
}

/// Runs `decide` like the controller does: applies the status it writes to the channel.
fn with_status(ch: &ManagedOSVersionChannel, d: &Decision) -> ManagedOSVersionChannel {
    let mut ch = ch.clone();
    if let Some(s) = &d.status {
        ch.status = Some(s.clone());
    }
    ch
}

/// The syncer pod as the API would show it, `age` seconds after `created`.
fn pod_in(ch: &ManagedOSVersionChannel, created: Timestamp, status: Value) -> Pod {
    let d = decide(&obs(ch, created), &settings());
    let Some(Action::CreatePod(pod)) = d.actions.first() else {
        panic!("expected a pod to be created: {d:?}")
    };
    let mut pod = (**pod).clone();
    pod.metadata.uid = Some("pod-uid".into());
    pod.metadata.creation_timestamp = Some(Time(created));
    pod.status = Some(serde_json::from_value(status).unwrap());
    pod
}

fn ready_pod_status() -> Value {
    json!({
        "phase": "Running",
        "initContainerStatuses": [{"name": "runner", "ready": true, "restartCount": 0, "image": "", "imageID": "",
            "state": {"terminated": {"exitCode": 0}}}],
        "containerStatuses": [{"name": "display", "ready": true, "restartCount": 0, "image": "", "imageID": "",
            "state": {"running": {}}}]
    })
}

fn runner_failed_status(code: i32) -> Value {
    json!({
        "phase": "Failed",
        "initContainerStatuses": [{"name": "runner", "ready": false, "restartCount": 0, "image": "", "imageID": "",
            "state": {"terminated": {"exitCode": code, "reason": "Error"}}}]
    })
}

#[test]
fn a_new_channel_starts_a_sync_pod_of_the_exact_shape() {
    let ch = sample_channel();
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    let Action::CreatePod(pod) = &d.actions[0] else {
        unreachable!()
    };
    let pod = serde_json::to_value(pod).unwrap();
    assert_eq!(
        pod,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "chan", "namespace": "ns",
                "labels": {"rancheros.cattle.io/channel": "chan"},
                "annotations": {"rancheros.cattle.io/channel-generation": "1",
                                "rancheros.cattle.io/operator-image": "rancheros-operator:dev"},
                "ownerReferences": [{"apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
                                     "name": "chan", "uid": "uid-1", "controller": true}]
            },
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": false,
                "enableServiceLinks": false,
                "terminationGracePeriodSeconds": 10,
                "activeDeadlineSeconds": 360,
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                "volumes": [{"name": "channel-data", "emptyDir": {}}],
                "initContainers": [{
                    "name": "runner", "image": "runner:1",
                    "command": ["/bin/bash", "-c", "--"], "args": ["echo hi > /output/data"],
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                                        "readOnlyRootFilesystem": true},
                    "volumeMounts": [{"name": "channel-data", "mountPath": "/output"}]
                }],
                "containers": [{
                    "name": "display", "image": "rancheros-operator:dev", "imagePullPolicy": "IfNotPresent",
                    "args": ["display", "--file", "/output/data"],
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                                        "readOnlyRootFilesystem": true, "runAsNonRoot": true,
                                        "runAsUser": 65532, "runAsGroup": 65532},
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                  "limits": {"cpu": "200m", "memory": "64Mi"}},
                    "volumeMounts": [{"name": "channel-data", "mountPath": "/output"}]
                }]
            }
        })
    );
    let r = ready(&d);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "Synchronizing")
    );
    assert_eq!(r.observed_generation, Some(1));
    assert_eq!(d.requeue, Some(Duration::from_secs(300)));
}

#[test]
fn a_working_pod_is_left_alone_until_its_deadline() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), json!({"phase": "Pending"}));
    let ch = with_status(&ch, &decide(&obs(&ch, t(0)), &settings()));
    let d = at_pod(&ch, &pod, t(100));
    assert_eq!(d.actions, vec![]);
    assert_eq!(d.status, None, "no status write when nothing changed");
    assert_eq!(d.requeue, Some(Duration::from_secs(200)));
}

#[test]
fn ready_output_becomes_versions_and_the_pod_goes() {
    let ch = sample_channel();
    let ch = with_status(&ch, &decide(&obs(&ch, t(0)), &settings()));
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let first = at_pod(&ch, &pod, t(3));
    assert_eq!(
        first.needs,
        Needs {
            display_log: true,
            versions: true,
            ..Default::default()
        }
    );
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log, &[], t(3));
    assert_eq!(
        descriptions(&d),
        ["apply version foo", "apply version bar", "delete pod chan"]
    );
    let Action::ApplyVersion(foo) = &d.actions[0] else {
        unreachable!()
    };
    assert_eq!(foo.labels()[CHANNEL_LABEL], "chan");
    assert_eq!(foo.spec.upgrade_container, Some(Default::default()));
    let r = ready(&d);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("True", "Synchronized")
    );
    assert_eq!(r.message, "synchronized 2 versions (2 created)");
    let s = d.status.as_ref().unwrap();
    assert_eq!(s.synced_versions, Some(2));
    assert_eq!(s.synced_generation, Some(1));
    assert_eq!(s.last_synced_time, Some(Time(t(3))));
    assert_eq!(d.requeue, Some(Duration::from_secs(3600)));
    assert_eq!(d.outcome, Some(Outcome::Synchronized));
    assert!(!d.events[0].warning);
}

#[test]
fn the_next_sync_is_due_one_interval_after_the_last() {
    let ch = sample_channel();
    let mut ch = with_status(&ch, &decide(&obs(&ch, t(0)), &settings()));
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log, &[], t(5));
    ch = with_status(&ch, &d);
    // Restarts and status echoes: nothing to do until the interval is up.
    let d = decide(&obs(&ch, t(65)), &settings());
    assert_eq!(d.actions, vec![]);
    assert_eq!(d.requeue, Some(Duration::from_secs(3540)));
    // Due: a new pod.
    let d = decide(&obs(&ch, t(3605)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
}

#[test]
fn on_demand_annotation_and_spec_changes_sync_at_once() {
    let ch = sample_channel();
    let ch = with_status(&ch, &decide(&obs(&ch, t(0)), &settings()));
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log, &[], t(5));
    let ch = with_status(&ch, &d);

    let mut requested = ch.clone();
    requested
        .annotations_mut()
        .insert(SYNC_REQUESTED_AT_ANNOTATION.into(), "now-1".into());
    let d = decide(&obs(&requested, t(10)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    assert_eq!(
        d.status.as_ref().unwrap().sync_requested_at.as_deref(),
        Some("now-1")
    );
    // The same value again is not a new request.
    let requested = with_status(&requested, &d);
    let mut after_sync = requested.clone();
    after_sync.status.as_mut().unwrap().conditions = ch.status.as_ref().unwrap().conditions.clone();
    let d = decide(&obs(&after_sync, t(20)), &settings());
    assert_eq!(d.actions, vec![]);

    let mut changed = ch.clone();
    changed.metadata.generation = Some(2);
    let d = decide(&obs(&changed, t(10)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
}

#[test]
fn a_still_incomplete_log_is_read_again_shortly() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log[..log.len() - 3], &[], t(3));
    assert_eq!(d.actions, vec![]);
    assert_eq!(d.requeue, Some(POLL));
}

#[test]
fn a_display_container_that_stopped_with_partial_output_fails_the_sync() {
    let ch = sample_channel();
    let pod = pod_in(
        &ch,
        t(0),
        json!({
            "phase": "Succeeded",
            "initContainerStatuses": [{"name": "runner", "ready": true, "restartCount": 0, "image": "", "imageID": "",
                "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [{"name": "display", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                "state": {"terminated": {"exitCode": 0}}}]
        }),
    );
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log[..20], &[], t(3));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert!(
        ready(&d)
            .message
            .starts_with("the display container stopped before")
    );
}

#[test]
fn a_failing_runner_fails_the_sync_with_exit_code_and_output_tail() {
    let ch = sample_channel();
    let ch = with_status(&ch, &decide(&obs(&ch, t(0)), &settings()));
    let pod = pod_in(&ch, t(0), runner_failed_status(3));
    let d = at_pod(&ch, &pod, t(4));
    assert!(d.needs.runner_log);
    let d = decide(
        &Observation {
            pod: Some(&pod),
            runner_log: Some("starting\nsomething broke\n"),
            ..obs(&ch, t(4))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToSync");
    assert_eq!(
        r.message,
        "the runner container exited with code 3; the end of its output: starting | something broke (attempt 1; retrying in 10s)"
    );
    assert_eq!(
        d.status.as_ref().unwrap().failed_synchronization_attempts,
        1
    );
    assert_eq!(d.requeue, Some(Duration::from_secs(10)));
    assert!(d.events[0].warning);
}

#[test]
fn invalid_data_fails_the_sync_and_touches_no_version() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let log = framed("[{\"metadata\": {\"name\": \"foo\"},");
    let existing = [existing_version(
        &ch,
        versions::desired(
            &ch,
            &config::resolve(&ch.spec).unwrap(),
            &ChannelVersion {
                name: "old".into(),
                labels: Default::default(),
                annotations: Default::default(),
                spec: versions::spec_of(json!({"type": "iso", "metadata": {"uri": "u"}})),
            },
        ),
    )];
    let d = reading(&ch, &pod, &log, &existing, t(3));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToSync");
    assert!(
        r.message.starts_with(
            "invalid channel data: line 1, column 30: not valid JSON, the data ends too early"
        ),
        "{}",
        r.message
    );
}

#[test]
fn failures_back_off_exponentially_then_wait_for_the_interval() {
    let mut ch = sample_channel();
    let mut now = 0;
    let mut waits = vec![];
    for _ in 0..5 {
        let start = decide(&obs(&ch, t(now)), &settings());
        assert_eq!(descriptions(&start), ["create pod chan"], "at {now}");
        ch = with_status(&ch, &start);
        let pod = pod_in(&ch, t(now), runner_failed_status(1));
        let d = decide(
            &Observation {
                pod: Some(&pod),
                runner_log: Some(""),
                ..obs(&ch, t(now + 1))
            },
            &settings(),
        );
        ch = with_status(&ch, &d);
        let wait = d.requeue.unwrap();
        waits.push(wait.as_secs());
        // Nothing starts before the wait is over.
        let early = decide(
            &obs(&ch, t(now + 1 + wait.as_secs() as i64 - 1)),
            &settings(),
        );
        assert_eq!(early.actions, vec![]);
        now += 1 + wait.as_secs() as i64;
    }
    assert_eq!(waits, [10, 20, 40, 3600, 3600]);
    assert_eq!(
        ch.status.as_ref().unwrap().failed_synchronization_attempts,
        5
    );
    assert!(
        ready(&Decision {
            status: ch.status.clone(),
            ..Default::default()
        })
        .message
        .ends_with("(5 failures in a row; next try in 1h (the sync interval))")
    );
}

#[test]
fn a_pod_past_its_timeout_fails_the_sync_with_where_it_was_stuck() {
    let ch = channel(json!({"type": "custom", "options": {"image": "nope:1", "timeout": "30s"}}));
    let pod = pod_in(
        &ch,
        t(0),
        json!({"phase": "Pending", "initContainerStatuses": [{"name": "runner", "ready": false, "restartCount": 0,
            "image": "", "imageID": "", "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}}]}),
    );
    let d = at_pod(&ch, &pod, t(29));
    assert_eq!(
        (d.actions.len(), d.requeue),
        (0, Some(Duration::from_secs(1)))
    );
    let d = at_pod(&ch, &pod, t(30));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert!(
        ready(&d).message.starts_with(
            "timed out after 30s: the syncer pod did not finish (runner: ErrImageNeverPull: image not present)"
        ),
        "{}",
        ready(&d).message
    );
}

#[test]
fn output_above_the_cap_is_refused() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let log = framed(SAMPLE);
    let small = Settings {
        max_output_bytes: 100,
        ..settings()
    };
    let d = decide(
        &Observation {
            pod: Some(&pod),
            display_log: Some(&log[..150]),
            versions: Some(&[]),
            ..obs(&ch, t(3))
        },
        &small,
    );
    assert!(
        ready(&d).message.starts_with(
            "the channel data is 311 bytes, more than the operator's limit of 100 bytes"
        ),
        "{}",
        ready(&d).message
    );
}

#[test]
fn pods_from_another_operator_image_or_generation_are_replaced() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let other = Settings {
        operator_image: "rancheros-operator:v2".into(),
        ..settings()
    };
    let d = decide(
        &Observation {
            pod: Some(&pod),
            ..obs(&ch, t(3))
        },
        &other,
    );
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert_eq!(d.status, None);

    let mut newer = ch.clone();
    newer.metadata.generation = Some(2);
    let d = at_pod(&newer, &pod, t(3));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
}

#[test]
fn a_terminating_pod_delays_the_next_sync() {
    let ch = sample_channel();
    let mut pod = pod_in(&ch, t(0), ready_pod_status());
    pod.metadata.deletion_timestamp = Some(Time(t(1)));
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(d.actions, vec![]);
    assert_eq!(d.requeue, Some(POLL));
}

#[test]
fn a_foreign_pod_of_the_same_name_is_never_touched() {
    let ch = sample_channel();
    let mut pod = pod_in(&ch, t(0), ready_pod_status());
    pod.metadata.owner_references = None;
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(d.actions, vec![]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToCreatePod");
    assert!(
        r.message.contains("is not controlled by this channel"),
        "{}",
        r.message
    );
    assert_eq!(d.requeue, Some(Duration::from_secs(10)));
}

#[test]
fn a_disabled_channel_deletes_its_pod_and_flags_its_versions_once() {
    let mut ch = sample_channel();
    ch.spec.enabled = Some(false);
    let pod = pod_in(&sample_channel(), t(0), ready_pod_status());
    let v = existing_version(
        &ch,
        versions::desired(
            &ch,
            &config::resolve(&ch.spec).unwrap(),
            &channel::parse(SAMPLE.as_bytes()).unwrap().versions[0],
        ),
    );
    let d = at_pod(&ch, &pod, t(3));
    assert!(d.needs.versions);
    let d = decide(
        &Observation {
            pod: Some(&pod),
            versions: Some(&arcs(std::slice::from_ref(&v))),
            ..obs(&ch, t(3))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["delete pod chan", "flag version foo"]);
    let r = ready(&d);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("True", "ChannelDisabled")
    );
    assert_eq!(d.requeue, None);
    // Once recorded, nothing more to do or read.
    let ch = with_status(&ch, &d);
    let d = decide(&obs(&ch, t(4)), &settings());
    assert_eq!(d, Decision::default());
}

#[test]
fn invalid_configuration_is_reported_once_and_starts_no_pod() {
    let ch = channel(json!({"type": "custom", "syncInterval": "often", "options": {"image": "i"}}));
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_eq!(d.actions, vec![]);
    let r = ready(&d);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "InvalidConfiguration")
    );
    assert!(r.message.starts_with("spec.syncInterval"), "{}", r.message);
    assert_eq!(d.events.len(), 1);
    assert_eq!(d.requeue, None);
    let ch = with_status(&ch, &d);
    let d = decide(&obs(&ch, t(10)), &settings());
    assert_eq!(d, Decision::default());
}

#[test]
fn transition_time_moves_only_when_the_status_does() {
    let ch = sample_channel();
    let start = decide(&obs(&ch, t(0)), &settings());
    let ch = with_status(&ch, &start);
    let pod = pod_in(&ch, t(0), runner_failed_status(2));
    let failed = decide(
        &Observation {
            pod: Some(&pod),
            runner_log: Some("x"),
            ..obs(&ch, t(7))
        },
        &settings(),
    );
    // Synchronizing (False) -> FailedToSync (False): same status, same transition time.
    assert_eq!(ready(&failed).last_transition_time, Time(t(0)));
}

#[test]
fn a_conflicting_version_fails_the_sync_before_any_write() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let mut foreign: ManagedOSVersion = serde_json::from_value(json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersion",
        "metadata": {"name": "bar", "namespace": "ns"}, "spec": {"type": "iso"}
    }))
    .unwrap();
    foreign
        .annotations_mut()
        .insert(NO_LONGER_IN_SYNC_ANNOTATION.into(), "true".into());
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log, std::slice::from_ref(&foreign), t(3));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert!(
        ready(&d)
            .message
            .contains("version \"bar\" already exists and is not controlled by any channel"),
        "{}",
        ready(&d).message
    );
}

#[test]
fn a_json_channel_fetches_instead_of_starting_a_pod() {
    let ch = channel(json!({"type": "json", "options": {"uri": "http://127.0.0.1:1/c.json"}}));
    let d = decide(&obs(&ch, t(0)), &settings());
    let request = d.needs.fetch.clone().expect("a fetch");
    assert_eq!(request.uri, "http://127.0.0.1:1/c.json");
    let body = |not_modified| Fetched::Body {
        data: SAMPLE.as_bytes().into(),
        etag: Some("\"v1\"".into()),
        last_modified: Some("Mon, 30 Nov 2026 10:00:00 GMT".into()),
        not_modified,
    };
    let first = body(false);
    let d = decide(
        &Observation {
            fetched: Some(&first),
            versions: Some(&[]),
            ..obs(&ch, t(0))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["apply version foo", "apply version bar"]);
    assert_eq!(
        d.status.as_ref().unwrap().source_etag.as_deref(),
        Some("\"v1\"")
    );
    let ch = with_status(&ch, &d);
    let cfg = config::resolve(&ch.spec).unwrap();
    let items = channel::parse(SAMPLE.as_bytes()).unwrap().versions;
    let foo = existing_version(&ch, versions::desired(&ch, &cfg, &items[0]));
    let bar = existing_version(&ch, versions::desired(&ch, &cfg, &items[1]));

    // A 304 is answered with the body it confirms: nothing to write when nothing drifted...
    let again = body(true);
    let d = decide(
        &Observation {
            fetched: Some(&again),
            versions: Some(&arcs(&[foo.clone(), bar.clone()])),
            ..obs(&ch, t(3600))
        },
        &settings(),
    );
    assert_eq!(d.actions, vec![]);
    assert_eq!(
        ready(&d).message,
        "synchronized 2 versions (no changes) (the source answered: not modified)"
    );
    assert_eq!(
        d.status.as_ref().unwrap().last_synced_time,
        Some(Time(t(3600)))
    );
    // ...and a version someone deleted or edited is restored all the same.
    let mut edited = bar.clone();
    edited.spec.version = Some("v9".into());
    let d = decide(
        &Observation {
            fetched: Some(&again),
            versions: Some(&arcs(&[edited])),
            ..obs(&ch, t(7200))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["apply version foo", "apply version bar"]);

    let failed = Fetched::Failed("HTTP 404 Not Found from http://127.0.0.1:1/c.json".into());
    let d = decide(
        &Observation {
            fetched: Some(&failed),
            versions: Some(&[]),
            ..obs(&ch, t(3600))
        },
        &settings(),
    );
    assert!(ready(&d).message.starts_with("HTTP 404"));
}

#[test]
fn a_pod_that_cannot_be_created_is_reported() {
    let ch = sample_channel();
    let d = decide(
        &Observation {
            pod_create_error: Some("creating syncer pod chan: forbidden"),
            ..obs(&ch, t(0))
        },
        &settings(),
    );
    assert_eq!(d.actions, vec![]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToCreatePod");
    assert!(
        r.message
            .starts_with("creating syncer pod chan: forbidden (attempt 1"),
        "{}",
        r.message
    );
}

#[test]
fn a_json_channel_ignores_a_foreign_pod_of_its_name() {
    let ch = channel(json!({"type": "json", "options": {"uri": "http://127.0.0.1:1/c.json"}}));
    let mut pod = pod_in(&sample_channel(), t(0), ready_pod_status());
    pod.metadata.owner_references = None;
    let d = at_pod(&ch, &pod, t(0));
    assert!(d.needs.fetch.is_some(), "{d:?}");
}

#[test]
fn a_refused_version_write_fails_the_sync() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let d = decide(
        &Observation {
            pod: Some(&pod),
            error: Some("apply version foo: forbidden"),
            ..obs(&ch, t(3))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToSync");
    assert!(
        r.message
            .starts_with("apply version foo: forbidden (attempt 1"),
        "{}",
        r.message
    );
}

#[test]
fn tails_are_short_and_on_one_line() {
    assert_eq!(tail(""), "(no output)");
    assert_eq!(tail("a\n\nb\n"), "a | b");
    let long = "é".repeat(1000);
    let t = tail(&long);
    assert!(t.starts_with("...") && t.len() <= TAIL_BYTES + 4);
}

// --- hardening: failures, timeouts, on-demand requests, duplicates, drift ----------------

#[test]
fn complete_data_in_the_log_is_used_even_after_the_timeout() {
    let ch = sample_channel();
    let ch = with_status(&ch, &decide(&obs(&ch, t(0)), &settings()));
    let pod = pod_in(&ch, t(0), ready_pod_status());
    // The operator was away for an hour; the data waited in the display log.
    let d = at_pod(&ch, &pod, t(3600));
    assert!(d.needs.display_log, "{d:?}");
    let d = reading(&ch, &pod, &framed(SAMPLE), &[], t(3600));
    assert_eq!(
        descriptions(&d),
        ["apply version foo", "apply version bar", "delete pod chan"]
    );
    assert_eq!(ready(&d).reason, "Synchronized");
    // Incomplete data past the timeout is a timeout.
    let d = reading(&ch, &pod, &framed(SAMPLE)[..40], &[], t(3600));
    assert!(
        ready(&d).message.starts_with(
            "timed out after 5m: the syncer pod did not finish (the display log never held complete output)"
        ),
        "{}",
        ready(&d).message
    );
}

#[test]
fn a_request_made_during_a_sync_causes_exactly_one_more_sync() {
    let mut ch = sample_channel();
    ch.annotations_mut()
        .insert(SYNC_REQUESTED_AT_ANNOTATION.into(), "req-1".into());
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    let mut ch = with_status(&ch, &d);
    let pod = pod_in(&ch, t(0), ready_pod_status());
    // A new request arrives while the pod runs; its data predates the request.
    ch.annotations_mut()
        .insert(SYNC_REQUESTED_AT_ANNOTATION.into(), "req-2".into());
    let d = reading(&ch, &pod, &framed(SAMPLE), &[], t(5));
    assert_eq!(ready(&d).reason, "Synchronized");
    assert_eq!(
        d.status.as_ref().unwrap().sync_requested_at.as_deref(),
        Some("req-1")
    );
    let ch = with_status(&ch, &d);
    // Pod gone: the pending request starts one more sync...
    let d = decide(&obs(&ch, t(6)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    let ch = with_status(&ch, &d);
    let pod = pod_in(&ch, t(6), ready_pod_status());
    let d = reading(&ch, &pod, &framed(SAMPLE), &[], t(10));
    let ch = with_status(&ch, &d);
    // ...and only one.
    let d = decide(&obs(&ch, t(12)), &settings());
    assert_eq!(d.actions, vec![]);
    assert_eq!(d.requeue, Some(Duration::from_secs(3600 - 2)));
}

#[test]
fn duplicate_names_use_the_last_entry_and_are_named_in_the_status_and_an_event() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let data = r#"[
        {"metadata":{"name":"foo"},"spec":{"type":"container","version":"v1","metadata":{"upgradeImage":"a:v1"}}},
        {"metadata":{"name":"bar"},"spec":{"type":"container","version":"v2","metadata":{"upgradeImage":"a:v2"}}},
        {"metadata":{"name":"foo"},"spec":{"type":"iso","version":"v1","metadata":{"uri":"http://x/v1.iso"}}}
    ]"#;
    let d = reading(&ch, &pod, &framed(data), &[], t(3));
    assert_eq!(
        descriptions(&d),
        ["apply version foo", "apply version bar", "delete pod chan"]
    );
    let Action::ApplyVersion(foo) = &d.actions[0] else {
        unreachable!()
    };
    assert_eq!(foo.spec.type_, "iso", "the last entry wins");
    let r = ready(&d);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("True", "Synchronized")
    );
    assert!(
        r.message
            .ends_with("duplicate names in the channel data, the last entry of each was used: foo"),
        "{}",
        r.message
    );
    let warning = d
        .events
        .iter()
        .find(|n| n.warning)
        .expect("a Warning event");
    assert_eq!(warning.reason, "DuplicateVersions");
    assert!(warning.message.ends_with("foo"), "{}", warning.message);
}

#[test]
fn an_api_error_is_a_failed_attempt_that_backs_off() {
    let ch = sample_channel();
    let ch = with_status(&ch, &decide(&obs(&ch, t(0)), &settings()));
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let d = decide(
        &Observation {
            pod: Some(&pod),
            error: Some(
                "listing ManagedOSVersions in ns: the server is currently unable to handle the request",
            ),
            ..obs(&ch, t(3))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert_eq!(d.outcome, Some(Outcome::Failed));
    assert_eq!(ready(&d).reason, "FailedToSync");
    assert_eq!(
        d.status.as_ref().unwrap().failed_synchronization_attempts,
        1
    );
    assert_eq!(d.events.len(), 1);
    assert_eq!(d.requeue, Some(Duration::from_secs(10)));
    // The status write wakes the controller again: it waits out the backoff.
    let ch = with_status(&ch, &d);
    let d = decide(&obs(&ch, t(5)), &settings());
    assert_eq!(
        (d.actions.len(), d.requeue),
        (0, Some(Duration::from_secs(8)))
    );
}

#[test]
fn a_disabled_channel_whose_writes_fail_backs_off_instead_of_looping() {
    let mut ch = sample_channel();
    ch.spec.enabled = Some(false);
    let d = decide(
        &Observation {
            error: Some("flag version foo: admission webhook denied the request"),
            ..obs(&ch, t(0))
        },
        &settings(),
    );
    assert_eq!(ready(&d).reason, "FailedToSync");
    let ch = with_status(&ch, &d);
    for now in [1, 5, 9] {
        let d = decide(&obs(&ch, t(now)), &settings());
        assert_eq!(d.actions, vec![], "at {now}s");
        assert_eq!(d.status, None, "at {now}s");
        assert_eq!(d.requeue, Some(Duration::from_secs(10 - now as u64)));
    }
    // After the backoff the disabled channel is handled again.
    let d = decide(&obs(&ch, t(10)), &settings());
    assert!(d.needs.versions, "{d:?}");
}

#[test]
fn a_pod_whose_image_admission_rewrote_is_not_replaced() {
    let ch = sample_channel();
    let mut pod = pod_in(&ch, t(0), json!({"phase": "Pending"}));
    // A mutating webhook pinned the display image to a digest.
    let spec = pod.spec.as_mut().unwrap();
    spec.containers[0].image = Some("mirror.local/rancheros-operator@sha256:abc".into());
    let ch = with_status(&ch, &decide(&obs(&ch, t(0)), &settings()));
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(d.actions, vec![], "{d:?}");
    // A pod without the operator's record (an older operator's) is replaced.
    pod.annotations_mut().remove(pod::OPERATOR_IMAGE_ANNOTATION);
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
}

#[test]
fn a_due_sync_without_a_free_slot_is_queued() {
    let ch = sample_channel();
    let d = decide(
        &Observation {
            queued: true,
            ..obs(&ch, t(0))
        },
        &settings(),
    );
    assert_eq!(d.actions, vec![]);
    assert_eq!(ready(&d).reason, "Synchronizing");
    assert!(
        ready(&d)
            .message
            .starts_with("queued: waiting for a free sync slot")
    );
    assert_eq!(d.requeue, Some(Duration::from_secs(2)));
    // Queued again: nothing new to write.
    let ch = with_status(&ch, &d);
    let d = decide(
        &Observation {
            queued: true,
            ..obs(&ch, t(2))
        },
        &settings(),
    );
    assert_eq!((d.status, d.events.len()), (None, 0));
    // A slot frees up: the pod is created.
    let d = decide(&obs(&ch, t(4)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
}

#[test]
fn an_error_of_the_display_container_is_reported_as_such() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), ready_pod_status());
    let log = b"error: cannot read /output/data: permission denied; display runs as user 65532\n";
    let d = reading(&ch, &pod, log, &[], t(3));
    assert!(
        ready(&d).message.starts_with(
            "the display container exited with code 1: error: cannot read /output/data: permission denied"
        ),
        "{}",
        ready(&d).message
    );
}
