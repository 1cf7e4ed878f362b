//! oci channels over the fake: a pull instead of a pod, the revision recorded, and an
//! unchanged digest answered from the data kept (drift still repaired).

use super::*;

const REVISION: &str = "v1@sha256:1111111111111111111111111111111111111111111111111111111111111111";

#[tokio::test]
async fn an_oci_channel_pulls_without_a_pod_and_an_unchanged_digest_still_repairs_drift() {
    let mut h = Harness::new(settings());
    let c = h.create(
        "a",
        "c",
        json!({"type": "oci", "options": {"image": "registry.example/channels/os:v1"}}),
    );
    h.ctx.io.world().source = Some(Box::new(|known: &Validators| {
        if known.etag.as_deref() == Some(REVISION) {
            Response::NotModified
        } else {
            Response::Body {
                data: DATA.as_bytes().to_vec(),
                validators: Validators {
                    etag: Some(REVISION.into()),
                    last_modified: None,
                },
                changelogs: None,
            }
        }
    }));
    h.ok(&c).await;
    assert_eq!(h.ready_reason(&c), "Synchronized");
    let status = h.channel(&c).status.unwrap();
    assert_eq!(status.source_revision.as_deref(), Some(REVISION));
    assert_eq!(h.calls("pull registry.example/channels/os:v1"), 1);
    assert_eq!(h.calls("create_pod"), 0);
    assert!(!h.has_pod(&c));
    // A version deleted behind the operator's back: the next sync finds the digest
    // unchanged, pulls nothing, and puts the version back from the data kept.
    h.ctx.io.world().versions.remove(&key("a", "v1"));
    h.bump(&c);
    h.ok(&c).await;
    assert!(h.ctx.io.world().versions.contains_key(&key("a", "v1")));
    let ready = h.channel(&c).status.unwrap();
    let ready = ready.condition("Ready").unwrap();
    assert!(
        ready.message.ends_with("(the image's digest is unchanged)"),
        "{}",
        ready.message
    );
    assert_eq!(h.calls("pull "), 2);
    assert_eq!(h.calls("create_pod"), 0);
}
