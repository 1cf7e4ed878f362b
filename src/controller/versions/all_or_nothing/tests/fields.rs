//! A version the operator created (its fields recorded under an Update entry) changed by
//! its first apply: the record is moved first (see `syncer::fields`).

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

/// Version "kept" at `resource_version` as a create leaves it: the operator's fields under
/// an Update entry.
fn created(resource_version: &str) -> ManagedOSVersion {
    let mut v = version("kept", Some("uid-kept"));
    v.metadata.resource_version = Some(resource_version.into());
    v.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some(crate::api::FIELD_MANAGER.into()),
        operation: Some("Update".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(
            json!({"f:metadata": {"f:labels": {".": {}, "f:arch": {}}}}),
        )),
        ..Default::default()
    }]);
    v
}

/// Whether a call is the move of the field record (a JSON patch: an array of operations).
fn is_move(c: &Call) -> bool {
    c.method == "PATCH" && c.body.is_array()
}

#[tokio::test]
async fn a_move_that_meets_a_changed_version_reads_it_again_and_moves_from_that() {
    // The same sync's flag patch changed the version between the read and the move.
    let moves = std::sync::atomic::AtomicUsize::new(0);
    let (api, calls) = fake_api(move |c| {
        if is_move(c) && moves.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Some(refusal(409, "Conflict", "the object has been modified"));
        }
        (c.method == "GET").then(|| (200, serde_json::to_value(created("8")).unwrap()))
    });
    let effects = [Effect::ApplyVersion {
        want: Box::new(version("kept", Some("uid-kept"))),
        replaces: Some(Arc::new(created("7"))),
    }];
    write(&api, &effects).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    let real: Vec<&Call> = calls.iter().filter(|c| !c.dry_run).collect();
    let sent: Vec<&str> = real.iter().map(|c| c.method.as_str()).collect();
    assert_eq!(sent, ["PATCH", "GET", "PATCH", "PATCH"], "{calls:#?}");
    assert_eq!(real[0].body[0]["value"], "7");
    assert_eq!(
        real[2].body[0]["value"], "8",
        "the second move is of the version read again"
    );
    assert!(!is_move(real[3]), "then the apply: {calls:#?}");
}

#[tokio::test]
async fn an_update_moves_the_fields_its_create_recorded_into_its_apply_first() {
    let (api, calls) = fake_api(|_| None);
    let before = created("7");
    let effects = [Effect::ApplyVersion {
        want: Box::new(version("kept", Some("uid-kept"))),
        replaces: Some(Arc::new(before)),
    }];
    write(&api, &effects).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    let real: Vec<&Call> = calls.iter().filter(|c| !c.dry_run).collect();
    assert_eq!(real.len(), 2, "{calls:#?}");
    // Conditional on the version read, then the apply.
    assert_eq!(
        real[0].body[0],
        json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "7"})
    );
    let entries = &real[0].body[1]["value"];
    assert_eq!(entries[0]["operation"], "Apply", "{entries}");
    assert_eq!(
        entries[0]["fieldsV1"]["f:metadata"]["f:labels"]["f:arch"],
        json!({})
    );
    assert_eq!(entries.as_array().map(Vec::len), Some(1), "{entries}");
    assert_eq!(real[1].body["metadata"]["uid"], "uid-kept");
}
