//! What one channel can cost, on the cluster: the number of versions it may list
//! (`--max-versions-per-channel`) and the length of what its failures say (every list in a
//! message or Event names at most 10 items, then "and N more").

mod common;

use common::*;

fn numbered(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("v{i:02}"), format!("1.0.{i}")))
        .collect()
}

fn data_of(pairs: &[(String, String)]) -> serde_json::Value {
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    channel_data(&refs)
}

#[tokio::test]
async fn a_channel_listing_more_than_max_versions_per_channel_fails_naming_the_flag_and_writes_nothing()
 {
    let t = TestNs::started("max-versions", &["--max-versions-per-channel=3"]).await;
    t.create_custom("ch", &data_of(&numbered(5))).await;
    let ch = t.wait_ready("ch", "FailedToSync", 2 * MINUTE).await;
    let message = ready_message(&ch);
    assert!(
        message.contains("lists 5 entries")
            && message.contains("--max-versions-per-channel")
            && message.contains("nothing was changed"),
        "{message}"
    );
    assert_eq!(t.version_names().await, Vec::<String>::new());
    // Within the bound, the same channel syncs.
    t.patch_spec("ch", custom_spec(&write_script(&data_of(&numbered(3)))))
        .await;
    t.wait_ready("ch", "Synchronized", 2 * MINUTE).await;
    assert_eq!(t.version_names().await.len(), 3);
    t.cleanup().await;
}

#[tokio::test]
async fn a_conflict_over_15_versions_names_10_of_them_and_counts_the_rest() {
    let t = TestNs::started("capped-lists", &[]).await;
    let data = data_of(&numbered(15));
    t.create_custom("first", &data).await;
    t.wait_ready("first", "Synchronized", 2 * MINUTE).await;
    // The same 15 names from another channel: every one is a conflict.
    t.create_custom("second", &data).await;
    let ch = t.wait_ready("second", "FailedToSync", 2 * MINUTE).await;
    let message = ready_message(&ch);
    assert_eq!(
        message.matches("already exists").count(),
        10,
        "at most 10 names: {message}"
    );
    assert!(message.contains("and 5 more"), "{message}");
    let warnings: Vec<String> = t
        .eventually("a Warning Event on the channel", MINUTE, || async {
            let notes: Vec<String> = channel_events(&t, "second")
                .await
                .into_iter()
                .filter(|(kind, _, _)| kind == "Warning")
                .map(|(_, _, note)| note)
                .collect();
            (!notes.is_empty()).then_some(notes)
        })
        .await;
    for note in &warnings {
        assert!(note.matches("already exists").count() <= 10, "{note}");
    }
    // Nothing of the first channel was taken over.
    let versions = t.versions().await;
    assert_eq!(versions.len(), 15);
    assert!(
        versions.iter().all(|v| v
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.name == "first")),
        "a version changed hands"
    );
    t.cleanup().await;
}

/// 200 versions whose channel-wide upgradeContainer (within its 64 KiB) is copied into
/// each: some 12 MiB of writes from a few KiB of data, past the operator's 1 MiB bound.
#[tokio::test]
async fn a_plan_writing_more_than_max_sync_write_bytes_fails_naming_the_flag_and_writes_nothing() {
    let t = TestNs::started("max-write-bytes", &["--max-sync-write-bytes=1Mi"]).await;
    let mut spec = custom_spec(&write_script(&data_of(&numbered(200))));
    spec["upgradeContainer"] = serde_json::json!({"image": "u", "args": ["x".repeat(60 * 1024)]});
    t.create_channel("ch", spec.clone()).await;
    let ch = t.wait_ready("ch", "FailedToSync", 2 * MINUTE).await;
    let message = ready_message(&ch);
    assert!(
        message.starts_with("the sync would write ")
            && message.contains("more than the 1048576 one sync may write (--max-sync-write-bytes); nothing was changed"),
        "{message}"
    );
    assert_eq!(t.version_names().await, Vec::<String>::new());
    // Without the big container, the same versions fit.
    spec["upgradeContainer"] = serde_json::json!({"image": "u", "args": ["short"]});
    t.patch_spec("ch", spec).await;
    t.wait_ready("ch", "Synchronized", 2 * MINUTE).await;
    assert_eq!(t.version_names().await.len(), 200);
    t.cleanup().await;
}

#[tokio::test]
async fn the_orphan_finalizer_over_400_versions_of_24_kib_holds_a_page_of_metadata_not_them_all() {
    let t = TestNs::started("orphan-large", &[]).await;
    // 400 versions of 24 KiB each (9.4 MiB in all: under the kubelet's 10 MiB log rotation),
    // made by the runner itself.
    let script = r#"pad=$(head -c 24000 /dev/zero | tr '\0' a); { printf '['; for i in $(seq 1 400); do [ "$i" -gt 1 ] && printf ','; printf '{"metadata":{"name":"v%s"},"spec":{"version":"v%s","type":"container","metadata":{"upgradeImage":"registry.example/os:v%s","notes":"%s"}}}' "$i" "$i" "$i" "$pad"; done; printf ']'; } > /output/data"#;
    let mut spec = custom_spec(script);
    spec["versionPolicy"] = serde_json::json!({"onChannelDelete": "Orphan"});
    t.create_channel("big", spec).await;
    t.wait_ready("big", "Synchronized", 3 * MINUTE).await;
    assert_eq!(t.version_names().await.len(), 400);
    t.wait_no_pods(MINUTE).await;

    // Settled; the peak reset: what the finalizer's pass holds is what it adds.
    let pid = operator_pid(&t.ns);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let (before, _) = rss_kib(pid);
    t.channels()
        .delete("big", &Default::default())
        .await
        .unwrap();
    t.eventually("the channel to go", 3 * MINUTE, || async {
        t.channels()
            .get_opt("big")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let (_, peak) = rss_kib(pid);
    // Every version stays, orphaned: no owner, flagged, the channel it came from named.
    let versions = t.versions().await;
    assert_eq!(versions.len(), 400);
    for v in &versions {
        assert!(
            v.metadata.owner_references.is_none(),
            "{:?}",
            v.metadata.name
        );
        let a = v.metadata.annotations.clone().unwrap_or_default();
        assert!(
            a.contains_key(rancheros_operator::api::ORPHANED_FROM_ANNOTATION),
            "{:?}",
            v.metadata.name
        );
    }
    // The versions are 9.4 MiB as JSON, more decoded: a pass that listed them whole would
    // hold them all. Pages of metadata are a few MiB at most.
    let grew = peak.saturating_sub(before);
    assert!(
        grew < 8 << 10,
        "the finalizer's pass grew the operator by {} MiB\n{}",
        grew >> 10,
        t.operator_log()
    );
    t.cleanup().await;
}
