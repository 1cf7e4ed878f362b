//! What `mirror` checks before it trusts SOURCE: `--verify-key` (a cosign public key) has
//! SOURCE's channel verified before anything is copied, by the check `spec.verify` makes
//! (`crate::cosign`); `--sign-key` signs only what was verified, unless
//! `--sign-unverified` says otherwise.
//!
//! A bundle (`--to dir:PATH`) made from a signed oci channel keeps the channel as it was
//! signed (its manifest, what it names, its `sha256-<hex>.sig` tag) beside the rewritten
//! channel. At the site, `dir:PATH --verify-key` checks that signature, reads the signed
//! channel's data, and accepts the bundle's channel only when it is that data with each
//! image pinned by digest in the same repository: an edit anywhere else is refused.

use std::collections::BTreeMap;
use std::path::Path;

use futures::TryStreamExt;
use serde_json::Value;

use crate::commands::mirror::MAX_DATA_BYTES;
use crate::commands::mirror::layout::Layout;
use crate::commands::mirror::plan::{Dest, Source};
use crate::commands::mirror::store::{Loc, Store};
use crate::config::{ImageRef, Platform, Reference};
use crate::cosign::{self, MAX_PAYLOAD_BYTES, PublicKey};
use crate::registry::layers::{self, Bounds, Found};
use crate::registry::manifest::{self, DATA_TYPES, MAX_MANIFEST_BYTES, Manifest};
use crate::registry::{self, PullError};

/// The most signatures of the channel a bundle is searched for (one per signed version
/// carried in it; the last listed first).
const MAX_SIGNED: usize = 16;
/// The most bytes of filesystem layers read to find the signed channel's file (as a pull
/// of SOURCE reads).
const MAX_LAYER_BYTES: u64 = 512 << 20;

/// `--sign-key` signs what SOURCE holds, so it needs SOURCE verified (`--verify-key`) or
/// the user's word that it need not be (`--sign-unverified`).
pub(super) fn signing(sign: bool, verify: bool, sign_unverified: bool) -> Result<(), String> {
    if sign && !verify && !sign_unverified {
        return Err("--sign-key would vouch for a SOURCE nothing checked: give --verify-key FILE (the key SOURCE's channel is signed with), or --sign-unverified to sign it unchecked".into());
    }
    Ok(())
}

/// What [`source`] found.
pub(super) struct Checked {
    /// The signed channel to keep in a layout DEST, beside the rewritten one.
    pub keep: Option<ImageRef>,
    /// What the user should know: what was verified, what a signature became.
    pub notes: Vec<String>,
}

/// SOURCE's channel as it was read.
pub(super) struct Read<'a> {
    pub source: &'a Source,
    /// An oci SOURCE's digest (which the read verified, given a key).
    pub digest: Option<&'a str>,
    /// A layout SOURCE, and its channel entry's name.
    pub layout: Option<(&'a Layout, &'a str)>,
    pub data: &'a [u8],
}

/// SOURCE's channel checked with `key` and, signed, kept for a layout DEST; `signing`:
/// `--sign-key` was given. `Err`: it did not verify.
pub(super) async fn source(
    read: Read<'_>,
    src: &Store<'_>,
    dest: &Dest,
    key: Option<&PublicKey>,
    signing: bool,
) -> Result<Checked, String> {
    let mut checked = Checked {
        keep: None,
        notes: Vec::new(),
    };
    match (read.source, read.digest, read.layout, key) {
        (Source::Oci(image), Some(digest), _, _) => {
            if key.is_some() {
                checked.notes.push(format!(
                    "the channel {image}@{digest} verified with --verify-key"
                ));
            }
            let parsed = ImageRef::parse(image)?;
            let tag = cosign::signature_tag(digest).map_err(|e| e.to_string())?;
            // (a signature tag that cannot be read is no signature to keep)
            let signed = matches!(
                src.manifest_digest(&Loc::of(&parsed), &tag).await,
                Ok(Some(_))
            );
            // A signature is over the data: the rewritten channel cannot carry the source's.
            match dest {
                Dest::Dir(d) if signed => {
                    checked.notes.push(format!(
                        "{image} is signed: the channel as signed and its signature are kept in {} beside the rewritten one (check them at the site with --verify-key)",
                        d.display()
                    ));
                    checked.keep = Some(ImageRef {
                        reference: Reference::Digest(digest.to_string()),
                        ..parsed
                    });
                }
                Dest::Registry(_) if signed && !signing => checked.notes.push(format!(
                    "{image} is signed; the rewritten channel cannot keep that signature (its data changed): sign it with --sign-key at the step that publishes to the site's registry"
                )),
                _ => {}
            }
        }
        (Source::Dir(d), _, Some((l, name)), Some(key)) => {
            let signed = bundle(l, d, name, read.data, key).await?;
            checked.notes.push(format!(
                "the channel of dir:{} verified with --verify-key: it is {signed}, signed, with its images pinned",
                d.display()
            ));
            if matches!(dest, Dest::Dir(_)) {
                checked.keep = Some(signed);
            }
        }
        _ => {}
    }
    Ok(checked)
}

