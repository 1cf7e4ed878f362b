//! json channels: fetches, conditional requests, their failures.

use super::*;

/// The decision once the channel data is fetched (and there are no versions yet).
fn fetched(ch: &ManagedOSVersionChannel, data: &Fetched, now: i64) -> Decision {
    decide(
        &Observation {
            fetched: Some(data),
            versions: Some(&[]),
            ..obs(ch, t(now))
        },
        &settings(),
    )
}

#[test]
fn a_json_channel_fetches_instead_of_starting_a_pod() {
    let ch = channel(json!({"type": "json", "options": {"uri": "http://127.0.0.1:1/c.json"}}));
    let d = decide(&obs(&ch, t(0)), &settings());
    let request = d.needs.fetch.clone().expect("a fetch");
    assert_eq!(request.uri, "http://127.0.0.1:1/c.json");
    let body = |not_modified| Fetched::Body {
        data: SAMPLE.as_bytes().into(),
        validators: crate::fetch::Validators {
            etag: Some("\"v1\"".into()),
            last_modified: Some("Mon, 30 Nov 2026 10:00:00 GMT".into()),
        },
        not_modified,
        changelogs: None,
    };
    let first = body(false);
    let d = fetched(&ch, &first, 0);
    assert_eq!(descriptions(&d), ["apply version foo", "apply version bar"]);
    assert_eq!(
        d.status.as_ref().unwrap().source_revision.as_deref(),
        Some("\"v1\"")
    );
    let ch = with_status(&ch, &d);
    let cfg = config::resolve(&ch.spec, &Default::default()).unwrap();
    let items = channel::parse(SAMPLE.as_bytes()).unwrap().versions;
    let foo = existing_version(&ch, versions::desired(&ch, &cfg, &items[0]));
    let bar = existing_version(&ch, versions::desired(&ch, &cfg, &items[1]));

    // A 304 is answered with the body it confirms: nothing to write when nothing drifted...
    let again = body(true);
    let d = decide(
        &Observation {
            fetched: Some(&again),
            versions: Some(&arcs(&[foo.clone(), bar.clone()])),
            ..obs(&ch, t(3600))
        },
        &settings(),
    );
    assert_eq!(d.effects, vec![]);
    assert_eq!(
        ready(&d).message,
        "synchronized 2 versions (no changes) (the source answered: not modified)"
    );
    assert_eq!(
        d.status.as_ref().unwrap().last_synced_time,
        Some(Time(t(3600)))
    );
    // ...and a version someone deleted or edited is restored all the same.
    let mut edited = bar.clone();
    edited.spec.version = Some("v9".into());
    let d = decide(
        &Observation {
            fetched: Some(&again),
            versions: Some(&arcs(&[edited])),
            ..obs(&ch, t(7200))
        },
        &settings(),
    );
    assert_eq!(descriptions(&d), ["apply version foo", "apply version bar"]);

    let failed = Fetched::Failed("HTTP 404 Not Found from http://127.0.0.1:1/c.json".into());
    let d = fetched(&ch, &failed, 3600);
    assert!(ready(&d).message.starts_with("HTTP 404"));
}

#[test]
fn a_json_channel_ignores_a_foreign_pod_of_its_name() {
    let ch = channel(json!({"type": "json", "options": {"uri": "http://127.0.0.1:1/c.json"}}));
    let mut pod = ready_pod(&sample_channel(), 0);
    pod.metadata.owner_references = None;
    let d = at_pod(&ch, &pod, t(0));
    assert!(d.needs.fetch.is_some(), "{d:?}");
}

#[test]
fn a_json_body_that_breaks_a_rule_is_not_quoted() {
    let ch = channel(json!({"type": "json", "options": {"uri": "http://10.0.0.1/c.json"}}));
    let secret = "hunter2-Zq8x";
    let body = Fetched::Body {
        data: format!(r#"[{{"metadata":{{"name":"a"}},"spec":{{"type":"{secret}"}}}}]"#)
            .into_bytes()
            .into(),
        validators: Default::default(),
        not_modified: false,
        changelogs: None,
    };
    let d = fetched(&ch, &body, 0);
    assert_eq!(ready(&d).reason, "FailedToSync");
    assert!(
        ready(&d)
            .message
            .starts_with("invalid channel data: line 1")
    );
    assert!(!ready(&d).message.contains(secret), "{}", ready(&d).message);
    assert!(d.events.iter().all(|e| !e.message.contains(secret)));
}
