//! The status conditions: disabled, invalid, suspended, kstatus, transition times.

use super::*;
use crate::api::STALLED;

#[test]
fn a_disabled_channel_deletes_its_pod_and_flags_its_versions_once() {
    let mut ch = sample_channel();
    ch.spec.enabled = Some(false);
    let pod = ready_pod(&sample_channel(), 0);
    let v = existing_version(
        &ch,
        versions::desired(
            &ch,
            &config::resolve(&ch.spec, &Default::default()).unwrap(),
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
    assert_status_reason(r, "True", "ChannelDisabled");
    assert_eq!(d.requeue, None);
    assert_settled(&ch, &d, 4);
}

/// Asserts that once `d`'s status is recorded, the decision at `at` has nothing more to do
/// or read.
#[track_caller]
fn assert_settled(ch: &ManagedOSVersionChannel, d: &Decision, at: i64) {
    let ch = with_status(ch, d);
    assert_eq!(decide(&obs(&ch, t(at)), &settings()), Decision::default());
}

#[test]
fn invalid_configuration_is_reported_once_and_starts_no_pod() {
    let ch = channel(json!({"type": "custom", "syncInterval": "often", "options": {"image": "i"}}));
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_eq!(d.effects, vec![]);
    let r = ready(&d);
    assert_status_reason(r, "False", "InvalidConfiguration");
    assert_message_starts(r, "spec.syncInterval");
    assert_eq!(d.events.len(), 1);
    assert_eq!(d.requeue, None);
    assert_settled(&ch, &d, 10);
}

#[test]
fn transition_time_moves_only_when_the_status_does() {
    let ch = sample_channel();
    let ch = started(&ch, 0);
    let failed = runner_failed(&ch, 0, 2, "x", 7);
    // Unknown (first sync) -> False: the transition time moves.
    assert_eq!(ready(&failed).last_transition_time, Time(t(7)));
    // False -> False on the next failure: it stays.
    let ch = with_status(&ch, &failed);
    let ch = started(&ch, 20);
    let again = runner_failed(&ch, 20, 2, "x", 25);
    assert_eq!(ready(&again).last_transition_time, Time(t(7)));
}

/// A channel that synced once at t(0)..t(5), and its versions.
fn synced_once() -> (ManagedOSVersionChannel, Vec<ManagedOSVersion>) {
    let (ch, pod) = started_ready();
    let d = reading(&ch, &pod, &framed(SAMPLE), &[], t(5));
    assert_eq!(ready(&d).reason, "Synchronized");
    let ch = with_status(&ch, &d);
    let cfg = config::resolve(&ch.spec, &Default::default()).unwrap();
    let versions = channel::parse(SAMPLE.as_bytes())
        .unwrap()
        .versions
        .iter()
        .map(|item| existing_version(&ch, versions::desired(&ch, &cfg, item)))
        .collect();
    (ch, versions)
}

#[test]
fn a_routine_resync_keeps_ready_and_shows_reconciling_while_it_runs() {
    let (ch, versions) = synced_once();
    let before = ch
        .status
        .as_ref()
        .unwrap()
        .condition(READY)
        .unwrap()
        .clone();
    assert_eq!(before.status, "True");
    // The interval is up: a resync starts; Ready still tells the last outcome.
    let d = decide(&obs(&ch, t(3605)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    assert_eq!(ready(&d), &before);
    let reconciling = condition(&d, RECONCILING).expect("Reconciling");
    assert_eq!(reconciling.status, "True");
    assert_eq!(condition(&d, STALLED), None);
    let ch = with_status(&ch, &d);
    // While the pod works, the status does not change.
    let pod = pod_in(&ch, t(3605), json!({"phase": "Pending"}));
    assert_eq!(at_pod(&ch, &pod, t(3606)).status, None);
    // It ends with nothing to change: Ready still True (same transition), Reconciling gone,
    // and no Normal Event: the status says it all.
    let pod = ready_pod(&ch, 3605);
    let d = reading(&ch, &pod, &framed(SAMPLE), &versions, t(3610));
    assert_eq!(ready(&d).status, "True");
    assert_eq!(ready(&d).last_transition_time, before.last_transition_time);
    assert_eq!(condition(&d, RECONCILING), None);
    assert_eq!(d.events, vec![]);
    let status = d.status.as_ref().unwrap();
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(status.next_sync_time, Some(Time(t(3610 + 3600))));
}

#[test]
fn a_sync_that_changes_something_or_recovers_is_an_event() {
    let (ch, versions) = synced_once();
    // One version fewer in the data: a change.
    let one = r#"[{"metadata":{"name":"foo"},"spec":{"version":"v1","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v1"}}}]"#;
    let ch2 = started(&ch, 3605);
    let pod = ready_pod(&ch2, 3605);
    let d = reading(&ch2, &pod, &framed(one), &versions, t(3610));
    assert_eq!(descriptions(&d), ["flag version bar", "delete pod chan"]);
    assert_eq!(d.events.len(), 1, "{:?}", d.events);
    assert!(!d.events[0].warning);
    // A failure, then a success with nothing to change: the recovery is news.
    let (ch3, failed) = failed_run(&ch, 3605);
    let ch3 = with_status(&ch3, &failed);
    let ch3 = started(&ch3, 3620);
    let pod = ready_pod(&ch3, 3620);
    let d = reading(&ch3, &pod, &framed(SAMPLE), &versions, t(3625));
    assert_eq!(ready(&d).reason, "Synchronized");
    assert_eq!(d.events.len(), 1, "{:?}", d.events);
}

#[test]
fn failures_past_the_quick_retries_stall_and_a_success_clears_it() {
    let (mut ch, versions) = synced_once();
    let mut now = 3605;
    for attempt in 1..=4 {
        let (next, d) = failed_run(&ch, now);
        ch = next;
        let stalled = condition(&d, STALLED);
        assert_eq!(stalled.is_some(), attempt >= 4, "attempt {attempt}");
        assert_eq!(ready(&d).status, "False");
        // kstatus: InProgress while retried (Reconciling, as Flux says it), Failed past
        // the budget (Stalled, and no Reconciling).
        let reconciling = condition(&d, RECONCILING);
        if attempt < 4 {
            let r = reconciling.expect("Reconciling while retried");
            assert_status_reason(r, "True", "ProgressingWithRetry");
            assert_message_starts(r, "FailedToSync: ");
            assert_message_has(r, "retrying in");
        } else {
            assert_eq!(reconciling, None, "attempt {attempt}");
        }
        ch = with_status(&ch, &d);
        // The retry waits out its backoff: a Reconciling that says so starts no sync.
        let waiting = decide(&obs(&ch, t(now + 2)), &settings());
        assert_eq!(
            (waiting.effects.len(), waiting.status.is_none()),
            (0, true),
            "attempt {attempt}: {waiting:?}"
        );
        assert!(waiting.requeue.is_some_and(|r| !r.is_zero()));
        now += 1 + d.requeue.unwrap().as_secs() as i64;
    }
    let stalled = ch.status.as_ref().unwrap().condition(STALLED).unwrap();
    assert_eq!(stalled.reason, "FailedToSync");
    assert_message_has(stalled, "4 failures in a row");
    ch = started(&ch, now);
    let pod = ready_pod(&ch, now);
    let d = reading(&ch, &pod, &framed(SAMPLE), &versions, t(now + 2));
    assert_eq!(condition(&d, STALLED), None);
    assert_eq!(condition(&d, RECONCILING), None);
    assert_eq!(ready(&d).status, "True");
}

#[test]
fn a_retry_under_way_says_synchronizing_again() {
    let (ch, _) = synced_once();
    let (ch, failed) = failed_run(&ch, 3605);
    let ch = with_status(&ch, &failed);
    let retry = condition(&failed, RECONCILING).unwrap();
    // The backoff (the retry delay) over, the retry starts: Reconciling says Synchronizing,
    // its transition time kept (it stayed True).
    let d = decide(&obs(&ch, t(3606 + 11)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    let r = condition(&d, RECONCILING).unwrap();
    assert_status_reason(r, "True", "Synchronizing");
    assert_eq!(r.last_transition_time, retry.last_transition_time);
}

#[test]
fn an_invalid_spec_stalls() {
    let ch = channel(json!({"type": "custom", "options": {}}));
    let d = decide(&obs(&ch, t(0)), &settings());
    let stalled = condition(&d, STALLED).expect("Stalled");
    assert_status_reason(stalled, "True", "InvalidConfiguration");
    assert_eq!(condition(&d, RECONCILING), None);
}

#[test]
fn a_suspended_channel_is_paused_and_resumes_at_once() {
    let (ch, versions) = synced_once();
    let mut paused = ch.clone();
    paused.spec.suspend = Some(true);
    paused.spec.delete_no_longer_in_sync_versions = Some(true);
    paused.metadata.generation = Some(2);
    // A sync under way is stopped; nothing else happens, whatever is due.
    let pod = pod_in(&ch, t(3605), json!({"phase": "Pending"}));
    let d = decide(
        &Observation {
            pod: Some(&pod),
            versions: Some(&arcs(&versions)),
            ..obs(&paused, t(3605))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert!(!d.needs.any());
    let r = ready(&d);
    assert_status_reason(r, "True", "Suspended");
    assert_message_has(r, "the last outcome: Synchronized: synchronized 2 versions");
    assert_eq!(d.status.as_ref().unwrap().next_sync_time, None);
    let paused = with_status(&paused, &d);
    // Days later, on demand: still nothing.
    let asked = with_request(&paused, "now");
    let d = decide(&obs(&asked, t(999_999)), &settings());
    assert_eq!((d.effects.len(), d.status.is_none()), (0, true), "{d:?}");
    // Resumed (a spec change): a sync at once.
    let mut resumed = paused.clone();
    resumed.spec.suspend = Some(false);
    resumed.metadata.generation = Some(3);
    let d = decide(&obs(&resumed, t(1_000_000)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    assert_eq!(ready(&d).status, "Unknown");
}
