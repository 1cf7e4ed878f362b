//! One image copied: its manifest tree walked from the top, blobs before the manifests
//! that name them, its cosign tags and its OCI 1.1 referrers; then the channel artifact,
//! last.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;

use crate::config::{ImageRef, Reference};
use crate::registry::{self, PullError};

use super::Mode;
use super::plan::{self, Dest};
use super::store::{Loc, Store};

#[derive(Default)]
pub(super) struct Stats {
    pub(super) blobs_sent: AtomicU64,
    pub(super) bytes_sent: AtomicU64,
    pub(super) blobs_present: AtomicU64,
    pub(super) blobs_mounted: AtomicU64,
    /// Blob bytes sent so far, counted as they stream (the progress display's).
    pub(super) streamed: std::sync::Arc<AtomicU64>,
    /// Where in DEST a blob is known to be, by registry and digest: a repository to mount
    /// it from.
    known: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
}

impl Stats {
    fn seen(&self, loc: &Loc, digest: &str) {
        if let Ok(mut known) = self.known.lock() {
            known.insert(
                (loc.registry.clone(), digest.to_string()),
                loc.repository.clone(),
            );
        }
    }

    /// Another repository of `loc`'s registry known to hold `digest`.
    fn elsewhere(&self, loc: &Loc, digest: &str) -> Option<String> {
        let known = self.known.lock().ok()?;
        known
            .get(&(loc.registry.clone(), digest.to_string()))
            .filter(|r| **r != loc.repository)
            .cloned()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Sent now (or, in a dry run, would be).
    Copied,
    Present,
    /// `--check`: DEST lacks it.
    Missing,
}

impl State {
    pub(super) fn word(self) -> &'static str {
        match self {
            State::Copied => "copied",
            State::Present => "present",
            State::Missing => "missing",
        }
    }
}

pub(super) struct Copied {
    /// The reference the rewritten channel names: DEST's, pinned by digest.
    pub(super) dest: String,
    pub(super) state: State,
    pub(super) blobs: u64,
    pub(super) bytes: u64,
    /// The index was narrowed to `--platform`.
    pub(super) rebuilt: bool,
}

impl Copied {
    pub(super) fn detail(&self) -> String {
        let rebuilt = if self.rebuilt {
            " (index rebuilt for --platform; signatures of the original not copied)"
        } else {
            ""
        };
        if self.blobs == 0 {
            rebuilt.to_string()
        } else {
            format!(
                " ({} blobs, {}){rebuilt}",
                self.blobs,
                plan::size(self.bytes)
            )
        }
    }
}

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
    };
    walk.tree(&digest, &body, &media_type, true).await?;
    // (a rebuilt index has no signatures: they were over the original)
    let tags = if rebuilt {
        Vec::new()
    } else {
        plan::cosign_tags(&digest)
    };
    for tag in tags {
        let Some(signature) = src.manifest_digest(&from, &tag).await.map_err(fail)? else {
            continue;
        };
        let at_dest = dst.manifest_digest(&to, &tag).await.map_err(fail)?;
        if at_dest.as_deref() == Some(signature.as_str()) && !signature.is_empty() {
            continue;
        }
        let (body, media_type) = src
            .manifest(&from, &tag)
            .await
            .map_err(fail)?
            .ok_or_else(|| format!("SOURCE lost {} while it was read", from.at(&tag)))?;
        let sig_digest = registry::sha256(&body);
        walk.tree(&sig_digest, &body, &media_type, false).await?;
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
        super::referrers::copy(&mut walk, &digest).await?;
    }
    Ok(copied)
}

/// The most manifests deep a tree may go (an index of images: 2).
pub(super) const MAX_DEPTH: usize = 4;

pub(super) struct Walk<'w, 's> {
    pub(super) src: &'w Store<'s>,
    pub(super) dst: &'w Store<'s>,
    pub(super) from: &'w Loc,
    pub(super) to: &'w Loc,
    pub(super) mode: Mode,
    stats: &'w Stats,
    pub(super) copied: &'w mut Copied,
    depth: usize,
}

