//! Conditions and Events: Ready through a routine resync, Stalled past the retry budget, a suspended channel, Events with counts.

use super::*;

// ---------------------------------------------------------------------------------------
// 2. A status kstatus-based tools read, and a pause

#[tokio::test]
async fn ready_stays_true_during_a_routine_resync_and_reconciling_shows_the_sync() {
    let t = TestNs::started("routine-resync", &[]).await;
    let data = channel_data(&[("a", "v1")]);
    let synced = t
        .create_synced("ch", custom_spec(&slow_script(8, &data)), SYNC)
        .await;
    let generation = synced.metadata.generation.unwrap();

    // An on-demand resync of a healthy channel: a routine one.
    let recorder = Recorder::start(&t, "ch").await;
    t.sync_again("ch", "routine", &synced, SYNC).await;
    // The recorder's watch may be a moment behind the read that saw the outcome: the sync
    // seen, then a state after it.
    t.eventually(
        "the recorder to see the sync and its end",
        Duration::from_secs(15),
        || async {
            let states = recorder.states();
            let began = states.iter().position(|s| s.reconciling())?;
            states[began..]
                .iter()
                .any(|s| !s.reconciling())
                .then_some(())
        },
    )
    .await;
    let states = recorder.stop();
    let all = history(&states);
    assert!(
        states.iter().all(|s| s.ready_status() == "True"),
        "Ready left True during a routine resync:\n{all}"
    );
    assert!(
        states
            .iter()
            .any(|s| s.reconciling == Some(("True".into(), "Synchronizing".into()))),
        "no Reconciling=True (Synchronizing) while the sync ran:\n{all}"
    );
    let last = states.last().unwrap();
    assert!(
        !last.reconciling(),
        "still Reconciling after the sync:\n{all}"
    );
    assert!(
        states.iter().all(|s| s.generation == generation
            && s.observed_generation == Some(generation)
            && s.ready.as_ref().unwrap().2 == Some(generation)),
        "observedGeneration is not the channel's generation:\n{all}"
    );

    // A spec change: Ready no longer says anything of the new spec while it syncs.
    let recorder = Recorder::start(&t, "ch").await;
    let before = t.channel("ch").await;
    let data = channel_data(&[("a", "v1"), ("b", "v2")]);
    t.patch_spec("ch", json!({"options": {"args": [slow_script(8, &data)]}}))
        .await;
    let ch = t.wait_next_attempt("ch", &before, SYNC).await;
    let new = generation + 1;
    // The recorder's watch may be a moment behind the read that saw the outcome.
    t.eventually(
        "the recorder to see the outcome",
        Duration::from_secs(15),
        || async {
            recorder
                .states()
                .iter()
                .any(|s| {
                    s.ready
                        .as_ref()
                        .is_some_and(|r| r.1 != "Synchronizing" && r.2 == Some(new))
                })
                .then_some(())
        },
    )
    .await;
    let states = recorder.stop();
    let all = history(&states);
    assert_eq!(ch.metadata.generation, Some(new));
    assert!(
        states.iter().any(|s| s.generation == new
            && s.observed_generation == Some(new)
            && s.reconciling()
            && matches!(&s.ready, Some((status, reason, Some(g)))
                if status != "True" && reason == "Synchronizing" && *g == new)),
        "Ready was not Unknown/False (Synchronizing) for the new generation while its first sync ran:\n{all}"
    );
    // No state claims the new generation is Ready before its sync finished.
    let done = states
        .iter()
        .position(|s| {
            s.ready
                .as_ref()
                .is_some_and(|r| r.1 == "Synchronized" && r.2 == Some(new))
        })
        .unwrap_or_else(|| panic!("never Synchronized for the new generation:\n{all}"));
    assert!(
        states[..done]
            .iter()
            .all(|s| s.observed_generation != Some(new) || s.reconciling()),
        "{all}"
    );
    let last = states.last().unwrap();
    assert_eq!(last.observed_generation, Some(new), "{all}");
    assert_eq!(last.ready_status(), "True", "{all}");
    assert!(!last.reconciling(), "{all}");
    t.cleanup().await;
}

