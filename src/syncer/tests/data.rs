//! Channel data: invalid data, conflicts, duplicates, limits.

use super::*;

#[test]
fn invalid_data_fails_the_sync_and_touches_no_version() {
    let (ch, pod) = sample_ready();
    let log = framed("[{\"metadata\": {\"name\": \"foo\"},");
    let existing = [existing_version(
        &ch,
        versions::desired(
            &ch,
            &config::resolve(&ch.spec, &Default::default()).unwrap(),
            &ChannelVersion {
                name: "old".into(),
                labels: Default::default(),
                annotations: Default::default(),
                spec: versions::spec_of(json!({"type": "iso", "metadata": {"uri": "u"}})),
            },
        ),
    )];
    let d = reading(&ch, &pod, &log, &existing, t(3));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    let r = ready(&d);
    assert_eq!(r.reason, "FailedToSync");
    assert_message_starts(
        r,
        "invalid channel data: line 1, column 30: not valid JSON, the data ends too early",
    );
}

#[test]
fn a_conflicting_version_fails_the_sync_before_any_write() {
    let (ch, pod) = sample_ready();
    let mut foreign: ManagedOSVersion = serde_json::from_value(json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersion",
        "metadata": {"name": "bar", "namespace": "ns"}, "spec": {"type": "iso"}
    }))
    .unwrap();
    foreign
        .annotations_mut()
        .insert(NO_LONGER_IN_SYNC_ANNOTATION.into(), "true".into());
    let log = framed(SAMPLE);
    let d = reading(&ch, &pod, &log, std::slice::from_ref(&foreign), t(3));
    assert_eq!(descriptions(&d), ["delete pod chan"]);
    assert_message_has(
        ready(&d),
        "version \"bar\" already exists and is not controlled by any channel",
    );
}

#[test]
fn duplicate_names_use_the_last_entry_and_are_named_in_the_status_and_an_event() {
    let (ch, pod) = sample_ready();
    let data = r#"[
        {"metadata":{"name":"foo"},"spec":{"type":"container","version":"v1","metadata":{"upgradeImage":"a:v1"}}},
        {"metadata":{"name":"bar"},"spec":{"type":"container","version":"v2","metadata":{"upgradeImage":"a:v2"}}},
        {"metadata":{"name":"foo"},"spec":{"type":"iso","version":"v1","metadata":{"uri":"http://x/v1.iso"}}}
    ]"#;
    let d = reading(&ch, &pod, &framed(data), &[], t(3));
    assert_eq!(
        descriptions(&d),
        ["apply version foo", "apply version bar", "delete pod chan"]
    );
    let Effect::ApplyVersion { want: foo, .. } = &d.effects[0] else {
        unreachable!()
    };
    assert_eq!(foo.spec.type_, "iso", "the last entry wins");
    let r = ready(&d);
    assert_status_reason(r, "True", "Synchronized");
    assert_message_ends(
        r,
        "duplicate names in the channel data, the last entry of each was used: foo",
    );
    let warning = d
        .events
        .iter()
        .find(|n| n.warning)
        .expect("a Warning event");
    assert_eq!(warning.reason, "DuplicateVersions");
    assert!(warning.message.ends_with("foo"), "{}", warning.message);
}

#[test]
fn more_versions_than_a_channel_may_list_fail_the_sync() {
    let (ch, pod) = started_ready();
    let settings = Settings {
        max_versions_per_channel: 1,
        ..settings()
    };
    let d = decide(&log_read(&ch, &pod, &framed(SAMPLE), t(5)), &settings);
    assert_sync_failed(
        &d,
        "the channel data lists 2 entries, more than the 1 a channel may list (--max-versions-per-channel)",
    );
}

#[test]
fn a_plan_writing_more_than_max_sync_write_bytes_fails_naming_the_flag_and_writes_nothing() {
    let (ch, pod) = started_ready();
    let log = framed(SAMPLE);
    let run = |limit: usize| {
        let settings = Settings {
            max_sync_write_bytes: limit,
            ..settings()
        };
        decide(&log_read(&ch, &pod, &log, t(5)), &settings)
    };
    // The two sample versions, as the API server gets them, are a few hundred bytes.
    let ok = run(4096);
    assert_eq!(ready(&ok).reason, "Synchronized", "{}", ready(&ok).message);
    let written = super::super::budget::write_bytes(&ok.effects);
    assert!((200..4096).contains(&written), "{written}");
    assert_eq!(ready(&run(written)).reason, "Synchronized");
    let want = format!(
        "the sync would write {written} bytes of versions, more than the {} one sync may write (--max-sync-write-bytes); nothing was changed",
        written - 1
    );
    assert_sync_failed(&run(written - 1), &want);
}

#[test]
fn lists_in_messages_name_ten_and_count_the_rest() {
    let items: Vec<String> = (0..30)
        .flat_map(|i| {
            let v = format!(
                r#"{{"metadata":{{"name":"v{i}"}},"spec":{{"type":"container","metadata":{{"upgradeImage":"i:{i}"}}}}}}"#
            );
            [v.clone(), v]
        })
        .collect();
    let data = format!("[{}]", items.join(","));
    let (ch, pod) = started_ready();
    let d = reading(&ch, &pod, &framed(&data), &[], t(5));
    let message = &ready(&d).message;
    assert!(message.ends_with("v9, and 20 more"), "{message}");
    assert!(!message.contains("v10"), "{message}");
}
