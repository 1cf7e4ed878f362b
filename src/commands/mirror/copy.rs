//! One image copied: its manifest tree walked from the top, blobs before the manifests
//! that name them, its cosign tags and its OCI 1.1 referrers; then the channel artifact,
//! last.

use futures::StreamExt;

use crate::config::{ImageRef, Reference};
use crate::registry::{self, PullError};

use crate::commands::mirror::Mode;
use crate::commands::mirror::plan::{self, Dest};
use crate::commands::mirror::store::{Loc, Store};
use crate::commands::mirror::walk::{Copied, State, Stats, Walk};

/// Copies one image (its manifest tree, then its cosign tags); in a dry run or a check,
/// only says what is missing.
pub(super) async fn copy_image(
    src: &Store<'_>,
    dst: &Store<'_>,
    dest: &Dest,
    image: &ImageRef,
    mode: Mode,
    stats: &Stats,
    platforms: &[crate::config::Platform],
) -> Result<Copied, String> {
    let from = Loc::of(image);
    let to = match dest {
        Dest::Registry(prefix) => Loc::under(prefix, &image.repository),
        Dest::Dir(_) => from.clone(),
    };
    let fail = |e: PullError| e.to_string();
    let (body, media_type) = src
        .manifest(&from, image.reference())
        .await
        .map_err(fail)?
        .ok_or_else(|| format!("SOURCE has no manifest {}", from.at(image.reference())))?;
    let digest = registry::sha256(&body);
    if let Reference::Digest(d) = &image.reference
        && registry::matches(d, &body) != Some(true)
    {
        return Err(format!(
            "the manifest {} is not what its digest names",
            from.at(d)
        ));
    }
    // `--platform`: an index narrowed to those platforms is another index, of its own digest.
    let narrowed = if platforms.is_empty() {
        None
    } else {
        plan::narrow_index(&body, Some(&media_type), platforms)
            .map_err(|e| format!("{}: {e}", from.at(image.reference())))?
    };
    let rebuilt = narrowed.is_some();
    let (body, digest) = match narrowed {
        Some(n) => {
            let d = registry::sha256(&n);
            (n, d)
        }
        None => (body, digest),
    };
    let mut copied = Copied {
        rebuilt,
        dest: match dest {
            Dest::Registry(prefix) => plan::dest_reference(prefix, image, &digest),
            Dest::Dir(_) => to.at(&digest),
        },
        state: State::Present,
        blobs: 0,
        bytes: 0,
    };
    let mut walk = Walk {
        src,
        dst,
        from: &from,
        to: &to,
        mode,
        stats,
        copied: &mut copied,
        depth: 0,
        seen: Default::default(),
    };
    walk.tree(&digest, &body, &media_type, true).await?;
    // (a rebuilt index has no signatures: they were over the original)
    let tags = if rebuilt {
        Vec::new()
    } else {
        crate::digest::DigestTag::COSIGN
            .map(|t| t.of(&digest))
            .to_vec()
    };
    for tag in tags {
        let Some(signature) = src.manifest_digest(&from, &tag).await.map_err(fail)? else {
            continue;
        };
        let at_dest = dst.manifest_digest(&to, &tag).await.map_err(fail)?;
        let same = at_dest.as_deref() == Some(signature.as_str()) && !signature.is_empty();
        // (a directory's signature is walked still: its blobs may have been lost since)
        if same && !dst.is_dir() {
            continue;
        }
        let local = match same {
            true => dst
                .manifest(&to, &tag)
                .await
                .map_err(fail)?
                .filter(|(b, _)| registry::matches(&signature, b) == Some(true)),
            false => None,
        };
        let (body, media_type) = match local {
            Some(found) => found,
            None => src
                .manifest(&from, &tag)
                .await
                .map_err(fail)?
                .ok_or_else(|| format!("SOURCE lost {} while it was read", from.at(&tag)))?,
        };
        let sig_digest = registry::sha256(&body);
        walk.tree(&sig_digest, &body, &media_type, false).await?;
        if same {
            continue;
        }
        match mode {
            Mode::Copy => dst
                .put_manifest(&to, &tag, &media_type, &body, true)
                .await
                .map_err(fail)?,
            Mode::Check => walk.copied.state = State::Missing,
            Mode::DryRun => walk.copied.state = State::Copied,
        }
    }
    if !rebuilt {
        crate::commands::mirror::referrers::copy(&mut walk, &digest).await?;
    }
    Ok(copied)
}

