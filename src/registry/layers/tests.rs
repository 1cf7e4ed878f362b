use super::*;

/// A tar stream of these entries: (name, Some(content)) a file, (name, None) a directory.
fn tar_of(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, content) in entries {
        let mut h = tar::Header::new_gnu();
        match content {
            Some(c) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(c.len() as u64);
                h.set_mode(0o644);
                b.append_data(&mut h, name, *c).unwrap();
            }
            None => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                h.set_mode(0o755);
                b.append_data(&mut h, name, io::empty()).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

fn sha(data: &[u8]) -> String {
    let d = digest::digest(&digest::SHA256, data);
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn bounds() -> Bounds {
    Bounds {
        max_file: 1 << 20,
        layer_budget: 64 << 20,
        layer_limit: 64 << 20,
    }
}

fn look(blob: &[u8], c: Compression, path: &str, b: &mut Bounds) -> Result<Found, LayerError> {
    search(blob, c, path, &sha(blob), blob.len() as u64, b)
}

const DATA: &[u8] = b"[{\"metadata\":{\"name\":\"v1\"}}]";

#[test]
fn the_file_is_found_in_every_compression() {
    let layer = tar_of(&[
        ("bin", None),
        ("bin/busybox", Some(b"elf")),
        ("channel.json", Some(DATA)),
    ]);
    for (blob, c) in [
        (layer.clone(), Compression::None),
        (gzip(&layer), Compression::Gzip),
        (zstd(&layer), Compression::Zstd),
    ] {
        let found = look(&blob, c, "/channel.json", &mut bounds());
        assert_eq!(found, Ok(Found::File(DATA.to_vec())), "{c:?}");
        assert_eq!(
            look(&blob, c, "/other.json", &mut bounds()),
            Ok(Found::Absent)
        );
    }
    let dotted = tar_of(&[("./etc/", None), ("./etc/channel.json", Some(DATA))]);
    assert_eq!(
        look(
            &dotted,
            Compression::None,
            "/etc/channel.json",
            &mut bounds()
        ),
        Ok(Found::File(DATA.to_vec()))
    );
}

#[test]
fn whiteouts_delete_the_file_or_its_directory_and_opaque_directories_hide_it() {
    for (entries, path) in [
        (vec![(".wh.channel.json", Some(&b""[..]))], "/channel.json"),
        (
            vec![("etc/.wh.rancher", Some(&b""[..]))],
            "/etc/rancher/channel.json",
        ),
        (
            vec![("etc/rancher/.wh..wh..opq", Some(&b""[..]))],
            "/etc/rancher/channel.json",
        ),
        (vec![(".wh..wh..opq", Some(&b""[..]))], "/channel.json"),
        // A file where a directory of the path was.
        (vec![("etc", Some(&b"x"[..]))], "/etc/channel.json"),
    ] {
        let layer = tar_of(&entries);
        assert_eq!(
            look(&layer, Compression::None, path, &mut bounds()),
            Ok(Found::Gone),
            "{entries:?}"
        );
    }
    // Whiteouts of other names leave the file alone.
    for name in [
        ".wh.channel.json.bak",
        "etc/.wh.channel.json",
        "other/.wh..wh..opq",
    ] {
        let layer = tar_of(&[(name, Some(b""))]);
        assert_eq!(
            look(&layer, Compression::None, "/channel.json", &mut bounds()),
            Ok(Found::Absent),
            "{name}"
        );
    }
}

#[test]
fn the_bounds_hold_and_name_their_flags() {
    let big = vec![0u8; 3 << 20];
    let layer = tar_of(&[("zeros", Some(&big)), ("channel.json", Some(DATA))]);
    let blob = gzip(&layer);
    let mut tight = Bounds {
        layer_budget: 1 << 20,
        layer_limit: 1 << 20,
        ..bounds()
    };
    let e = look(&blob, Compression::Gzip, "/channel.json", &mut tight).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the layers read to find /channel.json are more than 1048576 bytes (--max-layer-bytes)"
    );
    let mut b = bounds();
    assert_eq!(
        look(&blob, Compression::Gzip, "/channel.json", &mut b),
        Ok(Found::File(DATA.to_vec()))
    );
    assert!(
        b.layer_budget < (64 << 20) - (3 << 20),
        "what was read is counted"
    );
    let mut small = Bounds {
        max_file: 4,
        ..bounds()
    };
    let e = look(&blob, Compression::Gzip, "/channel.json", &mut small).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/channel.json is more than 4 bytes (--max-output-bytes)"
    );
}

