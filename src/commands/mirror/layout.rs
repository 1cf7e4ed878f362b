//! An OCI image layout directory (`dir:PATH`) as `mirror`'s source or destination: blobs
//! under `blobs/sha256/`, and `index.json` naming each image copied by its original
//! reference (`org.opencontainers.image.ref.name`: `registry/repository@digest`, or
//! `:tag` for signature tags and the channel). A blob is written to a temporary file,
//! checked against its digest and renamed into place, and `index.json` is replaced whole,
//! so a run killed at any point leaves a layout that a next run completes.
//!
//! A directory is carried in from elsewhere and trusted for nothing: no write or read
//! follows a symlink (a temporary file is made new, under a name no one can guess, and
//! renamed over whatever held the name; a symlinked `blobs/` is refused), every read is
//! bounded as it is read, and a blob counts as present only when its bytes hash to its
//! digest.

use std::collections::HashSet;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::registry::PullError;

/// The largest `index.json` read (some 40,000 entries).
pub const MAX_INDEX_BYTES: u64 = 16 << 20;

/// The annotation naming an image in `index.json`.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The annotation marking the channel's entry.
pub const CHANNEL: &str = "io.rancheros.mirror.channel";

pub struct Layout {
    dir: PathBuf,
    /// `index.json`'s entries, written back after each change (one writer at a time).
    index: tokio::sync::Mutex<Vec<Value>>,
    /// Blobs this run hashed whole or wrote: not hashed again.
    verified: std::sync::Mutex<HashSet<String>>,
    /// Manifests read (a walk reads each digest once).
    reads: AtomicU64,
}

/// Opens `path` for reading without following a symlink, and only a regular file (a FIFO
/// or a device would block or never end).
fn open_read(path: &Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// What a bounded read found.
enum Read {
    Missing,
    Bytes(Vec<u8>),
    /// More than the bound.
    TooBig,
}

/// A file's bytes, at most `max` (counted as read, not from its size: a size can lie).
fn read_bounded(path: &Path, max: u64) -> Result<Read, String> {
    let file = match open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Missing),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > max {
        return Ok(Read::TooBig);
    }
    Ok(Read::Bytes(bytes))
}

/// A new file in `dir` named after `stem` and a random suffix (`STEM.partial-HEX`), made
/// new (never an existing name, nor through a symlink).
fn create_temp(dir: &Path, stem: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    use ring::rand::SecureRandom;
    let mut noise = [0u8; 12];
    ring::rand::SystemRandom::new()
        .fill(&mut noise)
        .map_err(|_| std::io::Error::other("no randomness for a temporary name"))?;
    let hex: String = noise.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("{stem}.partial-{hex}"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    Ok((path, file))
}

/// Replaces `dir/name` with `bytes` whole (a temporary file renamed over it: a symlink
/// that held the name is replaced, not followed).
fn replace(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let (tmp, mut file) = create_temp(dir, name)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| std::fs::rename(&tmp, dir.join(name)));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

/// `path` is a directory itself, not a symlink to one.
fn real_dir(path: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "{} is not a directory (a symlink is refused)",
            path.display()
        )),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