/// The public key of `--verify-key FILE`.
pub(super) fn key(file: &Path) -> Result<PublicKey, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    PublicKey::from_pem(&text).map_err(|e| format!("--verify-key {}: {e}", file.display()))
}

/// The image `repository@digest` (`registry/path`, as a layout names its entries).
pub(super) fn signed_image(repository: &str, digest: &str) -> ImageRef {
    let (registry, repository) = repository.split_once('/').unwrap_or(("", repository));
    ImageRef {
        registry: registry.to_string(),
        repository: repository.to_string(),
        reference: Reference::Digest(digest.to_string()),
    }
}

/// Verifies the channel of the bundle `l` (its entry `name`, its data `data`) against
/// `key`; the signed channel it comes from (the image its signature names).
pub(super) async fn bundle(
    l: &Layout,
    dir: &Path,
    name: &str,
    data: &[u8],
    key: &PublicKey,
) -> Result<ImageRef, String> {
    // The channel is named by its repository path and tag; the signed channel kept beside
    // it, as every image, by its registry too.
    let path = name.rsplit_once(':').map_or(name, |(p, _)| p);
    let under = format!("/{path}");
    let entries = l.entries().await;
    let signed: Vec<(String, String, String)> = entries
        .iter()
        .rev()
        .filter_map(|(n, sig)| {
            let (repository, tag) = n.rsplit_once(':')?;
            let digest = crate::digest::DigestTag::Signature.digest_in(tag)?;
            (repository == path || repository.ends_with(&under))
                .then(|| (repository.to_string(), digest, sig.clone()))
        })
        .take(MAX_SIGNED)
        .collect();
    if signed.is_empty() {
        return Err(format!(
            "--verify-key: dir:{} carries no signature of its channel {name} (a bundle keeps one when its SOURCE was a signed oci channel)",
            dir.display()
        ));
    }
    let bundled: Value =
        serde_json::from_slice(data).map_err(|_| "the bundle's channel data is not JSON")?;
    let mut why = Vec::new();
    for (repository, digest, sig) in signed {
        match signed_by(l, &repository, &digest, &sig, key, &bundled).await {
            Ok(()) => return Ok(signed_image(&repository, &digest)),
            Err(e) => why.push(e),
        }
    }
    Err(format!(
        "--verify-key: the channel {name} in dir:{} is not one its signatures vouch for: {}",
        dir.display(),
        crate::text::list(&why, "; ")
    ))
}

/// Whether the signature manifest `sig` verifies `digest` with `key`, and the bundle's
/// channel `bundled` is that channel's data, pinned.
async fn signed_by(
    l: &Layout,
    path: &str,
    digest: &str,
    sig: &str,
    key: &PublicKey,
    bundled: &Value,
) -> Result<(), String> {
    let image = format!("{path}@{digest}");
    let read_err = |e: PullError| e.to_string();
    let manifest = l
        .manifest(sig, MAX_MANIFEST_BYTES)
        .await
        .map_err(read_err)?;
    let layers = cosign::to_read(digest, &image, manifest.as_deref()).map_err(|e| e.to_string())?;
    let mut read = Vec::with_capacity(layers.len());
    for layer in layers {
        let payload = l
            .manifest(&layer.payload_digest, MAX_PAYLOAD_BYTES)
            .await
            .map_err(read_err)?
            .ok_or_else(|| {
                format!(
                    "the bundle lacks the signature payload {}",
                    layer.payload_digest
                )
            })?;
        read.push((layer, payload));
    }
    cosign::verify_read(key, digest, read).map_err(|e| e.to_string())?;
    let original = signed_data(l, digest).await?;
    let original: Value = serde_json::from_slice(&original)
        .map_err(|_| format!("the data of {image} is not JSON"))?;
    derived(&original, bundled).map_err(|e| format!("{image} verified, but {e}"))
}