#[tokio::test]
async fn a_failing_channel_past_the_retry_budget_is_stalled() {
    let t = TestNs::started("stalled", &["--retry-delay=1s"]).await;
    // A spec no sync can act on: stalled at once.
    t.create_channel(
        "invalid",
        json!({"type": "custom", "options": {"mountPath": "/output"}}),
    )
    .await;
    // A runner that always fails: quick retries, then stalled until a human acts.
    let mut failing = custom_spec("echo 'disk on fire' >&2; exit 3");
    failing["syncInterval"] = json!("1h");
    t.create_channel("failing", failing).await;
    let recorder = Recorder::start(&t, "failing").await;

    let ch = t.wait_ready("invalid", "InvalidConfiguration", SYNC).await;
    let stalled = ch.status.as_ref().unwrap().condition(STALLED).cloned();
    assert!(
        stalled
            .as_ref()
            .is_some_and(|c| c.status == "True" && c.reason == "InvalidConfiguration"),
        "{stalled:?}"
    );

    let ch = t
        .eventually(
            "four failures in a row",
            Duration::from_secs(300),
            || async {
                let ch = t.channel("failing").await;
                let failures = ch.status.as_ref()?.failed_synchronization_attempts;
                (failures >= 4).then_some(ch)
            },
        )
        .await;
    let status = ch.status.as_ref().unwrap();
    assert_eq!(status.failed_synchronization_attempts, 4);
    let stalled = status
        .condition(STALLED)
        .cloned()
        .expect("no Stalled condition");
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "FailedToSync")
    );
    assert!(
        stalled
            .message
            .contains("4 failures in a row; next try in 1h"),
        "{}",
        stalled.message
    );
    assert_eq!(ready_reason(&ch).as_deref(), Some("FailedToSync"));
    // Within the retry budget it was not stalled; past it, it was.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let states = recorder.stop();
    let all = history(&states);
    for s in &states {
        assert_eq!(s.stalled(), s.failures >= 4, "{all}");
    }
    assert!(states.iter().any(|s| s.failures == 1), "{all}");

    // The human acts: a working spec clears Stalled.
    t.patch_spec(
        "failing",
        json!({"options": {"args": [write_script(&channel_data(&[("a", "v1")]))]}}),
    )
    .await;
    let ch = t.wait_ready("failing", "Synchronized", SYNC).await;
    assert!(ch.status.as_ref().unwrap().condition(STALLED).is_none());
    t.cleanup().await;
}

