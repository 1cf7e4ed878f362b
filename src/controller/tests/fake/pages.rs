//! The fake's list of a channel's versions by label, in pages.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::ManagedOSVersion;
use crate::controller::tests::fake::Key;

/// One page of the versions labelled with `key`'s channel. Pages of two, so that the
/// finalizer's paging is exercised: the token is the index of the page's first entry.
pub(in crate::controller) fn page(
    versions: &HashMap<Key, ManagedOSVersion>,
    key: &Key,
    continue_token: Option<String>,
) -> (Vec<ObjectMeta>, Option<String>) {
    const PAGE: usize = 2;
    let start: usize = continue_token.and_then(|t| t.parse().ok()).unwrap_or(0);
    let mut all: Vec<ObjectMeta> = versions
        .iter()
        .filter(|(k, v)| {
            k.namespace == key.namespace
                && v.labels().get(crate::api::CHANNEL_LABEL) == Some(&key.name)
        })
        .map(|(_, v)| v.metadata.clone())
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let end = start.saturating_add(PAGE).min(all.len());
    let next = (end < all.len()).then(|| end.to_string());
    (all.get(start..end).unwrap_or_default().to_vec(), next)
}
