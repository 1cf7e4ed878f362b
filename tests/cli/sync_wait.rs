//! `sync --wait` against the cluster: what the requested sync changed, failures, timeouts, missing channels.

use super::*;

/// `sync NAMESPACE/ch --wait --timeout 4m`, which must succeed: the channel's
/// `NAMESPACE/ch`, and what the command did.
async fn sync_ch_and_wait(t: &TestNs) -> (String, Output) {
    let target = format!("{}/ch", t.ns);
    let o = cli(&["sync", &target, "--wait", "--timeout", "4m"], CLI_LIMIT).await;
    assert_success(&o, t);
    (target, o)
}

/// The one error line of the command's stderr: the runner of `target` failed.
#[track_caller]
fn failed_runner_error(o: &Output, target: &str) -> String {
    let errors = error_lines(o);
    assert_eq!(errors.len(), 1, "{}", stderr(o));
    let error = errors[0].clone();
    assert!(
        error.starts_with(&format!("error: {target}: FailedToSync: the runner")),
        "{error}"
    );
    error
}

#[tokio::test]
async fn sync_wait_prints_what_the_requested_sync_changed_by_name() {
    let t = TestNs::started("cli-sync-changes", &[]).await;
    set_data(&t, "v", &[("a", "v1"), ("b", "v1"), ("c", "v1")]).await;
    t.create_synced("ch", configmap_spec("v"), SYNC).await;
    // New channel data, seen only by a sync that starts from now on.
    set_data(&t, "v", &[("a", "v2"), ("c", "v1"), ("d", "v1")]).await;

    let (target, o) = sync_ch_and_wait(&t).await;
    assert_eq!(
        stdout(&o),
        format!(
            "{target}: Synchronized: synchronized 3 versions (1 created, 1 updated, 1 flagged as no longer in sync)\n  \
             created: d\n  updated: a\n  flagged as no longer in sync: b\n"
        )
    );
    assert!(error_lines(&o).is_empty(), "{}", stderr(&o));
    // Not a screen animation: stderr is a pipe here, so progress comes as plain lines.
    assert!(!stderr(&o).contains('\r'), "{}", stderr(&o));
    assert_eq!(t.version_names().await, ["a", "b", "c", "d"]);
    // The request was served: it is recorded.
    let ch = t.channel("ch").await;
    let asked = ch.metadata.annotations.as_ref().unwrap()[SYNC_REQUESTED_AT_ANNOTATION].clone();
    assert_eq!(ch.status.unwrap().sync_requested_at, Some(asked));

    // Again, with nothing new: said so.
    let o = cli_exit(&["sync", &target, "--wait"], 0).await;
    assert!(
        stdout(&o).ends_with(
            ": Synchronized: synchronized 3 versions (no changes)\n  no version was changed\n"
        ),
        "{}",
        stdout(&o)
    );
    t.cleanup().await;
}

#[tokio::test]
async fn sync_wait_of_a_failing_runner_exits_1_with_the_reason_of_a_new_attempt() {
    let t = TestNs::started("cli-sync-fails", &[]).await;
    t.create_channel("bad", custom_spec("echo 'no channel data here'; exit 3"))
        .await;
    let first = t.wait_ready("bad", "FailedToSync", SYNC).await;
    assert_eq!(failed_attempts(&first), 1);

    let target = format!("{}/bad", t.ns);
    let o = cli_exit(&["sync", &target, "--wait", "--timeout", "4m"], 1).await;
    let error = failed_runner_error(&o, &target);
    assert!(error.contains("no channel data here"), "{error}");
    assert_eq!(stdout(&o), "");
    // The outcome reported is a sync run for the request (the operator's retry was a
    // minute away), not the failure that was there before it.
    let after = t.channel("bad").await;
    assert_eq!(failed_attempts(&after), 2, "{}", t.operator_log());
    assert!(error.contains("attempt 2;"), "{error}");
    t.cleanup().await;
}

