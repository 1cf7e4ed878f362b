//! `spec.versionPolicy.onChannelDelete: Orphan`: versions are fleet data that outlive their
//! channel. The operator puts a finalizer on such channels (and only on those); when one is
//! deleted, it takes the channel's owner reference off each of its versions, flags them no
//! longer in sync and records which channel let them go, then removes the finalizer. A
//! later channel of the same name adopts them. This module decides; `controller::objects::finalize`
//! performs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::owner::controlled_by;
use crate::api::{
    CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionChannel, NO_LONGER_IN_SYNC_ANNOTATION,
    ORPHAN_FINALIZER, ORPHANED_FROM_ANNOTATION, OnChannelDelete,
};

/// What the channel's finalizer needs before anything else happens to the channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing: go on (a live channel syncs; a deleted one without the finalizer is the
    /// garbage collector's).
    Nothing,
    /// A live `Orphan` channel without the finalizer: add it, then go on.
    AddFinalizer,
    /// A live channel back to `Delete`: remove the finalizer, then go on.
    RemoveFinalizer,
    /// A deleted channel whose policy is `Delete` (it changed during the deletion): let it
    /// go at once.
    Release,
    /// A deleted `Orphan` channel: orphan its versions, then let it go.
    OrphanThenRelease,
}

fn has_finalizer(channel: &ManagedOSVersionChannel) -> bool {
    channel.finalizers().iter().any(|f| f == ORPHAN_FINALIZER)
}

/// The step for this channel, from its spec, finalizers and deletion.
pub fn step(channel: &ManagedOSVersionChannel) -> Step {
    let orphan = channel.spec.on_channel_delete() == OnChannelDelete::Orphan;
    let deleted = channel.metadata.deletion_timestamp.is_some();
    match (deleted, has_finalizer(channel), orphan) {
        (_, false, _) if deleted => Step::Nothing,
        (true, true, true) => Step::OrphanThenRelease,
        (true, true, false) => Step::Release,
        (false, false, true) => Step::AddFinalizer,
        (false, true, false) => Step::RemoveFinalizer,
        _ => Step::Nothing,
    }
}

/// A merge patch that sets the channel's finalizers to what they are plus (`add`) or minus
/// ours, conditional on the channel's resourceVersion (no other finalizer is lost to a
/// concurrent write: that one gets 409 and is made again from a fresh read).
pub fn finalizers_patch(channel: &ManagedOSVersionChannel, add: bool) -> Value {
    let mut finalizers: Vec<String> = channel
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != ORPHAN_FINALIZER)
        .cloned()
        .collect();
    if add {
        finalizers.push(ORPHAN_FINALIZER.into());
    }
    json!({"metadata": {
        "resourceVersion": channel.resource_version(),
        "finalizers": if finalizers.is_empty() { Value::Null } else { json!(finalizers) },
    }})
}

/// The merge patch that orphans one version of the deleted channel: its owner references
/// without the channel's, the no-longer-in-sync flag, and the uid of the channel that let
/// it go. Conditional on the version's uid and resourceVersion, so a version replaced or
/// changed meanwhile is patched again from a fresh read, never from a stale one. `None`:
/// not the channel's to orphan (another's, nobody's, or already being deleted).
/// Takes the version's metadata only: the finalizer lists no more than that.
pub fn orphan_patch(version: &ObjectMeta, channel: &ManagedOSVersionChannel) -> Option<Value> {
    if !controlled_by(version, channel) || version.deletion_timestamp.is_some() {
        return None;
    }
    let uid = channel.uid()?;
    let others: Vec<_> = version
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.uid != uid)
        .collect();
    Some(json!({"metadata": {
        "uid": version.uid,
        "resourceVersion": version.resource_version,
        "ownerReferences": if others.is_empty() { Value::Null } else { json!(others) },
        "annotations": {
            NO_LONGER_IN_SYNC_ANNOTATION: "true",
            ORPHANED_FROM_ANNOTATION: uid,
        },
    }}))
}

/// Whether `channel` may take over `version`: a version the operator orphaned (it carries
/// the orphaned-from annotation) from a channel of this name (the channel label), that no
/// one controls since. A version another channel controls, or one that merely carries the
/// label, is never taken.
pub fn adoptable(version: &ManagedOSVersion, channel: &ManagedOSVersionChannel) -> bool {
    let uncontrolled = !version
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true));
    let orphaned = version
        .annotations()
        .get(ORPHANED_FROM_ANNOTATION)
        .is_some_and(|uid| !uid.is_empty());
    let same_name = version.labels().get(CHANNEL_LABEL) == Some(&channel.name_any());
    uncontrolled && orphaned && same_name && version.metadata.deletion_timestamp.is_none()
}

