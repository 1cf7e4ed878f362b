//! The manifest tree of one image walked from the top: blobs before the manifests that
//! name them, each skipped when DEST has it, mounted where the registry allows; and what
//! a run counts of it.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;

use crate::registry::{self, PullError};

use crate::commands::mirror::Mode;
use crate::commands::mirror::plan;
use crate::commands::mirror::store::{Loc, Store};

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

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
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

/// The most manifests deep a tree may go (an index of images: 2).
pub(super) const MAX_DEPTH: usize = 4;

pub(super) struct Walk<'w, 's> {
    pub(super) src: &'w Store<'s>,
    pub(super) dst: &'w Store<'s>,
    pub(super) from: &'w Loc,
    pub(super) to: &'w Loc,
    pub(super) mode: Mode,
    pub(super) stats: &'w Stats,
    pub(super) copied: &'w mut Copied,
    pub(super) depth: usize,
    /// Manifests and blobs this walk has been through: each once, however often an index
    /// repeats it.
    pub(super) seen: std::collections::HashSet<String>,
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
        if !self.seen.insert(digest.to_string()) {
            return Ok(());
        }
        let in_dest = self
            .dst
            .manifest_digest(self.to, digest)
            .await
            .map_err(fail)?
            .is_some();
        // A registry that has a manifest has all it names; a directory is judged by the
        // blobs themselves (one may have been lost or cut short since).
        if in_dest && !self.dst.is_dir() {
            return Ok(());
        }
        if !in_dest {
            self.lacks();
            if self.mode == Mode::Check {
                return Ok(());
            }
        }
        if self.depth >= MAX_DEPTH {
            return Err(format!(
                "{} nests manifests deeper than {MAX_DEPTH}",
                self.from.at(digest)
            ));
        }
        let registry::manifest::Contents { manifests, blobs } = registry::manifest::contents(body)
            .map_err(|e| format!("{}: {e}", self.from.at(digest)))?;
        for registry::manifest::Sized { digest: child, .. } in manifests {
            if self.seen.contains(&child) {
                continue;
            }
            // (from DEST where a directory has it whole: nothing asked of SOURCE)
            let local = if self.dst.is_dir() {
                self.dst.manifest(self.to, &child).await.map_err(fail)?
            } else {
                None
            };
            let (cbody, ctype) = match local {
                Some(found) => found,
                None => self
                    .src
                    .manifest(self.from, &child)
                    .await
                    .map_err(fail)?
                    .ok_or_else(|| format!("SOURCE has no manifest {}", self.from.at(&child)))?,
            };
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
        for registry::manifest::Sized { digest: blob, size } in blobs {
            if !self.seen.insert(blob.clone()) {
                continue;
            }
            if self.dst.has_blob(self.to, &blob).await.map_err(fail)? {
                self.stats.blobs_present.fetch_add(1, Ordering::Relaxed);
                self.stats.seen(self.to, &blob);
                continue;
            }
            self.lacks();
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
                    .blob(self.from, &blob, size)
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
        if self.mode == Mode::Copy && !in_dest {
            self.dst
                .put_manifest(self.to, digest, media_type, body, top)
                .await
                .map_err(fail)?;
        }
        Ok(())
    }

    /// DEST lacks something of this image: drift to `--check`, a copy otherwise.
    fn lacks(&mut self) {
        self.copied.state = match self.mode {
            Mode::Check => State::Missing,
            Mode::Copy | Mode::DryRun => State::Copied,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::mirror::layout::Layout;
    use futures::stream::BoxStream;
    use serde_json::json;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("walk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn once(body: &[u8]) -> BoxStream<'static, Result<bytes::Bytes, PullError>> {
        futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(body))]).boxed()
    }

    async fn put(l: &Layout, body: &[u8]) -> String {
        let digest = registry::sha256(body);
        l.put_blob(&digest, body.len() as u64, once(body))
            .await
            .unwrap();
        digest
    }