#[tokio::test]
async fn sync_wait_without_an_operator_times_out_with_a_clear_message() {
    // No operator watches this namespace.
    let (t, target) = unwatched_channel("cli-sync-timeout", configmap_spec("v")).await;
    let started = Instant::now();
    let o = cli_exit(&["sync", &target, "--wait", "--timeout", "5s"], 1).await;
    assert!(started.elapsed() >= Duration::from_secs(5));
    assert_eq!(
        error_lines(&o),
        [format!(
            "error: {target}: no outcome within 5s: the operator did not pick up the request; is it running, and does it watch namespace {}?",
            t.ns
        )]
    );
    // The request is there for an operator to pick up later.
    let ch = t.channel("ch").await;
    assert!(ch.annotations().contains_key(SYNC_REQUESTED_AT_ANNOTATION));
    t.cleanup().await;
}

#[tokio::test]
async fn sync_without_wait_only_requests() {
    let (t, target) = unwatched_channel("cli-sync-nowait", configmap_spec("v")).await;
    let o = cli_exit(&["sync", &target], 0).await;
    assert_eq!(stdout(&o), format!("{target}: sync requested\n"));
    let first = t.channel("ch").await.annotations()[SYNC_REQUESTED_AT_ANNOTATION].clone();
    // Each run writes a fresh value: each is a new request.
    cli_exit(&["sync", "ch", "-n", &t.ns], 0).await;
    let second = t.channel("ch").await.annotations()[SYNC_REQUESTED_AT_ANNOTATION].clone();
    assert_ne!(first, second);
    t.cleanup().await;
}

#[tokio::test]
async fn a_missing_channel_is_one_line_and_exit_1() {
    let t = TestNs::new("cli-missing").await;
    let target = format!("{}/nope", t.ns);
    for args in [
        vec!["sync", &target, "--wait"],
        vec!["sync", &target],
        vec!["status", &target],
    ] {
        let o = cli(&args, CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert_eq!(
            stderr(&o),
            format!("error: channel {target} not found\n"),
            "{args:?}"
        );
    }
    let o = cli(&["sync", "--all", "-n", &t.ns], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("error: no channels in namespace {}\n", t.ns)
    );
    t.cleanup().await;
}

#[tokio::test]
async fn sync_all_waits_for_every_channel_of_the_namespace() {
    let t = TestNs::started("cli-sync-all", &[]).await;
    set_data(&t, "one", &[("one-a", "v1"), ("one-b", "v1")]).await;
    set_data(&t, "two", &[("two-a", "v1"), ("two-b", "v1")]).await;
    t.create_channel("one", configmap_spec("one")).await;
    let mut two = configmap_spec("two");
    two["deleteNoLongerInSyncVersions"] = json!(true);
    t.create_channel("two", two).await;
    t.create_channel("bad", custom_spec("exit 4")).await;
    t.wait_ready("one", "Synchronized", SYNC).await;
    t.wait_ready("two", "Synchronized", SYNC).await;
    t.wait_ready("bad", "FailedToSync", SYNC).await;
    set_data(&t, "one", &[("one-a", "v1"), ("one-c", "v1")]).await;
    set_data(&t, "two", &[("two-a", "v1")]).await;

    let o = cli(
        &["sync", "--all", "-n", &t.ns, "--wait", "--timeout", "4m"],
        CLI_LIMIT,
    )
    .await;
    // One channel failed: exit 1, and the others' outcomes are all there.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let ns = &t.ns;
    assert!(
        out.contains(&format!(
            "{ns}/one: Synchronized: synchronized 2 versions (1 created, 1 flagged as no longer in sync)\n  \
             created: one-c\n  flagged as no longer in sync: one-b\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{ns}/two: Synchronized: synchronized 1 versions (1 deleted)\n  deleted: two-b\n"
        )),
        "{out}"
    );
    failed_runner_error(&o, &format!("{ns}/bad"));
    assert_eq!(failed_attempts(&t.channel("bad").await), 2);
    t.cleanup().await;
}

#[tokio::test]
async fn status_shows_the_channels_as_a_table() {
    let t = TestNs::started("cli-status", &[]).await;
    set_data(&t, "v", &[("a", "v1"), ("b", "v1")]).await;
    let synced = t.create_synced("ch", configmap_spec("v"), SYNC).await;
    let digest = synced
        .status
        .as_ref()
        .unwrap()
        .source_revision
        .clone()
        .unwrap();
    let short = &digest[digest.find("sha256:").unwrap()..][..19];

    for args in [
        vec!["status", "-n", &t.ns],
        vec!["status", &format!("{}/ch", t.ns)],
        vec!["status", "-A"],
    ] {
        let o = cli(&args, CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        let mut lines = out.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap()
            .split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            header,
            [
                "NAMESPACE",
                "NAME",
                "READY",
                "REASON",
                "VERSIONS",
                "REVISION",
                "LAST SYNC",
                "NEXT SYNC",
                "MESSAGE"
            ]
        );
        let row = lines
            .find(|l| l.starts_with(&format!("{} ", t.ns)))
            .unwrap_or_else(|| panic!("{args:?}: no row for the channel:\n{out}"));
        let cells: Vec<&str> = row
            .split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            &cells[..6],
            [t.ns.as_str(), "ch", "True", "Synchronized", "2", short],
            "{row}"
        );
        assert!(cells[6].ends_with(" ago"), "{row}");
        // 1h stretched by the channel's share of the 10% interval jitter.
        assert!(
            cells[7] == "in 59m" || cells[7].starts_with("in 1h"),
            "{row}"
        );
        assert_eq!(cells[8], "synchronized 2 versions (2 created)", "{row}");
    }
    t.cleanup().await;
}

