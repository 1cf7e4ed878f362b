//! OCI 1.1 referrers (SBOMs, signatures, attestations that name an image as their
//! `subject`): read from SOURCE's referrers API, or from the referrers tag
//! (`sha256-<hex>`, an index) where a registry or a layout has no API; copied into DEST,
//! whose registry indexes them by their subject, or whose referrers tag is extended.
//! One level: the referrers of each image a channel names, not the referrers of those.
//!
//! A referrer is copied only when its manifest names the image as its `subject` (a
//! referrers tag is an index anyone could have written), and the entry DEST's referrers
//! tag gets is made from that manifest, as the distribution spec makes the referrers API's
//! (its media type, digest, size, `artifactType` and annotations), not copied from
//! SOURCE's listing; a referrer whose annotations pass [`MAX_ANNOTATIONS`] or
//! [`MAX_ANNOTATION_BYTES`] is not copied.

use crate::digest::DigestTag;
use crate::registry::manifest::{Annotations, Descriptor, Head, Index, OCI_INDEX};
use crate::registry::{self, PullError};

use crate::commands::mirror::Mode;
use crate::commands::mirror::store::{Loc, Store};
use crate::commands::mirror::walk::{State, Walk};

/// The most annotations a referrer's index entry carries.
pub const MAX_ANNOTATIONS: usize = 32;
/// The most bytes of a referrer's annotations (keys and values, as JSON).
pub const MAX_ANNOTATION_BYTES: usize = 8 << 10;

/// The descriptors of a referrers index, each naming a well-formed digest.
pub fn descriptors(index: &[u8]) -> Result<Vec<Descriptor>, String> {
    let index: Index = serde_json::from_slice(index)
        .map_err(|_| "a referrers index is not JSON, or not shaped as an index".to_string())?;
    index
        .manifests
        .into_iter()
        .map(|d| match registry::Algorithm::of(&d.digest) {
            Some(_) => Ok(d),
            None => Err(format!("a referrers index names the digest {:?}", d.digest)),
        })
        .collect()
}

/// The referrers index entry of the referrer manifest `body` (digest `digest`, media type
/// `media_type`) of the image `subject`: `Err` says why it is not one.
pub fn entry(
    subject: &str,
    digest: &str,
    media_type: &str,
    body: &[u8],
) -> Result<Descriptor, String> {
    let m: Head = serde_json::from_slice(body)
        .map_err(|_| "it is not JSON, or not shaped as a manifest".to_string())?;
    match m.subject {
        Some(s) if s.digest == subject => {}
        Some(s) => {
            return Err(format!(
                "its subject is {}, not the image",
                crate::text::head(&s.digest, 80)
            ));
        }
        None => return Err("it names no subject".into()),
    }
    let annotations = m.annotations.map(strings).transpose()?;
    if let Some(a) = &annotations {
        let bytes = serde_json::to_string(a).map_err(|e| e.to_string())?.len();
        if a.len() > MAX_ANNOTATIONS || bytes > MAX_ANNOTATION_BYTES {
            return Err(format!(
                "its {} annotations take {bytes} bytes (at most {MAX_ANNOTATIONS}, {MAX_ANNOTATION_BYTES} bytes)",
                a.len()
            ));
        }
    }
    Ok(Descriptor {
        media_type: media_type.into(),
        digest: digest.into(),
        size: body.len() as u64,
        // The manifest's own type, else its config's; an index without one has none.
        artifact_type: m
            .artifact_type
            .or_else(|| m.config.map(|c| c.media_type).filter(|t| !t.is_empty())),
        annotations,
        ..Descriptor::default()
    })
}

/// Annotations that are all strings, as the spec has them; others are refused, not
/// dropped one by one.
fn strings(map: serde_json::Map<String, serde_json::Value>) -> Result<Annotations, String> {
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(v) => Ok((k, v)),
            _ => Err("its annotations are not a map of strings".to_string()),
        })
        .collect()
}

/// Those of `wanted` that `have` does not list, by digest, in `wanted`'s order.
pub fn missing(wanted: &[Descriptor], have: &[Descriptor]) -> Vec<Descriptor> {
    let listed = |d: &Descriptor| have.iter().any(|h| h.digest == d.digest);
    wanted.iter().filter(|d| !listed(d)).cloned().collect()
}

/// The referrers tag's index with `add` appended (an existing index keeps its entries and
/// fields; none yet: a new one).
pub fn extend(existing: Option<&[u8]>, add: &[Descriptor]) -> Result<Vec<u8>, String> {
    let mut index = match existing {
        Some(body) => serde_json::from_slice::<Index>(body)
            .map_err(|_| "DEST's referrers tag is not JSON, or not an index".to_string())?,
        None => Index::new(Vec::new()),
    };
    for d in add {
        if !index.manifests.iter().any(|h| h.digest == d.digest) {
            index.manifests.push(d.clone());
        }
    }
    serde_json::to_vec(&index).map_err(|e| e.to_string())
}

