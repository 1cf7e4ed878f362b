//! The compressed streams (zstd frames and their window cap, gzip members), the bytes after
//! the tar's end, digests, and the memory one search holds.

use super::*;

/// A zstd frame by hand: `window` (a Window_Descriptor byte) or single segment with a
/// content size, then `data` in raw blocks.
fn zstd_frame(window: Option<u8>, content_size: Option<u64>, data: &[u8]) -> Vec<u8> {
    let mut f = 0xFD2F_B528u32.to_le_bytes().to_vec();
    match (window, content_size) {
        (Some(w), _) => f.extend([0x00, w]),
        (None, Some(size)) => {
            f.push(0xE0); // single segment, 8-byte content size
            f.extend(size.to_le_bytes());
        }
        (None, None) => unreachable!(),
    }
    let chunks: Vec<&[u8]> = if data.is_empty() {
        vec![&[]]
    } else {
        data.chunks(128 << 10).collect()
    };
    for (i, chunk) in chunks.iter().enumerate() {
        let last = u32::from(i + 1 == chunks.len());
        let header = ((chunk.len() as u32) << 3) | last; // raw block
        f.extend(&header.to_le_bytes()[..3]);
        f.extend(*chunk);
    }
    f
}

#[test]
fn a_zstd_frame_with_a_window_over_the_cap_is_refused_before_it_is_decoded() {
    let layer = tar_of(&[("channel.json", Some(DATA))]);
    // 8 MiB (exponent 13): what zstd -19 writes, read.
    let ok = zstd_frame(Some(13 << 3), None, &layer);
    assert_eq!(
        look(&ok, Compression::Zstd, "/channel.json", &mut bounds()),
        Ok(Found::File(DATA.to_vec()))
    );
    for (blob, window) in [
        // 1 GiB of window, and a single segment of 1 GiB of content.
        (zstd_frame(Some(20 << 3), None, &layer), 1u64 << 30),
        (zstd_frame(None, Some(1 << 30), &layer), 1 << 30),
        // 8 MiB and one eighth.
        (
            zstd_frame(Some((13 << 3) | 1), None, &layer),
            (8 << 20) + (1 << 20),
        ),
    ] {
        let e = look(&blob, Compression::Zstd, "/channel.json", &mut bounds()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "layer {} has a zstd frame with a {window}-byte window, over the 8388608-byte cap",
                sha(&blob)
            )
        );
    }
    // Every frame is checked: a second one asking for 1 GiB after a good one.
    let (a, b) = layer.split_at(512);
    let mut blob = zstd(a);
    blob.extend(zstd_frame(Some(20 << 3), None, b));
    let e = look(&blob, Compression::Zstd, "/channel.json", &mut bounds()).unwrap_err();
    assert!(
        matches!(
            e,
            LayerError::ZstdWindow {
                window: 1073741824,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn every_zstd_frame_and_gzip_member_is_read_and_skippable_frames_are_skipped() {
    let layer = tar_of(&[("a", Some(b"x")), ("channel.json", Some(DATA))]);
    let (a, b) = layer.split_at(1024);
    let mut frames = zstd(a);
    frames.extend(0x184D_2A50u32.to_le_bytes());
    frames.extend(3u32.to_le_bytes());
    frames.extend(b"pad");
    frames.extend(zstd(b));
    let mut members = gzip(a);
    members.extend(gzip(b));
    for (blob, c) in [(frames, Compression::Zstd), (members, Compression::Gzip)] {
        assert_eq!(
            look(&blob, c, "/channel.json", &mut bounds()),
            Ok(Found::File(DATA.to_vec())),
            "{c:?}"
        );
    }
    for blob in [vec![], b"\x28\xb5\x2f".to_vec(), b"not zstd".to_vec()] {
        let e = look(&blob, Compression::Zstd, "/channel.json", &mut bounds()).unwrap_err();
        assert!(
            e.to_string().contains("is not a readable zstd tar stream"),
            "{e}"
        );
    }
}

#[test]
fn what_follows_the_tar_end_is_hashed_as_sent_not_decompressed() {
    // 64 MiB of zeros after the end of the archive: a gzip of some 64 KiB.
    let mut layer = tar_of(&[("channel.json", Some(DATA))]);
    layer.resize(layer.len() + (64 << 20), 0);
    let blob = gzip(&layer);
    let mut tight = Bounds {
        layer_budget: 1 << 20,
        layer_limit: 1 << 20,
        ..bounds()
    };
    assert_eq!(
        look(&blob, Compression::Gzip, "/other.json", &mut tight),
        Ok(Found::Absent)
    );
    assert!(
        tight.layer_budget > (1 << 20) - (64 << 10),
        "only what came before the end was decompressed: {}",
        tight.layer_budget
    );
    // Changed past the end, it is still refused: the digest covers the blob.
    let mut changed = blob.clone();
    let n = changed.len();
    changed[n - 100] ^= 1;
    let e = search(
        &changed[..],
        Compression::Gzip,
        "/other.json",
        &sha(&blob),
        n as u64,
        &mut bounds(),
    );
    assert!(matches!(e, Err(LayerError::Digest { .. })), "{e:?}");
}

#[test]
fn sha512_digests_are_verified_and_other_algorithms_refused() {
    let layer = tar_of(&[("channel.json", Some(DATA))]);
    let sha512 = Algorithm::Sha512.digest(&layer);
    assert!(sha512.starts_with("sha512:") && sha512.len() == 7 + 128);
    let n = layer.len() as u64;
    let found = search(
        &layer[..],
        Compression::None,
        "/channel.json",
        &sha512,
        n,
        &mut bounds(),
    );
    assert_eq!(found, Ok(Found::File(DATA.to_vec())));
    let wrong = Algorithm::Sha512.digest(b"other");
    let e = search(
        &layer[..],
        Compression::None,
        "/channel.json",
        &wrong,
        n,
        &mut bounds(),
    );
    assert!(matches!(e, Err(LayerError::Digest { .. })), "{e:?}");
    for digest in ["md5:00", "sha384:00", "sha256", "blake3:00"] {
        let e = search(
            &layer[..],
            Compression::None,
            "/channel.json",
            digest,
            n,
            &mut bounds(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "layer {digest} is named by a digest algorithm this client cannot verify (sha256 and sha512 are)"
            )
        );
    }
}

/// The bytes a closure allocates on its own thread, at their peak: the tests of this crate
/// run on threads of their own, so one's allocations do not count in another's.
mod peak {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    pub struct Counting;

    fn add(n: isize) {
        let _ = LIVE.try_with(|live| {
            let now = live.get() + n;
            live.set(now);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
        });
    }

    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                add(layout.size() as isize);
            }
            p
        }
        unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
            unsafe { System.dealloc(p, layout) };
            add(-(layout.size() as isize));
        }
        unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
            let q = unsafe { System.realloc(p, layout, size) };
            if !q.is_null() {
                // At the moment of a move both are held.
                add(size as isize);
                add(-(layout.size() as isize));
            }
            q
        }
    }

    /// What `f` returns, and the most it held allocated at once.
    pub fn of<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let base = LIVE.with(Cell::get);
        PEAK.with(|p| p.set(base));
        let out = f();
        let peak = PEAK.with(Cell::get) - base;
        (out, peak.max(0) as usize)
    }
}

