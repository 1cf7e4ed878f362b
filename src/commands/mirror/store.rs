//! The two sides of a mirror: registries (credentials from docker config files, plain
//! HTTP where the user said so) and layout directories, behind one set of operations.
//! A registry is a [`Remote`]: `Registries` speaks HTTP to real ones, the unit tests'
//! in-memory registry stands in for them.

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use futures::stream::BoxStream;

use crate::config::{ImageRef, Reference};
use crate::registry::{self, PullError, push};

use crate::commands::mirror::layout::Layout;

/// A blob's bytes, as they arrive.
pub(crate) type Bytes = BoxStream<'static, Result<bytes::Bytes, PullError>>;
/// One registry operation.
pub(crate) type Op<'a, T> = LocalBoxFuture<'a, Result<T, PullError>>;

/// The registry operations a mirror makes, each on one repository (`loc`): what the OCI
/// distribution protocol offers, nothing of how it is spoken.
pub(crate) trait Remote {
    /// A manifest by tag or digest, with the `Content-Type` it was served with.
    fn manifest<'a>(
        &'a self,
        loc: &'a Loc,
        reference: &'a str,
    ) -> Op<'a, Option<(Vec<u8>, Option<String>)>>;
    /// The digest `reference` names, if there is one.
    fn manifest_digest<'a>(&'a self, loc: &'a Loc, reference: &'a str) -> Op<'a, Option<String>>;
    /// The referrers API's index of `digest`; `None`: no such API.
    fn referrers<'a>(&'a self, loc: &'a Loc, digest: &'a str) -> Op<'a, Option<Vec<u8>>>;
    fn has_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str) -> Op<'a, bool>;
    fn blob<'a>(&'a self, loc: &'a Loc, digest: &'a str) -> Op<'a, Bytes>;
    fn put_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str, size: u64, data: Bytes) -> Op<'a, ()>;
    /// Takes `digest` into `loc` from the repository `from` of the same registry; whether
    /// the registry did.
    fn mount_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str, from: &'a str) -> Op<'a, bool>;
    fn put_manifest<'a>(
        &'a self,
        loc: &'a Loc,
        reference: &'a str,
        media_type: &'a str,
        body: &'a [u8],
    ) -> Op<'a, ()>;
    /// The most a blob may take in all (`--timeout`).
    fn blob_time(&self) -> Option<std::time::Duration>;
}

/// One side of the copy.
pub(crate) enum Store<'a> {
    Registry(&'a dyn Remote),
    Dir(&'a Layout),
}

/// A repository on a side: in a layout, its entries are named `registry/repository`.
#[derive(Clone, Debug)]
pub(crate) struct Loc {
    pub(super) registry: String,
    pub(super) repository: String,
}

impl Loc {
    pub(crate) fn of(image: &ImageRef) -> Loc {
        Loc {
            registry: image.registry.clone(),
            repository: image.repository.clone(),
        }
    }

    /// The repository `repository` goes to under a registry DEST's `prefix`
    /// (`host[:port][/path]`).
    pub(super) fn under(prefix: &str, repository: &str) -> Loc {
        let full = crate::commands::mirror::plan::dest_repo(prefix, repository);
        let (registry, repository) = full.split_once('/').unwrap_or((&full, ""));
        Loc {
            registry: registry.to_string(),
            repository: repository.to_string(),
        }
    }

    pub(super) fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// `name:tag` or `name@digest`.
    pub(super) fn at(&self, reference: &str) -> String {
        if reference.contains(':') {
            format!("{}@{reference}", self.name())
        } else {
            format!("{}:{reference}", self.name())
        }
    }

    pub(super) fn image(&self) -> ImageRef {
        ImageRef {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            reference: Reference::Tag("mirror".into()),
        }
    }
}

impl Store<'_> {
    /// A manifest by tag or digest, with the media type it is stored with.
    pub(super) async fn manifest(
        &self,
        loc: &Loc,
        reference: &str,
    ) -> Result<Option<(Vec<u8>, String)>, PullError> {
        let found = match self {
            Store::Registry(r) => r.manifest(loc, reference).await?,
            Store::Dir(l) => match l.resolve(&loc.at(reference)).await {
                Some(d) => l
                    .manifest(&d, registry::manifest::MAX_MANIFEST_BYTES)
                    .await?
                    .map(|b| (b, None)),
                None => None,
            },
        };
        Ok(found.map(|(body, ct)| {
            let mt = push::media_type(&body, ct.as_deref());
            (body, mt)
        }))
    }

    /// The digest `reference` names here, if there is one.
    pub(super) async fn manifest_digest(
        &self,
        loc: &Loc,
        reference: &str,
    ) -> Result<Option<String>, PullError> {
        match self {
            Store::Registry(r) => r.manifest_digest(loc, reference).await,
            Store::Dir(l) => Ok(l.resolve(&loc.at(reference)).await),
        }
    }

    /// The referrers API's index of `digest`; `None` where there is no such API (a
    /// registry without it, and every layout: both keep the referrers tag instead).
    pub(super) async fn referrers(
        &self,
        loc: &Loc,
        digest: &str,
    ) -> Result<Option<Vec<u8>>, PullError> {
        match self {
            Store::Registry(r) => r.referrers(loc, digest).await,
            Store::Dir(_) => Ok(None),
        }
    }

    pub(super) async fn has_blob(&self, loc: &Loc, digest: &str) -> Result<bool, PullError> {
        match self {
            Store::Registry(r) => r.has_blob(loc, digest).await,
            Store::Dir(l) => l.has_blob(digest).await,
        }
    }

    /// A directory: judged by its blobs, a manifest's included (a registry that has a
    /// manifest has all it names).
    pub(super) fn is_dir(&self) -> bool {
        matches!(self, Store::Dir(_))
    }

    /// A blob's bytes, bounded by its descriptor's `size` and, from a registry, by the
    /// run's `--timeout` in all.
    pub(super) async fn blob(
        &self,
        loc: &Loc,
        digest: &str,
        size: u64,
    ) -> Result<BoxStream<'static, Result<bytes::Bytes, PullError>>, PullError> {
        let (data, limit) = match self {
            Store::Registry(r) => (r.blob(loc, digest).await?, r.blob_time()),
            Store::Dir(l) => (l.blob(digest).await?, None),
        };
        Ok(bounded(data, digest, size, limit))
    }

    pub(super) async fn put_blob(
        &self,
        loc: &Loc,
        digest: &str,
        size: u64,
        data: BoxStream<'static, Result<bytes::Bytes, PullError>>,
    ) -> Result<(), PullError> {
        match self {
            Store::Registry(r) => r.put_blob(loc, digest, size, data).await,
            Store::Dir(l) => l.put_blob(digest, size, data).await,
        }
    }

    /// Takes `digest` into `loc` from the repository `from` of the same registry, where
    /// the registry allows; whether it did (a layout shares its blobs: never needed).
    pub(super) async fn mount_blob(&self, loc: &Loc, digest: &str, from: &str) -> bool {
        match self {
            Store::Registry(r) => r.mount_blob(loc, digest, from).await.unwrap_or(false),
            Store::Dir(_) => false,
        }
    }

    /// Stores a manifest under `reference`; in a layout, `named` adds an entry to
    /// `index.json` (an index's children are only blobs there).
    pub(super) async fn put_manifest(
        &self,
        loc: &Loc,
        reference: &str,
        media_type: &str,
        body: &[u8],
        named: bool,
    ) -> Result<(), PullError> {
        match self {
            Store::Registry(r) => r.put_manifest(loc, reference, media_type, body).await,
            Store::Dir(l) if named => {
                l.put_manifest(&loc.at(reference), media_type, body, false)
                    .await
            }
            Store::Dir(l) => {
                let digest = registry::sha256(body);
                if l.has_blob(&digest).await? {
                    return Ok(());
                }
                let data = futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(body))]).boxed();
                l.put_blob(&digest, body.len() as u64, data).await
            }
        }
    }
}

