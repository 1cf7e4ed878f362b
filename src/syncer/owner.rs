//! Which channel controls a version: the one question both `versions` (what a sync may
//! write) and `orphan` (what a deleted channel lets go) ask, in a room of its own so that
//! neither imports the other for it.

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
