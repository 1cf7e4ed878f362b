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

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("layout-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A scratch layout with no entries yet.
fn empty_layout(name: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("index.json"), br#"{"manifests":[]}"#).unwrap();
    dir
}

fn once(body: &[u8]) -> BoxStream<'static, Result<bytes::Bytes, PullError>> {
    futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(body))]).boxed()
}

#[tokio::test]
async fn no_write_into_a_layout_follows_a_symlink_an_attacker_left() {
    let root = scratch("symlinks");
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let target = outside.join("target");
    std::fs::write(&target, b"untouched").unwrap();
    let dir = root.join("layout");
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    // Every name the old writer used, and the final ones, pointing outside.
    std::os::unix::fs::symlink(&target, dir.join("oci-layout")).unwrap();
    let body = b"a blob";
    let digest = crate::registry::sha256(body);
    let hex = digest.strip_prefix("sha256:").unwrap();
    let pid = std::process::id();
    for n in 0..256 {
        let name = format!("{hex}.partial-{pid}-{n}");
        std::os::unix::fs::symlink(&target, dir.join("blobs/sha256").join(name)).unwrap();
    }
    std::os::unix::fs::symlink(&target, dir.join(format!("index.json.partial-{pid}"))).unwrap();
    let l = Layout::open(&dir, true).unwrap();
    l.put_blob(&digest, body.len() as u64, once(body))
        .await
        .unwrap();
    l.put_manifest("reg.io/x:v1", "application/json", b"{}", false)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"untouched");
    let m = std::fs::symlink_metadata(dir.join("oci-layout")).unwrap();
    assert!(m.is_file(), "oci-layout replaced by a file of its own");
    assert!(l.has_blob(&digest).await.unwrap());
    // A blob that is a symlink (to the right bytes) is not there: it is replaced.
    let other = b"another blob";
    let other_digest = crate::registry::sha256(other);
    std::fs::write(outside.join("copy"), other).unwrap();
    let other_path = dir
        .join("blobs/sha256")
        .join(other_digest.strip_prefix("sha256:").unwrap());
    std::os::unix::fs::symlink(outside.join("copy"), &other_path).unwrap();
    assert!(!l.has_blob(&other_digest).await.unwrap());
    l.put_blob(&other_digest, other.len() as u64, once(other))
        .await
        .unwrap();
    assert!(std::fs::symlink_metadata(&other_path).unwrap().is_file());
    // A symlinked blobs/ is refused whole, as DEST and as SOURCE.
    let trap = root.join("trap");
    std::fs::create_dir_all(&trap).unwrap();
    std::os::unix::fs::symlink(&outside, trap.join("blobs")).unwrap();
    for create in [true, false] {
        std::fs::write(trap.join("index.json"), br#"{"manifests":[]}"#).unwrap();
        let e = Layout::open(&trap, create).err().unwrap();
        assert!(e.contains("a symlink is refused"), "{e}");
    }
    assert!(!outside.join("sha256").exists());
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test]
async fn a_manifest_that_is_a_symlink_to_an_endless_file_is_refused_not_read() {
    let dir = empty_layout("dev-zero");
    let digest = format!("sha256:{}", "a".repeat(64));
    let path = dir.join("blobs/sha256").join("a".repeat(64));
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    let l = Layout::open(&dir, false).unwrap();
    let e = l.manifest(&digest, 1 << 20).await.unwrap_err().to_string();
    assert!(e.contains("cannot read"), "{e}");
    assert!(l.blob(&digest).await.is_err());
    assert!(!l.has_blob(&digest).await.unwrap());
    // A regular file past the bound: refused as read, whatever its size says.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, vec![b'x'; 2048]).unwrap();
    let e = l.manifest(&digest, 1024).await.unwrap_err().to_string();
    assert!(e.contains("more than 1024 bytes"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_blob_longer_than_its_descriptor_stops_being_written_there() {
    let dir = empty_layout("oversized");
    let l = Layout::open(&dir, true).unwrap();
    let pulled = std::sync::Arc::new(AtomicU64::new(0));
    let counter = pulled.clone();
    // A body that never ends.
    let endless = futures::stream::repeat_with(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(bytes::Bytes::from_static(&[0u8; 64 << 10]))
    })
    .boxed();
    let digest = crate::registry::sha256(b"{}");
    let e = l
        .put_blob(&digest, 2, endless)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than its descriptor's 2 bytes"), "{e}");
    assert_eq!(
        pulled.load(Ordering::Relaxed),
        1,
        "nothing read past the size"
    );
    let left: Vec<_> = std::fs::read_dir(dir.join("blobs/sha256"))
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "the partial file is removed");
    // A truncated blob is not there; a write puts it back.
    let body = b"a whole blob";
    let digest = crate::registry::sha256(body);
    l.put_blob(&digest, body.len() as u64, once(body))
        .await
        .unwrap();
    let path = l.blob_path(&digest).unwrap();
    std::fs::write(&path, &body[..4]).unwrap();
    let fresh = Layout::open(&dir, false).unwrap();
    assert!(!fresh.has_blob(&digest).await.unwrap(), "truncated");
    fresh
        .put_blob(&digest, body.len() as u64, once(body))
        .await
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), body);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_channel_entry_named_outside_its_path_is_refused() {
    let dir = scratch("names");
    let l = Layout::open(&dir, true).unwrap();
    l.put_manifest("os/channel:v1", "application/json", b"{}", true)
        .await
        .unwrap();
    assert_eq!(l.channel().await.unwrap().unwrap().0, "os/channel:v1");
    for bad in ["../victim/app:latest", "os/../../victim:v1", "os/channel"] {
        l.put_manifest(bad, "application/json", b"{}", true)
            .await
            .unwrap();
        let e = l.channel().await.unwrap_err();
        assert!(e.contains("is not named path:tag"), "{bad}: {e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
