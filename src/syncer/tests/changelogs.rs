//! An oci image's changelogs in the decision: stored after the versions when the data was
//! read now, emptied when the image has none, left alone when the data was kept.

use super::*;
use crate::channel::changelogs::Changelogs;

fn oci_channel() -> ManagedOSVersionChannel {
    channel(json!({"type": "oci", "options": {"image": "registry.example.com/os/channel:v1"}}))
}

fn pulled(changelogs: Option<Changelogs>, not_modified: bool) -> Fetched {
    Fetched::Body {
        data: SAMPLE.as_bytes().into(),
        validators: Default::default(),
        not_modified,
        changelogs: changelogs.map(Arc::new),
    }
}

fn decided(fetched: &Fetched) -> Decision {
    let ch = oci_channel();
    decide(
        &Observation {
            fetched: Some(fetched),
            versions: Some(&[]),
            ..obs(&ch, t(0))
        },
        &settings(),
    )
}

#[test]
fn changelogs_read_with_the_data_are_stored_after_the_versions() {
    let mut logs = Changelogs::default();
    logs.add("foo", b"- fixed\n");
    let d = decided(&pulled(Some(logs), false));
    assert_eq!(
        descriptions(&d),
        [
            "apply version foo",
            "apply version bar",
            "store 1 changelogs in configmap chan-changelogs"
        ]
    );
    let d = decided(&pulled(Some(Changelogs::default()), false));
    assert_eq!(
        descriptions(&d).last().map(String::as_str),
        Some("empty configmap chan-changelogs"),
        "an image without changelogs"
    );
    for kept in [pulled(None, false), pulled(None, true)] {
        let d = decided(&kept);
        assert!(
            !descriptions(&d).iter().any(|e| e.contains("configmap")),
            "{:?}",
            descriptions(&d)
        );
    }
}

#[test]
fn changelogs_left_out_are_said_in_an_event() {
    let mut logs = Changelogs::default();
    assert!(!logs.wants("big", u64::MAX));
    let d = decided(&pulled(Some(logs), false));
    let note = d
        .events
        .iter()
        .find(|n| n.reason == "ChangelogsLeftOut")
        .expect("an Event");
    assert!(
        note.warning && note.message.starts_with("1 changelogs"),
        "{}",
        note.message
    );
}
