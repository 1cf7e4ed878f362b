//! Drift over the fake, its versions served as the metadata-only cache holds them: a
//! version someone else changed is read fresh by the resourceVersion the operator last wrote
//! or verified, whatever its `managedFields` say; after a restart, by those.

use super::*;
use crate::api::ManagedOSVersion;

/// Someone else changes v1 (`edit`) at resourceVersion `rv`; `hidden`: and rewrites its
/// record so that the operator looks like its latest writer.
fn tenant_writes(h: &Harness, rv: &str, hidden: bool, edit: impl FnOnce(&mut ManagedOSVersion)) {
    let mut world = h.ctx.io.world();
    let v = world.versions.get_mut(&key("a", "v1")).unwrap();
    // The operator's entry: what it applied, before the edit.
    let mut ours = crate::syncer::tests::applied_by_operator(v);
    edit(v);
    v.metadata.resource_version = Some(rv.into());
    let tenant_at = if hidden { 1 } else { 20 };
    let mut record = crate::syncer::tests::writers(&[(FIELD_MANAGER, 10), ("tenant", tenant_at)]);
    // The operator's entry keeps its field set (a full read compares what it owns).
    ours.time = record[0].time.take();
    record[0] = ours;
    v.metadata.managed_fields = Some(record);
}

fn spec_version(h: &Harness) -> Option<String> {
    h.ctx.io.world().versions[&key("a", "v1")]
        .spec
        .version
        .clone()
}

#[tokio::test]
async fn a_version_changed_at_a_resource_version_the_operator_did_not_write_is_read_and_repaired() {
    let mut h = Harness::new(settings());
    let c = h.create("a", "c", json_channel());
    {
        let mut world = h.ctx.io.world();
        world.metadata_cache = true;
        world.source = Some(Box::new(|_: &Validators| Response::Body {
            data: DATA.as_bytes().to_vec(),
            validators: Validators::default(),
            changelogs: None,
        }));
    }
    h.ok(&c).await;
    assert_eq!(h.ready_reason(&c), "Synchronized");
    assert_eq!(
        h.calls("read_version"),
        0,
        "the operator's own write is not read"
    );

    // The spec edited; by its record the operator wrote last: read by its resourceVersion.
    tenant_writes(&h, "t1", true, |v| v.spec.version = Some("tampered".into()));
    h.bump(&c);
    h.ok(&c).await;
    assert_eq!(h.calls("read_version v1"), 1);
    assert_eq!(spec_version(&h).as_deref(), Some("v1"), "not repaired");
    assert_eq!(h.calls("write_versions"), 2);
    // The repair's resourceVersion is the operator's: not read again.
    h.bump(&c);
    h.ok(&c).await;
    assert_eq!(h.calls("read_version"), 1);

    // A label of someone else's only: read once, found as wanted, remembered as verified.
    tenant_writes(&h, "t2", true, |v| {
        v.labels_mut().insert("tenant".into(), "x".into());
    });
    h.bump(&c);
    h.ok(&c).await;
    assert_eq!(h.calls("read_version"), 2);
    assert_eq!(h.calls("verified v1"), 1);
    assert_eq!(h.calls("write_versions"), 2, "nothing to repair");
    h.bump(&c);
    h.ok(&c).await;
    assert_eq!(
        h.calls("read_version"),
        2,
        "read again at a verified resourceVersion"
    );

    // A restart forgets: the record decides. Not every version is read: one it says the
    // operator wrote last is not...
    h.ctx.io.world().known.clear();
    tenant_writes(&h, "t3", true, |_| {});
    h.bump(&c);
    h.ok(&c).await;
    assert_eq!(h.calls("read_version"), 2);
    // ...one it says someone else wrote since is.
    tenant_writes(&h, "t4", false, |v| v.spec.version = Some("edited".into()));
    h.bump(&c);
    h.ok(&c).await;
    assert_eq!(h.calls("read_version"), 3);
    assert_eq!(spec_version(&h).as_deref(), Some("v1"), "not repaired");
}
