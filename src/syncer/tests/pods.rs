//! The syncer pod of a custom channel: its shape, its progress, its failures.

use super::*;

#[test]
fn a_new_channel_starts_a_sync_pod_of_the_exact_shape() {
    let ch = sample_channel();
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    let Effect::CreatePod(pod) = &d.effects[0] else {
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
                "volumes": [{"name": "channel-data", "emptyDir": {"sizeLimit": "2097152"}}],
                "initContainers": [{
                    "name": "runner", "image": "runner:1", "imagePullPolicy": "Always",
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
    // A first sync: Ready is not known yet, Reconciling says a sync is under way.
    let r = ready(&d);
    assert_status_reason(r, "Unknown", "Synchronizing");
    assert_eq!(r.observed_generation, Some(1));
    let reconciling = condition(&d, RECONCILING).expect("Reconciling");
    assert_eq!(
        (reconciling.status.as_str(), reconciling.message.as_str()),
        ("True", "syncer pod chan started")
    );
    assert_eq!(d.status.as_ref().unwrap().observed_generation, Some(1));
    assert_eq!(d.requeue, Some(Duration::from_secs(300)));
}

#[test]
fn a_working_pod_is_left_alone_until_its_deadline() {
    let ch = sample_channel();
    let pod = pod_in(&ch, t(0), json!({"phase": "Pending"}));
    let ch = started(&ch, 0);
    let d = at_pod(&ch, &pod, t(100));
    assert_eq!(d.effects, vec![]);
    assert_eq!(d.status, None, "no status write when nothing changed");
    assert_eq!(d.requeue, Some(Duration::from_secs(200)));
}

#[test]
fn ready_output_becomes_versions_and_the_pod_goes() {
    let (ch, pod) = started_ready();
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
    let Effect::ApplyVersion { want: foo, .. } = &d.effects[0] else {
        unreachable!()
    };
    assert_eq!(foo.labels()[CHANNEL_LABEL], "chan");
    assert_eq!(foo.spec.upgrade_container, Some(Default::default()));
    let r = ready(&d);
    assert_status_reason(r, "True", "Synchronized");
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
fn a_still_incomplete_log_is_read_again_shortly() {
    let (ch, pod) = sample_ready();
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log[..log.len() - 3], &[], t(3));
    assert_eq!(d.effects, vec![]);
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
    let ch = started(&sample_channel(), 0);
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
        (d.effects.len(), d.requeue),
        (0, Some(Duration::from_secs(1)))
    );
    let d = at_pod(&ch, &pod, t(30));
    assert_sync_failed(
        &d,
        "timed out after 30s: the syncer pod did not finish (runner: ErrImageNeverPull: image not present)",
    );
}

#[test]
fn output_above_the_cap_is_refused() {
    let (ch, pod) = sample_ready();
    let log = framed(SAMPLE);
    let small = Settings {
        max_output_bytes: 100,
        ..settings()
    };
    let d = decide(&log_read(&ch, &pod, &log[..150], t(3)), &small);
    assert_message_starts(
        ready(&d),
        "the channel data is 311 bytes, more than the operator's limit of 100 bytes",
    );
}

#[test]
fn pods_from_another_operator_image_or_generation_are_replaced() {
    let (ch, pod) = sample_ready();
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
    let (ch, mut pod) = sample_ready();
    pod.metadata.deletion_timestamp = Some(Time(t(1)));
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(d.effects, vec![]);
    assert_eq!(d.requeue, Some(POLL));
}

#[test]
fn a_foreign_pod_of_the_same_name_is_never_touched() {
    let (ch, mut pod) = sample_ready();
    pod.metadata.owner_references = None;
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(d.effects, vec![]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToCreatePod");
    assert_message_has(r, "is not controlled by this channel");
    assert_eq!(d.requeue, Some(Duration::from_secs(10)));
}

#[test]
fn a_pod_that_cannot_be_created_is_reported() {
    let ch = sample_channel();
    let d = decide(
        &Observation {
            pod_create_error: Some(&SyncFailure::PodRefused {
                pod: "chan".into(),
                class: ErrorClass::Refused,
                message: "forbidden".into(),
            }),
            ..obs(&ch, t(0))
        },
        &settings(),
    );
    assert_eq!(d.effects, vec![]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToCreatePod");
    assert_message_starts(r, "creating syncer pod chan: forbidden (attempt 1");
}

#[test]
fn tails_are_short_and_on_one_line() {
    assert_eq!(tail(""), "(no output)");
    assert_eq!(tail("a\n\nb\n"), "a | b");
    let long = "é".repeat(1000);
    let t = tail(&long);
    assert!(t.starts_with("...") && t.len() <= TAIL_BYTES + 4);
}

#[test]
fn complete_data_in_the_log_is_used_even_after_the_timeout() {
    let (ch, pod) = started_ready();
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
    assert_message_starts(
        ready(&d),
        "timed out after 5m: the syncer pod did not finish (the display log never held complete output)",
    );
}

#[test]
fn a_pod_the_operator_did_not_record_is_never_read_and_goes() {
    let ch = started(&sample_channel(), 0);
    // Named, labelled and controlled like the channel's own pod, with finished output,
    // but not the uid the operator recorded: a tenant made it.
    let mut forged = ready_pod(&ch, 0);
    forged.metadata.uid = Some("forged".into());
    let d = at_pod(&ch, &forged, t(3));
    assert_eq!(d.needs, Needs::default(), "the forged pod's log is read");
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert!(!pod::made_by_operator(&forged, &ch));
    assert!(pod::made_by_operator(&ready_pod(&ch, 0), &ch));
}
