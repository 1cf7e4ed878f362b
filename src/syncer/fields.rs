//! Which fields of a version the operator owns, by its `managedFields` record.
//!
//! The operator creates a version with a plain create, the cheapest write for the API
//! server, and changes it with a server-side apply, so that an apply removes what the
//! channel no longer sets. A create (and the put of an undo) records its fields under an
//! `Update` entry of the operator's manager, where an apply would never remove them: before
//! the first apply to such a version, [`gathered`] moves them into the operator's `Apply`
//! entry. The annotations its flag patches set (no longer in sync, orphaned) stay in the
//! `Update` entry: no apply sets them, so none may remove them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::{Map, Value};

use crate::api::{
    FIELD_MANAGER, ManagedOSVersion, NO_LONGER_IN_SYNC_ANNOTATION, ORPHANED_FROM_ANNOTATION,
};

/// The fields the operator owns on `v`: those of its apply, and those its creates and
/// undos recorded (the flag annotations left out); `None` when it has written none.
pub fn ours(v: &ManagedOSVersion) -> Option<Value> {
    let entries = v.metadata.managed_fields.as_deref().unwrap_or_default();
    let applied = entry(entries, "Apply").and_then(|i| set(&entries[i]));
    let updated = entry(entries, "Update")
        .and_then(|i| set(&entries[i]))
        .map(|s| split_flags(s).0);
    match (applied, updated) {
        (Some(a), Some(u)) => Some(union(a, u)),
        (a, u) => a.or(u),
    }
}

/// `v`'s `managedFields` with the fields of the operator's `Update` entry (but the flag
/// annotations) moved into its `Apply` entry; `None` when there is nothing to move.
pub fn gathered(v: &ManagedOSVersion) -> Option<Vec<ManagedFieldsEntry>> {
    let mut entries = v.metadata.managed_fields.clone()?;
    let u = entry(&entries, "Update")?;
    let (rest, flags) = split_flags(set(&entries[u])?);
    if is_empty(&rest) {
        return None;
    }
    match entry(&entries, "Apply") {
        Some(a) => {
            let applied = set(&entries[a]).unwrap_or_else(|| Value::Object(Map::new()));
            entries[a].fields_v1 = Some(FieldsV1(union(applied, rest)));
        }
        None => entries.push(ManagedFieldsEntry {
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(rest)),
            ..entries[u].clone()
        }),
    }
    if is_empty(&flags) {
        entries.remove(u);
    } else {
        entries[u].fields_v1 = Some(FieldsV1(flags));
    }
    Some(entries)
}

/// The operator's entry of `operation` for the version itself (not a subresource).
fn entry(entries: &[ManagedFieldsEntry], operation: &str) -> Option<usize> {
    entries.iter().position(|m| {
        m.manager.as_deref() == Some(FIELD_MANAGER)
            && m.operation.as_deref() == Some(operation)
            && m.subresource.as_deref().is_none_or(str::is_empty)
    })
}

/// An entry's field set as a tree (the API server may send it as text).
fn set(m: &ManagedFieldsEntry) -> Option<Value> {
    match &m.fields_v1.as_ref()?.0 {
        Value::String(text) => serde_json::from_str(text).ok(),
        tree => Some(tree.clone()),
    }
}

/// A field set split into (everything but the flag annotations, the flag annotations).
fn split_flags(mut set: Value) -> (Value, Value) {
    let mut flags = Map::new();
    if let Some(annotations) = set
        .get_mut("f:metadata")
        .and_then(|m| m.get_mut("f:annotations"))
        .and_then(Value::as_object_mut)
    {
        for key in [NO_LONGER_IN_SYNC_ANNOTATION, ORPHANED_FROM_ANNOTATION] {
            let key = format!("f:{key}");
            if let Some(leaf) = annotations.remove(&key) {
                flags.insert(key, leaf);
            }
        }
        // A map left with nothing of its own is not a field anyone sets.
        if annotations.keys().all(|k| k == ".") {
            set["f:metadata"]
                .as_object_mut()
                .map(|m| m.remove("f:annotations"));
        }
        if set["f:metadata"].as_object().is_some_and(Map::is_empty) {
            set.as_object_mut().map(|s| s.remove("f:metadata"));
        }
    }
    let flags = match flags.is_empty() {
        true => Value::Object(Map::new()),
        false => serde_json::json!({"f:metadata": {"f:annotations": flags}}),
    };
    (set, flags)
}

/// Both field sets in one: every field either names.
fn union(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Object(mut a), Value::Object(b)) => {
            for (k, bv) in b {
                let merged = match a.remove(&k) {
                    Some(av) => union(av, bv),
                    None => bv,
                };
                a.insert(k, merged);
            }
            Value::Object(a)
        }
        (a, _) => a,
    }
}

