//! Which channel controls an object: the one question `versions` (what a sync may write),
//! `orphan` (what a deleted channel lets go) and the controller's writer of other objects
//! ask, in a room of its own so that none imports another for it; and how a name held by
//! someone else is said.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::ManagedOSVersionChannel;

/// Whether `channel` is the controller owner of the object `meta` describes.
pub fn controlled_by(meta: &ObjectMeta, channel: &ManagedOSVersionChannel) -> bool {
    let uid = channel.uid();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

/// A name held by an object this channel does not control, as the channel's status and
/// Events say it: `kind` is what the object is to the reader (`version`, `ConfigMap`).
pub fn conflict(kind: &str, meta: &ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or_default();
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match owner {
        Some(o) => format!(
            "{kind} {name:?} already exists and is controlled by {} {:?}",
            o.kind, o.name
        ),
        None => format!("{kind} {name:?} already exists and is not controlled by any channel"),
    }
}