impl Layout {
    /// Opens the layout at `dir`, made when `create` and it does not exist.
    pub fn open(dir: &Path, create: bool) -> Result<Layout, String> {
        let index_path = dir.join("index.json");
        let exists = std::fs::symlink_metadata(&index_path).is_ok();
        if !exists && !create {
            return Err(format!(
                "{} is not an OCI image layout (no index.json)",
                dir.display()
            ));
        }
        if create {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        // Every blob is reached through these two: neither may lead elsewhere (each
        // checked before anything is made inside it).
        for sub in ["blobs", "blobs/sha256"] {
            let path = dir.join(sub);
            if create {
                match std::fs::create_dir(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(format!("cannot create {}: {e}", path.display()));
                    }
                    _ => {}
                }
            }
            match std::fs::symlink_metadata(&path) {
                Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => break,
                _ => real_dir(&path)?,
            }
        }
        if !exists {
            replace(dir, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)
                .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
        }
        let entries = match read_bounded(&index_path, MAX_INDEX_BYTES)? {
            Read::TooBig => {
                return Err(format!(
                    "{} is more than {} MiB",
                    index_path.display(),
                    MAX_INDEX_BYTES >> 20
                ));
            }
            Read::Bytes(bytes) => serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v["manifests"].as_array().cloned())
                .ok_or_else(|| format!("{} is not an image index", index_path.display()))?,
            Read::Missing => Vec::new(),
        };
        Ok(Layout {
            dir: dir.to_path_buf(),
            index: tokio::sync::Mutex::new(entries),
            verified: Default::default(),
            reads: AtomicU64::new(0),
        })
    }

    /// A layout with nothing in it, not written (what a dry run or a check compares with
    /// when DEST does not exist yet).
    pub fn empty(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_path_buf(),
            index: tokio::sync::Mutex::new(Vec::new()),
            verified: Default::default(),
            reads: AtomicU64::new(0),
        }
    }

    /// Manifests read from this layout so far.
    pub fn manifests_read(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf, PullError> {
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| PullError::Bad(format!("{digest} is not a sha256 digest")))?;
        Ok(self.dir.join("blobs/sha256").join(hex))
    }

    /// Whether the layout holds `digest` whole: a regular file whose bytes hash to it
    /// (hashed once a run). A missing, truncated or altered blob, or a symlink, is not
    /// there, and a copy puts it back.
    pub async fn has_blob(&self, digest: &str) -> Result<bool, PullError> {
        let path = self.blob_path(digest)?;
        if self.verified.lock().is_ok_and(|v| v.contains(digest)) {
            return Ok(true);
        }
        let expected = digest.to_string();
        let whole = tokio::task::spawn_blocking(move || -> bool {
            let Ok(mut file) = open_read(&path) else {
                return false;
            };
            let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
            let mut buf = vec![0u8; 256 << 10];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => hash.update(buf.get(..n).unwrap_or_default()),
                    Err(_) => return false,
                }
            }
            crate::registry::Algorithm::Sha256.name(&hash.finish()) == expected
        })
        .await
        .unwrap_or(false);
        if whole && let Ok(mut v) = self.verified.lock() {
            v.insert(digest.to_string());
        }
        Ok(whole)
    }

    /// The digest the entry `name` (`registry/repository:tag` or `@digest`) points to.
    pub async fn resolve(&self, name: &str) -> Option<String> {
        if let Some((_, digest)) = name.rsplit_once('@') {
            return self
                .has_blob(digest)
                .await
                .ok()?
                .then(|| digest.to_string());
        }
        let index = self.index.lock().await;
        index
            .iter()
            .find(|e| e["annotations"][REF_NAME] == name)
            .and_then(|e| e["digest"].as_str())
            .map(str::to_string)
    }

    /// The channel's entry: its name (`path:tag`, checked as a reference's parts are: a
    /// name from a carried-in directory names where the channel goes) and digest.
    pub async fn channel(&self) -> Result<Option<(String, String)>, String> {
        let index = self.index.lock().await;
        let Some(entry) = index.iter().find(|e| e["annotations"][CHANNEL] == "true") else {
            return Ok(None);
        };
        let name = entry["annotations"][REF_NAME].as_str().unwrap_or_default();
        crate::reference::path_and_tag(name).map_err(|e| {
            format!(
                "the channel's entry in {} is not named path:tag: {e}",
                self.dir.join("index.json").display()
            )
        })?;
        let digest = entry["digest"].as_str().unwrap_or_default();
        Ok(Some((name.to_string(), digest.to_string())))
    }

    /// Every named entry: its name and digest (`mirror --verify-key` looks for the
    /// signatures a bundle carries among them).
    pub async fn entries(&self) -> Vec<(String, String)> {
        let index = self.index.lock().await;
        index
            .iter()
            .filter_map(|e| {
                Some((
                    e["annotations"][REF_NAME].as_str()?.to_string(),
                    e["digest"].as_str()?.to_string(),
                ))
            })
            .collect()
    }

    /// A manifest blob, at most `max` bytes (counted as read).
    pub async fn manifest(&self, digest: &str, max: u64) -> Result<Option<Vec<u8>>, PullError> {
        let path = self.blob_path(digest)?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        let read = tokio::task::spawn_blocking(move || read_bounded(&path, max))
            .await
            .map_err(|e| PullError::Bad(e.to_string()))?;
        match read.map_err(PullError::Bad)? {
            Read::Missing => Ok(None),
            Read::Bytes(b) => Ok(Some(b)),
            Read::TooBig => Err(PullError::Bad(format!(
                "the manifest {digest} in the layout is more than {max} bytes"
            ))),
        }
    }

    /// A blob's bytes as a stream (bounded by its descriptor's size by the caller).
    pub async fn blob(
        &self,
        digest: &str,
    ) -> Result<BoxStream<'static, Result<bytes::Bytes, PullError>>, PullError> {
        let path = self.blob_path(digest)?;
        let file = open_read(&path)
            .map_err(|e| PullError::Bad(format!("cannot read {}: {e}", path.display())))?;
        Ok(
            tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file))
                .map(|c| c.map_err(|e| PullError::Transport(format!("reading the layout: {e}"))))
                .boxed(),
        )
    }

    /// Writes a blob of `size` bytes from `data`, checked against `digest` before it takes
    /// its place; more bytes than `size` stop the write there.
    pub async fn put_blob(
        &self,
        digest: &str,
        size: u64,
        mut data: BoxStream<'static, Result<bytes::Bytes, PullError>>,
    ) -> Result<(), PullError> {
        let path = self.blob_path(digest)?;
        let dir = self.dir.join("blobs/sha256");
        let stem = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let (tmp, file) = create_temp(&dir, &stem)
            .map_err(|e| PullError::Bad(format!("writing {}: {e}", path.display())))?;
        let io = |e: std::io::Error| PullError::Bad(format!("writing {}: {e}", tmp.display()));
        let mut file = tokio::fs::File::from_std(file);
        let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
        let mut seen: u64 = 0;
        let written = async {
            while let Some(chunk) = data.next().await {
                let chunk = chunk?;
                seen = seen.saturating_add(chunk.len() as u64);
                if seen > size {
                    return Err(PullError::Bad(format!(
                        "blob {digest} is more than its descriptor's {size} bytes"
                    )));
                }
                hash.update(&chunk);
                file.write_all(&chunk).await.map_err(io)?;
            }
            file.flush().await.map_err(io)?;
            file.sync_all().await.map_err(io)
        }
        .await;
        let actual = crate::registry::Algorithm::Sha256.name(&hash.finish());
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e);
        }
        if actual != digest {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(PullError::Bad(format!(
                "blob {digest}: the bytes received are {actual}"
            )));
        }
        tokio::fs::rename(&tmp, &path)
            .await
            .map_err(|e| PullError::Bad(format!("writing {}: {e}", path.display())))?;
        if let Ok(mut v) = self.verified.lock() {
            v.insert(digest.to_string());
        }
        Ok(())
    }

    /// Stores a manifest and names it `name` in `index.json` (replacing an entry of that
    /// name); `channel` marks the channel's entry.
    pub async fn put_manifest(
        &self,
        name: &str,
        media_type: &str,
        body: &[u8],
        channel: bool,
    ) -> Result<(), PullError> {
        let digest = crate::registry::sha256(body);
        if !self.has_blob(&digest).await? {
            let data = futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(body))]).boxed();
            self.put_blob(&digest, body.len() as u64, data).await?;
        }
        let mut annotations = json!({ REF_NAME: name });
        if channel {
            annotations[CHANNEL] = json!("true");
        }
        let entry = json!({"mediaType": media_type, "digest": digest, "size": body.len(),
            "annotations": annotations});
        let mut index = self.index.lock().await;
        index.retain(|e| {
            e["annotations"][REF_NAME] != name && !(channel && e["annotations"][CHANNEL] == "true")
        });
        index.push(entry);
        let doc = json!({"schemaVersion": 2, "mediaType": crate::registry::manifest::OCI_INDEX,
            "manifests": *index});
        replace(&self.dir, "index.json", doc.to_string().as_bytes()).map_err(|e| {
            PullError::Bad(format!(
                "writing {}: {e}",
                self.dir.join("index.json").display()
            ))
        })
    }
}

#[cfg(test)]
mod tests;
