//! The store over a registry and over a layout: what each answers for the same operations.

use futures::StreamExt;

use super::{Memory, image};
use crate::commands::mirror::layout::Layout;
use crate::commands::mirror::store::{Loc, Store};
use crate::registry::{self, manifest};

fn loc(repository: &str) -> Loc {
    Loc {
        registry: "reg.lan".into(),
        repository: repository.into(),
    }
}

fn once(data: &[u8]) -> crate::commands::mirror::store::Bytes {
    futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(data))]).boxed()
}

#[tokio::test]
async fn a_registry_store_types_its_manifests_bounds_its_blobs_and_mounts() {
    let mem = Memory::default();
    let store = Store::Registry(&mem);
    let body = image(&mem, "reg.lan/a", "x");
    // Served without a media type: the body's own says it.
    let digest = mem.seed_manifest("reg.lan/a", &body, Some("v1"));
    let (got, media_type) = store.manifest(&loc("a"), "v1").await.unwrap().unwrap();
    assert_eq!((got, media_type.as_str()), (body, manifest::OCI_MANIFEST));
    assert_eq!(
        store.manifest_digest(&loc("a"), "v1").await.unwrap(),
        Some(digest)
    );
    assert_eq!(store.manifest_digest(&loc("a"), "v2").await.unwrap(), None);
    // A blob is cut off at its descriptor's size, whatever the registry sends.
    let blob = mem.seed_blob("reg.lan/a", b"twelve bytes");
    let read: Vec<_> = store
        .blob(&loc("a"), &blob, 5)
        .await
        .unwrap()
        .collect()
        .await;
    assert!(read.last().unwrap().is_err(), "{read:?}");
    // Mounted from a repository of the same registry that has it.
    assert!(store.mount_blob(&loc("b"), &blob, "a").await);
    assert!(store.has_blob(&loc("b"), &blob).await.unwrap());
    assert!(!store.mount_blob(&loc("c"), "sha256:00", "a").await);
    assert!(!store.is_dir());
}

#[tokio::test]
async fn a_layout_store_keeps_unnamed_manifests_as_blobs_and_never_mounts() {
    let dir = std::env::temp_dir().join(format!("mirror-stores-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let layout = Layout::open(&dir, true).unwrap();
    let store = Store::Dir(&layout);
    let data = b"a layer";
    let digest = registry::sha256(data);
    store
        .put_blob(&loc("a"), &digest, data.len() as u64, once(data))
        .await
        .unwrap();
    assert!(store.has_blob(&loc("a"), &digest).await.unwrap());
    assert!(!store.mount_blob(&loc("b"), &digest, "a").await);
    let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
    let index_digest = registry::sha256(index);
    store
        .put_manifest(&loc("a"), &index_digest, manifest::OCI_INDEX, index, false)
        .await
        .unwrap();
    assert!(store.has_blob(&loc("a"), &index_digest).await.unwrap());
    assert_eq!(layout.entries().await, Vec::new(), "no entry in index.json");
    assert!(store.is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}
