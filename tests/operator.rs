//! End-to-end behaviour of custom channels against the local cluster: the operator binary,
//! real syncer pods (the local runner image as the channel image, the operator image as
//! the display container), real versions. See tests/common for the harness.

use crate::common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};
use rancheros_operator::api::{CHANNEL_LABEL, NO_LONGER_IN_SYNC_ANNOTATION};
use serde_json::{Value, json};

const SYNC: Duration = Duration::from_secs(90);

/// The spec's sample manifest, image swapped for the local runner image (imported into the
/// node, so not pulled: `IfNotPresent`).
fn sample_spec() -> serde_json::Value {
    let mut spec = custom_spec(
        "echo '[{\"metadata\":{\"name\":\"foo\"},\"spec\":{\"version\":\"v1\",\"type\":\"container\",\"minVersion\":\"0.0.0\",\"metadata\":{\"upgradeImage\":\"registry.com/repository/image:v1\"}}},{\"metadata\":{\"name\":\"bar\"},\"spec\":{\"version\":\"v2\",\"type\":\"container\",\"minVersion\":\"0.0.0\",\"metadata\":{\"upgradeImage\":\"registry.com/repository/image:v2\"}}}]' > /output/data",
    );
    spec["upgradeContainer"] = json!({});
    spec
}

#[tokio::test]
async fn the_sample_channel_syncs_to_foo_and_bar() {
    let t = TestNs::started("sample", &[]).await;
    let ch = t.create_channel("testchannel", sample_spec()).await;
    let synced = t.wait_ready("testchannel", "Synchronized", SYNC).await;
    let ready = ready(&synced).unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.message, "synchronized 2 versions (2 created)");
    let status = synced.status.as_ref().unwrap();
    assert_eq!(status.synced_versions, Some(2));
    assert_eq!(status.failed_synchronization_attempts, 0);
    assert!(status.last_synced_time.is_some());

    let versions = t.versions().await;
    assert_eq!(
        versions.iter().map(|v| v.name_any()).collect::<Vec<_>>(),
        ["bar", "foo"]
    );
    let foo = &versions[1];
    assert_eq!(foo.spec.version.as_deref(), Some("v1"));
    assert_eq!(foo.spec.type_, "container");
    assert_eq!(foo.spec.min_version.as_deref(), Some("0.0.0"));
    assert_eq!(
        foo.spec.metadata.as_ref().unwrap()["upgradeImage"],
        "registry.com/repository/image:v1"
    );
    assert_eq!(foo.spec.upgrade_container, Some(Default::default()));
    assert_eq!(foo.labels()[CHANNEL_LABEL], "testchannel");
    let owner = &foo.owner_references()[0];
    assert_eq!(owner.kind, "ManagedOSVersionChannel");
    assert_eq!(owner.name, "testchannel");
    assert_eq!(Some(&owner.uid), ch.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));

    t.wait_no_pods(SYNC).await;
    assert_eq!(t.pods_created(), 1);
    t.cleanup().await;
}

