//! The one writer of the objects a channel owns besides its versions (`super::writer` is
//! the versions'): its syncer pod and its changelogs ConfigMap, and whatever comes later.
//! Every change keeps one rule:
//!
//! 1. read the object fresh (its metadata only);
//! 2. change it only while this channel is its controller (owner reference, by uid);
//! 3. write or delete it with that uid as a precondition, so that an object replaced
//!    meanwhile is left alone; create only what does not exist (a create-only apply).
//!
//! A name held by an object the channel does not control is a conflict ([`Done::Conflict`]),
//! said on the channel by the caller, never adopted. ConfigMaps are never deleted: the
//! garbage collector removes the channel's with the channel (its owner reference), and one
//! the channel no longer needs is emptied instead (so the operator holds no `delete` on
//! ConfigMaps).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::api::{CHANNEL_LABEL, ManagedOSVersionChannel};
use crate::channel::changelogs::Changelogs;
use crate::controller::io::errors::is_status;
use crate::controller::io::{Kind, ObjectIo};
use crate::metrics::Metrics;
use crate::syncer::versions::{conflict, controlled_by};

/// The resourceVersion of a create-only apply: no object has it, so an
/// apply carrying it creates, or fails with 409 when the name exists.
const CREATE_ONLY: &str = "1";

/// What a change of an owned object did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Written or deleted.
    Changed,
    /// Nothing to change: absent (for a delete or an emptying), or already gone.
    Nothing,
    /// The name now holds another object than the one decided on (another uid): left
    /// alone, it is not the one the decision was about.
    Replaced,
    /// The name is held by an object this channel does not control: left alone; the
    /// message says whose it is.
    Conflict(String),
}

/// The object of `kind` named `name`, as read fresh: absent, the channel's own, or
/// someone else's (and how that is said).
enum Holder {
    Nobody,
    /// The channel's own, with its uid.
    Channel(Option<String>),
    Other {
        uid: Option<String>,
        said: String,
    },
}

async fn holder(
    io: &impl ObjectIo,
    kind: Kind,
    namespace: &str,
    name: &str,
    channel: &ManagedOSVersionChannel,
) -> Result<Holder, kube::Error> {
    Ok(match io.read_meta(kind, namespace, name).await? {
        None => Holder::Nobody,
        Some(meta) if controlled_by(&meta, channel) => Holder::Channel(meta.uid),
        Some(meta) => Holder::Other {
            uid: meta.uid.clone(),
            said: conflict(kind.shown(), &meta),
        },
    })
}

/// Deletes the object `name` decided on (`uid`: as the decision saw it), only while the
/// channel controls it, with its uid as a precondition.
pub async fn delete(
    io: &impl ObjectIo,
    metrics: &Metrics,
    kind: Kind,
    namespace: &str,
    name: &str,
    uid: &str,
    channel: &ManagedOSVersionChannel,
) -> Result<Done, kube::Error> {
    match holder(io, kind, namespace, name, channel).await? {
        Holder::Nobody => Ok(Done::Nothing),
        Holder::Other { uid: theirs, .. } if theirs.as_deref() != Some(uid) => Ok(Done::Replaced),
        Holder::Other { said, .. } => Ok(Done::Conflict(said)),
        Holder::Channel(ours) if ours.as_deref() != Some(uid) => Ok(Done::Replaced),
        Holder::Channel(_) => {
            metrics.wrote(kind.delete_label());
            delete_exactly(io, kind, namespace, name, uid).await
        }
    }
}

async fn delete_exactly(
    io: &impl ObjectIo,
    kind: Kind,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<Done, kube::Error> {
    match io.delete_object(kind, namespace, name, uid).await {
        Ok(()) => Ok(Done::Changed),
        Err(e) if is_status(&e, 404) => Ok(Done::Nothing),
        // The uid precondition: replaced between the read and the delete.
        Err(e) if is_status(&e, 409) => Ok(Done::Replaced),
        Err(e) => Err(e),
    }
}

/// Stores the channel's changelogs in its ConfigMap `name` (`Some`), or empties that
/// ConfigMap when the image has none (`None`): created when absent, applied over the
/// channel's own with its uid as a precondition, a conflict when someone else's holds the
/// name. A ConfigMap of someone else's is no conflict when there is nothing to store.
pub async fn store_changelogs(
    io: &impl ObjectIo,
    metrics: &Metrics,
    channel: &ManagedOSVersionChannel,
    name: &str,
    files: Option<&Changelogs>,
) -> Result<Done, kube::Error> {
    let ns = channel.namespace().unwrap_or_default();
    let mut map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(CHANNEL_LABEL.into(), channel.name_any())])),
            owner_references: channel.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(files.map(|f| f.files.clone()).unwrap_or_default()),
        ..Default::default()
    };
    match (
        holder(io, Kind::ConfigMap, &ns, name, channel).await?,
        files,
    ) {
        (Holder::Other { said, .. }, Some(_)) => Ok(Done::Conflict(said)),
        (Holder::Nobody | Holder::Other { .. }, None) => Ok(Done::Nothing),
        (Holder::Nobody, Some(_)) => {
            map.metadata.resource_version = Some(CREATE_ONLY.into());
            metrics.wrote("apply_configmap");
            match io.apply_config_map(&ns, &map).await {
                Ok(()) => Ok(Done::Changed),
                Err(e) if is_status(&e, 409) => Ok(Done::Conflict(format!(
                    "{} {name:?} was created by someone else meanwhile",
                    Kind::ConfigMap.shown()
                ))),
                Err(e) => Err(e),
            }
        }
        (Holder::Channel(ours), _) => {
            map.metadata.uid = ours;
            metrics.wrote("apply_configmap");
            match io.apply_config_map(&ns, &map).await {
                Ok(()) => Ok(Done::Changed),
                Err(e) if is_status(&e, 409) => Ok(Done::Replaced),
                Err(e) => Err(e),
            }
        }
    }
}
