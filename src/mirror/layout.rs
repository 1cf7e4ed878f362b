//! An OCI image layout directory (`dir:PATH`) as `mirror`'s source or destination: blobs
//! under `blobs/sha256/`, and `index.json` naming each image copied by its original
//! reference (`org.opencontainers.image.ref.name`: `registry/repository@digest`, or
//! `:tag` for signature tags and the channel). A blob is written to a temporary file,
//! checked against its digest and renamed into place, and `index.json` is replaced whole,
//! so a run killed at any point leaves a layout that a next run completes.

use std::path::{Path, PathBuf};

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
}

impl Layout {
    /// Opens the layout at `dir`, made when `create` and it does not exist.
    pub fn open(dir: &Path, create: bool) -> Result<Layout, String> {
        let index_path = dir.join("index.json");
        if !index_path.exists() {
            if !create {
                return Err(format!(
                    "{} is not an OCI image layout (no index.json)",
                    dir.display()
                ));
            }
            std::fs::create_dir_all(dir.join("blobs/sha256"))
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)
                .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
        }
        // Capped: a directory is carried in from elsewhere, and read whole.
        let read = |p: &Path| -> std::io::Result<Vec<u8>> {
            use std::io::Read;
            let mut bytes = Vec::new();
            std::fs::File::open(p)?
                .take(MAX_INDEX_BYTES.saturating_add(1))
                .read_to_end(&mut bytes)?;
            Ok(bytes)
        };
        let entries = match read(&index_path) {
            Ok(bytes) if bytes.len() as u64 > MAX_INDEX_BYTES => {
                return Err(format!(
                    "{} is more than {} MiB",
                    index_path.display(),
                    MAX_INDEX_BYTES >> 20
                ));
            }
            Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v["manifests"].as_array().cloned())
                .ok_or_else(|| format!("{} is not an image index", index_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", index_path.display())),
        };
        Ok(Layout {
            dir: dir.to_path_buf(),
            index: tokio::sync::Mutex::new(entries),
        })
    }

    /// A layout with nothing in it, not written (what a dry run or a check compares with
    /// when DEST does not exist yet).
    pub fn empty(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_path_buf(),
            index: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf, PullError> {
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| PullError::Bad(format!("{digest} is not a sha256 digest")))?;
        Ok(self.dir.join("blobs/sha256").join(hex))
    }

    pub fn has_blob(&self, digest: &str) -> Result<bool, PullError> {
        Ok(self.blob_path(digest)?.exists())
    }

    /// The digest the entry `name` (`registry/repository:tag` or `@digest`) points to.
    pub async fn resolve(&self, name: &str) -> Option<String> {
        if let Some((_, digest)) = name.rsplit_once('@') {
            return self.has_blob(digest).ok()?.then(|| digest.to_string());
        }
        let index = self.index.lock().await;
        index
            .iter()
            .find(|e| e["annotations"][REF_NAME] == name)
            .and_then(|e| e["digest"].as_str())
            .map(str::to_string)
    }

    /// The channel's entry: its name and digest.
    pub async fn channel(&self) -> Option<(String, String)> {
        let index = self.index.lock().await;
        index
            .iter()
            .find(|e| e["annotations"][CHANNEL] == "true")
            .and_then(|e| {
                Some((
                    e["annotations"][REF_NAME].as_str()?.to_string(),
                    e["digest"].as_str()?.to_string(),
                ))
            })
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

    /// A manifest blob, at most `max` bytes.
    pub async fn manifest(&self, digest: &str, max: u64) -> Result<Option<Vec<u8>>, PullError> {
        let path = self.blob_path(digest)?;
        match tokio::fs::metadata(&path).await {
            Ok(m) if m.len() > max => Err(PullError::Bad(format!(
                "the manifest {digest} in the layout is more than {max} bytes"
            ))),
            Ok(_) => tokio::fs::read(&path)
                .await
                .map(Some)
                .map_err(|e| PullError::Bad(format!("cannot read {}: {e}", path.display()))),
            Err(_) => Ok(None),
        }
    }

    pub async fn blob(
        &self,
        digest: &str,
    ) -> Result<BoxStream<'static, Result<bytes::Bytes, PullError>>, PullError> {
        let path = self.blob_path(digest)?;
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| PullError::Bad(format!("cannot read {}: {e}", path.display())))?;
        Ok(tokio_util::io::ReaderStream::new(file)
            .map(|c| c.map_err(|e| PullError::Transport(format!("reading the layout: {e}"))))
            .boxed())
    }

    /// Writes a blob from `data`, checked against `digest` before it takes its place.
    pub async fn put_blob(
        &self,
        digest: &str,
        mut data: BoxStream<'static, Result<bytes::Bytes, PullError>>,
    ) -> Result<(), PullError> {
        let path = self.blob_path(digest)?;
        // Unique per write: two images that share a blob may both be sending it.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("partial-{}-{n}", std::process::id()));
        let io = |e: std::io::Error| PullError::Bad(format!("writing {}: {e}", tmp.display()));
        let mut file = tokio::fs::File::create(&tmp).await.map_err(io)?;
        let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
        let written = async {
            while let Some(chunk) = data.next().await {
                let chunk = chunk?;
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
            .map_err(|e| PullError::Bad(format!("writing {}: {e}", path.display())))
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
        if !self.has_blob(&digest)? {
            let data = futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(body))]).boxed();
            self.put_blob(&digest, data).await?;
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
        let path = self.dir.join("index.json");
        let tmp = self
            .dir
            .join(format!("index.json.partial-{}", std::process::id()));
        let io = |e: std::io::Error| PullError::Bad(format!("writing {}: {e}", path.display()));
        tokio::fs::write(&tmp, doc.to_string()).await.map_err(io)?;
        tokio::fs::rename(&tmp, &path).await.map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_or_foreign_index_json_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("layout-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let index = dir.join("index.json");
        let mut big = br#"{"manifests":[],"x":""#.to_vec();
        big.resize(usize::try_from(MAX_INDEX_BYTES).unwrap() + 10, b'a');
        big.extend_from_slice(br#""}"#);
        std::fs::write(&index, &big).unwrap();
        let e = Layout::open(&dir, false).err().unwrap();
        assert!(e.contains("index.json is more than 16 MiB"), "{e}");
        std::fs::write(&index, b"[1]").unwrap();
        let e = Layout::open(&dir, false).err().unwrap();
        assert!(e.contains("is not an image index"), "{e}");
        std::fs::write(&index, br#"{"manifests":[]}"#).unwrap();
        assert!(Layout::open(&dir, false).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
