//! Bounded durations and unprivileged runners (`--max-sync-timeout`,
//! `--min-sync-interval`, `--allow-privileged-runners`): what the flags refuse is
//! `InvalidConfiguration` before any pod exists, and no time the decision computes can
//! overflow, whatever the spec or the settings.

use super::*;

fn invalid(d: &Decision) -> &str {
    let r = ready(d);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", reason::INVALID_CONFIGURATION),
        "{d:?}"
    );
    assert_eq!(d.effects, vec![], "an invalid spec starts no pod");
    assert_eq!(d.requeue, None);
    &r.message
}

#[test]
fn a_timeout_too_large_for_any_arithmetic_is_invalid_configuration() {
    for timeout in ["5124095576030431h", "8761h", "2h"] {
        let ch = channel(json!({"type": "custom", "options": {"image": "i", "timeout": timeout}}));
        let d = decide(&obs(&ch, t(0)), &settings());
        let m = invalid(&d);
        assert_eq!(
            m,
            format!(
                "spec.options.timeout: {timeout:?} is longer than this operator's maximum of 1h (--max-sync-timeout)"
            )
        );
    }
    // With the flag raised, the same spec syncs, and the pod's deadline holds it.
    let ch = channel(json!({"type": "custom", "options": {"image": "i", "timeout": "2h"}}));
    let raised = Settings {
        max_sync_timeout: Duration::from_secs(3 * 3600),
        ..settings()
    };
    let d = decide(&obs(&ch, t(0)), &raised);
    let pod = created_pod(&d);
    assert_eq!(
        pod.spec.as_ref().unwrap().active_deadline_seconds,
        Some(2 * 3600 + 60)
    );
    assert_eq!(d.requeue, Some(Duration::from_secs(2 * 3600)));
}

#[test]
fn a_sync_interval_out_of_bounds_is_invalid_configuration_naming_the_flag() {
    for (interval, want) in [
        (
            "59s",
            "spec.syncInterval: \"59s\" is shorter than this operator's minimum of 1m (--min-sync-interval)",
        ),
        (
            "0",
            "spec.syncInterval: \"0\" is shorter than this operator's minimum of 1m (--min-sync-interval)",
        ),
        (
            "5124095576030431h",
            "spec.syncInterval: \"5124095576030431h\" is longer than a year; use at most 8760h",
        ),
    ] {
        let ch = channel(json!({"type": "json", "syncInterval": interval,
            "options": {"uri": "http://x/c.json"}}));
        let d = decide(&obs(&ch, t(0)), &settings());
        assert_eq!(invalid(&d), want);
    }
    let ch = channel(json!({"type": "json", "syncInterval": "10s",
        "options": {"uri": "http://x/c.json"}}));
    let fast = Settings {
        min_sync_interval: Duration::from_secs(5),
        ..settings()
    };
    assert!(decide(&obs(&ch, t(0)), &fast).needs.fetch.is_some());
}

/// Settings made outside the flags (a library user, the fuzzer): a requeue stays within
/// a year and a deadline saturates, instead of overflowing.
#[test]
fn settings_past_the_flags_bounds_cannot_overflow() {
    let ch = sample_channel();
    let wild = Settings {
        sync_timeout: Duration::MAX,
        retry_delay: Duration::MAX,
        max_sync_timeout: Duration::MAX,
        ..settings()
    };
    let d = decide(&obs(&ch, t(0)), &wild);
    let pod = created_pod(&d);
    assert!(d.requeue.unwrap() <= config::MAX_DURATION);
    assert!(pod.spec.as_ref().unwrap().active_deadline_seconds.unwrap() > 0);
    // And a failure's backoff and nextSyncTime at the far end of time.
    let ch = with_status(&ch, &d);
    let pod = pod_in(&ch, t(0), runner_failed_status(1));
    let end = Timestamp::MAX;
    let d = decide(
        &Observation {
            pod: Some(&pod),
            runner_log: Some("x"),
            ..obs(&ch, end)
        },
        &wild,
    );
    assert!(d.requeue.unwrap() <= config::MAX_DURATION);
    assert_eq!(d.status.unwrap().next_sync_time, None);
}