/// `data` cut off past `size` bytes (an error, the rest never read) and, with `limit`, once
/// that long has passed since it started.
pub(super) fn bounded(
    data: BoxStream<'static, Result<bytes::Bytes, PullError>>,
    digest: &str,
    size: u64,
    limit: Option<std::time::Duration>,
) -> BoxStream<'static, Result<bytes::Bytes, PullError>> {
    let deadline = limit.and_then(|l| tokio::time::Instant::now().checked_add(l));
    let digest = digest.to_string();
    futures::stream::unfold(Some((data, 0u64)), move |state| {
        let digest = digest.clone();
        async move {
            let (mut data, seen) = state?;
            let next = match deadline {
                Some(at) => match tokio::time::timeout_at(at, data.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let limit = crate::duration::format(limit.unwrap_or_default());
                        let e = PullError::Transport(format!(
                            "blob {digest} was not received within {limit} (--timeout)"
                        ));
                        return Some((Err(e), None));
                    }
                },
                None => data.next().await,
            };
            match next? {
                Err(e) => Some((Err(e), None)),
                Ok(chunk) => {
                    let seen = seen.saturating_add(chunk.len() as u64);
                    if seen > size {
                        let e = PullError::Bad(format!(
                            "blob {digest} is more than its descriptor's {size} bytes"
                        ));
                        return Some((Err(e), None));
                    }
                    Some((Ok(chunk), Some((data, seen))))
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_blob_stream_ends_at_its_size_and_its_time() {
        let pulled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = pulled.clone();
        // Endless: a body that never stops.
        let endless = futures::stream::repeat_with(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(bytes::Bytes::from_static(&[7u8; 1024]))
        })
        .boxed();
        let out: Vec<_> = bounded(endless, "sha256:aa", 3000, None).collect().await;
        assert_eq!(out.len(), 3, "two whole chunks and the error");
        let e = out.last().unwrap().as_ref().unwrap_err().to_string();
        assert!(e.contains("more than its descriptor's 3000 bytes"), "{e}");
        assert_eq!(pulled.load(std::sync::atomic::Ordering::Relaxed), 3);
        // One that never sends: ended by the total bound.
        let silent = futures::stream::pending().boxed();
        let out: Vec<_> = bounded(
            silent,
            "sha256:bb",
            10,
            Some(std::time::Duration::from_millis(50)),
        )
        .collect()
        .await;
        let e = out[0].as_ref().unwrap_err().to_string();
        assert!(e.contains("not received within"), "{e}");
    }
}
