//! When syncs happen: intervals, on-demand requests, backoff, the queue, API errors.

use super::*;

#[test]
fn the_next_sync_is_due_one_interval_after_the_last() {
    let (mut ch, pod) = started_ready();
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log, &[], t(5));
    ch = with_status(&ch, &d);
    // Restarts and status echoes: nothing to do until the interval is up.
    let d = decide(&obs(&ch, t(65)), &settings());
    assert_eq!(d.effects, vec![]);
    assert_eq!(d.requeue, Some(Duration::from_secs(3540)));
    // Due: a new pod.
    let d = decide(&obs(&ch, t(3605)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
}

#[test]
fn on_demand_annotation_and_spec_changes_sync_at_once() {
    let (ch, pod) = started_ready();
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log, &[], t(5));
    let ch = with_status(&ch, &d);

    let requested = with_request(&ch, "now-1");
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
    assert_eq!(d.effects, vec![]);

    let mut changed = ch.clone();
    changed.metadata.generation = Some(2);
    let d = decide(&obs(&changed, t(10)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
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
        let d = runner_failed(&ch, now, 1, "", now + 1);
        ch = with_status(&ch, &d);
        let wait = d.requeue.unwrap();
        waits.push(wait.as_secs());
        // Nothing starts before the wait is over.
        let early = decide(
            &obs(&ch, t(now + 1 + wait.as_secs() as i64 - 1)),
            &settings(),
        );
        assert_eq!(early.effects, vec![]);
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
fn a_request_made_during_a_sync_causes_exactly_one_more_sync() {
    let ch = with_request(&sample_channel(), "req-1");
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    let ch = with_status(&ch, &d);
    let pod = ready_pod(&ch, 0);
    // A new request arrives while the pod runs; its data predates the request.
    let ch = with_request(&ch, "req-2");
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
    let pod = ready_pod(&ch, 6);
    let d = reading(&ch, &pod, &framed(SAMPLE), &[], t(10));
    let ch = with_status(&ch, &d);
    // ...and only one.
    let d = decide(&obs(&ch, t(12)), &settings());
    assert_eq!(d.effects, vec![]);
    assert_eq!(d.requeue, Some(Duration::from_secs(3600 - 2)));
}

/// The decision at `now` on `ch`'s syncer pod, once an API request failed with `message`.
fn api_error_at(ch: &ManagedOSVersionChannel, pod: &Pod, message: &str, now: i64) -> Decision {
    decide(
        &Observation {
            pod: Some(pod),
            error: Some(&api_failure(message)),
            ..obs(ch, t(now))
        },
        &settings(),
    )
}

#[test]
fn an_api_error_is_a_failed_attempt_that_backs_off() {
    let (ch, pod) = started_ready();
    let d = api_error_at(
        &ch,
        &pod,
        "listing ManagedOSVersions in ns: the server is currently unable to handle the request",
        3,
    );
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert!(
        matches!(
            &d.outcome,
            Some(Outcome::Failed(SyncFailure::Api {
                class: ErrorClass::Retryable,
                ..
            }))
        ),
        "{:?}",
        d.outcome
    );
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
        (d.effects.len(), d.requeue),
        (0, Some(Duration::from_secs(8)))
    );
}

#[test]
fn a_disabled_channel_whose_writes_fail_backs_off_instead_of_looping() {
    let mut ch = sample_channel();
    ch.spec.enabled = Some(false);
    let d = decide(
        &Observation {
            error: Some(&api_failure(
                "flag version foo: admission webhook denied the request",
            )),
            ..obs(&ch, t(0))
        },
        &settings(),
    );
    assert_eq!(ready(&d).reason, "FailedToSync");
    let ch = with_status(&ch, &d);
    for now in [1, 5, 9] {
        let d = decide(&obs(&ch, t(now)), &settings());
        assert_eq!(d.effects, vec![], "at {now}s");
        assert_eq!(d.status, None, "at {now}s");
        assert_eq!(d.requeue, Some(Duration::from_secs(10 - now as u64)));
    }
    // After the backoff the disabled channel is handled again.
    let d = decide(&obs(&ch, t(10)), &settings());
    assert!(d.needs.versions, "{d:?}");
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
    assert_eq!(d.effects, vec![]);
    let reconciling = condition(&d, RECONCILING).expect("Reconciling");
    assert_status_reason(reconciling, "True", "Synchronizing");
    assert_message_starts(reconciling, "queued: waiting for a free sync slot");
    // Woken when its turn comes; the look now and then costs no API request.
    assert_eq!(d.requeue, Some(Duration::from_secs(30)));
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
fn a_refused_version_write_fails_the_sync() {
    let (ch, pod) = sample_ready();
    let d = api_error_at(&ch, &pod, "apply version foo: forbidden", 3);
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToSync");
    assert_message_starts(r, "apply version foo: forbidden (attempt 1");
}

#[test]
fn a_sync_requested_after_failures_runs_to_its_end() {
    // Four failures: the channel waits for its interval...
    let mut ch = sample_channel();
    let mut now = 0;
    for _ in 0..4 {
        let (next, d) = failed_run(&ch, now);
        ch = with_status(&next, &d);
        now += 1 + d.requeue.unwrap().as_secs() as i64;
    }
    assert_eq!(
        ch.status.as_ref().unwrap().failed_synchronization_attempts,
        4
    );
    let at = now - 3600 + 5;
    // ...until asked: the sync starts, Ready still saying FailedToSync...
    let ch = with_request(&ch, "please");
    let d = decide(&obs(&ch, t(at)), &settings());
    assert_eq!(descriptions(&d), ["create pod chan"]);
    assert_eq!(ready(&d).reason, "FailedToSync");
    let ch = with_status(&ch, &d);
    // ...and the backoff does not stop it half-way: its output is read and applied.
    let pod = ready_pod(&ch, at);
    let d = at_pod(&ch, &pod, t(at + 3));
    assert!(d.needs.display_log, "{d:?}");
    let d = reading(&ch, &pod, &framed(SAMPLE), &[], t(at + 4));
    assert_eq!(ready(&d).reason, "Synchronized");
}

#[test]
fn on_demand_requests_start_at_most_one_sync_per_request_interval_and_are_never_dropped() {
    let windowed = Settings {
        min_request_interval: Duration::from_secs(10),
        ..settings()
    };
    let ch = sample_channel();
    let ch = with_status(&ch, &decide(&obs(&ch, t(0)), &windowed));
    let pod = ready_pod(&ch, 0);
    let ch = with_status(&ch, &reading(&ch, &pod, &framed(SAMPLE), &[], t(5)));
    // A request 2 s after the last sync: served when the window ends (at 15 s), not now.
    let requested = with_request(&ch, "r1");
    let d = decide(&obs(&requested, t(7)), &windowed);
    assert_eq!(d.effects, vec![]);
    assert_eq!(d.requeue, Some(Duration::from_secs(8)));
    // More requests meanwhile change nothing but the value served.
    let requested = with_request(&requested, "r2");
    let d = decide(&obs(&requested, t(12)), &windowed);
    assert_eq!(d.effects, vec![]);
    assert_eq!(d.requeue, Some(Duration::from_secs(3)));
    // The window is over: one sync, for the latest request.
    let d = decide(&obs(&requested, t(15)), &windowed);
    assert_eq!(descriptions(&d), ["create pod chan"]);
    assert_eq!(
        d.status.as_ref().unwrap().sync_requested_at.as_deref(),
        Some("r2")
    );
    // A spec change is not a request: it syncs at once.
    let mut changed = ch.clone();
    changed.metadata.generation = Some(2);
    let d = decide(&obs(&changed, t(6)), &windowed);
    assert_eq!(descriptions(&d), ["create pod chan"]);
}
