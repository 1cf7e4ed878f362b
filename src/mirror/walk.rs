//! The manifest tree of one image walked from the top: blobs before the manifests that
//! name them, each skipped when DEST has it, mounted where the registry allows; and what
//! a run counts of it.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;

use crate::registry::{self, PullError};

use super::Mode;
use super::plan;
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
