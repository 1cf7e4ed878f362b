use super::*;

#[test]
fn counters_show_in_the_text_format() {
    let m = Metrics::default();
    m.sync_finished(&Outcome::Synchronized);
    m.status_written();
    let text = m.encode();
    assert!(
        text.contains("rancheros_operator_syncs_total{result=\"synchronized\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("rancheros_operator_writes_total{operation=\"status\"} 1"),
        "{text}"
    );
}

#[test]
fn a_suspended_or_disabled_channel_says_so_and_its_series_go_with_it() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    let m = Metrics::default();
    let key = |name: &str| Key::new(name).within("ns");
    let status = |reason: &str| ManagedOSVersionChannelStatus {
        conditions: vec![Condition {
            type_: crate::api::READY.into(),
            status: "True".into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }],
        ..Default::default()
    };
    let interval = std::time::Duration::from_secs(3600);
    m.observe_channel(&key("a"), &status(crate::api::reason::SUSPENDED), interval);
    m.observe_channel(
        &key("b"),
        &status(crate::api::reason::CHANNEL_DISABLED),
        interval,
    );
    m.observe_channel(
        &key("c"),
        &status(crate::api::reason::SYNCHRONIZED),
        interval,
    );
    let text = m.encode();
    for (name, value) in [("a", 1), ("b", 1), ("c", 0)] {
        let line = format!(
            "rancheros_operator_channel_suspended{{namespace=\"ns\",name=\"{name}\"}} {value}"
        );
        assert!(text.contains(&line), "{line} not in\n{text}");
    }
    m.forget_channel(&key("a"));
    assert!(!m.encode().contains("name=\"a\""), "{}", m.encode());
}

#[test]
fn channels_past_the_series_cap_are_counted_not_listed() {
    let m = Metrics::default();
    m.set_max_channel_series(2);
    let key = |name: &str| Key::new(name).within("ns");
    let failing = ManagedOSVersionChannelStatus::default();
    let interval = std::time::Duration::from_secs(3600);
    for name in ["a", "b", "c", "d"] {
        m.observe_channel(&key(name), &failing, interval);
    }
    // Seen again: still the same two listed.
    m.observe_channel(&key("c"), &failing, interval);
    let text = m.encode();
    assert!(
        text.contains("name=\"a\"") && text.contains("name=\"b\""),
        "{text}"
    );
    assert!(
        !text.contains("name=\"c\"") && !text.contains("name=\"d\""),
        "{text}"
    );
    assert!(
        text.contains("rancheros_operator_channels_unlisted 2"),
        "{text}"
    );
    assert!(
        text.contains("rancheros_operator_channels_unlisted_not_ready 2"),
        "{text}"
    );
    m.forget_channel(&key("d"));
    assert!(
        m.encode()
            .contains("rancheros_operator_channels_unlisted 1")
    );
    // A listed channel that goes leaves room for a new one.
    m.forget_channel(&key("a"));
    m.observe_channel(&key("e"), &failing, interval);
    assert!(m.encode().contains("name=\"e\""));
}