#[tokio::test]
async fn changes_patch_add_flag_delete_and_unflag_versions() {
    let t = TestNs::started("changes", &[]).await;
    let data = channel_data(&[("a", "v1"), ("b", "v1"), ("c", "v1")]);
    let mut spec = custom_spec(&write_script(&data));
    spec["registry"] = json!("mirror.local/");
    let first = t.create_synced("ch", spec, SYNC).await;
    assert_eq!(
        t.versions().await[0].spec.metadata.as_ref().unwrap()["upgradeImage"],
        "mirror.local/registry.com/repository/image:v1"
    );

    // a changes, b goes, c stays, d is new.
    let data = channel_data(&[("a", "v2"), ("c", "v1"), ("d", "v1")]);
    t.patch_spec("ch", json!({"options": {"args": [write_script(&data)]}}))
        .await;
    let second = t.wait_next_attempt("ch", &first, SYNC).await;
    assert_reason(&second, "Synchronized");
    assert_eq!(
        ready_message(&second),
        "synchronized 3 versions (1 created, 1 updated, 1 flagged as no longer in sync)"
    );
    let versions = t.versions().await;
    let by_name = |n: &str| versions.iter().find(|v| v.name_any() == n).unwrap().clone();
    assert_eq!(by_name("a").spec.version.as_deref(), Some("v2"));
    assert_eq!(
        by_name("b")
            .annotations()
            .get(NO_LONGER_IN_SYNC_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
    assert!(
        by_name("c")
            .annotations()
            .get(NO_LONGER_IN_SYNC_ANNOTATION)
            .is_none()
    );
    assert_eq!(by_name("d").spec.version.as_deref(), Some("v1"));

    // b comes back: it loses the flag.
    let data = channel_data(&[("a", "v2"), ("b", "v1"), ("c", "v1"), ("d", "v1")]);
    t.patch_spec("ch", json!({"options": {"args": [write_script(&data)]}}))
        .await;
    let third = t.wait_next_attempt("ch", &second, SYNC).await;
    assert_eq!(ready_reason(&third).as_deref(), Some("Synchronized"));
    let b = t.versions_api().get("b").await.unwrap();
    assert!(
        b.annotations().get(NO_LONGER_IN_SYNC_ANNOTATION).is_none(),
        "{b:?}"
    );

    // With deleteNoLongerInSyncVersions, unlisted versions are deleted.
    let data = channel_data(&[("a", "v2")]);
    t.patch_spec(
        "ch",
        json!({"deleteNoLongerInSyncVersions": true, "options": {"args": [write_script(&data)]}}),
    )
    .await;
    let fourth = t.wait_next_attempt("ch", &third, SYNC).await;
    assert_eq!(
        ready_message(&fourth),
        "synchronized 1 versions (3 deleted)"
    );
    t.eventually("versions b, c, d to be deleted", SYNC, || async {
        (t.version_names().await == ["a"]).then_some(())
    })
    .await;
    t.cleanup().await;
}

/// Starts a slow sync of channel `ch` (its runner waits a minute before it writes `data`)
/// and waits until its pod exists.
async fn slow_sync_running(t: &TestNs, data: &Value) {
    t.patch_spec("ch", json!({"options": {"args": [slow_script(60, data)]}}))
        .await;
    t.eventually("the slow syncer pod", SYNC, || async {
        t.pods().get_opt("ch").await.unwrap().map(|_| ())
    })
    .await;
}

#[tokio::test]
async fn a_disabled_channel_deletes_its_pod_and_flags_its_versions() {
    let t = TestNs::started("disabled", &[]).await;
    let data = channel_data(&[("a", "v1"), ("b", "v1")]);
    t.synced_custom("ch", &data, SYNC).await;
    t.wait_no_pods(SYNC).await;

    // Start a slow sync, then disable the channel while its pod runs.
    slow_sync_running(&t, &data).await;
    t.patch_spec("ch", json!({"enabled": false})).await;
    let ch = t.wait_ready("ch", "ChannelDisabled", SYNC).await;
    assert_eq!(ready(&ch).unwrap().status, "True");
    t.wait_no_pods(SYNC).await;
    assert_eq!(t.version_names().await, ["a", "b"]);
    for v in t.versions().await {
        assert_eq!(
            v.annotations()
                .get(NO_LONGER_IN_SYNC_ANNOTATION)
                .map(String::as_str),
            Some("true"),
            "{}",
            v.name_any()
        );
    }
    t.cleanup().await;
}

#[tokio::test]
async fn invalid_configurations_are_reported_and_start_no_pod() {
    let t = TestNs::started("invalid", &[]).await;
    let good = custom_spec(&write_script(&channel_data(&[("a", "v1")])));
    // What the CRD's rules cannot see: the operator judges it and says so in the status.
    let mut cases = vec![];
    let mut no_image = good.clone();
    no_image["options"].as_object_mut().unwrap().remove("image");
    cases.push(("no-image", no_image, "spec.options.image: required"));
    // An unknown option key (`imag`) no longer gets this far: the typed schema refuses it at
    // `kubectl apply` (`bounds::an_unknown_option_key_*`) or prunes it.
    let mut relative = good.clone();
    relative["options"]["mountPath"] = json!("output");
    relative["options"]["outputFile"] = json!("output/data");
    cases.push(("relative", relative, "spec.options.mountPath"));
    let mut short = good.clone();
    // Zero is refused by the API server (below); under a second, by the operator.
    short["options"]["timeout"] = json!("500ms");
    cases.push((
        "short-timeout",
        short,
        "spec.options.timeout: \"500ms\" is too short",
    ));

    for (name, spec, _) in &cases {
        t.create_channel(name, spec.clone()).await;
    }
    for (name, _, message) in &cases {
        let ch = t.wait_ready(name, "InvalidConfiguration", SYNC).await;
        assert_eq!(ready(&ch).unwrap().status, "False");
        assert!(
            ready_message(&ch).starts_with(message),
            "{name}: {}",
            ready_message(&ch)
        );
    }
    // A pod would have been created in the reconcile that wrote the status instead.
    assert_eq!(t.pods_created(), 0);
    t.cleanup().await;
}

#[tokio::test]
async fn the_api_server_refuses_what_the_crd_rules_can_check() {
    let t = TestNs::new("crd-rules").await;
    let good = custom_spec(&write_script(&channel_data(&[("a", "v1")])));
    let mut cases = vec![];
    let mut no_type = good.clone();
    no_type.as_object_mut().unwrap().remove("type");
    cases.push((no_type, "spec.type must be \"custom\", \"json\" or \"oci\""));
    let mut unknown_type = good.clone();
    unknown_type["type"] = json!("rpm");
    cases.push((
        unknown_type,
        "spec.type must be \"custom\", \"json\" or \"oci\"",
    ));
    let mut interval = good.clone();
    interval["syncInterval"] = json!("every day");
    cases.push((interval, "spec.syncInterval must be a duration"));
    let mut timeout = good.clone();
    timeout["options"]["timeout"] = json!("1d");
    cases.push((timeout, "spec.options.timeout must be a duration"));
    let mut zero = good.clone();
    zero["options"]["timeout"] = json!("0s");
    cases.push((zero, "spec.options.timeout must be more than 0"));
    let mut outside = good.clone();
    outside["options"]["outputFile"] = json!("/tmp/data");
    cases.push((outside, "spec.options.outputFile must be a file inside"));
    let mut default_mount = good.clone();
    default_mount["options"]
        .as_object_mut()
        .unwrap()
        .remove("mountPath");
    default_mount["options"]["outputFile"] = json!("/output/data");
    cases.push((
        default_mount,
        "spec.options.outputFile must be a file inside",
    ));
    cases.push((
        json!({"type": "json", "options": {"uri": "ftp://x/c.json"}}),
        "spec.options.uri must be an http:// or https:// URL",
    ));
    cases.push((
        json!({"type": "json", "options": {"uri": "http:€//x"}}),
        "spec.options.uri must be an http:// or https:// URL",
    ));
    for (i, (spec, message)) in cases.into_iter().enumerate() {
        let channel: rancheros_operator::api::ManagedOSVersionChannel =
            serde_json::from_value(json!({
                "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
                "metadata": {"name": format!("bad-{i}")}, "spec": spec
            }))
            .unwrap();
        let err = t
            .channels()
            .create(&PostParams::default(), &channel)
            .await
            .expect_err(&format!("the API server accepted {spec}"));
        let kube::Error::Api(status) = &err else {
            panic!("{spec}: {err}")
        };
        assert_eq!(status.code, 422, "{spec}: {err}");
        assert!(
            status.message.contains(message),
            "{spec}: {}",
            status.message
        );
    }
    // Good specs, and the sample, still pass.
    let mut ok = good.clone();
    ok["syncInterval"] = json!("1h30m");
    ok["options"]["timeout"] = json!("90s");
    t.create_channel("ok", ok).await;
    t.create_channel("sample", sample_spec()).await;
    t.create_channel(
        "json",
        json!({"type": "json", "syncInterval": "10m", "options": {"uri": "HTTPS://example.com/c.json"}}),
    )
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_failing_runner_fails_the_sync_and_keeps_the_versions() {
    let t = TestNs::started("runner-fails", &[]).await;
    let data = channel_data(&[("a", "v1")]);
    let synced = t.synced_custom("ch", &data, SYNC).await;
    let before = t.versions().await;

    t.patch_spec(
        "ch",
        json!({"options": {"args": ["echo preparing; echo 'disk on fire' >&2; exit 3"]}}),
    )
    .await;
    let failed = t.wait_next_attempt("ch", &synced, SYNC).await;
    assert_eq!(ready_reason(&failed).as_deref(), Some("FailedToSync"));
    let message = ready_message(&failed);
    assert!(message.contains("exited with code 3"), "{message}");
    assert!(message.contains("disk on fire"), "{message}");
    assert_eq!(
        failed
            .status
            .as_ref()
            .unwrap()
            .failed_synchronization_attempts,
        1
    );
    t.wait_no_pods(SYNC).await;
    assert_eq!(
        t.versions().await,
        before,
        "a failed sync changed the versions"
    );

    // Invalid JSON: the position is in the message; still nothing changes.
    t.patch_spec("ch", json!({"options": {"args": ["printf '[{\"metadata\": {\"name\": \"x\"}},\\n  oops]' > /output/data"]}}))
        .await;
    let failed = t.wait_next_attempt("ch", &failed, SYNC).await;
    let message = ready_message(&failed);
    assert_eq!(
        ready_reason(&failed).as_deref(),
        Some("FailedToSync"),
        "{message}"
    );
    assert!(
        message.starts_with("invalid channel data: line 2, column 3: not valid JSON"),
        "{message}"
    );
    t.wait_no_pods(SYNC).await;
    assert_eq!(
        t.versions().await,
        before,
        "a failed sync changed the versions"
    );
    t.cleanup().await;
}

#[tokio::test]
async fn an_unpullable_image_or_a_hanging_runner_fails_at_the_timeout() {
    let t = TestNs::started("timeouts", &[]).await;
    let mut unpullable = custom_spec("true");
    unpullable["options"]["image"] = json!("registry.invalid/nothing:1");
    unpullable["options"]["timeout"] = json!("25s");
    t.create_channel("unpullable", unpullable).await;
    // (the timeouts leave the pods time to be scheduled on a loaded node: the messages must
    // find the pull refused and the runner running, not a pod still Pending)
    let mut hanging = custom_spec("sleep 3600");
    hanging["options"]["timeout"] = json!("25s");
    t.create_channel("hanging", hanging).await;

    for (name, timeout, stuck) in [
        ("unpullable", "25s", "runner: "),
        ("hanging", "25s", "runner: still running"),
    ] {
        let ch = t
            .wait_ready(name, "FailedToSync", Duration::from_secs(90))
            .await;
        let message = ready_message(&ch);
        assert!(
            message.starts_with(&format!("timed out after {timeout}")),
            "{name}: {message}"
        );
        assert!(message.contains(stuck), "{name}: {message}");
    }
    t.wait_no_pods(SYNC).await;
    t.cleanup().await;
}

#[tokio::test]
async fn one_pod_per_sync_on_the_interval_and_on_demand() {
    let mut t = TestNs::new("interval").await;
    // A 10 s interval is below the default minimum (1m).
    t.start_operator(&["--min-sync-interval=10s"]);
    let mut spec = custom_spec(&write_script(&channel_data(&[("a", "v1")])));
    spec["syncInterval"] = json!("10s");
    let mut ch = t.create_synced("ch", spec, SYNC).await;
    // Two more syncs on the interval. Pods are counted the moment a sync is seen done:
    // the next one is 10 s away, and each sync's pod was created before it finished.
    for _ in 0..2 {
        ch = t.wait_next_attempt("ch", &ch, SYNC).await;
        assert_eq!(ready_reason(&ch).as_deref(), Some("Synchronized"));
    }
    assert_eq!(t.pods_created(), 3, "one pod per sync");

    // A long interval (a spec change: one sync), then the on-demand annotation.
    t.patch_spec("ch", json!({"syncInterval": "1h"})).await;
    ch = t.wait_next_attempt("ch", &ch, SYNC).await;
    assert_eq!(t.pods_created(), 4, "the spec change syncs once");
    t.wait_no_pods(SYNC).await;
    ch = t.sync_again("ch", "2026-11-30T10:00:00Z", &ch, SYNC).await;
    assert_eq!(ready_reason(&ch).as_deref(), Some("Synchronized"));
    t.wait_no_pods(SYNC).await;
    assert_eq!(
        t.pods_created(),
        5,
        "exactly one pod for the on-demand sync"
    );
    // Nothing else starts a sync. A barrier proves it: one more request makes exactly one
    // more pod; a stray sync in between would have made two.
    ch = t.sync_again("ch", "2026-11-30T11:00:00Z", &ch, SYNC).await;
    assert_eq!(ready_reason(&ch).as_deref(), Some("Synchronized"));
    t.wait_no_pods(SYNC).await;
    assert_eq!(t.pods_created(), 6, "a sync nobody asked for");
    t.cleanup().await;
}

#[tokio::test]
async fn versions_of_another_channel_and_foreign_pods_are_never_touched() {
    let t = TestNs::started("conflicts", &[]).await;
    t.synced_custom("owner", &channel_data(&[("shared", "v1")]), SYNC)
        .await;
    let shared = t.versions_api().get("shared").await.unwrap();

    t.create_custom(
        "intruder",
        &channel_data(&[("shared", "v9"), ("own", "v1")]),
    )
    .await;
    let ch = t.wait_ready("intruder", "FailedToSync", SYNC).await;
    assert_message_contains(
        &ch,
        "version \"shared\" already exists and is controlled by ManagedOSVersionChannel \"owner\"",
    );
    let after = t.versions_api().get("shared").await.unwrap();
    assert_eq!(
        after.resource_version(),
        shared.resource_version(),
        "the other channel's version was written"
    );
    assert!(
        t.versions_api().get_opt("own").await.unwrap().is_none(),
        "a conflicting sync wrote a version"
    );

    // A pod named like a channel that the channel does not control.
    let foreign: Pod = serde_json::from_value(json!({
        "metadata": {"name": "squatted"},
        "spec": {"containers": [{"name": "c", "image": runner_image(), "command": ["sleep", "3600"]}]}
    }))
    .unwrap();
    let foreign = t
        .pods()
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    t.create_custom("squatted", &channel_data(&[("x", "v1")]))
        .await;
    let ch = t.wait_ready("squatted", "FailedToCreatePod", SYNC).await;
    assert_message_contains(&ch, "is not controlled by this channel");
    let still = t.pods().get("squatted").await.unwrap();
    assert_eq!(still.uid(), foreign.uid());
    assert!(still.metadata.deletion_timestamp.is_none());
    t.cleanup().await;
}

#[tokio::test]
async fn a_restarted_operator_finishes_the_sync_without_a_second_pod() {
    let mut t = TestNs::started("restart", &[]).await;
    let data = channel_data(&[("a", "v1"), ("b", "v1")]);
    t.create_channel("ch", custom_spec(&slow_script(6, &data)))
        .await;
    // Killed once its pod is recorded in the status (the proof that the operator made it):
    // a pod it had not recorded yet, as when it dies between the two writes, is replaced
    // once after the restart, by design (docs/security.md).
    t.wait_pod_recorded("ch", SYNC).await;
    t.kill_operator();
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.start_operator(&[]);
    let ch = t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_eq!(ready_message(&ch), "synchronized 2 versions (2 created)");
    assert_eq!(t.version_names().await, ["a", "b"]);
    t.wait_no_pods(SYNC).await;
    assert_eq!(t.pods_created(), 1, "the restart created a second pod");
    t.cleanup().await;
}

#[tokio::test]
async fn a_pod_of_an_operator_with_another_image_is_replaced() {
    let mut t = TestNs::new("stale-image").await;
    // Another spelling of the same image: a different image as far as the pod spec goes.
    let other = format!("docker.io/library/{}", operator_image());
    t.start_operator(&[&format!("--operator-image={other}")]);
    let data = channel_data(&[("a", "v1")]);
    t.create_channel("ch", custom_spec(&slow_script(8, &data)))
        .await;
    let old = t
        .eventually("the first syncer pod", SYNC, || async {
            t.pods().get_opt("ch").await.unwrap()
        })
        .await;
    t.kill_operator();
    t.start_operator(&[]);
    t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_eq!(
        t.pods_created(),
        2,
        "the old pod is replaced by exactly one new pod"
    );
    assert!(
        t.pods()
            .get_opt("ch")
            .await
            .unwrap()
            .is_none_or(|p| p.uid() != old.uid())
    );
    t.cleanup().await;
}

#[tokio::test]
async fn deleting_the_channel_removes_its_versions_and_pod() {
    let t = TestNs::started("delete", &[]).await;
    let data = channel_data(&[("a", "v1"), ("b", "v1")]);
    t.synced_custom("ch", &data, SYNC).await;
    // A slow second sync, so that a pod exists when the channel goes.
    slow_sync_running(&t, &data).await;
    t.channels()
        .delete("ch", &DeleteParams::default())
        .await
        .unwrap();
    t.eventually("the versions to be garbage collected", SYNC, || async {
        t.version_names().await.is_empty().then_some(())
    })
    .await;
    t.wait_no_pods(SYNC).await;
    t.cleanup().await;
}

#[tokio::test]
async fn the_operator_stops_cleanly_on_sigterm_and_hands_back_its_lease() {
    let mut t = TestNs::new("sigterm").await;
    let lease = format!("lease-{}", t.ns);
    let lease_args = [
        "--leader-election=true".to_string(),
        format!("--leader-election-namespace={}", t.ns),
        format!("--leader-election-lease={lease}"),
    ];
    let lease_args: Vec<&str> = lease_args.iter().map(String::as_str).collect();
    t.start_operator(&lease_args);
    t.synced_custom("ch", &channel_data(&[("a", "v1")]), SYNC)
        .await;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(t.client.clone(), &t.ns);
    let held = leases.get(&lease).await.unwrap();
    assert!(
        held.spec.and_then(|s| s.holder_identity).is_some(),
        "the leader holds the lease"
    );

    let (status, took) = t.term_operator();
    assert_eq!(status.code(), Some(0), "{}", t.operator_log());
    assert!(took < Duration::from_secs(10), "stopping took {took:?}");
    let released = leases.get(&lease).await.unwrap();
    assert_eq!(
        released.spec.and_then(|s| s.holder_identity),
        None,
        "the lease is released on a clean stop"
    );
    t.cleanup().await;
}
