//! Unit tests of the walk, the plan and the stores over an in-memory registry: a
//! [`Remote`] that keeps manifests, tags and blobs in maps, refuses a manifest whose blobs
//! or children it lacks (as registries do), and records where every write went.

mod copying;
mod stores;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use futures::StreamExt;
use serde_json::json;

use crate::commands::mirror::store::{Bytes, Loc, Op, Remote};
use crate::registry::{self, PullError, manifest};

/// A map by repository (`registry/repository`) and a tag or digest.
type ByRepo<T> = Mutex<BTreeMap<(String, String), T>>;

/// A registry in memory (every host in one: keys are `registry/repository`).
#[derive(Default)]
pub(super) struct Memory {
    /// By repository and digest: the body and its media type.
    manifests: ByRepo<(Vec<u8>, String)>,
    /// By repository and tag: the digest.
    tags: ByRepo<String>,
    blobs: ByRepo<Vec<u8>>,
    /// The repository of every write, in order.
    pub(super) writes: Mutex<Vec<String>>,
}

impl Memory {
    pub(super) fn has_manifest(&self, repo: &str, digest: &str) -> bool {
        let key = (repo.to_string(), digest.to_string());
        self.manifests.lock().unwrap().contains_key(&key)
    }

    pub(super) fn has(&self, repo: &str, digest: &str) -> bool {
        let key = (repo.to_string(), digest.to_string());
        self.blobs.lock().unwrap().contains_key(&key)
    }

    pub(super) fn written(&self) -> BTreeSet<String> {
        self.writes.lock().unwrap().iter().cloned().collect()
    }

    /// Stores a blob directly (the test's setup, not recorded as a write).
    pub(super) fn seed_blob(&self, repo: &str, data: &[u8]) -> String {
        let digest = registry::sha256(data);
        let key = (repo.to_string(), digest.clone());
        self.blobs.lock().unwrap().insert(key, data.to_vec());
        digest
    }

    /// Stores a manifest directly under its digest and, if given, a tag.
    pub(super) fn seed_manifest(&self, repo: &str, body: &[u8], tag: Option<&str>) -> String {
        let digest = registry::sha256(body);
        let mt = registry::push::media_type(body, None);
        let key = (repo.to_string(), digest.clone());
        self.manifests
            .lock()
            .unwrap()
            .insert(key, (body.to_vec(), mt));
        if let Some(t) = tag {
            let key = (repo.to_string(), t.to_string());
            self.tags.lock().unwrap().insert(key, digest.clone());
        }
        digest
    }

    fn digest_of(&self, repo: &str, reference: &str) -> Option<String> {
        if reference.contains(':') {
            let key = (repo.to_string(), reference.to_string());
            return self
                .manifests
                .lock()
                .unwrap()
                .contains_key(&key)
                .then(|| reference.to_string());
        }
        let key = (repo.to_string(), reference.to_string());
        self.tags.lock().unwrap().get(&key).cloned()
    }

    fn wrote(&self, loc: &Loc) {
        self.writes.lock().unwrap().push(loc.name());
    }
}

fn ready<'a, T: 'a>(value: Result<T, PullError>) -> Op<'a, T> {
    Box::pin(async move { value })
}