fn is_empty(set: &Value) -> bool {
    set.as_object().is_none_or(Map::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flag() -> String {
        format!("f:{NO_LONGER_IN_SYNC_ANNOTATION}")
    }

    /// A version whose `managedFields` are `entries` (manager, operation, field set).
    fn version(entries: &[(&str, &str, Value)]) -> ManagedOSVersion {
        let mut v = ManagedOSVersion::new("v", Default::default());
        v.metadata.managed_fields = Some(
            entries
                .iter()
                .map(|(manager, operation, set)| ManagedFieldsEntry {
                    manager: Some(manager.to_string()),
                    operation: Some(operation.to_string()),
                    api_version: Some("rancheros.cattle.io/v1".into()),
                    fields_type: Some("FieldsV1".into()),
                    fields_v1: Some(FieldsV1(set.clone())),
                    ..Default::default()
                })
                .collect(),
        );
        v
    }

    fn created() -> Value {
        json!({"f:metadata": {"f:labels": {".": {}, "f:arch": {}},
                              "f:annotations": {".": {}, "f:note": {}}},
               "f:spec": {".": {}, "f:version": {}}})
    }

    fn sets(entries: &[ManagedFieldsEntry]) -> Vec<(String, String, Value)> {
        entries
            .iter()
            .map(|m| {
                (
                    m.manager.clone().unwrap(),
                    m.operation.clone().unwrap(),
                    set(m).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn a_created_versions_fields_become_its_applys_and_no_other_managers_change() {
        let kubectl = json!({"f:metadata": {"f:labels": {"f:team": {}}}});
        let v = version(&[
            ("kubectl", "Update", kubectl.clone()),
            (FIELD_MANAGER, "Update", created()),
        ]);
        let entries = gathered(&v).unwrap();
        assert_eq!(
            sets(&entries),
            [
                ("kubectl".into(), "Update".into(), kubectl),
                (FIELD_MANAGER.into(), "Apply".into(), created()),
            ]
        );
        assert_eq!(
            entries[1].api_version.as_deref(),
            Some("rancheros.cattle.io/v1")
        );
        assert_eq!(
            gathered(&version(&[(FIELD_MANAGER, "Apply", created())])),
            None
        );
    }

    /// A version the operator created, flagged, then applied one more field to: its
    /// Update entry's set, its Apply entry's set, and the union of the two but the flag.
    fn flagged_then_applied() -> (Value, Value, Value) {
        let mut update = created();
        update["f:metadata"]["f:annotations"][flag()] = json!({});
        let applied = json!({"f:spec": {"f:minVersion": {}}});
        let mut ours = created();
        ours["f:spec"]["f:minVersion"] = json!({});
        (update, applied, ours)
    }

    #[test]
    fn the_flag_annotations_stay_with_the_patches_that_set_them() {
        let (update, applied, want) = flagged_then_applied();
        let v = version(&[
            (FIELD_MANAGER, "Apply", applied),
            (FIELD_MANAGER, "Update", update),
        ]);
        let entries = gathered(&v).unwrap();
        assert_eq!(
            sets(&entries),
            [
                (FIELD_MANAGER.into(), "Apply".into(), want),
                (
                    FIELD_MANAGER.into(),
                    "Update".into(),
                    json!({"f:metadata": {"f:annotations": {flag(): {}}}})
                ),
            ]
        );
        // Only flags recorded by patches: nothing to move.
        let flags_only = json!({"f:metadata": {"f:annotations": {".": {}, flag(): {}}}});
        assert_eq!(
            gathered(&version(&[(FIELD_MANAGER, "Update", flags_only)])),
            None
        );
    }

    #[test]
    fn a_status_entry_or_another_managers_is_not_the_operators() {
        let mut status = version(&[(FIELD_MANAGER, "Update", created())]);
        status.metadata.managed_fields.as_mut().unwrap()[0].subresource = Some("status".into());
        assert_eq!(gathered(&status), None);
        assert_eq!(ours(&status), None);
        assert_eq!(
            gathered(&version(&[("kubectl", "Update", created())])),
            None
        );
    }

    #[test]
    fn the_operators_fields_are_its_applys_and_its_creates_but_the_flags() {
        let (update, applied, want) = flagged_then_applied();
        let v = version(&[
            (
                "kubectl",
                "Update",
                json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
            ),
            (FIELD_MANAGER, "Apply", applied.clone()),
            (FIELD_MANAGER, "Update", update),
        ]);
        assert_eq!(ours(&v), Some(want));
        assert_eq!(
            ours(&version(&[(FIELD_MANAGER, "Apply", applied.clone())])),
            Some(applied)
        );
        assert_eq!(ours(&version(&[("kubectl", "Update", created())])), None);
    }
}