    /// An image (a config and a layer) in `l`: its manifest's bytes.
    async fn image(l: &Layout) -> Vec<u8> {
        let config = put(l, b"{}").await;
        let layer = put(l, b"a layer's bytes").await;
        json!({"schemaVersion": 2, "mediaType": registry::manifest::OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": 15}]})
        .to_string()
        .into_bytes()
    }

    fn loc() -> Loc {
        Loc {
            registry: "reg.io".into(),
            repository: "os".into(),
        }
    }

    fn copied() -> Copied {
        Copied {
            dest: String::new(),
            state: State::Present,
            blobs: 0,
            bytes: 0,
            rebuilt: false,
        }
    }

    async fn walk(src: &Layout, dst: &Layout, mode: Mode, top: &[u8]) -> (State, u64) {
        let (src, dst, at, stats) = (Store::Dir(src), Store::Dir(dst), loc(), Stats::default());
        let mut copied = copied();
        let mut w = Walk {
            src: &src,
            dst: &dst,
            from: &at,
            to: &at,
            mode,
            stats: &stats,
            copied: &mut copied,
            depth: 0,
            seen: Default::default(),
        };
        w.tree(
            &registry::sha256(top),
            top,
            registry::manifest::OCI_INDEX,
            true,
        )
        .await
        .unwrap();
        (copied.state, stats.blobs_sent.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn a_dry_run_reads_each_manifest_once_however_often_indexes_repeat_it() {
        let dir = scratch("repeats");
        let src = Layout::open(&dir.join("src"), true).unwrap();
        let mut body = image(&src).await;
        // Three indexes deep, each naming its child 8 times: 8^3 paths to one image.
        for _ in 0..3 {
            let child = put(&src, &body).await;
            let entry = json!({"mediaType": registry::manifest::OCI_MANIFEST, "digest": child, "size": body.len()});
            body = json!({"schemaVersion": 2, "mediaType": registry::manifest::OCI_INDEX,
                "manifests": vec![entry; 8]})
            .to_string()
            .into_bytes();
        }
        let dst = Layout::empty(&dir.join("dst"));
        let (state, blobs) = walk(&src, &dst, Mode::DryRun, &body).await;
        assert_eq!(state, State::Copied);
        assert_eq!(
            src.manifests_read(),
            3,
            "two indexes and the image, once each"
        );
        assert_eq!(blobs, 2, "the config and the layer, once each");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_directory_missing_or_cutting_short_a_blob_is_drift_and_a_copy_puts_it_back() {
        let dir = scratch("drift");
        let src = Layout::open(&dir.join("src"), true).unwrap();
        let manifest = image(&src).await;
        let child = put(&src, &manifest).await;
        let top = json!({"schemaVersion": 2, "mediaType": registry::manifest::OCI_INDEX,
            "manifests": [{"mediaType": registry::manifest::OCI_MANIFEST, "digest": child, "size": manifest.len()}]})
        .to_string()
        .into_bytes();
        let dst_dir = dir.join("dst");
        let dst = Layout::open(&dst_dir, true).unwrap();
        assert_eq!(walk(&src, &dst, Mode::Copy, &top).await.0, State::Copied);
        let blob = |d: &str| {
            dst_dir
                .join("blobs/sha256")
                .join(d.strip_prefix("sha256:").unwrap())
        };
        let config = registry::sha256(b"{}");
        let layer = registry::sha256(b"a layer's bytes");
        for damage in [
            Box::new(|p: &std::path::Path| std::fs::remove_file(p).unwrap())
                as Box<dyn Fn(&std::path::Path)>,
            Box::new(|p: &std::path::Path| std::fs::write(p, b"a layer").unwrap()),
        ] {
            for lost in [&config, &layer, &child] {
                damage(&blob(lost));
                // (a new run: nothing known of the directory yet)
                let dst = Layout::open(&dst_dir, false).unwrap();
                assert_eq!(
                    walk(&src, &dst, Mode::Check, &top).await.0,
                    State::Missing,
                    "{lost}"
                );
                let dst = Layout::open(&dst_dir, false).unwrap();
                assert_eq!(walk(&src, &dst, Mode::Copy, &top).await.0, State::Copied);
                let dst = Layout::open(&dst_dir, false).unwrap();
                assert_eq!(walk(&src, &dst, Mode::Check, &top).await.0, State::Present);
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