/// The referrers a side lists for `digest`, and whether it has the API.
async fn listed(
    store: &Store<'_>,
    loc: &Loc,
    digest: &str,
) -> Result<(bool, Vec<Descriptor>), String> {
    let at = |e: String| format!("{}: {e}", loc.at(digest));
    let fail = |e: PullError| e.to_string();
    if let Some(index) = store.referrers(loc, digest).await.map_err(fail)? {
        return Ok((true, descriptors(&index).map_err(at)?));
    }
    match store
        .manifest(loc, &DigestTag::Referrers.of(digest))
        .await
        .map_err(fail)?
    {
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
    let mut added = Vec::with_capacity(missing.len());
    for d in &missing {
        let child = d.digest.as_str();
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
        match entry(digest, child, &media_type, &body) {
            Ok(e) => added.push(e),
            // Not this image's, or too much to list: left, and said.
            Err(why) => {
                eprintln!(
                    "warning: the referrer {} of {} is not copied: {why}",
                    walk.from.at(child),
                    walk.from.at(digest)
                );
                continue;
            }
        }
        walk.tree(child, &body, &media_type, false).await?;
    }
    if added.is_empty() {
        return Ok(());
    }
    match walk.mode {
        Mode::Check => walk.copied.state = State::Missing,
        Mode::DryRun => walk.copied.state = State::Copied,
        // A registry with the API indexed each one as it was stored.
        Mode::Copy if api => walk.copied.state = State::Copied,
        Mode::Copy => {
            let tag = DigestTag::Referrers.of(digest);
            let existing = walk.dst.manifest(walk.to, &tag).await.map_err(fail)?;
            let body = extend(existing.as_ref().map(|(b, _)| b.as_slice()), &added)?;
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
    use serde_json::{Value, json};

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

    fn referrer(subject: &str, annotations: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": B, "size": 2},
            "layers": [], "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": subject, "size": 9}, "annotations": annotations}))
        .unwrap()
    }

    #[test]
    fn a_referrer_must_name_the_image_as_its_subject() {
        let mt = "application/vnd.oci.image.manifest.v1+json";
        let body = referrer(A, json!({"org.example": "sbom"}));
        let e = entry(A, "sha256:cc", mt, &body).unwrap();
        assert_eq!(e.media_type, mt);
        assert_eq!(e.digest, "sha256:cc");
        assert_eq!(e.size, body.len() as u64);
        assert_eq!(
            e.artifact_type.as_deref(),
            Some("application/vnd.oci.empty.v1+json")
        );
        assert_eq!(e.annotations.unwrap()["org.example"], "sbom");
        let e = entry(B, "sha256:cc", mt, &body).unwrap_err();
        assert!(e.contains("its subject is sha256:aaaa"), "{e}");
        let e = entry(A, "sha256:cc", mt, br#"{"layers":[]}"#).unwrap_err();
        assert!(e.contains("names no subject"), "{e}");
    }

    #[test]
    fn a_referrers_annotations_are_its_own_and_bounded() {
        let mt = "application/vnd.oci.image.manifest.v1+json";
        let many: serde_json::Map<String, Value> = (0..=MAX_ANNOTATIONS)
            .map(|i| (format!("k{i}"), json!("v")))
            .collect();
        let e = entry(A, "sha256:cc", mt, &referrer(A, Value::Object(many))).unwrap_err();
        assert!(e.contains("33 annotations"), "{e}");
        let big = json!({"k": "x".repeat(MAX_ANNOTATION_BYTES)});
        assert!(entry(A, "sha256:cc", mt, &referrer(A, big)).is_err());
        let e = entry(A, "sha256:cc", mt, &referrer(A, json!({"k": 1}))).unwrap_err();
        assert!(e.contains("not a map of strings"), "{e}");
        // An artifact's own type wins over its config's.
        let mut m: Value = serde_json::from_slice(&referrer(A, json!({}))).unwrap();
        m["artifactType"] = json!("application/spdx+json");
        let e = entry(A, "sha256:cc", mt, &serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(e.artifact_type.as_deref(), Some("application/spdx+json"));
    }

    #[test]
    fn a_referrers_index_must_name_digests() {
        assert_eq!(descriptors(&index(&[A, B])).unwrap().len(), 2);
        assert!(descriptors(&index(&["latest"])).is_err());
        assert!(descriptors(b"<html>").is_err());
        assert!(descriptors(b"{}").unwrap().is_empty());
        assert!(descriptors(br#"{"manifests":null}"#).unwrap().is_empty());
    }

    #[test]
    fn only_what_dest_does_not_list_is_copied() {
        let wanted = descriptors(&index(&[A, B])).unwrap();
        let have = descriptors(&index(&[B])).unwrap();
        let m = missing(&wanted, &have);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].digest, A);
        assert!(missing(&wanted, &wanted).is_empty());
    }

    #[test]
    fn the_tag_keeps_what_it_listed_and_its_descriptors_whole() {
        let existing = index(&[B]);
        let add = descriptors(&index(&[A, B])).unwrap();
        let body = extend(Some(&existing), &add).unwrap();
        let out = descriptors(&body).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].digest, B);
        assert_eq!(
            out[1].artifact_type.as_deref(),
            Some("application/spdx+json")
        );
        let fresh = extend(None, &add[..1]).unwrap();
        let v: Value = serde_json::from_slice(&fresh).unwrap();
        assert_eq!(v["mediaType"], OCI_INDEX);
        assert_eq!(v["schemaVersion"], 2);
        assert_eq!(descriptors(&fresh).unwrap().len(), 1);
        // What the tag carries that the mirror does not read stays, in it and its entries.
        let odd = json!({"schemaVersion": 2, "x-index": [1], "manifests": [
            {"mediaType": "m", "digest": B, "size": 2, "data": "e30=",
             "annotations": {"a": "b"}}]});
        let body = extend(Some(&serde_json::to_vec(&odd).unwrap()), &add[..1]).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["x-index"], json!([1]));
        assert_eq!(v["manifests"][0], odd["manifests"][0]);
        assert_eq!(v["manifests"][1]["digest"], A);
        assert!(v.get("mediaType").is_none(), "{v}");
    }
}