#[global_allocator]
static COUNTING: peak::Counting = peak::Counting;

#[test]
fn one_search_holds_its_documented_bound_whatever_the_layer_declares() {
    const MIB: usize = 1 << 20;
    let budget = || Bounds {
        max_file: 1 << 20,
        layer_budget: 1 << 30,
        layer_limit: 1 << 30,
        changelogs: None,
    };
    // A long name of 32 MiB really there (a gzip of 32 KiB): refused, nothing of it held.
    let mut layer = entry(b'L', "././@LongLink", 32 << 20, &vec![b'a'; 32 << 20]);
    layer.extend(file("channel.json", DATA));
    let blob = gzip(&end(layer));
    let (found, held) = peak::of(|| look(&blob, Compression::Gzip, "/channel.json", &mut budget()));
    assert!(matches!(found, Err(LayerError::Record { .. })), "{found:?}");
    assert!(held < MIB, "{held} bytes held");
    // 48 MiB of gzip layer walked: flat.
    let big = vec![7u8; 16 << 20];
    let layer = tar_of(&[
        ("a", Some(&big)),
        ("b", Some(&big)),
        ("c", Some(&big)),
        ("channel.json", Some(DATA)),
    ]);
    let blob = gzip(&layer);
    let (found, held) = peak::of(|| look(&blob, Compression::Gzip, "/channel.json", &mut budget()));
    assert_eq!(found, Ok(Found::File(DATA.to_vec())));
    assert!(held < MIB, "{held} bytes held");
    // zstd at the window cap, 48 MiB of content: the window's worth and its growth.
    let blob = zstd_frame(Some(13 << 3), None, &layer);
    let (found, held) = peak::of(|| look(&blob, Compression::Zstd, "/channel.json", &mut budget()));
    assert_eq!(found, Ok(Found::File(DATA.to_vec())));
    eprintln!("zstd at an 8 MiB window: {held} bytes held at the peak");
    assert!(held < 25 * MIB, "{held} bytes held");
    // A window of 1 GiB declared: refused before the decoder holds any of it.
    let blob = zstd_frame(Some(20 << 3), None, &layer);
    let (found, held) = peak::of(|| look(&blob, Compression::Zstd, "/channel.json", &mut budget()));
    assert!(
        matches!(found, Err(LayerError::ZstdWindow { .. })),
        "{found:?}"
    );
    assert!(held < MIB, "{held} bytes held");
}