#[tokio::test]
async fn sync_wait_of_a_suspended_channel_fails_at_once() {
    let mut spec = configmap_spec("v");
    spec["suspend"] = json!(true);
    let (t, target) = unwatched_channel("cli-sync-suspended", spec).await;
    // No operator runs, and none would sync it: the answer does not wait for the timeout.
    let o = cli_exit(&["sync", &target, "--wait", "--timeout", "4m"], 1).await;
    assert_eq!(
        error_lines(&o),
        [format!(
            "error: {target}: Suspended: the channel is suspended (spec.suspend is true): no sync runs until it is false"
        )]
    );
    // Without --wait: requested, and warned.
    let o = cli_exit(&["sync", &target], 0).await;
    assert_eq!(stdout(&o), format!("{target}: sync requested\n"));
    assert_eq!(
        stderr(&o),
        format!(
            "warning: {target}: Suspended: the channel is suspended (spec.suspend is true): no sync runs until it is false\n"
        )
    );
    t.cleanup().await;
}

#[tokio::test]
async fn sync_wait_during_a_running_sync_reports_the_next_one() {
    let t = TestNs::started("cli-sync-during", &[]).await;
    set_data(&t, "v", &[("a", "v1")]).await;
    // The runner reads its data when it starts, then takes a while.
    let mut spec = configmap_spec("v");
    spec["options"]["args"] = json!([r#"printf '%s' "$DATA" > /output/data; sleep 15"#]);
    t.create_channel("ch", spec).await;
    // The first sync's runner is running: it has read the old data.
    t.eventually("the first runner to run", SYNC, || async {
        let pod = t.pods().get_opt("ch").await.unwrap()?;
        let running =
            pod.status?.init_container_statuses?.iter().any(|c| {
                c.name == "runner" && c.state.as_ref().is_some_and(|s| s.running.is_some())
            });
        running.then_some(())
    })
    .await;
    set_data(&t, "v", &[("a", "v1"), ("late", "v1")]).await;

    let (target, o) = sync_ch_and_wait(&t).await;
    // Not the outcome of the sync under way (1 version): the one after it.
    assert_eq!(
        stdout(&o),
        format!(
            "{target}: Synchronized: synchronized 2 versions (1 created)\n  created: a, late\n  \
             (with the changes of a sync that was under way when the request came)\n"
        )
    );
    assert!(
        stderr(&o).contains("a sync that started before the request is finishing"),
        "{}",
        stderr(&o)
    );
    assert_eq!(t.version_names().await, ["a", "late"]);
    t.cleanup().await;
}