#[test]
fn a_privileged_runner_is_invalid_configuration_unless_allowed() {
    for (sc, field) in [
        (json!({"privileged": true}), "privileged"),
        (
            json!({"allowPrivilegeEscalation": true}),
            "allowPrivilegeEscalation",
        ),
        (
            json!({"capabilities": {"add": ["SYS_ADMIN"]}}),
            "capabilities.add",
        ),
        (json!({"runAsUser": 0}), "runAsUser"),
    ] {
        let ch =
            channel(json!({"type": "custom", "options": {"image": "i", "securityContext": sc}}));
        let d = decide(&obs(&ch, t(0)), &settings());
        let m = invalid(&d);
        assert!(
            m.starts_with(&format!("spec.options.securityContext.{field}: "))
                && m.contains("--allow-privileged-runners"),
            "{m}"
        );
        // Allowed: the runner gets what it asked, over the hardened default.
        let d = privileged_decision(&ch, 0);
        let pod = created_pod(&d);
        let runner = &pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
        let got = serde_json::to_value(runner.security_context.as_ref().unwrap()).unwrap();
        for (k, v) in sc.as_object().unwrap() {
            let mut want = v.clone();
            // Whatever the channel adds, the runner drops ALL first.
            if k == "capabilities" {
                want["drop"] = serde_json::json!(["ALL"]);
            }
            assert_eq!(got[k], want, "{got}");
        }
    }
}

/// A running sync whose spec became privileged (a spec edit, or an operator restarted
/// without the flag) stops: its pod is deleted.
#[test]
fn a_running_pod_of_a_spec_now_refused_is_deleted() {
    let ch = started(&sample_channel(), 0);
    let pod = pod_in(&ch, t(0), json!({"phase": "Pending"}));
    let mut ch = ch;
    ch.spec.options.as_mut().unwrap().insert(
        "securityContext".into(),
        json!({"capabilities": {"add": ["NET_ADMIN"]}}),
    );
    let d = decide(
        &Observation {
            pod: Some(&pod),
            ..obs(&ch, t(1))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert_eq!(ready(&d).reason, reason::INVALID_CONFIGURATION);
}

/// Allowed, a privileged runner's pod is one the API server accepts: it does not also
/// say `allowPrivilegeEscalation: false` (the API server refuses that pair).
#[test]
fn an_allowed_privileged_runner_does_not_forbid_escalation() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i",
        "securityContext": {"privileged": true}}}));
    let d = privileged_decision(&ch, 0);
    let pod = created_pod(&d);
    let spec = pod.spec.as_ref().unwrap();
    let runner = spec.init_containers.as_ref().unwrap()[0]
        .security_context
        .as_ref()
        .unwrap();
    assert_eq!(runner.privileged, Some(true));
    assert_eq!(runner.allow_privilege_escalation, None);
    // display keeps its hardening whatever the runner asks.
    let display = spec.containers[0].security_context.as_ref().unwrap();
    assert_eq!(display.allow_privilege_escalation, Some(false));
}

/// The operator restarted with looser flags: the spec it refused syncs, and `Ready` does
/// not keep saying `InvalidConfiguration` while it runs.
#[test]
fn a_spec_the_flags_now_allow_syncs_with_ready_unknown() {
    let ch = channel(json!({"type": "custom", "syncInterval": "30s", "options": {"image": "i"}}));
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_eq!(ready(&d).reason, reason::INVALID_CONFIGURATION);
    let ch = with_status(&ch, &d);
    let looser = Settings {
        min_sync_interval: Duration::from_secs(30),
        ..settings()
    };
    let d = decide(&obs(&ch, t(5)), &looser);
    assert!(
        matches!(d.effects.first(), Some(Effect::CreatePod(_))),
        "{d:?}"
    );
    let r = ready(&d);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("Unknown", reason::SYNCHRONIZING)
    );
}
