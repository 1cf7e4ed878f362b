//! A version the operator created (its fields recorded under an Update entry) changed by
//! its first apply: the record is moved first (see `syncer::fields`).

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

#[tokio::test]
async fn an_update_moves_the_fields_its_create_recorded_into_its_apply_first() {
    // As a create leaves it: the operator's fields under an Update entry.
    let (api, calls) = fake_api(|_| None);
    let mut before = version("kept", Some("uid-kept"));
    before.metadata.resource_version = Some("7".into());
    before.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some(crate::api::FIELD_MANAGER.into()),
        operation: Some("Update".into()),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(
            json!({"f:metadata": {"f:labels": {".": {}, "f:arch": {}}}}),
        )),
        ..Default::default()
    }]);
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