/// Pushes the rewritten channel as an artifact (blobs, then the manifest under its tag);
/// its reference in DEST and whether it was there already.
pub(super) async fn publish(
    dst: &Store<'_>,
    dest: &Dest,
    name: &str,
    data: &[u8],
    mode: Mode,
    sign: Option<&crate::cosign::sign::SigningKey>,
) -> Result<(String, State), String> {
    // (checked again here: every write lands under DEST's prefix)
    let (path, tag) =
        crate::reference::path_and_tag(name).map_err(|e| format!("the channel's name: {e}"))?;
    let loc = match dest {
        Dest::Registry(prefix) => Loc::under(prefix, path),
        // In a layout, the channel's entry is named `path:tag`.
        Dest::Dir(_) => {
            let (registry, repository) = path.split_once('/').unwrap_or(("", path));
            Loc {
                registry: registry.into(),
                repository: repository.into(),
            }
        }
    };
    let manifest = plan::artifact(data);
    let digest = registry::sha256(&manifest);
    let shown = match dest {
        Dest::Registry(_) => format!("{}:{tag}", loc.name()),
        Dest::Dir(d) => format!("dir:{}:{name}", d.display()),
    };
    let fail = |e: PullError| e.to_string();
    let current = match dst {
        // (a directory's channel is there when its three blobs are, whole)
        Store::Dir(l) => {
            let named = l.channel().await.ok().flatten();
            let mut whole = named.is_some_and(|(n, d)| n == name && d == digest);
            for blob in [
                digest.clone(),
                registry::sha256(plan::EMPTY),
                registry::sha256(data),
            ] {
                whole = whole && l.has_blob(&blob).await.map_err(fail)?;
            }
            whole.then(|| digest.clone())
        }
        Store::Registry(_) => dst.manifest_digest(&loc, tag).await.map_err(fail)?,
    };
    // Signed: the signature goes in before the channel's tag moves (ECDSA signatures differ
    // each time, so one found is kept).
    let sig_tag = crate::cosign::signature_tag(&digest).map_err(|e| e.to_string())?;
    let unsigned = match sign {
        Some(_) => dst
            .manifest_digest(&loc, &sig_tag)
            .await
            .map_err(fail)?
            .is_none(),
        None => false,
    };
    if current.as_deref() == Some(digest.as_str()) && !unsigned {
        return Ok((shown, State::Present));
    }
    match mode {
        Mode::Check => return Ok((shown, State::Missing)),
        Mode::DryRun => return Ok((shown, State::Copied)),
        Mode::Copy => {}
    }
    let put = async |blob: &[u8]| -> Result<(), String> {
        let digest = registry::sha256(blob);
        if !dst.has_blob(&loc, &digest).await.map_err(fail)? {
            let stream = futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(blob))]).boxed();
            dst.put_blob(&loc, &digest, blob.len() as u64, stream)
                .await
                .map_err(fail)?;
        }
        Ok(())
    };
    put(plan::EMPTY).await?;
    put(data).await?;
    if let Some(key) = sign
        && unsigned
    {
        let signed = key.sign(&loc.name(), &digest)?;
        put(&signed.config).await?;
        put(&signed.payload).await?;
        dst.put_manifest(
            &loc,
            &sig_tag,
            registry::manifest::OCI_MANIFEST,
            &signed.manifest,
            true,
        )
        .await
        .map_err(fail)?;
    }
    match dst {
        Store::Dir(l) => l
            .put_manifest(name, registry::manifest::OCI_MANIFEST, &manifest, true)
            .await
            .map_err(fail)?,
        Store::Registry(_) => dst
            .put_manifest(&loc, tag, registry::manifest::OCI_MANIFEST, &manifest, true)
            .await
            .map_err(fail)?,
    }
    Ok((shown, State::Copied))
}
