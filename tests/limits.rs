//! What one channel can cost, on the cluster: the number of versions it may list
//! (`--max-versions-per-channel`) and the length of what its failures say (every list in a
//! message or Event names at most 10 items, then "and N more").

use crate::common;

use common::*;

fn numbered(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("v{i:02}"), format!("1.0.{i}")))
        .collect()
}

/// Channel `ch`, its spec patched to `spec`, syncs: `versions` versions.
async fn synced_as_fixed(t: &TestNs, spec: serde_json::Value, versions: usize) {
    t.patch_spec("ch", spec).await;
    t.wait_ready("ch", "Synchronized", 2 * MINUTE).await;
    assert_eq!(t.version_names().await.len(), versions);
}

#[tokio::test]
async fn a_channel_listing_more_than_max_versions_per_channel_fails_naming_the_flag_and_writes_nothing()
 {
    let t = TestNs::started("max-versions", &["--max-versions-per-channel=3"]).await;
    t.create_custom("ch", &channel_data(&numbered(5))).await;
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
    synced_as_fixed(
        &t,
        custom_spec(&write_script(&channel_data(&numbered(3)))),
        3,
    )
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_conflict_over_15_versions_names_10_of_them_and_counts_the_rest() {
    let t = TestNs::started("capped-lists", &[]).await;
    let data = channel_data(&numbered(15));
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
    let mut spec = custom_spec(&write_script(&channel_data(&numbered(200))));
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
    synced_as_fixed(&t, spec, 200).await;
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
    t.wait_gone(&t.channels(), "big", "the channel to go", 3 * MINUTE)
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

/// `writes_total{operation}` and `writes_paced_total` from the operator's `/metrics`.
async fn write_counts(port: u16, operation: &str) -> (f64, f64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    let value = |series: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let writes = format!("rancheros_operator_writes_total{{operation=\"{operation}\"}}");
    (
        value(&writes),
        value("rancheros_operator_writes_paced_total"),
    )
}

#[tokio::test]
async fn the_undo_and_the_orphan_finalizer_write_through_the_paced_counted_writer() {
    // 5 writes a second, one at a time: the namespace is alone, so --write-qps bounds it.
    // Slow enough that a write sent one after another (undo, finalizer) waits for its turn
    // even when the API server answers slowly.
    const QPS: f64 = 5.0;
    let mut t = TestNs::new("one-writer").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    t.start_operator(&[
        &format!("--metrics-address=127.0.0.1:{port}"),
        "--metrics-insecure",
        "--write-qps=5",
        "--namespace-write-burst=1",
        // One attempt meets the quota: no retry of it adds creates and undos to the counts.
        "--retry-delay=1h",
    ]);
    let thirty = numbered(30);
    let mut spec = custom_spec(&write_script(&channel_data(&thirty)));
    spec["versionPolicy"] = serde_json::json!({"onChannelDelete": "Orphan"});
    t.create_channel("ch", spec).await;
    let ch = t.wait_ready("ch", "Synchronized", 2 * MINUTE).await;

    // The undo: a quota lets 5 of 10 new versions in; the 5 made are deleted again.
    create_quota(
        &t,
        "versions",
        serde_json::json!({"count/managedosversions.rancheros.cattle.io": "35"}),
    )
    .await;
    // The operator sees the quota, so the sync dry-runs its writes first.
    t.wait_admission_watched(Some(&format!("resourcequotas {}/versions", t.ns)))
        .await;
    let (_, paced) = write_counts(port, "undo_version").await;
    let forty = numbered(40);
    t.patch_spec(
        "ch",
        serde_json::json!({"options": {"args": [write_script(&channel_data(&forty))]}}),
    )
    .await;
    let ch = t.wait_next_attempt("ch", &ch, 2 * MINUTE).await;
    assert!(
        ready_message(&ch).contains("exceeded quota"),
        "{}",
        ready_message(&ch)
    );
    assert_eq!(t.version_names().await.len(), 30);
    let (undone, paced_after) = write_counts(port, "undo_version").await;
    assert_eq!(undone, 5.0);
    // 10 dry runs, the creates sent (at least 6) and 5 undos took a turn each; all but the
    // first waited for it (a few may have come when the answer before them took longer
    // than the turn).
    assert!(
        paced_after - paced >= 20.0 - 4.0,
        "{paced} -> {paced_after}"
    );

    // The finalizer: 30 patches, one at a time, each in its turn.
    let (_, paced) = write_counts(port, "orphan_version").await;
    let start = std::time::Instant::now();
    t.channels()
        .delete("ch", &Default::default())
        .await
        .unwrap();
    t.wait_gone(&t.channels(), "ch", "the channel to go", MINUTE)
        .await;
    let took = start.elapsed().as_secs_f64();
    let (orphaned, paced_after) = write_counts(port, "orphan_version").await;
    assert_eq!(orphaned, 30.0);
    // Each took a turn; those whose turn had come by the time the answer before them
    // arrived did not wait (on a loaded node, a third of them: 19 of 30 waited once), so
    // the rate is what shows the pacing, and the waits that it is the pacer's.
    assert!(paced_after - paced >= 10.0, "{paced} -> {paced_after}");
    assert!(took >= 29.0 / QPS, "30 orphan patches in {took:.1} s");
    t.cleanup().await;
}
