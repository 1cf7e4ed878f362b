//! Which `ManagedOSVersion` writes a sync needs: from the versions the channel lists and
//! the versions that exist in its namespace.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::Effect;
// Where the callers outside `syncer` have always found it; it lives with `orphan`'s other
// needs in `owner`, so that `orphan` and `versions` do not import each other.
pub use super::owner::{conflict, controlled_by};
use crate::api::{
    CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionChannel, NO_LONGER_IN_SYNC_ANNOTATION,
};
use crate::channel::ChannelVersion;
use crate::config::ChannelConfig;

/// The writes of a sync, and their counts for the status message.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub effects: Vec<Effect>,
    pub created: usize,
    pub updated: usize,
    /// Versions orphaned by a deleted channel of this name that this sync takes over.
    pub adopted: usize,
    pub flagged: usize,
    pub deleted: usize,
    /// Listed versions read in full (someone else wrote them) and found as the sync wants
    /// them: name and resourceVersion, for the operator to remember (`super::drift`).
    pub verified: Vec<(String, String)>,
}

impl Plan {
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (n, what) in [
            (self.created, "created"),
            (self.updated, "updated"),
            (self.adopted, "adopted"),
            (self.flagged, "flagged as no longer in sync"),
            (self.deleted, "deleted"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        if parts.is_empty() {
            "no changes".into()
        } else {
            parts.join(", ")
        }
    }
}

/// Annotation the operator writes on every version: a hash of the content it applied
/// (labels, annotations, spec). The watch cache holds no spec: a version whose hash is the
/// one a sync wants is unchanged, unless someone else wrote it since (then it is read, see
/// `super::drift`).
pub const CONTENT_HASH_ANNOTATION: &str = "rancheros.cattle.io/content-hash";

/// The content hash of a version the operator applies (its own hash annotation left out).
pub fn content_hash(v: &ManagedOSVersion) -> String {
    let mut annotations = v.annotations().clone();
    annotations.remove(CONTENT_HASH_ANNOTATION);
    let content = serde_json::json!([v.labels(), annotations, v.spec]);
    crate::digest::sha256_hex_prefix(content.to_string().as_bytes(), 16)
}

/// Whether this is a version as the metadata-only cache holds it (no spec, no field sets),
/// not one read in full.
pub fn metadata_only(v: &ManagedOSVersion) -> bool {
    v.spec == Default::default()
        && v.metadata
            .managed_fields
            .iter()
            .flatten()
            .all(|m| m.fields_v1.is_none())
}

fn is_flagged(v: &ManagedOSVersion) -> bool {
    v.annotations()
        .get(NO_LONGER_IN_SYNC_ANNOTATION)
        .is_some_and(|a| a == "true")
}

/// Whether a version is one the channel publishes now: it controls it, and it is neither
/// flagged no longer in sync (by the source or the policy) nor orphaned. What the channel
/// server rebuilds a channel's data from after a start.
pub fn published_by(v: &ManagedOSVersion, channel: &ManagedOSVersionChannel) -> bool {
    controlled_by(&v.metadata, channel) && !is_flagged(v) && !super::orphan::marked_orphan(v)
}

/// The version a listed item becomes: owner reference, label, registry and
/// upgradeContainer applied.
pub fn desired(
    channel: &ManagedOSVersionChannel,
    config: &ChannelConfig,
    item: &ChannelVersion,
) -> ManagedOSVersion {
    desired_from(channel, config, item.clone())
}

/// [`desired`], made of the item itself (its parts moved, not copied).
fn desired_from(
    channel: &ManagedOSVersionChannel,
    config: &ChannelConfig,
    item: ChannelVersion,
) -> ManagedOSVersion {
    let ChannelVersion {
        name,
        mut labels,
        mut annotations,
        mut spec,
    } = item;
    labels.insert(CHANNEL_LABEL.into(), channel.name_any());
    annotations.remove(NO_LONGER_IN_SYNC_ANNOTATION);
    if let (Some(registry), Some(metadata)) = (&config.registry, spec.metadata.as_mut()) {
        let key = if spec.type_ == "iso" {
            "uri"
        } else {
            "upgradeImage"
        };
        if let Some(Value::String(target)) = metadata.get_mut(key) {
            *target = with_registry(registry, target);
        }
    }
    if config.upgrade_container.is_some() {
        spec.upgrade_container = config.upgrade_container.clone();
    }
    let mut version = ManagedOSVersion::new(&name, spec);
    version.metadata = ObjectMeta {
        name: Some(name),
        namespace: channel.namespace(),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: channel.controller_owner_ref(&()).map(|r| vec![r]),
        ..Default::default()
    };
    let hash = content_hash(&version);
    version
        .annotations_mut()
        .insert(CONTENT_HASH_ANNOTATION.into(), hash);
    version
}

/// `registry/target` with exactly one `/` between.
fn with_registry(registry: &str, target: &str) -> String {
    format!(
        "{}/{}",
        registry.trim_end_matches('/'),
        target.trim_start_matches('/')
    )
}

/// Whether `existing` must be written to become `want`. Only what the operator owns counts:
/// everything `want` sets must be there with the same value (numbers compared by value),
/// and nothing the operator set may be left that `want` no longer sets (a label dropped
/// from the channel data; what it set is [`super::fields::ours`]). Fields other managers added are ignored.
pub fn differs(existing: &ManagedOSVersion, want: &ManagedOSVersion) -> bool {
    if metadata_only(existing) {
        // As cached: the hash says it all (a removed or forged one differs too). One
        // written by someone else since is read in full first (`drift::to_read_fresh`).
        return existing.annotations().get(CONTENT_HASH_ANNOTATION)
            != want.annotations().get(CONTENT_HASH_ANNOTATION);
    }
    let contains = |have: &BTreeMap<String, String>, want: &BTreeMap<String, String>| {
        want.iter().all(|(k, v)| have.get(k) == Some(v))
    };
    let (Ok(have_spec), Ok(want_spec)) = (
        serde_json::to_value(&existing.spec),
        serde_json::to_value(&want.spec),
    ) else {
        return true;
    };
    if !contains(existing.labels(), want.labels())
        || !contains(existing.annotations(), want.annotations())
        || !subset(&want_spec, &have_spec)
    {
        return true;
    }
    let Some(owned) = super::fields::ours(existing) else {
        // Not written by this operator yet (or the record is gone): write once.
        return true;
    };
    let want_meta = serde_json::json!({
        "labels": want.labels(),
        "annotations": want.annotations(),
    });
    let owned_meta = owned.get("f:metadata").cloned().unwrap_or_default();
    let owned_meta = serde_json::json!({
        "f:labels": owned_meta.get("f:labels").cloned().unwrap_or_default(),
        "f:annotations": owned_meta.get("f:annotations").cloned().unwrap_or_default(),
    });
    owns_more(&owned_meta, &want_meta)
        || owns_more(owned.get("f:spec").unwrap_or(&Value::Null), &want_spec)
}

/// Whether the owned field set names a field that `want` does not have. Keys of a field set
/// are `f:<name>`; lists under free-form objects are atomic, so only `f:` keys matter.
fn owns_more(owned: &Value, want: &Value) -> bool {
    let Value::Object(fields) = owned else {
        return false;
    };
    fields.iter().any(|(key, sub)| {
        let Some(name) = key.strip_prefix("f:") else {
            return false;
        };
        match want.get(name) {
            None => true,
            Some(child) => owns_more(sub, child),
        }
    })
}

/// Whether everything in `want` is in `have` with the same value; objects may hold more
/// keys in `have`, numbers are compared by value (`1` equals `1.0`).
fn subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| subset(v, hv))),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| same(a, b))
        }
        _ => same(want, have),
    }
}

