//! Drift by someone else, repaired with a metadata-only cache.

use super::*;

#[tokio::test]
async fn drift_by_someone_else_is_repaired_with_a_metadata_only_cache() {
    let mut t = TestNs::new("drift-metadata-cache").await;
    let entry = |name: &str, version: &str| {
        json!({
            "metadata": {"name": name, "labels": {"tier": "gold"}},
            "spec": {"version": version, "type": "container", "minVersion": "0.0.0",
                     "metadata": {"upgradeImage": format!("registry.com/os:{version}")}}
        })
    };
    let data = json!([
        entry("spec-edited", "v1"),
        entry("label-edited", "v2"),
        entry("hash-removed", "v3"),
        entry("hash-forged", "v4")
    ]);
    t.create_custom("drift", &data).await;
    t.start_operator(&[]);
    let synced = t.wait_ready("drift", "Synchronized", SYNC).await;
    const HASH: &str = "rancheros.cattle.io/content-hash";
    let hash_of =
        |v: &rancheros_operator::api::ManagedOSVersion| v.annotations().get(HASH).cloned();
    let before: Vec<_> = t.versions().await;
    assert!(before.iter().all(|v| hash_of(v).is_some()), "{before:?}");
    // Someone else edits (their own field manager): the spec, a label the channel sets,
    // the hash annotation (removed, forged).
    let someone = kube::api::PatchParams {
        field_manager: Some("someone-else".into()),
        ..Default::default()
    };
    let edits = [
        ("spec-edited", json!({"spec": {"version": "tampered"}})),
        (
            "label-edited",
            json!({"metadata": {"labels": {"tier": "tin"}}}),
        ),
        (
            "hash-removed",
            json!({"metadata": {"annotations": {HASH: null}}}),
        ),
        (
            "hash-forged",
            json!({"metadata": {"annotations": {HASH: "0000"}}}),
        ),
    ];
    for (name, patch) in &edits {
        t.versions_api()
            .patch(name, &someone, &kube::api::Patch::Merge(patch))
            .await
            .unwrap();
    }
    let after = t.sync_again("drift", "repair", &synced, SYNC).await;
    assert_eq!(ready_reason(&after).as_deref(), Some("Synchronized"));
    let versions = t.versions().await;
    let get = |name: &str| versions.iter().find(|v| v.name_any() == name).unwrap();
    assert_eq!(
        get("spec-edited").spec.version.as_deref(),
        Some("v1"),
        "{}",
        t.operator_log()
    );
    assert_eq!(get("label-edited").labels()["tier"], "gold");
    for name in ["hash-removed", "hash-forged"] {
        let was = before.iter().find(|v| v.name_any() == name).unwrap();
        assert_eq!(hash_of(get(name)), hash_of(was), "{name}");
    }
    // Repaired, nothing else: the message counts the four.
    assert_message_contains(&after, "4 updated");
    t.cleanup().await;
}

#[tokio::test]
async fn drift_hidden_by_a_rewritten_managed_fields_record_is_repaired_by_resource_version() {
    let mut t = TestNs::new("drift-hidden").await;
    let entry = |name: &str, version: &str| {
        json!({
            "metadata": {"name": name},
            "spec": {"version": version, "type": "container", "minVersion": "0.0.0",
                     "metadata": {"upgradeImage": format!("registry.com/os:{version}")}}
        })
    };
    let data = json!([entry("hidden-edit", "v1"), entry("label-only", "v2")]);
    t.create_custom("drift", &data).await;
    t.start_operator(&[]);
    let synced = t.wait_ready("drift", "Synchronized", SYNC).await;
    // A tenant replaces the version (PUT) with an edited spec and a managedFields list of
    // its own, in which the operator's entry is the latest write (an hour from now).
    let api = t.versions_api();
    let mut v = api.get("hidden-edit").await.unwrap();
    v.spec.version = Some("tampered".into());
    let later =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
    for m in v.metadata.managed_fields.iter_mut().flatten() {
        if m.manager.as_deref() == Some("rancheros-operator") {
            m.time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(later));
        }
    }
    let someone = PostParams {
        field_manager: Some("someone-else".into()),
        ..Default::default()
    };
    api.replace("hidden-edit", &someone, &v).await.unwrap();
    let hidden = api.get("hidden-edit").await.unwrap();
    assert_eq!(hidden.spec.version.as_deref(), Some("tampered"));
    assert!(
        !rancheros_operator::syncer::drift::written_by_others(&hidden),
        "the record does not hide the edit: {:?}",
        hidden.metadata.managed_fields
    );
    // Another tenant adds a label of its own: no content of the operator's.
    let patch = json!({"metadata": {"labels": {"tenant": "x"}}});
    let merge = kube::api::PatchParams {
        field_manager: Some("someone-else".into()),
        ..Default::default()
    };
    api.patch("label-only", &merge, &kube::api::Patch::Merge(&patch))
        .await
        .unwrap();
    let repaired = t.sync_again("drift", "repair", &synced, SYNC).await;
    let version = |name: &'static str| {
        let api = api.clone();
        async move { api.get(name).await.unwrap() }
    };
    assert_eq!(
        version("hidden-edit").await.spec.version.as_deref(),
        Some("v1"),
        "{}",
        t.operator_log()
    );
    assert_message_contains(&repaired, "1 updated");
    assert_eq!(version("label-only").await.labels()["tenant"], "x");
    // Each was read in full once: the repair's resourceVersion and the one the read found
    // as wanted are remembered, so the next sync reads neither again.
    let reads = |t: &TestNs, name: &str| {
        let line = format!("version {}/{name} was changed by someone else", t.ns);
        t.operator_log().matches(&line).count()
    };
    assert_eq!((reads(&t, "hidden-edit"), reads(&t, "label-only")), (1, 1));
    let again = t.sync_again("drift", "again", &repaired, SYNC).await;
    assert_message_contains(&again, "no changes");
    assert_eq!(
        (reads(&t, "hidden-edit"), reads(&t, "label-only")),
        (1, 1),
        "{}",
        t.operator_log()
    );
    t.cleanup().await;
}
