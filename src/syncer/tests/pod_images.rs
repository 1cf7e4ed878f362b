//! The syncer pod's images and pull secrets, and runners that read a Secret.

use super::*;

#[test]
fn a_pod_whose_image_admission_rewrote_is_not_replaced() {
    let ch = sample_channel();
    let mut pod = pod_in(&ch, t(0), json!({"phase": "Pending"}));
    // A mutating webhook pinned the display image to a digest.
    let spec = pod.spec.as_mut().unwrap();
    spec.containers[0].image = Some("mirror.local/rancheros-operator@sha256:abc".into());
    let ch = started(&ch, 0);
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(d.effects, vec![], "{d:?}");
    // A pod without the operator's record (an older operator's) is replaced.
    pod.annotations_mut().remove(pod::OPERATOR_IMAGE_ANNOTATION);
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
}

#[test]
fn an_error_of_the_display_container_is_reported_as_such() {
    let (ch, pod) = sample_ready();
    let log = b"error: cannot read /output/data: permission denied; display runs as user 65532\n";
    let d = reading(&ch, &pod, log, &[], t(3));
    assert_message_starts(
        ready(&d),
        "the display container exited with code 1: error: cannot read /output/data: permission denied",
    );
}

#[test]
fn the_runner_image_digest_is_the_source_revision() {
    let ch = started(&sample_channel(), 0);
    let mut status = ready_pod_status();
    status["initContainerStatuses"][0]["imageID"] = json!("registry.local/os/channel@sha256:abc");
    let pod = pod_in(&ch, t(0), status);
    let d = reading(&ch, &pod, &framed(SAMPLE), &[], t(5));
    assert_eq!(
        d.status.as_ref().unwrap().source_revision.as_deref(),
        Some("registry.local/os/channel@sha256:abc")
    );
}

#[test]
fn the_runner_pulls_always_unless_the_channel_says_otherwise() {
    let pull = |options: Value| {
        let mut spec = json!({"type": "custom", "options": {"image": "runner:6.1-baremetal"}});
        for (k, v) in options.as_object().unwrap() {
            spec["options"][k] = v.clone();
        }
        let d = decide(&obs(&channel(spec), t(0)), &settings());
        let pod = created_pod(&d);
        let runner = &pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
        runner.image_pull_policy.clone()
    };
    assert_eq!(pull(json!({})).as_deref(), Some("Always"));
    assert_eq!(
        pull(json!({"imagePullPolicy": "IfNotPresent"})).as_deref(),
        Some("IfNotPresent")
    );
}

#[test]
fn the_operator_image_pull_secret_reaches_every_syncer_pod() {
    let ch = channel(json!({"type": "custom", "options": {"image": "runner:1",
        "imagePullSecrets": [{"name": "channel-registry"}]}}));
    let settings = Settings {
        syncer_image_pull_secrets: vec!["operator-registry".into(), "channel-registry".into()],
        ..settings()
    };
    let d = decide(&obs(&ch, t(0)), &settings);
    let pod = created_pod(&d);
    let names: Vec<&str> = pod
        .spec
        .as_ref()
        .unwrap()
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["channel-registry", "operator-registry"]);
}

/// A channel whose runner reads a Secret, its sync started at t(0), and its pod whose runner
/// failed (exit 1).
fn secret_reader_failed() -> (ManagedOSVersionChannel, Pod) {
    let ch = channel(json!({"type": "custom", "options": {"image": "runner:1",
        "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}}]}}));
    let ch = started(&ch, 0);
    let mut status = runner_failed_status(1);
    status["initContainerStatuses"][0]["state"]["terminated"]["finishedAt"] =
        json!("2023-11-14T22:13:22Z");
    let pod = pod_in(&ch, t(0), status);
    (ch, pod)
}

#[test]
fn a_runner_that_reads_a_secret_keeps_its_output_out_of_status_and_events() {
    let (ch, pod) = secret_reader_failed();
    // The runner's log is not even read.
    let d = at_pod(&ch, &pod, t(3));
    assert!(!d.needs.runner_log, "{d:?}");
    let message = &ready(&d).message;
    assert!(message.contains("references a Secret"), "{message}");
    assert!(message.contains("kubectl logs chan -c runner"), "{message}");
    assert!(d.events.iter().all(|e| !e.message.contains("boom")));
    // The pod is kept so that its log can be read...
    assert_eq!(d.effects, vec![]);
    let ch = with_status(&ch, &d);
    // ...not reported twice while the backoff runs...
    let d = at_pod(&ch, &pod, t(5));
    assert_eq!((d.effects.len(), d.status.is_none()), (0, true), "{d:?}");
    // ...and deleted when the next sync is due.
    let d = at_pod(&ch, &pod, t(14));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
}

#[test]
fn a_request_made_while_a_secret_reading_runner_ran_gets_its_own_sync() {
    let (ch, pod) = secret_reader_failed();
    // The request comes while the runner runs: the failure does not answer it...
    let ch = with_request(&ch, "during");
    let d = at_pod(&ch, &pod, t(3));
    assert_eq!(ready(&d).reason, "FailedToSync");
    assert_eq!(d.effects, vec![]);
    assert_eq!(d.status.as_ref().unwrap().sync_requested_at, None);
    // ...so the kept pod goes at once and a new sync follows.
    let ch = with_status(&ch, &d);
    let d = at_pod(&ch, &pod, t(4));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
}