impl Walk<'_, '_> {
    /// One manifest (already read) and what it names; stored last, so that a manifest in
    /// DEST always has all it names there.
    pub(super) async fn tree(
        &mut self,
        digest: &str,
        body: &[u8],
        media_type: &str,
        top: bool,
    ) -> Result<(), String> {
        let fail = |e: PullError| e.to_string();
        if self
            .dst
            .manifest_digest(self.to, digest)
            .await
            .map_err(fail)?
            .is_some()
        {
            return Ok(());
        }
        if self.mode == Mode::Check {
            self.copied.state = State::Missing;
            return Ok(());
        }
        self.copied.state = State::Copied;
        if self.depth >= MAX_DEPTH {
            return Err(format!(
                "{} nests manifests deeper than {MAX_DEPTH}",
                self.from.at(digest)
            ));
        }
        let (manifests, blobs) =
            plan::children(body).map_err(|e| format!("{}: {e}", self.from.at(digest)))?;
        for (child, _) in manifests {
            let (cbody, ctype) = self
                .src
                .manifest(self.from, &child)
                .await
                .map_err(fail)?
                .ok_or_else(|| format!("SOURCE has no manifest {}", self.from.at(&child)))?;
            if registry::matches(&child, &cbody) != Some(true) {
                return Err(format!(
                    "the manifest {} is not what its digest names",
                    self.from.at(&child)
                ));
            }
            self.depth = self.depth.saturating_add(1);
            Box::pin(self.tree(&child, &cbody, &ctype, false)).await?;
            self.depth = self.depth.saturating_sub(1);
        }
        for (blob, size) in blobs {
            if self.dst.has_blob(self.to, &blob).await.map_err(fail)? {
                self.stats.blobs_present.fetch_add(1, Ordering::Relaxed);
                self.stats.seen(self.to, &blob);
                continue;
            }
            if self.mode == Mode::Copy {
                // From SOURCE's repository when both sides are one registry, else from a
                // repository of DEST's registry already known to hold it.
                let same = matches!(
                    (self.src, self.dst),
                    (Store::Registry(_), Store::Registry(_))
                ) && self.from.registry == self.to.registry;
                let from = if same {
                    Some(self.from.repository.clone())
                } else {
                    self.stats.elsewhere(self.to, &blob)
                };
                if let Some(from) = from
                    && self.dst.mount_blob(self.to, &blob, &from).await
                {
                    self.stats.blobs_mounted.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let streamed = self.stats.streamed.clone();
                let data = self
                    .src
                    .blob(self.from, &blob)
                    .await
                    .map_err(fail)?
                    .inspect(move |chunk| {
                        if let Ok(bytes) = chunk {
                            streamed.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        }
                    })
                    .boxed();
                self.dst
                    .put_blob(self.to, &blob, size, data)
                    .await
                    .map_err(|e| format!("blob {blob}: {e}"))?;
                self.stats.seen(self.to, &blob);
            }
            self.stats.blobs_sent.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_sent.fetch_add(size, Ordering::Relaxed);
            self.copied.blobs = self.copied.blobs.saturating_add(1);
            self.copied.bytes = self.copied.bytes.saturating_add(size);
        }
        if self.mode == Mode::Copy {
            self.dst
                .put_manifest(self.to, digest, media_type, body, top)
                .await
                .map_err(fail)?;
        }
        Ok(())
    }
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
    let (path, tag) = name
        .rsplit_once(':')
        .ok_or("a channel name without a tag")?;
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
    let current = match (dst, dest) {
        (Store::Dir(l), _) => l.channel().await.filter(|(n, _)| n == name).map(|(_, d)| d),
        _ => dst.manifest_digest(&loc, tag).await.map_err(fail)?,
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
