//! The metadata-only cache: a version is what its content hash says, unless someone else
//! wrote it after the operator (then it is read in full).
use super::*;
use crate::syncer::drift::{Known, to_read_fresh, written_by_others};

/// `v` as the metadata-only watch caches it, with these writers: `(manager, second)`.
fn cached(v: &ManagedOSVersion, writers: &[(&str, i64)]) -> ManagedOSVersion {
    let mut c = ManagedOSVersion::new(&v.name_any(), Default::default());
    c.metadata = v.metadata.clone();
    c.metadata.managed_fields = Some(crate::syncer::tests::writers(writers));
    c
}

#[test]
fn the_content_hash_decides_and_a_removed_or_forged_one_is_rewritten() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    let cfg = config(&ch);
    let want = desired(&ch, &cfg, &item("foo", "os:v1"));
    let hash = &want.annotations()[CONTENT_HASH_ANNOTATION];
    assert_eq!(hash.len(), 32);
    // Another content, another hash.
    let other = desired(&ch, &cfg, &item("foo", "os:v2"));
    assert_ne!(&other.annotations()[CONTENT_HASH_ANNOTATION], hash);

    let have = cached(&existing_version(&ch, want.clone()), &[(FIELD_MANAGER, 10)]);
    assert!(metadata_only(&have) && !written_by_others(&have));
    let unchanged = plan(
        &ch,
        Some((&cfg, &[item("foo", "os:v1")])),
        &arcs(std::slice::from_ref(&have)),
        false,
    );
    assert_eq!(unchanged.unwrap(), Plan::default());
    // A new content: written.
    let changed = plan(
        &ch,
        Some((&cfg, &[item("foo", "os:v2")])),
        &arcs(std::slice::from_ref(&have)),
        false,
    );
    assert_eq!(changed.unwrap().updated, 1);
    // The hash removed, or forged: rewritten.
    for forged in [None, Some("0123")] {
        let mut v = have.clone();
        match forged {
            None => v.annotations_mut().remove(CONTENT_HASH_ANNOTATION),
            Some(h) => v
                .annotations_mut()
                .insert(CONTENT_HASH_ANNOTATION.into(), h.into()),
        };
        let p = plan(
            &ch,
            Some((&cfg, &[item("foo", "os:v1")])),
            &arcs(&[v]),
            false,
        );
        assert_eq!(p.unwrap().updated, 1, "{forged:?}");
    }
}

#[test]
fn only_versions_written_by_others_after_the_operator_are_read_in_full() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    let want = desired(&ch, &config(&ch), &item("foo", "os:v1"));
    let mine = existing_version(&ch, want);
    // Nothing remembered (a restart): the `managedFields` record decides.
    let none = Known::new();
    let stale = |writers: &[(&str, i64)]| {
        to_read_fresh(&ch, &arcs(&[cached(&mine, writers)]), &none) == ["foo"]
    };
    assert!(!stale(&[(FIELD_MANAGER, 10)]));
    assert!(!stale(&[("kubectl", 9), (FIELD_MANAGER, 10)]));
    assert!(stale(&[(FIELD_MANAGER, 10), ("kubectl", 11)]));
    // The same second: it may be later.
    assert!(stale(&[(FIELD_MANAGER, 10), ("kubectl", 10)]));
    // Never written by the operator.
    assert!(stale(&[("kubectl", 1)]));
    // A status write is no content.
    let mut status = cached(&mine, &[(FIELD_MANAGER, 10), ("tool", 11)]);
    status.metadata.managed_fields.as_mut().unwrap()[1].subresource = Some("status".into());
    assert!(to_read_fresh(&ch, &arcs(&[status]), &none).is_empty());
    // Read in full, a version is compared in full: its edited spec is drift.
    assert!(!metadata_only(&mine));
    let mut edited = mine.clone();
    edited.spec.version = Some("v9".into());
    assert!(differs(
        &edited,
        &desired(&ch, &config(&ch), &item("foo", "os:v1"))
    ));
    // Versions of other channels are never read.
    let mut theirs = cached(&mine, &[("kubectl", 1)]);
    theirs.metadata.owner_references = None;
    assert!(to_read_fresh(&ch, &arcs(&[theirs]), &none).is_empty());
}

#[test]
fn a_version_read_in_full_and_found_as_wanted_is_verified_at_its_resource_version() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    let cfg = config(&ch);
    let listed = [item("foo", "os:v1")];
    let mut read = existing_version(&ch, desired(&ch, &cfg, &listed[0]));
    read.metadata.resource_version = Some("42".into());
    // Someone else added a label of its own: not the operator's content.
    read.labels_mut().insert("tenant".into(), "x".into());
    let p = plan(&ch, Some((&cfg, &listed)), &arcs(&[read.clone()]), false).unwrap();
    assert_eq!(p.verified, [("foo".to_string(), "42".to_string())]);
    assert!(p.effects.is_empty());
    // Its spec edited: repaired, not verified (the write's resourceVersion is kept).
    let mut edited = read.clone();
    edited.spec.version = Some("tampered".into());
    let p = plan(&ch, Some((&cfg, &listed)), &arcs(&[edited]), false).unwrap();
    assert!(p.verified.is_empty() && p.updated == 1);
    // As cached (metadata only), the hash is all it shows: nothing to verify.
    let meta = cached(&read, &[(FIELD_MANAGER, 1)]);
    let p = plan(&ch, Some((&cfg, &listed)), &arcs(&[meta]), false).unwrap();
    assert_eq!(p, Plan::default());
    // Not listed any more: its content is not checked, so not verified either.
    let p = plan(&ch, Some((&cfg, &[])), &arcs(&[read]), false).unwrap();
    assert!(p.verified.is_empty() && p.flagged == 1);
}
