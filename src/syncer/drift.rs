//! Drift: which of a channel's cached versions someone else may have changed since the
//! operator last wrote them. The watch cache holds no spec, so a version whose content
//! hash is the one a sync wants is unchanged, unless someone else wrote it: those, and only
//! those, are read in full before the sync decides on them.
//!
//! The operator remembers, per version, the resourceVersion its own last write returned, or
//! that of a full read which found the version as the sync wants it (`Known`). A cached
//! resourceVersion other than that one is someone else's write, whatever the version's
//! `managedFields` say (a request may rewrite those). Only without a remembered one (after
//! a restart, or a version the operator has not written since) does the `managedFields`
//! record decide (`written_by_others`).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::ResourceExt;

use super::versions::{controlled_by, metadata_only};
use crate::api::{FIELD_MANAGER, ManagedOSVersion, ManagedOSVersionChannel};

/// By version name: the resourceVersion at which the operator last wrote the version, or
/// read it in full and found it as a sync wanted it (this process only).
pub type Known = HashMap<String, String>;

/// Whether someone else may have written the cached version since the operator last wrote
/// or checked it: its resourceVersion is not the one remembered (`known`); with none
/// remembered, by its `managedFields` (`written_by_others`).
fn changed_by_others(v: &ManagedOSVersion, known: Option<&str>) -> bool {
    match known {
        Some(rv) => v.metadata.resource_version.as_deref() != Some(rv),
        None => written_by_others(v),
    }
}

/// Whether someone other than the operator wrote the version (its labels, annotations or
/// spec; not its status) at or after the operator's own last write, by its `managedFields`
/// record: then its content may differ from what its hash says. Times have one-second
/// resolution: a write in the same second counts.
pub fn written_by_others(v: &ManagedOSVersion) -> bool {
    let writers = v.metadata.managed_fields.iter().flatten();
    let main = |m: &&ManagedFieldsEntry| m.subresource.as_deref().is_none_or(str::is_empty);
    let ours = writers
        .clone()
        .filter(main)
        .filter(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
        .filter_map(|m| m.time.as_ref())
        .max();
    let Some(ours) = ours else {
        return true;
    };
    writers
        .filter(main)
        .filter(|m| m.manager.as_deref() != Some(FIELD_MANAGER))
        .any(|m| m.time.as_ref().is_none_or(|t| t >= ours))
}

/// The versions of this channel to read fresh before a sync decides on them: cached as
/// metadata only, and changed by someone else since (`changed_by_others`).
pub fn to_read_fresh(
    channel: &ManagedOSVersionChannel,
    cached: &[Arc<ManagedOSVersion>],
    known: &Known,
) -> Vec<String> {
    cached
        .iter()
        .filter(|v| controlled_by(&v.metadata, channel) && metadata_only(v))
        .map(|v| (v, v.name_any()))
        .filter(|(v, name)| changed_by_others(v, known.get(name).map(String::as_str)))
        .map(|(_, name)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn channel() -> ManagedOSVersionChannel {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "uc"},
            "spec": {"type": "custom", "options": {"image": "i"}}
        }))
        .unwrap()
    }

    /// A version of `c` as the metadata-only cache holds it, at resourceVersion `rv`,
    /// with these writers (manager, second).
    fn cached(name: &str, rv: &str, writers: &[(&str, i64)]) -> Arc<ManagedOSVersion> {
        let mut v: ManagedOSVersion = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                "ownerReferences": [{"apiVersion": "rancheros.cattle.io/v1",
                    "kind": "ManagedOSVersionChannel", "name": "c", "uid": "uc",
                    "controller": true}]},
            "spec": {}
        }))
        .unwrap();
        v.metadata.managed_fields = Some(crate::syncer::tests::writers(writers));
        Arc::new(v)
    }

    fn known(pairs: &[(&str, &str)]) -> Known {
        pairs
            .iter()
            .map(|(n, rv)| (n.to_string(), rv.to_string()))
            .collect()
    }

    #[test]
    fn a_resource_version_the_operator_did_not_write_is_drift_whatever_managed_fields_say() {
        // The operator's entry looks like the latest writer (a request rewrote the record).
        let hidden = cached("v", "12", &[("tenant", 5), (FIELD_MANAGER, 4_000_000_000)]);
        assert!(!written_by_others(&hidden));
        assert!(changed_by_others(&hidden, Some("11")));
        assert_eq!(
            to_read_fresh(&channel(), &[hidden], &known(&[("v", "11")])),
            ["v"]
        );
    }

    #[test]
    fn the_resource_version_the_operator_wrote_or_verified_is_not_read_again() {
        // Someone else's entry is the latest, yet the object is as the operator left it or
        // found it (a write since is a new resourceVersion).
        let later = cached("v", "12", &[(FIELD_MANAGER, 4), ("gc", 9)]);
        assert!(written_by_others(&later));
        assert!(!changed_by_others(&later, Some("12")));
        assert!(to_read_fresh(&channel(), &[later], &known(&[("v", "12")])).is_empty());
    }

    #[test]
    fn with_nothing_remembered_the_managed_fields_record_decides() {
        let ch = channel();
        let none = Known::new();
        let mine = cached("mine", "3", &[("tenant", 1), (FIELD_MANAGER, 2)]);
        let theirs = cached("theirs", "3", &[(FIELD_MANAGER, 2), ("tenant", 2)]);
        let never = cached("never", "3", &[("tenant", 1)]);
        let read = to_read_fresh(&ch, &[mine, theirs, never], &none);
        assert_eq!(read, ["theirs", "never"]);
        // Remembered for another version only: this one still goes by its record.
        let other = known(&[("elsewhere", "3")]);
        let mine = cached("mine", "3", &[(FIELD_MANAGER, 2)]);
        assert!(to_read_fresh(&ch, &[mine], &other).is_empty());
    }

    #[test]
    fn versions_read_in_full_or_of_other_channels_are_never_read_again() {
        let ch = channel();
        let mut full = (*cached("full", "9", &[])).clone();
        full.spec.version = Some("v1".into());
        let mut foreign = (*cached("foreign", "9", &[])).clone();
        foreign.metadata.owner_references = None;
        let stale = known(&[("full", "1"), ("foreign", "1")]);
        assert!(to_read_fresh(&ch, &[Arc::new(full), Arc::new(foreign)], &stale).is_empty());
    }
}