/// Equal values, with numbers compared by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || matches!((x.as_f64(), y.as_f64()), (Some(p), Some(q)) if p == q)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The writes that bring `existing` in line with what a sync listed (`None`: the channel is
/// disabled and lists nothing). Fails, before any write, when a listed name is taken by a
/// version this channel does not control.
pub fn plan(
    channel: &ManagedOSVersionChannel,
    listing: Option<(&ChannelConfig, &[ChannelVersion])>,
    existing: &[Arc<ManagedOSVersion>],
    delete_unlisted: bool,
) -> Result<Plan, String> {
    plan_held(channel, listing, &HashSet::new(), existing, delete_unlisted)
}

/// [`plan`], where `held` names listed versions `spec.versions` holds back: not in
/// `listing`, and flagged when they exist, never deleted (the policy never deletes).
pub fn plan_held(
    channel: &ManagedOSVersionChannel,
    listing: Option<(&ChannelConfig, &[ChannelVersion])>,
    held: &HashSet<String>,
    existing: &[Arc<ManagedOSVersion>],
    delete_unlisted: bool,
) -> Result<Plan, String> {
    let listing = listing.map(|(config, items)| (config, items.to_vec()));
    plan_from(channel, listing, held, existing, delete_unlisted)
}

/// [`plan_held`], made of the listed items themselves: each becomes the version it asks
/// for as it is planned, so a large listing is not held beside the versions planned from
/// it (a sync's peak memory).
pub fn plan_from(
    channel: &ManagedOSVersionChannel,
    listing: Option<(&ChannelConfig, Vec<ChannelVersion>)>,
    held: &HashSet<String>,
    existing: &[Arc<ManagedOSVersion>],
    delete_unlisted: bool,
) -> Result<Plan, String> {
    let by_name: HashMap<String, &Arc<ManagedOSVersion>> =
        existing.iter().map(|v| (v.name_any(), v)).collect();
    let mut plan = Plan::default();
    let listed_names: HashSet<String> = listing
        .iter()
        .flat_map(|(_, items)| items.iter().map(|i| i.name.clone()))
        .collect();
    let mut conflicts = Vec::new();
    // Deletes go last: the only writes that cannot be undone if a later one is refused.
    let mut deletes = Vec::new();
    for (config, item) in listing
        .into_iter()
        .flat_map(|(c, items)| items.into_iter().map(move |i| (c, i)))
    {
        let want = desired_from(channel, config, item);
        let name = want.name_any();
        match by_name.get(&name) {
            None => {
                plan.created = plan.created.saturating_add(1);
                plan.effects.push(Effect::ApplyVersion {
                    want: Box::new(want),
                    replaces: None,
                });
            }
            Some(have)
                if !controlled_by(&have.metadata, channel)
                    && !super::orphan::adoptable(have, channel) =>
            {
                conflicts.push(super::owner::conflict("version", &have.metadata));
            }
            Some(have) => {
                // A version orphaned by a deleted channel of this name: taken over (the
                // apply sets the owner reference), whatever its content.
                let adopt = !controlled_by(&have.metadata, channel);
                if adopt {
                    plan.adopted = plan.adopted.saturating_add(1);
                }
                let changed = differs(have, &want);
                if let Some(rv) = have.resource_version()
                    && !adopt
                    && !changed
                    && !metadata_only(have)
                {
                    plan.verified.push((name.clone(), rv));
                }
                if adopt || changed {
                    plan.updated = plan.updated.saturating_add(usize::from(!adopt));
                    let mut want = want;
                    // A precondition: a version replaced meanwhile is never taken over.
                    want.metadata.uid = have.uid();
                    plan.effects.push(Effect::ApplyVersion {
                        want: Box::new(want),
                        replaces: Some(Arc::clone(have)),
                    });
                }
                if is_flagged(have) || super::orphan::marked_orphan(have) {
                    plan.effects.push(Effect::MarkVersion {
                        name,
                        uid: have.uid().unwrap_or_default(),
                        no_longer_in_sync: false,
                    });
                }
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(format!(
            "{}; nothing was changed (rename the version in the channel data or remove the other version)",
            crate::text::list(&conflicts, "; ")
        ));
    }
    for have in existing {
        let name = have.name_any();
        if listed_names.contains(&name) || !controlled_by(&have.metadata, channel) {
            continue;
        }
        if delete_unlisted && !held.contains(&name) {
            plan.deleted = plan.deleted.saturating_add(1);
            deletes.push(Effect::DeleteVersion {
                name,
                uid: have.uid().unwrap_or_default(),
                before: Arc::clone(have),
            });
        } else if !is_flagged(have) {
            plan.flagged = plan.flagged.saturating_add(1);
            plan.effects.push(Effect::MarkVersion {
                name,
                uid: have.uid().unwrap_or_default(),
                no_longer_in_sync: true,
            });
        }
    }
    plan.effects.extend(deletes);
    Ok(plan)
}

/// For tests and tools: a spec from JSON.
#[cfg(test)]
pub(crate) fn spec_of(v: Value) -> crate::api::ManagedOSVersionSpec {
    serde_json::from_value(v).unwrap()
}

#[cfg(test)]
mod tests;
