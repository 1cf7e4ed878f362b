//! What a sync makes of its data and of requests that come while it runs.

use super::*;

#[tokio::test]
async fn an_on_demand_request_during_a_sync_causes_exactly_one_more_sync() {
    let t = TestNs::started("request-during", &[]).await;
    sync_under_way(&t, 4).await;
    // Asked while the first sync runs: its data predates the request.
    t.request_sync("ch", "during-1").await;
    let ch = t
        .eventually("the sync that serves the request", SYNC, || async {
            let ch = t.channel("ch").await;
            let s = ch.status.as_ref()?;
            // Ready keeps its outcome while a routine resync runs, and the request is
            // recorded when the sync serving it starts: wait for that sync's end.
            (s.sync_requested_at.as_deref() == Some("during-1")
                && ready_reason(&ch).as_deref() == Some("Synchronized")
                && !reconciling(&ch))
            .then_some(ch)
        })
        .await;
    assert_eq!(t.pods_created(), 2, "one more sync for the request");
    t.wait_no_pods(SYNC).await;
    // A barrier: one more request. Had a third sync started by itself, this one would
    // make a fourth.
    let ch = t.sync_again("ch", "barrier", &ch, SYNC).await;
    assert_eq!(ready_reason(&ch).as_deref(), Some("Synchronized"));
    t.wait_no_pods(SYNC).await;
    assert_eq!(t.pods_created(), 3, "{}", t.operator_log());
    t.cleanup().await;
}

#[tokio::test]
async fn dropped_labels_and_annotations_are_removed_and_duplicate_names_use_the_last_entry() {
    let t = TestNs::started("labels-dups", &[]).await;
    let with_labels = json!([{
        "metadata": {"name": "os", "labels": {"flavor": "green", "arch": "x86"},
                     "annotations": {"note": "first"}},
        "spec": {"version": "v1", "type": "container",
                 "metadata": {"upgradeImage": "r/os:v1", "displayName": "OS 1", "created": "2026-11-01",
                              "platforms": ["linux/amd64", "linux/arm64"]}}
    }]);
    let ch = t.synced_custom("ch", &with_labels, SYNC).await;
    let os = t.versions_api().get("os").await.unwrap();
    assert_eq!(os.labels()["arch"], "x86");
    assert_eq!(os.annotations()["note"], "first");
    assert_eq!(
        os.spec.metadata.as_ref().unwrap()["platforms"],
        json!(["linux/amd64", "linux/arm64"])
    );

    // The next data drops a label and the annotation, and lists "os" twice (a container
    // and an iso build, as real channels have): the last entry wins.
    let next = json!([
        {"metadata": {"name": "os", "labels": {"flavor": "green"}},
         "spec": {"version": "v1", "type": "container", "metadata": {"upgradeImage": "r/os:v1"}}},
        {"metadata": {"name": "os", "labels": {"flavor": "blue"}},
         "spec": {"version": "v1", "type": "iso", "metadata": {"uri": "http://r/os-v1.iso", "displayName": "OS 1 ISO"}}}
    ]);
    t.patch_spec("ch", json!({"options": {"args": [write_script(&next)]}}))
        .await;
    let ch = t.wait_next_attempt("ch", &ch, SYNC).await;
    assert_eq!(ready_reason(&ch).as_deref(), Some("Synchronized"));
    assert!(
        ready_message(&ch)
            .ends_with("duplicate names in the channel data, the last entry of each was used: os"),
        "{}",
        ready_message(&ch)
    );
    let os = t.versions_api().get("os").await.unwrap();
    assert_eq!(os.spec.type_, "iso");
    assert_eq!(os.labels().get("flavor").map(String::as_str), Some("blue"));
    assert_eq!(os.labels().get("arch"), None, "a dropped label is removed");
    assert_eq!(
        os.annotations().get("note"),
        None,
        "a dropped annotation is removed"
    );
    let metadata = os.spec.metadata.as_ref().unwrap();
    assert_eq!(metadata.get("upgradeImage"), None);
    assert_eq!(metadata["displayName"], "OS 1 ISO");
    wait_for_event(&t, "ch", |(ty, reason, note)| {
        ty == "Warning" && reason == "DuplicateVersions" && note.ends_with("os")
    })
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn complete_data_is_used_when_the_operator_comes_back_after_the_timeout() {
    let mut t = TestNs::started("late-operator", &[]).await;
    let mut spec = custom_spec(&write_script(&channel_data(&[("late", "v1")])));
    spec["options"]["timeout"] = json!("5s");
    t.create_channel("ch", spec).await;
    // The operator dies right after starting the pod (and recording it in the status: a
    // pod it did not record, as when it dies between the two writes, is replaced once)...
    t.wait_pod_recorded("ch", SYNC).await;
    t.kill_operator();
    // ...and comes back after the pod's timeout, with the data waiting in its log.
    let pods = t.pods();
    t.eventually("the display container to run", SYNC, || async {
        let pod = pods.get_opt("ch").await.unwrap()?;
        let statuses = pod.status?.container_statuses?;
        statuses
            .iter()
            .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            .then_some(())
    })
    .await;
    let created = pods.get("ch").await.unwrap().creation_timestamp().unwrap();
    t.eventually("the pod's timeout to pass", SYNC, || async {
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.0);
        (age.as_secs() >= 6).then_some(())
    })
    .await;
    t.start_operator(&[]);
    let ch = t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_eq!(ready_message(&ch), "synchronized 1 versions (1 created)");
    assert_eq!(t.pods_created(), 1);
    t.cleanup().await;
}

/// A runner that prints terminal escape sequences (clear screen, colours, a title change)
/// and fails: its output reaches the Ready message and the `status` table as text, with
/// no ESC byte, and the message stays within 1,024 bytes.
#[tokio::test]
async fn a_runner_printing_terminal_escapes_leaves_no_esc_byte_in_ready_or_the_status_table() {
    let t = TestNs::started("escapes", &[]).await;
    let script = r#"head -c 4000 /dev/zero | tr '\0' x; printf '\033[2J\033]0;owned\007\033[31mred\r\n'; exit 3"#;
    t.create_channel("esc", custom_spec(script)).await;
    let ch = t.wait_ready("esc", "FailedToSync", SYNC).await;
    let message = ready_message(&ch);
    assert!(message.contains("red"), "{message}");
    assert!(!message.chars().any(char::is_control), "{message:?}");
    assert!(message.len() <= 1024, "{}", message.len());
    let stalled_or_ready = ch.status.as_ref().unwrap().conditions.iter();
    for c in stalled_or_ready {
        assert!(
            !c.message.contains('\u{1b}'),
            "{}: {:?}",
            c.type_,
            c.message
        );
    }
    for wide in [false, true] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rancheros-operator"));
        cmd.args(["status", "-n", &t.ns]);
        if wide {
            cmd.args(["-o", "json"]);
        }
        let out = cmd.output().unwrap();
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.contains("esc"), "{table}");
        assert!(!table.contains('\u{1b}'), "{table:?}");
    }
    t.cleanup().await;
}