/// Whether the version still carries a mark of having been orphaned (the sync that adopts
/// it removes the mark with the flag).
pub fn marked_orphan(version: &ManagedOSVersion) -> bool {
    version.annotations().contains_key(ORPHANED_FROM_ANNOTATION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syncer::tests::channel;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use kube::Resource;

    fn orphan_channel() -> ManagedOSVersionChannel {
        channel(json!({"type": "custom", "options": {"image": "i"},
                       "versionPolicy": {"onChannelDelete": "Orphan"}}))
    }

    fn deleted(mut ch: ManagedOSVersionChannel) -> ManagedOSVersionChannel {
        ch.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(100).unwrap()));
        ch
    }

    fn with_finalizer(mut ch: ManagedOSVersionChannel) -> ManagedOSVersionChannel {
        ch.finalizers_mut().push(ORPHAN_FINALIZER.into());
        ch
    }

    fn version_of(ch: &ManagedOSVersionChannel, name: &str) -> ManagedOSVersion {
        let mut v = ManagedOSVersion::new(name, Default::default());
        v.metadata.uid = Some(format!("{name}-uid"));
        v.metadata.resource_version = Some("7".into());
        v.metadata.labels = Some([(CHANNEL_LABEL.to_string(), ch.name_any())].into());
        v.metadata.owner_references = ch.controller_owner_ref(&()).map(|r| vec![r]);
        v
    }

    #[test]
    fn the_finalizer_is_only_on_orphan_channels() {
        let delete = channel(json!({"type": "custom", "options": {"image": "i"}}));
        assert_eq!(step(&delete), Step::Nothing);
        assert_eq!(step(&orphan_channel()), Step::AddFinalizer);
        assert_eq!(step(&with_finalizer(orphan_channel())), Step::Nothing);
        // Back to Delete: the finalizer goes.
        assert_eq!(step(&with_finalizer(delete.clone())), Step::RemoveFinalizer);
        // Deleted: orphan first (Orphan), or at once (Delete); without the finalizer the
        // garbage collector decides.
        assert_eq!(
            step(&deleted(with_finalizer(orphan_channel()))),
            Step::OrphanThenRelease
        );
        assert_eq!(
            step(&deleted(with_finalizer(delete.clone()))),
            Step::Release
        );
        assert_eq!(step(&deleted(orphan_channel())), Step::Nothing);
        assert_eq!(step(&deleted(delete)), Step::Nothing);
    }

    #[test]
    fn finalizer_patches_keep_the_others_and_are_conditional() {
        let mut ch = orphan_channel();
        ch.metadata.resource_version = Some("42".into());
        ch.finalizers_mut().push("example.com/keep".into());
        let add = finalizers_patch(&ch, true);
        assert_eq!(
            add,
            json!({"metadata": {"resourceVersion": "42",
                "finalizers": ["example.com/keep", ORPHAN_FINALIZER]}})
        );
        let ch = with_finalizer(ch);
        assert_eq!(
            finalizers_patch(&ch, false)["metadata"]["finalizers"],
            json!(["example.com/keep"])
        );
        let mut only_ours = orphan_channel();
        only_ours.finalizers_mut().push(ORPHAN_FINALIZER.into());
        assert_eq!(
            finalizers_patch(&only_ours, false)["metadata"]["finalizers"],
            Value::Null
        );
    }

    #[test]
    fn orphaning_takes_off_only_the_channels_reference_and_flags() {
        let ch = deleted(with_finalizer(orphan_channel()));
        let mut v = version_of(&ch, "foo");
        let other = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "keep".into(),
            uid: "cm-uid".into(),
            ..Default::default()
        };
        v.owner_references_mut().push(other.clone());
        let patch = orphan_patch(&v.metadata, &ch).expect("the channel's version");
        assert_eq!(
            patch,
            json!({"metadata": {
                "uid": "foo-uid",
                "resourceVersion": "7",
                "ownerReferences": [other],
                "annotations": {
                    NO_LONGER_IN_SYNC_ANNOTATION: "true",
                    ORPHANED_FROM_ANNOTATION: ch.uid().unwrap(),
                },
            }})
        );
        // Its only owner: the list goes (null removes it in a merge patch).
        let only = version_of(&ch, "bar");
        assert_eq!(
            orphan_patch(&only.metadata, &ch).unwrap()["metadata"]["ownerReferences"],
            Value::Null
        );
        // Not the channel's, or on its way out: not touched.
        let mut theirs = version_of(&ch, "baz");
        theirs.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
        assert_eq!(orphan_patch(&theirs.metadata, &ch), None);
        let mut going = version_of(&ch, "qux");
        going.metadata.deletion_timestamp = ch.metadata.deletion_timestamp.clone();
        assert_eq!(orphan_patch(&going.metadata, &ch), None);
    }

    #[test]
    fn only_versions_the_operator_orphaned_from_this_name_are_adopted() {
        let old = orphan_channel();
        let mut new = orphan_channel();
        new.metadata.uid = Some("new-uid".into());
        let mut orphaned = version_of(&old, "foo");
        orphaned.metadata.owner_references = None;
        orphaned
            .annotations_mut()
            .insert(ORPHANED_FROM_ANNOTATION.into(), old.uid().unwrap());
        assert!(adoptable(&orphaned, &new));
        assert!(marked_orphan(&orphaned));

        // The label alone is not enough.
        let mut labelled = orphaned.clone();
        labelled.annotations_mut().remove(ORPHANED_FROM_ANNOTATION);
        assert!(!adoptable(&labelled, &new));
        assert!(!marked_orphan(&labelled));
        // Orphaned from another channel name.
        let mut other_name = new.clone();
        other_name.metadata.name = Some("other".into());
        assert!(!adoptable(&orphaned, &other_name));
        // Controlled by a channel (even with the marks): never taken.
        let mut controlled = orphaned.clone();
        let mut other = orphan_channel();
        other.metadata.uid = Some("other-uid".into());
        controlled.metadata.owner_references = other.controller_owner_ref(&()).map(|r| vec![r]);
        assert!(!adoptable(&controlled, &new));
        // On its way out.
        let mut going = orphaned.clone();
        going.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(1).unwrap()));
        assert!(!adoptable(&going, &new));
    }

    #[test]
    fn a_sync_adopts_the_orphans_it_lists_and_nothing_else() {
        use crate::channel::ChannelVersion;
        use crate::syncer::Effect;
        use crate::syncer::tests::{arcs, existing_version};
        use crate::syncer::versions::{desired, plan, spec_of};
        let item = |name: &str| ChannelVersion {
            name: name.into(),
            labels: Default::default(),
            annotations: Default::default(),
            spec: spec_of(
                json!({"version": "v1", "type": "container", "metadata": {"upgradeImage": "x"}}),
            ),
        };
        let old = orphan_channel();
        let mut new = channel(json!({"type": "custom", "options": {"image": "i"}}));
        new.metadata.uid = Some("new-uid".into());
        let cfg = crate::config::resolve(&new.spec, &Default::default()).unwrap();
        let orphaned = |name: &str| {
            let mut v = existing_version(&old, desired(&old, &cfg, &item(name)));
            v.metadata.owner_references = None;
            let marks = v.annotations_mut();
            marks.insert(NO_LONGER_IN_SYNC_ANNOTATION.into(), "true".into());
            marks.insert(ORPHANED_FROM_ANNOTATION.into(), old.uid().unwrap());
            v
        };
        let existing = arcs(&[orphaned("listed"), orphaned("unlisted")]);
        let p = plan(&new, Some((&cfg, &[item("listed")])), &existing, true).unwrap();
        // Same content, still written: the apply sets the new owner reference (on the
        // version's uid), and the marks go.
        let kinds: Vec<String> = p.effects.iter().map(Effect::describe).collect();
        assert_eq!(kinds, ["apply version listed", "unflag version listed"]);
        let Effect::ApplyVersion { want, .. } = &p.effects[0] else {
            unreachable!()
        };
        assert_eq!(want.metadata.uid.as_deref(), Some("listed-uid"));
        assert_eq!(want.owner_references()[0].uid, "new-uid");
        assert_eq!((p.adopted, p.updated, p.deleted), (1, 0, 0));
        assert_eq!(p.summary(), "1 adopted");

        // Only the label: a conflict, as any version the channel does not control.
        let mut labelled = orphaned("listed");
        labelled.annotations_mut().remove(ORPHANED_FROM_ANNOTATION);
        let err = plan(
            &new,
            Some((&cfg, &[item("listed")])),
            &arcs(&[labelled]),
            false,
        )
        .unwrap_err();
        assert!(err.contains("not controlled by any channel"), "{err}");
    }
}
