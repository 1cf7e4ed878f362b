//! OCI 1.1 referrers (SBOMs, signatures, attestations that name an image as their
//! `subject`): read from SOURCE's referrers API, or from the referrers tag
//! (`sha256-<hex>`, an index) where a registry or a layout has no API; copied into DEST,
//! whose registry indexes them by their subject, or whose referrers tag is extended.
//! One level: the referrers of each image a channel names, not the referrers of those.

use serde_json::{Value, json};

use crate::registry::{self, PullError, manifest::OCI_INDEX};

use super::Mode;
use super::store::{Loc, Store};
use super::walk::{State, Walk};

/// The referrers tag of `digest` (the distribution spec's fallback for registries without
/// the referrers API): `<algorithm>-<hex>`.
pub fn tag(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

/// The descriptors of a referrers index, each naming a well-formed digest.
pub fn descriptors(index: &[u8]) -> Result<Vec<Value>, String> {
    let v: Value =
        serde_json::from_slice(index).map_err(|_| "a referrers index is not JSON".to_string())?;
    v["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| match d["digest"].as_str() {
            Some(digest) if registry::Algorithm::of(digest).is_some() => Ok(d.clone()),
            other => Err(format!("a referrers index names the digest {other:?}")),
        })
        .collect()
}

/// Those of `wanted` that `have` does not list, by digest, in `wanted`'s order.
pub fn missing(wanted: &[Value], have: &[Value]) -> Vec<Value> {
    let listed = |d: &Value| have.iter().any(|h| h["digest"] == d["digest"]);
    wanted.iter().filter(|d| !listed(d)).cloned().collect()
}

/// The referrers tag's index with `add` appended (an existing index keeps its entries and
/// fields; none yet: a new one).
pub fn extend(existing: Option<&[u8]>, add: &[Value]) -> Result<Vec<u8>, String> {
    let mut index = match existing {
        Some(body) => serde_json::from_slice::<Value>(body)
            .map_err(|_| "DEST's referrers tag is not JSON".to_string())?,
        None => json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}),
    };
    if !index["manifests"].is_array() {
        index["manifests"] = json!([]);
    }
    if let Some(list) = index["manifests"].as_array_mut() {
        for d in add {
            if !list.iter().any(|h| h["digest"] == d["digest"]) {
                list.push(d.clone());
            }
        }
    }
    serde_json::to_vec(&index).map_err(|e| e.to_string())
}

/// The referrers a side lists for `digest`, and whether it has the API.
async fn listed(store: &Store<'_>, loc: &Loc, digest: &str) -> Result<(bool, Vec<Value>), String> {
    let at = |e: String| format!("{}: {e}", loc.at(digest));
    let fail = |e: PullError| e.to_string();
    if let Some(index) = store.referrers(loc, digest).await.map_err(fail)? {
        return Ok((true, descriptors(&index).map_err(at)?));
    }
    match store.manifest(loc, &tag(digest)).await.map_err(fail)? {
        Some((index, _)) => Ok((false, descriptors(&index).map_err(at)?)),
        None => Ok((false, Vec::new())),
    }
}

/// Copies the referrers of `digest` that DEST does not list yet: each manifest with what
/// it names (the walk's own rules: blobs first, skipped when there), then, where DEST has
/// no referrers API, its referrers tag.
pub(super) async fn copy(walk: &mut Walk<'_, '_>, digest: &str) -> Result<(), String> {
    let (_, wanted) = listed(walk.src, walk.from, digest).await?;
    if wanted.is_empty() {
        return Ok(());
    }
    let (api, have) = listed(walk.dst, walk.to, digest).await?;
    let missing = missing(&wanted, &have);
    if missing.is_empty() {
        return Ok(());
    }
    let fail = |e: PullError| e.to_string();
    for d in &missing {
        let child = d["digest"].as_str().unwrap_or_default();
        let (body, media_type) = walk
            .src
            .manifest(walk.from, child)
            .await
            .map_err(fail)?
            .ok_or_else(|| {
                format!(
                    "SOURCE lists {} but has no such manifest",
                    walk.from.at(child)
                )
            })?;
        if registry::matches(child, &body) != Some(true) {
            return Err(format!(
                "the manifest {} is not what its digest names",
                walk.from.at(child)
            ));
        }
        walk.tree(child, &body, &media_type, false).await?;
    }
    match walk.mode {
        Mode::Check => walk.copied.state = State::Missing,
        Mode::DryRun => walk.copied.state = State::Copied,
        // A registry with the API indexed each one as it was stored.
        Mode::Copy if api => walk.copied.state = State::Copied,
        Mode::Copy => {
            let tag = tag(digest);
            let existing = walk.dst.manifest(walk.to, &tag).await.map_err(fail)?;
            let body = extend(existing.as_ref().map(|(b, _)| b.as_slice()), &missing)?;
            walk.dst
                .put_manifest(walk.to, &tag, OCI_INDEX, &body, true)
                .await
                .map_err(fail)?;
            walk.copied.state = State::Copied;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn index(digests: &[&str]) -> Vec<u8> {
        let manifests: Vec<Value> = digests
            .iter()
            .map(|d| json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 2, "artifactType": "application/spdx+json"}))
            .collect();
        serde_json::to_vec(
            &json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}),
        )
        .unwrap()
    }

    #[test]
    fn the_referrers_tag_is_the_digest_with_a_dash() {
        assert_eq!(tag(A), format!("sha256-{}", &A[7..]));
    }

    #[test]
    fn a_referrers_index_must_name_digests() {
        assert_eq!(descriptors(&index(&[A, B])).unwrap().len(), 2);
        assert!(descriptors(&index(&["latest"])).is_err());
        assert!(descriptors(b"<html>").is_err());
        assert!(descriptors(b"{}").unwrap().is_empty());
    }

    #[test]
    fn only_what_dest_does_not_list_is_copied() {
        let wanted = descriptors(&index(&[A, B])).unwrap();
        let have = descriptors(&index(&[B])).unwrap();
        let m = missing(&wanted, &have);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["digest"], A);
        assert!(missing(&wanted, &wanted).is_empty());
    }

    #[test]
    fn the_tag_keeps_what_it_listed_and_its_descriptors_whole() {
        let existing = index(&[B]);
        let add = descriptors(&index(&[A, B])).unwrap();
        let body = extend(Some(&existing), &add).unwrap();
        let out = descriptors(&body).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["digest"], B);
        assert_eq!(out[1]["artifactType"], "application/spdx+json");
        let fresh = extend(None, &add[..1]).unwrap();
        let v: Value = serde_json::from_slice(&fresh).unwrap();
        assert_eq!(v["mediaType"], OCI_INDEX);
        assert_eq!(descriptors(&fresh).unwrap().len(), 1);
    }
}
