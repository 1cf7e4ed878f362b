//! The walk and the plan over in-memory registries: an image copied whole, every write in
//! DEST's prefix, nothing written by a dry run or a check.

use super::{Memory, blobs_of, image, index};
use crate::commands::mirror::Mode;
use crate::commands::mirror::copy::{copy_image, publish};
use crate::commands::mirror::plan::Dest;
use crate::commands::mirror::store::Store;
use crate::commands::mirror::walk::{State, Stats};
use crate::config::ImageRef;
use crate::digest::DigestTag;
use crate::registry;

const SRC: &str = "quay.io/org/os";
const PREFIX: &str = "mirror.site.lan:5000/site";
/// Where `SRC`'s repository goes under `PREFIX`.
const DST: &str = "mirror.site.lan:5000/site/org/os";

/// SOURCE with an index of three images, tagged `v1`: the index's digest and the children.
fn source() -> (Memory, String, Vec<Vec<u8>>) {
    let src = Memory::default();
    let children: Vec<Vec<u8>> = ["a", "b", "c"]
        .iter()
        .map(|s| image(&src, SRC, s))
        .collect();
    let top = index(&src, SRC, &children);
    let digest = src.seed_manifest(SRC, &top, Some("v1"));
    (src, digest, children)
}

async fn copy(src: &Memory, dst: &Memory, reference: &str, mode: Mode) -> (State, String, u64) {
    let (s, d, stats) = (Store::Registry(src), Store::Registry(dst), Stats::default());
    let dest = Dest::Registry(PREFIX.into());
    let image = ImageRef::parse(reference).unwrap();
    let copied = copy_image(&s, &d, &dest, &image, mode, &stats, &[])
        .await
        .unwrap();
    (copied.state, copied.dest, copied.blobs)
}

#[tokio::test]
async fn the_walk_copies_every_child_of_an_index_and_each_blob_of_each() {
    let (src, top, children) = source();
    let dst = Memory::default();
    let (state, dest, blobs) = copy(&src, &dst, &format!("{SRC}:v1"), Mode::Copy).await;
    assert_eq!(state, State::Copied);
    assert_eq!(dest, format!("{DST}@{top}"));
    assert_eq!(blobs, 6, "three images, a config and a layer each");
    assert!(dst.has_manifest(DST, &top));
    for child in &children {
        assert!(
            dst.has_manifest(DST, &registry::sha256(child)),
            "a child of the index"
        );
        for blob in blobs_of(child) {
            assert!(dst.has(DST, &blob), "{blob} of a child");
        }
    }
    // Once copied, a check finds it whole and a copy again sends nothing.
    let (state, _, blobs) = copy(&src, &dst, &format!("{SRC}:v1"), Mode::Check).await;
    assert_eq!((state, blobs), (State::Present, 0));
    let writes = dst.writes.lock().unwrap().len();
    let (state, _, _) = copy(&src, &dst, &format!("{SRC}:v1"), Mode::Copy).await;
    assert_eq!(state, State::Present);
    assert_eq!(dst.writes.lock().unwrap().len(), writes);
}

#[tokio::test]
async fn a_dry_run_and_a_check_count_what_is_missing_and_write_nothing() {
    let (src, _, _) = source();
    let dst = Memory::default();
    let (state, _, blobs) = copy(&src, &dst, &format!("{SRC}:v1"), Mode::DryRun).await;
    assert_eq!((state, blobs), (State::Copied, 6));
    let (state, _, _) = copy(&src, &dst, &format!("{SRC}:v1"), Mode::Check).await;
    assert_eq!(state, State::Missing);
    assert!(dst.written().is_empty(), "{:?}", dst.written());
    assert!(src.written().is_empty());
}

#[tokio::test]
async fn every_write_of_a_copy_and_of_the_channel_lands_under_dest() {
    let src = Memory::default();
    let dst = Memory::default();
    let mut references = Vec::new();
    for (repo, tag) in [
        ("ghcr.io/library/busybox", "1.36"),
        ("quay.io/org/team/app", "v2"),
        ("localhost:5000/x", "latest"),
    ] {
        let body = image(&src, repo, tag);
        let digest = src.seed_manifest(repo, &body, Some(tag));
        // Signed: the signature tag is copied beside it.
        let sig = image(&src, repo, &format!("the signature of {tag}"));
        src.seed_manifest(repo, &sig, Some(&DigestTag::Signature.of(&digest)));
        references.push(format!("{repo}:{tag}"));
    }
    for r in &references {
        let (state, dest, _) = copy(&src, &dst, r, Mode::Copy).await;
        assert_eq!(state, State::Copied);
        assert!(dest.starts_with(&format!("{PREFIX}/")), "{dest}");
    }
    let d = Store::Registry(&dst);
    let dest = Dest::Registry(PREFIX.into());
    let (channel, state) = publish(&d, &dest, "os/channel:v1", b"[]", Mode::Copy, None)
        .await
        .unwrap();
    assert_eq!(state, State::Copied);
    assert_eq!(channel, format!("{PREFIX}/os/channel:v1"));
    let written = dst.written();
    assert_eq!(
        written.len(),
        4,
        "three images and the channel: {written:?}"
    );
    for repo in &written {
        assert!(
            repo.starts_with(&format!("{PREFIX}/")),
            "{repo} outside DEST"
        );
    }
    assert!(
        written.contains(&format!("{PREFIX}/library/busybox")),
        "{written:?}"
    );
    assert!(src.written().is_empty());
}