#[test]
fn a_blob_that_is_not_what_its_digest_says_is_refused() {
    let layer = tar_of(&[("channel.json", Some(DATA))]);
    let wrong = sha(b"other");
    let e = search(
        &layer[..],
        Compression::None,
        "/channel.json",
        &wrong,
        layer.len() as u64,
        &mut bounds(),
    );
    assert!(matches!(e, Err(LayerError::Digest { .. })), "{e:?}");
    // Longer than the descriptor says.
    let e = search(
        &layer[..],
        Compression::None,
        "/channel.json",
        &sha(&layer),
        10,
        &mut bounds(),
    );
    assert!(matches!(e, Err(LayerError::Digest { .. })), "{e:?}");
    let e = look(
        b"not gzip",
        Compression::Gzip,
        "/channel.json",
        &mut bounds(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("is not a readable gzip tar stream"),
        "{e}"
    );
}

#[test]
fn a_link_at_the_path_is_refused() {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "channel.json", "/etc/passwd")
        .unwrap();
    let layer = b.into_inner().unwrap();
    let e = look(&layer, Compression::None, "/channel.json", &mut bounds()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/channel.json is not a regular file in the layer (a link or a directory)"
    );
}

/// One tar entry as written: a GNU header of type `kind` declaring `size` bytes, then
/// `data` padded to whole blocks (`data` may be shorter than `size`: a header alone).
fn entry(kind: u8, name: &str, size: u64, data: &[u8]) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_path(name).unwrap();
    h.set_mode(0o644);
    h.set_size(size);
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(512), 0);
    out
}

fn file(name: &str, data: &[u8]) -> Vec<u8> {
    entry(b'0', name, data.len() as u64, data)
}

/// A PAX record line: `<length> <key>=<value>\n`, the length counting itself.
fn pax(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut n = body.len() + 1;
    while format!("{n}{body}").len() != n {
        n += 1;
    }
    format!("{n}{body}").into_bytes()
}

fn end(mut layer: Vec<u8>) -> Vec<u8> {
    layer.extend_from_slice(&[0; 1024]);
    layer
}

#[test]
fn extension_records_over_their_cap_are_refused_from_the_header_before_they_are_read() {
    let huge = 256 << 20;
    for (kind, what, cap) in [
        (b'L', "GNU long-name", MAX_LONG_NAME),
        (b'K', "GNU long-link", MAX_LONG_NAME),
        (b'x', "PAX extended header", MAX_PAX_RECORD),
        (b'g', "PAX global header", MAX_PAX_RECORD),
    ] {
        // The header alone: the record it declares is never there, so only the header
        // can have refused it (reading on would have found the stream cut short).
        let layer = entry(kind, "././@LongLink", huge, b"");
        let blob = gzip(&layer);
        let e = look(&blob, Compression::Gzip, "/channel.json", &mut bounds()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "layer {} has a {what} record of 268435456 bytes, over the {cap}-byte cap",
                sha(&blob)
            )
        );
        // One byte over the cap is refused too; at the cap it is read.
        let layer = entry(kind, "././@LongLink", cap + 1, b"");
        let e = look(&layer, Compression::None, "/channel.json", &mut bounds());
        assert!(matches!(e, Err(LayerError::Record { .. })), "{e:?}");
    }
    let at_cap = vec![b'a'; MAX_LONG_NAME as usize];
    let mut layer = entry(b'L', "././@LongLink", MAX_LONG_NAME, &at_cap);
    layer.extend(file("x", b""));
    let layer = end(layer);
    assert_eq!(
        look(&layer, Compression::None, "/channel.json", &mut bounds()),
        Ok(Found::Absent)
    );
}

#[test]
fn a_gnu_long_name_names_the_next_entry_less_its_nul() {
    let long = format!("{}/channel.json", "d".repeat(200));
    let path = format!("/{long}");
    // As tar::Builder writes it (a `././@LongLink` record, NUL-terminated).
    let built = tar_of(&[(&long, Some(DATA))]);
    assert_eq!(
        look(&built, Compression::None, &path, &mut bounds()),
        Ok(Found::File(DATA.to_vec()))
    );
    // By hand, with and without the NUL; the header's own name is a decoy.
    for name in [format!("{long}\0"), long.clone()] {
        let mut layer = entry(b'L', "././@LongLink", name.len() as u64, name.as_bytes());
        layer.extend(file("decoy", DATA));
        let layer = end(layer);
        assert_eq!(
            look(&layer, Compression::None, &path, &mut bounds()),
            Ok(Found::File(DATA.to_vec())),
            "{name:?}"
        );
        assert_eq!(
            look(&layer, Compression::None, "/decoy", &mut bounds()),
            Ok(Found::Absent)
        );
    }
    // A long name whiteout deletes what it names.
    let whiteout = format!("{}/.wh.channel.json", "d".repeat(200));
    let layer = tar_of(&[(&whiteout, Some(b""))]);
    assert_eq!(
        look(&layer, Compression::None, &path, &mut bounds()),
        Ok(Found::Gone)
    );
    // Only the next entry: the one after has its own name.
    let mut layer = entry(b'L', "././@LongLink", 5, b"other");
    layer.extend(file("a", b""));
    layer.extend(file("channel.json", DATA));
    let layer = end(layer);
    assert_eq!(
        look(&layer, Compression::None, "/channel.json", &mut bounds()),
        Ok(Found::File(DATA.to_vec()))
    );
}

