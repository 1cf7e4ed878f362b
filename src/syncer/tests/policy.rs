//! `spec.versions` in the decision: what a sync writes, flags and keeps in the status.

use super::*;

const DATA: &str = r#"[
 {"metadata":{"name":"os-v1.0.0"},"spec":{"version":"v1.0.0","type":"container","metadata":{"upgradeImage":"r/os:1","platforms":["linux/x86_64"]}}},
 {"metadata":{"name":"os-v1.1.0"},"spec":{"version":"v1.1.0","type":"container","metadata":{"upgradeImage":"r/os:1.1","platforms":["linux/x86_64","linux/aarch64"]}}},
 {"metadata":{"name":"os-v2.0.0"},"spec":{"version":"v2.0.0","type":"container","metadata":{"upgradeImage":"r/os:2"}}}
]"#;

fn json_channel(versions: Value, delete: bool) -> ManagedOSVersionChannel {
    channel(json!({
        "type": "json",
        "options": {"uri": "http://127.0.0.1:1/c.json"},
        "deleteNoLongerInSyncVersions": delete,
        "versions": versions,
    }))
}

fn body() -> Fetched {
    Fetched::Body {
        data: DATA.as_bytes().into(),
        validators: Default::default(),
        not_modified: false,
        changelogs: None,
    }
}

/// The decision with `have` in the namespace, at `now`.
fn sync(ch: &ManagedOSVersionChannel, have: &[ManagedOSVersion], now: i64) -> Decision {
    let fetched = body();
    let versions = arcs(have);
    decide(
        &Observation {
            fetched: Some(&fetched),
            versions: Some(&versions),
            ..obs(ch, t(now))
        },
        &settings(),
    )
}

/// The versions as the sync writes them (all of DATA).
fn all_versions(ch: &ManagedOSVersionChannel) -> Vec<ManagedOSVersion> {
    let cfg = config::resolve(&ch.spec, &Default::default()).unwrap();
    channel::parse(DATA.as_bytes())
        .unwrap()
        .versions
        .iter()
        .map(|i| existing_version(ch, versions::desired(ch, &cfg, i)))
        .collect()
}

#[test]
fn held_versions_are_not_created_and_the_status_says_why_and_which_is_newest() {
    let ch = json_channel(json!({"platforms": ["linux/arm64"]}), false);
    let d = sync(&ch, &[], 0);
    assert_eq!(
        descriptions(&d),
        ["apply version os-v1.1.0", "apply version os-v2.0.0"]
    );
    let status = d.status.as_ref().unwrap();
    assert_eq!(status.latest_version.as_deref(), Some("os-v2.0.0"));
    assert_eq!(status.synced_versions, Some(2));
    assert_eq!(status.held_back, [("platforms".to_string(), 1)].into());
    assert_eq!(
        ready(&d).message,
        "synchronized 2 versions (2 created); 1 held back by spec.versions (platforms 1)"
    );
}

#[test]
fn the_policy_flags_what_it_holds_back_and_never_deletes_it() {
    for delete in [false, true] {
        let ch = json_channel(json!({"keep": 1}), delete);
        let have = all_versions(&ch);
        let d = sync(&ch, &have, 0);
        assert_eq!(
            descriptions(&d),
            ["flag version os-v1.0.0", "flag version os-v1.1.0"],
            "deleteNoLongerInSyncVersions: {delete}"
        );
        assert_eq!(
            d.status.as_ref().unwrap().held_back,
            [("keep".to_string(), 2)].into()
        );
    }
    // A version the source drops is deleted as before: the policy only keeps.
    let ch = json_channel(json!({"keep": 1}), true);
    let mut have = all_versions(&ch);
    let mut gone = have[0].clone();
    gone.metadata.name = Some("os-v0.9.0".into());
    have.push(gone);
    let d = sync(&ch, &have, 0);
    assert!(descriptions(&d).contains(&"delete version os-v0.9.0".to_string()));
    assert!(
        !descriptions(&d)
            .iter()
            .any(|e| e.starts_with("delete version os-v1"))
    );
}

#[test]
fn min_age_holds_new_versions_across_syncs_by_the_status_alone() {
    let ch = json_channel(json!({"minAge": "1h"}), false);
    let d = sync(&ch, &[], 0);
    assert!(d.effects.is_empty(), "{:?}", descriptions(&d));
    let status = d.status.as_ref().unwrap();
    assert_eq!(status.first_seen.len(), 3);
    assert_eq!(status.held_back, [("minAge".to_string(), 3)].into());
    assert_eq!(d.requeue, Some(Duration::from_secs(3600)));
    // Another operator (a restart, a new leader) reads only the status.
    let ch = with_status(&ch, &d);
    let due = decide(&obs(&ch, t(3599)), &settings());
    assert_eq!(
        due.requeue,
        Some(Duration::from_secs(1)),
        "due when they come of age"
    );
    let d = sync(&ch, &[], 1800);
    assert!(d.effects.is_empty());
    let d = sync(&ch, &[], 3600);
    assert_eq!(d.effects.len(), 3);
    assert!(d.status.as_ref().unwrap().first_seen.is_empty());
}

#[test]
fn an_invalid_policy_is_an_invalid_configuration_naming_the_field() {
    let ch = json_channel(json!({"include": [">=one"]}), false);
    let d = decide(&obs(&ch, t(0)), &settings());
    assert_status_reason(ready(&d), "False", reason::INVALID_CONFIGURATION);
    assert_message_has(ready(&d), "spec.versions.include[0]");
}