impl Remote for Memory {
    fn manifest<'a>(
        &'a self,
        loc: &'a Loc,
        reference: &'a str,
    ) -> Op<'a, Option<(Vec<u8>, Option<String>)>> {
        let found = self.digest_of(&loc.name(), reference).and_then(|d| {
            let key = (loc.name(), d);
            let manifests = self.manifests.lock().unwrap();
            manifests
                .get(&key)
                .map(|(body, mt)| (body.clone(), Some(mt.clone())))
        });
        ready(Ok(found))
    }

    fn manifest_digest<'a>(&'a self, loc: &'a Loc, reference: &'a str) -> Op<'a, Option<String>> {
        ready(Ok(self.digest_of(&loc.name(), reference)))
    }

    fn referrers<'a>(&'a self, _: &'a Loc, _: &'a str) -> Op<'a, Option<Vec<u8>>> {
        ready(Ok(None))
    }

    fn has_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str) -> Op<'a, bool> {
        ready(Ok(self.has(&loc.name(), digest)))
    }

    fn blob<'a>(&'a self, loc: &'a Loc, digest: &'a str) -> Op<'a, Bytes> {
        let key = (loc.name(), digest.to_string());
        let found = self.blobs.lock().unwrap().get(&key).cloned();
        ready(match found {
            Some(b) => Ok(futures::stream::iter([Ok(bytes::Bytes::from(b))]).boxed()),
            None => Err(PullError::Status {
                what: format!("blob {digest}"),
                status: 404,
            }),
        })
    }

    fn put_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str, _: u64, data: Bytes) -> Op<'a, ()> {
        Box::pin(async move {
            let chunks: Vec<_> = data.collect().await;
            let mut body = Vec::new();
            for c in chunks {
                body.extend_from_slice(&c?);
            }
            if registry::sha256(&body) != digest {
                return Err(PullError::Bad(format!("blob {digest}: digest mismatch")));
            }
            self.wrote(loc);
            let key = (loc.name(), digest.to_string());
            self.blobs.lock().unwrap().insert(key, body);
            Ok(())
        })
    }

    fn mount_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str, from: &'a str) -> Op<'a, bool> {
        let source = (format!("{}/{from}", loc.registry), digest.to_string());
        let found = self.blobs.lock().unwrap().get(&source).cloned();
        if let Some(b) = &found {
            self.wrote(loc);
            let key = (loc.name(), digest.to_string());
            self.blobs.lock().unwrap().insert(key, b.clone());
        }
        ready(Ok(found.is_some()))
    }

    fn put_manifest<'a>(
        &'a self,
        loc: &'a Loc,
        reference: &'a str,
        media_type: &'a str,
        body: &'a [u8],
    ) -> Op<'a, ()> {
        let repo = loc.name();
        // What it names must be here first: its blobs, and an index's manifests.
        let named = match manifest::contents(body) {
            Ok(c) => c,
            Err(e) => return ready(Err(PullError::Bad(e))),
        };
        let lacking = named
            .manifests
            .iter()
            .find(|c| !self.has_manifest(&repo, &c.digest))
            .or_else(|| named.blobs.iter().find(|b| !self.has(&repo, &b.digest)));
        if let Some(d) = lacking {
            return ready(Err(PullError::Bad(format!("{repo}: {} unknown", d.digest))));
        }
        self.wrote(loc);
        let digest = registry::sha256(body);
        let key = (repo.clone(), digest.clone());
        self.manifests
            .lock()
            .unwrap()
            .insert(key, (body.to_vec(), media_type.to_string()));
        if !reference.contains(':') {
            let key = (repo, reference.to_string());
            self.tags.lock().unwrap().insert(key, digest);
        }
        ready(Ok(()))
    }

    fn blob_time(&self) -> Option<std::time::Duration> {
        None
    }
}

/// An image in `repo` of `mem` (its config and one layer, both told apart by `seed`): the
/// manifest's bytes, not stored yet.
pub(super) fn image(mem: &Memory, repo: &str, seed: &str) -> Vec<u8> {
    let config = format!("{{\"seed\":\"{seed}\"}}");
    let layer = format!("the layer of {seed}");
    let c = mem.seed_blob(repo, config.as_bytes());
    let l = mem.seed_blob(repo, layer.as_bytes());
    json!({"schemaVersion": 2, "mediaType": manifest::OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": l, "size": layer.len()}]})
    .to_string()
    .into_bytes()
}

/// An index of `children` (stored in `repo` of `mem`), one entry per platform.
pub(super) fn index(mem: &Memory, repo: &str, children: &[Vec<u8>]) -> Vec<u8> {
    let entries: Vec<_> = children
        .iter()
        .zip(["amd64", "arm64", "s390x", "ppc64le"])
        .map(|(body, arch)| {
            let d = mem.seed_manifest(repo, body, None);
            json!({"mediaType": manifest::OCI_MANIFEST, "digest": d, "size": body.len(),
                "platform": {"os": "linux", "architecture": arch}})
        })
        .collect();
    json!({"schemaVersion": 2, "mediaType": manifest::OCI_INDEX, "manifests": entries})
        .to_string()
        .into_bytes()
}

/// The digests of the config and layer of an image manifest made by [`image`].
pub(super) fn blobs_of(body: &[u8]) -> Vec<String> {
    let named = manifest::contents(body).unwrap();
    named.blobs.into_iter().map(|b| b.digest).collect()
}