/// A manifest of the layout, checked against its digest.
async fn manifest_at(l: &Layout, digest: &str) -> Result<Vec<u8>, String> {
    let body = l
        .manifest(digest, MAX_MANIFEST_BYTES)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("the bundle lacks the manifest {digest}"))?;
    if registry::matches(digest, &body) != Some(true) {
        return Err(format!(
            "the manifest {digest} is not what its digest names"
        ));
    }
    Ok(body)
}

/// The channel data of the manifest `digest` in the layout, read as an oci channel reads
/// it: an artifact's data layer, or an image's `/channel.json`, layers top down (an index:
/// this machine's platform).
async fn signed_data(l: &Layout, digest: &str) -> Result<Vec<u8>, String> {
    let mut body = manifest_at(l, digest).await?;
    let layers = match manifest::parse(&body, None)? {
        Manifest::Image(layers) => layers,
        Manifest::Index(entries) => {
            let chosen = manifest::choose(&entries, &Platform::host())
                .ok_or_else(|| format!("{digest} lists no image for this platform"))?;
            body = manifest_at(l, &chosen.digest).await?;
            match manifest::parse(&body, None)? {
                Manifest::Image(layers) => layers,
                Manifest::Index(_) => return Err(format!("{digest} lists another index")),
            }
        }
    };
    if let Some(data) = layers
        .iter()
        .find(|d| DATA_TYPES.contains(&d.media_type.as_str()))
    {
        let bytes = l
            .manifest(&data.digest, MAX_DATA_BYTES)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("the bundle lacks the channel data {}", data.digest))?;
        if registry::matches(&data.digest, &bytes) != Some(true) {
            return Err(format!(
                "the blob {} is not what its digest names",
                data.digest
            ));
        }
        return Ok(bytes);
    }
    let mut bounds = Bounds {
        max_file: MAX_DATA_BYTES,
        layer_budget: MAX_LAYER_BYTES,
        layer_limit: MAX_LAYER_BYTES,
        changelogs: None,
    };
    for layer in layers.iter().rev() {
        let compression = manifest::compression(&layer.media_type)
            .ok_or_else(|| format!("layer {} is not a filesystem layer", layer.digest))?;
        let stream = l
            .blob(&layer.digest)
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| std::io::Error::other(e.to_string()));
        let blob = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
        let (digest, size) = (layer.digest.clone(), layer.size);
        // The search reads synchronously: off the runtime's threads.
        let (found, left) = tokio::task::spawn_blocking(move || {
            let found = layers::search(
                blob,
                compression,
                crate::config::DEFAULT_PATH,
                &digest,
                size,
                &mut bounds,
            );
            (found, bounds)
        })
        .await
        .map_err(|e| format!("reading a layer failed: {e}"))?;
        bounds = left;
        match found.map_err(|e| PullError::from(e).to_string())? {
            Found::File(data) => return Ok(data),
            Found::Gone => break,
            Found::Absent => {}
        }
    }
    Err(format!("{digest} holds no {}", crate::config::DEFAULT_PATH))
}

