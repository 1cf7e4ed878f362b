//! The versions' watch cache holds metadata only: the watch asks the API server for
//! `PartialObjectMetadata`, and of that only what decisions read is decoded (names,
//! labels, annotations with the operator's content hash, owner references, and of
//! `managedFields` who wrote when, never the field sets). No spec is kept: whether a
//! version is unchanged is its content hash (`syncer::versions::CONTENT_HASH_ANNOTATION`);
//! a version someone else wrote since the operator did (`syncer::drift`) is read fresh
//! before it is decided on, and one to update or delete is read in full for its undo
//! (`in_full`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Deserializer};

use crate::api::{
    CHANNEL_LABEL, FIELD_MANAGER, ManagedOSVersion, NO_LONGER_IN_SYNC_ANNOTATION,
    ORPHANED_FROM_ANNOTATION,
};
use crate::syncer::versions::CONTENT_HASH_ANNOTATION;

/// A version as the metadata-only watch returns it: a `ManagedOSVersion` with an empty
/// spec and lean metadata.
#[derive(Clone, Debug)]
pub struct VersionMeta(pub ManagedOSVersion);

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Lean {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    /// Skipped unread: `fieldsV1` (a tree as deep as the object).
    managed_fields: Option<Vec<Wrote>>,
}

/// Of one `managedFields` entry, who wrote and when.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wrote {
    manager: Option<String>,
    operation: Option<String>,
    time: Option<Time>,
    subresource: Option<String>,
}

#[derive(Deserialize)]
struct Envelope {
    metadata: Option<Lean>,
}

impl<'de> Deserialize<'de> for VersionMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Envelope { metadata } = Envelope::deserialize(d)?;
        let m = metadata.unwrap_or_default();
        let writers = m.managed_fields.map(|all| {
            latest_writers(all)
                .into_iter()
                .map(|w| ManagedFieldsEntry {
                    manager: w.manager,
                    operation: w.operation,
                    time: w.time,
                    subresource: w.subresource,
                    ..Default::default()
                })
                .collect()
        });
        let mut version = ManagedOSVersion::new("", Default::default());
        version.metadata = ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            labels: only(m.labels, &[CHANNEL_LABEL]),
            // Decisions read only who controls a version (at most one reference, which
            // the API server enforces): the others, any number a tenant adds, cost nothing.
            owner_references: m
                .owner_references
                .map(|refs| {
                    refs.into_iter()
                        .filter(|o| o.controller == Some(true))
                        .take(1)
                        .collect::<Vec<_>>()
                })
                .filter(|refs| !refs.is_empty()),
            annotations: only(
                m.annotations,
                &[
                    CONTENT_HASH_ANNOTATION,
                    NO_LONGER_IN_SYNC_ANNOTATION,
                    ORPHANED_FROM_ANNOTATION,
                ],
            ),
            managed_fields: writers,
            ..Default::default()
        };
        Ok(VersionMeta(version))
    }
}

/// The most bytes of a kept label or annotation value: the operator's own are a hash, a
/// uid or `true`; a longer value (anyone may write one, up to 256 KiB) is cut, which no
/// decision mistakes for the operator's (a cut hash matches no content).
const MAX_VALUE: usize = 128;