#[test]
fn a_pax_path_renames_the_next_entry_and_a_pax_size_resizes_it_as_the_tar_crate_reads_them() {
    let records = [pax("mtime", "1"), pax("path", "etc/channel.json")].concat();
    let mut layer = entry(b'x', "PaxHeaders/decoy", records.len() as u64, &records);
    layer.extend(file("decoy", DATA));
    let layer = end(layer);
    assert_eq!(
        look(
            &layer,
            Compression::None,
            "/etc/channel.json",
            &mut bounds()
        ),
        Ok(Found::File(DATA.to_vec()))
    );
    assert_eq!(
        look(&layer, Compression::None, "/decoy", &mut bounds()),
        Ok(Found::Absent)
    );
    // A GNU long name wins over a PAX path (tar::Entry::path_bytes, Go's reader alike);
    // a PAX linkpath is read and not used.
    let records = [pax("path", "pax.json"), pax("linkpath", "/etc/passwd")].concat();
    let mut layer = entry(b'L', "././@LongLink", 9, b"long.json");
    layer.extend(entry(b'x', "PaxHeaders/x", records.len() as u64, &records));
    layer.extend(file("decoy", DATA));
    let layer = end(layer);
    assert_eq!(
        look(&layer, Compression::None, "/long.json", &mut bounds()),
        Ok(Found::File(DATA.to_vec()))
    );
    assert_eq!(
        look(&layer, Compression::None, "/pax.json", &mut bounds()),
        Ok(Found::Absent)
    );
    // `size` replaces the header's: the data is read at its size, and the next header
    // found after it, as tar::Archive finds it.
    let records = pax("size", &DATA.len().to_string());
    let mut layer = entry(b'x', "PaxHeaders/a", records.len() as u64, &records);
    layer.extend(entry(b'0', "a", 0, DATA));
    layer.extend(file("channel.json", b"next"));
    let layer = end(layer);
    assert_eq!(
        look(&layer, Compression::None, "/a", &mut bounds()),
        Ok(Found::File(DATA.to_vec()))
    );
    assert_eq!(
        look(&layer, Compression::None, "/channel.json", &mut bounds()),
        Ok(Found::File(b"next".to_vec()))
    );
    let mut archive = tar::Archive::new(&layer[..]);
    let names: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["a", "channel.json"], "the tar crate reads it alike");
}

#[test]
fn a_pax_global_header_is_no_file_and_misplaced_records_are_corrupt() {
    let records = pax("comment", "git archive");
    let mut layer = entry(b'g', "channel.json", records.len() as u64, &records);
    layer.extend(file("channel.json", DATA));
    let layer = end(layer);
    assert_eq!(
        look(&layer, Compression::None, "/channel.json", &mut bounds()),
        Ok(Found::File(DATA.to_vec()))
    );
    for (layer, why) in [
        (
            end([
                entry(b'L', "././@LongLink", 1, b"a"),
                entry(b'L', "././@LongLink", 1, b"b"),
                file("c", b""),
            ]
            .concat()),
            "two long name entries",
        ),
        (
            end(entry(b'x', "PaxHeaders/a", records.len() as u64, &records)),
            "extension records with no entry after them",
        ),
        (
            entry(b'0', "channel.json", 4096, b"cut"),
            "is not a readable uncompressed tar stream",
        ),
    ] {
        let e = look(&layer, Compression::None, "/channel.json", &mut bounds()).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
    let mut bad = file("channel.json", DATA);
    bad[0] ^= 1;
    let e = look(&end(bad), Compression::None, "/channel.json", &mut bounds()).unwrap_err();
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
}

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
    let sha512 = super::super::Algorithm::Sha512.digest(&layer);
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
    let wrong = super::super::Algorithm::Sha512.digest(b"other");
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
