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
        changelogs: None,
    }
}

fn look(blob: &[u8], c: Compression, path: &str, b: &mut Bounds) -> Result<Found, LayerError> {
    search(blob, c, path, &sha(blob), blob.len() as u64, b)
}

/// An uncompressed layer searched for `path` within [`bounds`].
fn plain(layer: &[u8], path: &str) -> Result<Found, LayerError> {
    look(layer, Compression::None, path, &mut bounds())
}

/// Asserts that the uncompressed `layer` holds `path`, of `data`.
#[track_caller]
fn assert_file(layer: &[u8], path: &str, data: &[u8]) {
    assert_eq!(plain(layer, path), Ok(Found::File(data.to_vec())));
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
    assert_file(&dotted, "/etc/channel.json", DATA);
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
        assert_eq!(plain(&layer, path), Ok(Found::Gone), "{entries:?}");
    }
    // Whiteouts of other names leave the file alone.
    for name in [
        ".wh.channel.json.bak",
        "etc/.wh.channel.json",
        "other/.wh..wh..opq",
    ] {
        let layer = tar_of(&[(name, Some(b""))]);
        assert_eq!(plain(&layer, "/channel.json"), Ok(Found::Absent), "{name}");
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
    let e = plain(&layer, "/channel.json").unwrap_err();
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

/// An entry of `kind` whose header gives its data's size.
fn sized(kind: u8, name: &str, data: &[u8]) -> Vec<u8> {
    entry(kind, name, data.len() as u64, data)
}

fn file(name: &str, data: &[u8]) -> Vec<u8> {
    sized(b'0', name, data)
}

fn end(mut layer: Vec<u8>) -> Vec<u8> {
    layer.extend_from_slice(&[0; 1024]);
    layer
}

/// A tar stream of these entries, ended.
fn layer_of(entries: &[Vec<u8>]) -> Vec<u8> {
    end(entries.concat())
}

// The tar extension records (GNU long names, PAX headers) and their caps.
mod records;
// zstd frames, gzip members, what follows the tar, digests, and the memory bound.
mod streams;
// Changelogs collected on the way to the file.
mod changelogs;