/// Of a map, only the keys decisions read, each value at most [`MAX_VALUE`] bytes:
/// whatever else tenants add costs no memory.
fn only(map: Option<BTreeMap<String, String>>, keys: &[&str]) -> Option<BTreeMap<String, String>> {
    let kept: BTreeMap<String, String> = map?
        .into_iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .map(|(k, v)| {
            let v = if v.len() > MAX_VALUE {
                crate::text::head(&v, MAX_VALUE)
            } else {
                v
            };
            (k, v)
        })
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// Of the writers of the object itself (not its status), the operator's latest and the
/// latest of anyone else: all that `written_by_others` compares.
fn latest_writers(all: Vec<Wrote>) -> Vec<Wrote> {
    let (mut ours, mut others): (Option<Wrote>, Option<Wrote>) = (None, None);
    for w in all {
        if w.subresource.as_deref().is_some_and(|s| !s.is_empty()) {
            continue;
        }
        let slot = if w.manager.as_deref() == Some(FIELD_MANAGER) {
            &mut ours
        } else {
            &mut others
        };
        // No time counts as the latest (`written_by_others` reads it so).
        let later = slot.as_ref().is_none_or(|s| {
            w.time.is_none() || s.time.as_ref().is_some_and(|t| w.time.as_ref() > Some(t))
        });
        if later {
            *slot = Some(w);
        }
    }
    ours.into_iter().chain(others).collect()
}

impl Resource for VersionMeta {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        ManagedOSVersion::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        ManagedOSVersion::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        ManagedOSVersion::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        ManagedOSVersion::plural(dt)
    }
    /// Lists and watches ask for `PartialObjectMetadata`: no spec crosses the wire.
    fn metadata_api() -> bool {
        true
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// The watch's events, as the versions they carry.
pub fn versions(
    event: Result<watcher::Event<VersionMeta>, watcher::Error>,
) -> Result<watcher::Event<ManagedOSVersion>, watcher::Error> {
    use watcher::Event;
    event.map(|e| match e {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(v) => Event::InitApply(v.0),
        Event::Apply(v) => Event::Apply(v.0),
        Event::Delete(v) => Event::Delete(v.0),
    })
}

/// The version in full: as given, or read when the cache had only its metadata (`None`:
/// gone meanwhile).
pub async fn in_full(
    api: &kube::Api<ManagedOSVersion>,
    v: &ManagedOSVersion,
) -> Result<Option<ManagedOSVersion>, kube::Error> {
    if crate::syncer::versions::metadata_only(v) {
        api.get_opt(&v.name_any()).await
    } else {
        Ok(Some(v.clone()))
    }
}

/// A version to update that was deleted during the sync: refused as a conflict would be.
pub fn gone_meanwhile(name: &str) -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        status: Some(kube::core::response::StatusSummary::Failure),
        code: 409,
        reason: "Conflict".into(),
        message: format!("version {name} was deleted by someone else during the sync"),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectList;

    #[test]
    fn only_metadata_is_kept_and_field_sets_are_never_read() {
        let deep = format!("{}1{}", "{\"f:a\":".repeat(300), "}".repeat(300));
        let page = format!(
            r#"{{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{{"resourceVersion":"5"}},"items":[{{"kind":"PartialObjectMetadata","metadata":{{"name":"v1","namespace":"n","uid":"u","resourceVersion":"4","labels":{{"rancheros.cattle.io/channel":"c","tenant":"x"}},"annotations":{{"a":"b","rancheros.cattle.io/content-hash":"h"}},"managedFields":[{{"manager":"kubectl","operation":"Update","time":"2026-01-01T00:00:01Z"}},{{"manager":"rancheros-operator","operation":"Apply","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{deep}}},{{"manager":"kubectl","operation":"Update","time":"2026-01-01T00:00:05Z"}},{{"manager":"tool","operation":"Update","subresource":"status","time":"2026-01-01T00:00:09Z"}}]}}}}]}}"#
        );
        let list: ObjectList<VersionMeta> = serde_json::from_str(&page).unwrap();
        let v = &list.items[0].0;
        assert_eq!(v.metadata.name.as_deref(), Some("v1"));
        assert_eq!(v.metadata.resource_version.as_deref(), Some("4"));
        // Of labels and annotations, only those decisions read.
        let keys = |m: &Option<BTreeMap<String, String>>| -> Vec<String> {
            m.iter().flatten().map(|(k, _)| k.clone()).collect()
        };
        assert_eq!(keys(&v.metadata.labels), ["rancheros.cattle.io/channel"]);
        assert_eq!(
            keys(&v.metadata.annotations),
            ["rancheros.cattle.io/content-hash"]
        );
        // Of the writers, the operator's latest and anyone else's latest; no field sets.
        let writers: Vec<(String, String)> = v
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .map(|w| {
                (
                    w.manager.clone().unwrap(),
                    w.time.as_ref().unwrap().0.to_string(),
                )
            })
            .collect();
        assert_eq!(
            writers,
            [
                (
                    "rancheros-operator".to_string(),
                    "2026-01-01T00:00:00Z".to_string()
                ),
                ("kubectl".to_string(), "2026-01-01T00:00:05Z".to_string())
            ]
        );
        assert!(
            v.metadata
                .managed_fields
                .iter()
                .flatten()
                .all(|w| w.fields_v1.is_none())
        );
        assert!(crate::syncer::drift::written_by_others(v));
        assert_eq!(v.spec, Default::default());
        assert!(VersionMeta::metadata_api());
    }

    #[test]
    fn tenant_written_owner_references_and_long_annotation_values_cost_no_memory() {
        let owner = |i: usize, controller: bool| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "name": format!("cm-{i}"),
                               "uid": format!("uid-{i}"), "controller": controller})
        };
        let mut refs: Vec<_> = (0..500).map(|i| owner(i, false)).collect();
        refs.push(owner(999, true));
        let long = "h".repeat(200 << 10);
        let item = serde_json::json!({"metadata": {
            "name": "v1", "namespace": "n",
            "ownerReferences": refs,
            "finalizers": vec!["example.com/x"; 100],
            "annotations": {"rancheros.cattle.io/content-hash": long},
        }});
        let v: VersionMeta = serde_json::from_value(item).unwrap();
        let kept = v.0.metadata.owner_references.unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].uid, "uid-999");
        assert_eq!(v.0.metadata.finalizers, None);
        let hash = &v.0.metadata.annotations.unwrap()["rancheros.cattle.io/content-hash"];
        assert!(hash.len() <= MAX_VALUE, "{}", hash.len());
    }
}
