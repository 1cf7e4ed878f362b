//! The status conditions: disabled, invalid, suspended, kstatus, transition times.

use super::*;

#[test]
fn a_disabled_channel_deletes_its_pod_and_flags_its_versions_once() {
    let mut ch = sample_channel();
    ch.spec.enabled = Some(false);
    let pod = pod_in(&sample_channel(), t(0), ready_pod_status());
    let v = existing_version(
        &ch,
        versions::desired(
            &ch,
            &config::resolve(&ch.spec).unwrap(),
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
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("True", "ChannelDisabled")
    );
    assert_eq!(d.requeue, None);
    // Once recorded, nothing more to do or read.
    let ch = with_status(&ch, &d);
    let d = decide(&obs(&ch, t(4)), &settings());
    assert_eq!(d, Decision::default());
}

#[test]
fn invalid_configuration_is_reported_once_and_starts_no_pod() {
    let ch = channel(json!({"type": "custom", "syncInterval": "often", "options": {"image": "i"}}));
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_eq!(d.effects, vec![]);
    let r = ready(&d);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "InvalidConfiguration")
    );
    assert!(r.message.starts_with("spec.syncInterval"), "{}", r.message);
    assert_eq!(d.events.len(), 1);
    assert_eq!(d.requeue, None);
    let ch = with_status(&ch, &d);
    let d = decide(&obs(&ch, t(10)), &settings());
    assert_eq!(d, Decision::default());
}

#[test]
fn transition_time_moves_only_when_the_status_does() {
    let ch = sample_channel();
    let start = decide(&obs(&ch, t(0)), &settings());
    let ch = with_status(&ch, &start);
    let pod = pod_in(&ch, t(0), runner_failed_status(2));
    let failed = decide(
        &Observation {
            pod: Some(&pod),
            runner_log: Some("x"),
            ..obs(&ch, t(7))
        },
        &settings(),
    );
    // Unknown (first sync) -> False: the transition time moves.
    assert_eq!(ready(&failed).last_transition_time, Time(t(7)));
    // False -> False on the next failure: it stays.
    let ch = with_status(&ch, &failed);
    let start = decide(&obs(&ch, t(20)), &settings());
    let ch = with_status(&ch, &start);
    let pod = pod_in(&ch, t(20), runner_failed_status(2));
    let again = decide(
        &Observation {
            pod: Some(&pod),
            runner_log: Some("x"),
            ..obs(&ch, t(25))
        },
        &settings(),
    );
    assert_eq!(ready(&again).last_transition_time, Time(t(7)));
}