/// Whether `bundled` is `original` with each image pinned by digest in its own repository
/// (what `mirror --to dir:` writes): the same versions and fields, every other byte of
/// meaning the same.
pub(super) fn derived(original: &Value, bundled: &Value) -> Result<(), String> {
    use crate::channel::images::{images, rewrite};
    let (from, to) = (images(original), images(bundled));
    if from.len() != to.len() {
        return Err(format!(
            "the bundle's channel names {} images, the signed channel {}",
            to.len(),
            from.len()
        ));
    }
    let mut pinned: BTreeMap<String, String> = BTreeMap::new();
    for (o, b) in from.iter().zip(&to) {
        let at = || format!("version {} ({})", b.index, b.field);
        if (o.index, o.field) != (b.index, b.field) {
            return Err(format!("{} names no image in the signed channel", at()));
        }
        let oi = crate::commands::mirror::plan::image(&o.reference)
            .map_err(|e| format!("{}: {e}", at()))?;
        let bi = crate::commands::mirror::plan::image(&b.reference)
            .map_err(|e| format!("{}: {e}", at()))?;
        let Reference::Digest(d) = &bi.reference else {
            return Err(format!("{}: {} is not pinned by digest", at(), b.reference));
        };
        let moved = (&oi.registry, &oi.repository) != (&bi.registry, &bi.repository);
        let repinned = matches!(&oi.reference, Reference::Digest(od) if od != d);
        if moved || repinned {
            return Err(format!(
                "{}: {} is not the signed channel's {}",
                at(),
                b.reference,
                o.reference
            ));
        }
        if let Some(other) = pinned.insert(o.reference.clone(), b.reference.clone())
            && other != b.reference
        {
            return Err(format!("{} is pinned to two digests", o.reference));
        }
    }
    let mut expected = original.clone();
    rewrite(&mut expected, |f| pinned.get(&f.reference).cloned());
    if &expected != bundled {
        return Err("the bundle's channel differs from it in more than its pinned images".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sign_key_alone_is_refused_naming_both_ways_out() {
        let e = signing(true, false, false).unwrap_err();
        assert!(
            e.contains("--verify-key") && e.contains("--sign-unverified"),
            "{e}"
        );
        assert!(!e.contains('\n'), "one line: {e}");
        assert_eq!(signing(true, true, false), Ok(()));
        assert_eq!(signing(true, false, true), Ok(()));
        assert_eq!(signing(false, false, false), Ok(()));
        assert_eq!(signing(false, true, false), Ok(()));
    }

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn channel(images: &[&str]) -> Value {
        Value::Array(
            images
                .iter()
                .enumerate()
                .map(|(i, image)| {
                    json!({"metadata": {"name": format!("v{i}")},
                       "spec": {"type": "container", "metadata": {"upgradeImage": image}}})
                })
                .collect(),
        )
    }

    #[test]
    fn a_channel_with_its_images_pinned_in_place_is_derived() {
        let original = channel(&["reg.example/os:1.0", &format!("reg.example/os@{D2}")]);
        let bundled = channel(&[
            &format!("reg.example/os@{D1}"),
            &format!("reg.example/os@{D2}"),
        ]);
        assert_eq!(derived(&original, &bundled), Ok(()));
        assert_eq!(derived(&bundled, &bundled), Ok(()));
    }

    #[test]
    fn an_edited_bundle_is_not_derived() {
        let original = channel(&["reg.example/os:1.0"]);
        let pinned = format!("reg.example/os@{D1}");
        // Another repository, a tag left, another digest for a pinned image.
        for (bundled, says) in [
            (
                channel(&[&format!("evil.example/os@{D1}")]),
                "is not the signed",
            ),
            (channel(&["reg.example/os:1.0"]), "not pinned by digest"),
            (channel(&[&pinned, &pinned]), "names 2 images"),
        ] {
            let e = derived(&original, &bundled).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
        let by_digest = channel(&[&pinned]);
        let e = derived(&by_digest, &channel(&[&format!("reg.example/os@{D2}")])).unwrap_err();
        assert!(e.contains("is not the signed"), "{e}");
        // A field beside the images changed.
        let mut renamed = channel(&[&pinned]);
        renamed[0]["metadata"]["name"] = json!("v9");
        let e = derived(&original, &renamed).unwrap_err();
        assert!(e.contains("more than its pinned images"), "{e}");
        // One reference pinned to two digests.
        let twice = channel(&["reg.example/os:1.0", "reg.example/os:1.0"]);
        let split = channel(&[&pinned, &format!("reg.example/os@{D2}")]);
        let e = derived(&twice, &split).unwrap_err();
        assert!(e.contains("two digests"), "{e}");
    }

    #[test]
    fn a_signed_channel_is_named_by_its_registry_and_repository() {
        let image = signed_image("reg.example:5000/ns/channel", D1);
        assert_eq!(image.registry, "reg.example:5000");
        assert_eq!(image.repository, "ns/channel");
        assert_eq!(image.reference, Reference::Digest(D1.into()));
    }
}
