use super::*;
use crate::syncer::drift::{Known, to_read_fresh, written_by_others};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::{Value, json};

fn channel(name: &str, uid: &str) -> ManagedOSVersionChannel {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"type": "custom", "options": {"image": "i"}}
    }))
    .unwrap()
}

/// A version as the metadata-only watch decodes it.
fn version(name: &str, owner: Option<(&str, &str)>, others_at: Option<i64>) -> ManagedOSVersion {
    let owners: Vec<Value> = owner
        .iter()
        .map(|(ch, uid)| {
            json!({"apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
                   "name": ch, "uid": uid, "controller": true})
        })
        .collect();
    let mut writers = vec![json!({"manager": FIELD_MANAGER, "operation": "Apply",
                                  "time": "2026-01-01T00:00:10Z"})];
    if let Some(at) = others_at {
        let time = Timestamp::from_second(at).unwrap().to_string();
        writers.push(json!({"manager": "kubectl", "operation": "Update", "time": time}));
    }
    let mut meta = json!({
        "name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "7",
        "labels": {CHANNEL_LABEL: owner.map_or("gone", |o| o.0), "tenant": "x"},
        "annotations": {CONTENT_HASH_ANNOTATION: "h1", "tenant": "y"},
        "managedFields": writers});
    if !owners.is_empty() {
        meta["ownerReferences"] = Value::Array(owners);
    }
    let text = json!({ "metadata": meta }).to_string();
    serde_json::from_str::<crate::controller::versions::meta::VersionMeta>(&text)
        .unwrap()
        .0
}

fn names(vs: &[Arc<ManagedOSVersion>]) -> Vec<String> {
    let mut n: Vec<String> = vs
        .iter()
        .map(|v| v.metadata.name.clone().unwrap())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn a_sync_gets_its_channels_versions_as_the_watch_showed_them() {
    let index = VersionIndex::default();
    let a = channel("a", "ua");
    let all = [
        version("a1", Some(("a", "ua")), None),
        // Written by someone else after the operator: read fresh before deciding.
        version("a2", Some(("a", "ua")), Some(1_767_225_611)),
        version("b1", Some(("b", "ub")), None),
        // An orphan labelled with a's name: a may adopt it.
        version("o1", None, None),
    ];
    index.apply(Event::Init);
    for v in &all {
        index.apply(Event::InitApply(v.clone()));
    }
    let wait = std::time::Duration::from_millis(10);
    assert!(
        tokio::time::timeout(wait, index.wait_until_ready())
            .await
            .is_err()
    );
    index.apply(Event::InitDone);
    index.wait_until_ready().await;
    for v in all {
        let back = &index.named("ns", &[v.name_any()])[0];
        // Everything a decision reads is as the watch decoded it; of the writers, whether
        // someone else wrote since the operator did.
        assert_eq!(written_by_others(back), written_by_others(&v));
        let (mut back, mut v) = (back.metadata.clone(), v.metadata);
        back.managed_fields = None;
        v.managed_fields = None;
        assert_eq!(back, v);
    }
    let mut orphan = version("o1", None, None);
    orphan.labels_mut().insert(CHANNEL_LABEL.into(), "a".into());
    index.apply(Event::Apply(orphan));
    let (of_a, known) = index.of_channel("ns", &a);
    assert_eq!(names(&of_a), ["a1", "a2", "o1"]);
    assert_eq!(known, Known::new(), "nothing written or verified yet");
    assert_eq!(to_read_fresh(&a, &of_a, &known), ["a2"]);
    assert_eq!(
        names(&index.named("ns", &["b1".into(), "x".into()])),
        ["b1"]
    );
    assert!(index.of_channel("other", &a).0.is_empty());
    assert_eq!(index.resource_version("ns", "b1").as_deref(), Some("7"));
    // Every version of a channel shares one copy of its owner references.
    let inner = index.inner.read().unwrap();
    let cached = &inner.by_namespace["ns"];
    assert!(Arc::ptr_eq(&cached["a1"].owners, &cached["a2"].owners));
    drop(inner);
    // Deleted, and gone from a re-list.
    index.apply(Event::Delete(version("b1", Some(("b", "ub")), None)));
    assert_eq!(index.resource_version("ns", "b1"), None);
    index.apply(Event::Init);
    index.apply(Event::InitApply(version("a1", Some(("a", "ua")), None)));
    assert_eq!(
        index.len(),
        3,
        "the old state serves until the re-list is done"
    );
    index.apply(Event::InitDone);
    assert_eq!(names(&index.of_channel("ns", &a).0), ["a1"]);
    assert_eq!(index.len(), 1);
}

/// `version` at another resourceVersion (someone wrote it).
fn at(mut v: ManagedOSVersion, rv: &str) -> ManagedOSVersion {
    v.metadata.resource_version = Some(rv.into());
    v
}

#[test]
fn the_resource_version_the_operator_wrote_is_remembered_until_the_version_goes() {
    let index = VersionIndex::default();
    let a = channel("a", "ua");
    let mine = || version("a1", Some(("a", "ua")), None);
    let remembered = |index: &VersionIndex| index.of_channel("ns", &a).1.get("a1").cloned();
    index.apply(Event::Init);
    index.apply(Event::InitApply(mine()));
    index.apply(Event::InitDone);
    // Not cached: nothing to remember it on.
    index.remember(
        "ns",
        &[("a1".into(), "7".into()), ("new".into(), "8".into())],
    );
    assert_eq!(remembered(&index).as_deref(), Some("7"));
    assert_eq!(index.of_channel("ns", &a).1.len(), 1);
    // Someone else's write (a new resourceVersion) keeps what the operator wrote: drift.
    index.apply(Event::Apply(at(mine(), "9")));
    assert_eq!(remembered(&index).as_deref(), Some("7"));
    let (versions, known) = index.of_channel("ns", &a);
    assert_eq!(to_read_fresh(&a, &versions, &known), ["a1"]);
    // Read and found as wanted at 9: remembered as verified, not read again.
    index.remember("ns", &[("a1".into(), "9".into())]);
    let (versions, known) = index.of_channel("ns", &a);
    assert!(to_read_fresh(&a, &versions, &known).is_empty());
    // A re-list keeps it, also for a write remembered while it is under way.
    index.apply(Event::Init);
    index.apply(Event::InitApply(at(mine(), "9")));
    index.apply(Event::InitDone);
    assert_eq!(remembered(&index).as_deref(), Some("9"));
    index.apply(Event::Init);
    index.apply(Event::InitApply(at(mine(), "9")));
    index.remember("ns", &[("a1".into(), "10".into())]);
    index.apply(Event::InitDone);
    assert_eq!(remembered(&index).as_deref(), Some("10"));
    // A namesake (another uid) starts with nothing remembered.
    let mut namesake = at(mine(), "11");
    namesake.metadata.uid = Some("another".into());
    index.apply(Event::Apply(namesake.clone()));
    assert_eq!(remembered(&index), None);
    // Deleted: forgotten, also for a version of that name made again with its uid.
    index.remember("ns", &[("a1".into(), "11".into())]);
    index.apply(Event::Delete(namesake.clone()));
    index.apply(Event::Apply(at(namesake, "12")));
    assert_eq!(remembered(&index), None);
}