#[tokio::test]
async fn a_suspended_channel_runs_no_pod_and_touches_no_version() {
    let t = TestNs::started("suspended", &[]).await;
    let both = channel_data(&[("a", "v1"), ("b", "v2")]);
    t.synced_custom("ch", &both, SYNC).await;
    t.wait_no_pods(SYNC).await;
    let before = t.versions().await;
    let pods = t.pods_created();

    // Paused, and in the same change the runner would list only `a` (a spec change syncs
    // at once, and would flag `b`); a sync is requested too.
    let only_a = channel_data(&[("a", "v1")]);
    t.patch_spec(
        "ch",
        json!({"suspend": true, "options": {"args": [write_script(&only_a)]}}),
    )
    .await;
    t.request_sync("ch", "while-suspended").await;
    let ch = t.wait_ready("ch", "Suspended", SYNC).await;
    let ready = ready(&ch).unwrap().clone();
    assert_eq!(ready.status, "True", "Ready keeps the last outcome");
    assert!(
        ready.message.contains("spec.suspend is true"),
        "{}",
        ready.message
    );
    assert!(ready.message.contains("Synchronized"), "{}", ready.message);
    // What `kubectl get -o wide` shows (the API server's table of the channel).
    let row = table_row(&t, "ch").await;
    assert_eq!(row["Ready"], "True", "{row:?}");
    assert_eq!(row["Reason"], "Suspended", "{row:?}");
    assert!(row["Message"].contains("spec.suspend is true"), "{row:?}");
    assert!(!reconciling(&ch));
    // Long enough for a sync to have started and finished, were one to run.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(t.pods_created(), pods, "a suspended channel ran a pod");
    assert_eq!(
        t.versions().await,
        before,
        "a suspended channel touched its versions"
    );
    assert_eq!(
        ready_reason(&t.channel("ch").await).as_deref(),
        Some("Suspended")
    );

    // Resumed: the pending change syncs, and `b` is flagged.
    t.patch_spec("ch", json!({"suspend": false})).await;
    let ch = t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_eq!(
        ready_message(&ch),
        "synchronized 1 versions (1 flagged as no longer in sync)"
    );
    let versions = t.versions().await;
    let b = versions.iter().find(|v| v.name_any() == "b").unwrap();
    assert_eq!(
        b.annotations()
            .get(NO_LONGER_IN_SYNC_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
    t.cleanup().await;
}

#[tokio::test]
async fn an_unchanged_sync_writes_no_normal_event_and_repeated_failures_are_one_event_with_a_count()
{
    let t = TestNs::started("events", &["--retry-delay=1s"]).await;
    let one = channel_data(&[("a", "v1")]);
    let ch = t.synced_custom("ch", &one, SYNC).await;
    // A sync that changes nothing: in the status only.
    let ch = t.sync_again("ch", "unchanged", &ch, SYNC).await;
    assert_eq!(ready_message(&ch), "synchronized 1 versions (no changes)");
    // A sync that changes something: an Event. Events of a channel are published in
    // order, so once this one shows, the unchanged sync's would have too.
    let two = channel_data(&[("a", "v1"), ("b", "v2")]);
    t.patch_spec("ch", json!({"options": {"args": [write_script(&two)]}}))
        .await;
    t.wait_next_attempt("ch", &ch, SYNC).await;
    let normal = t
        .eventually("the Event of the second change", SYNC, || async {
            let normal = events_of_type(&t, "ch", "Normal").await;
            normal
                .iter()
                .any(|e| e.2.contains("(1 created)") && e.2.starts_with("synchronized 2"))
                .then_some(normal)
        })
        .await;
    let notes: Vec<&str> = normal.iter().map(|e| e.2.as_str()).collect();
    assert_eq!(
        notes,
        [
            "synchronized 1 versions (1 created)",
            "synchronized 2 versions (1 created)"
        ],
        "{normal:?}"
    );
    assert!(
        normal.iter().all(|e| e.1 == "Synchronized" && e.3 == 1),
        "{normal:?}"
    );

    // The same failure again and again: one Warning whose series counts them.
    t.patch_spec(
        "ch",
        json!({"options": {"args": ["echo 'disk on fire' >&2; exit 3"]}}),
    )
    .await;
    t.eventually(
        "four failures in a row",
        Duration::from_secs(300),
        || async {
            let ch = t.channel("ch").await;
            (ch.status.as_ref()?.failed_synchronization_attempts >= 4).then_some(())
        },
    )
    .await;
    let warnings = t
        .eventually("the failure Event counted four times", SYNC, || async {
            let warnings = events_of_type(&t, "ch", "Warning").await;
            (warnings.iter().map(|e| e.3).sum::<i32>() >= 4).then_some(warnings)
        })
        .await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let (_, reason, note, count) = &warnings[0];
    assert_eq!(reason, "FailedToSync");
    assert!(note.contains("exited with code 3"), "{note}");
    assert!(note.contains("disk on fire"), "{note}");
    assert_eq!(*count, 4);

    // The recovery is news.
    let three = channel_data(&[("a", "v1"), ("b", "v2"), ("c", "v3")]);
    t.patch_spec("ch", json!({"options": {"args": [write_script(&three)]}}))
        .await;
    t.wait_ready("ch", "Synchronized", SYNC).await;
    t.eventually("the recovery's Event", SYNC, || async {
        events_with_counts(&t, "ch")
            .await
            .iter()
            .any(|e| e.0 == "Normal" && e.2 == "synchronized 3 versions (1 created)")
            .then_some(())
    })
    .await;
    t.cleanup().await;
}

/// The channel's Events of type `type_` (`Normal`, `Warning`), with their series counts.
async fn events_of_type(
    t: &TestNs,
    channel: &str,
    type_: &str,
) -> Vec<(String, String, String, i32)> {
    events_with_counts(t, channel)
        .await
        .into_iter()
        .filter(|e| e.0 == type_)
        .collect()
}
