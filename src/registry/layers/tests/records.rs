//! Tar extension records: GNU long names and links, PAX headers, their caps, as the tar
//! crate reads them.

use super::*;

/// A PAX record line: `<length> <key>=<value>\n`, the length counting itself.
fn pax(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut n = body.len() + 1;
    while format!("{n}{body}").len() != n {
        n += 1;
    }
    format!("{n}{body}").into_bytes()
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
        let e = plain(&layer, "/channel.json");
        assert!(matches!(e, Err(LayerError::Record { .. })), "{e:?}");
    }
    let at_cap = vec![b'a'; MAX_LONG_NAME as usize];
    let layer = layer_of(&[
        entry(b'L', "././@LongLink", MAX_LONG_NAME, &at_cap),
        file("x", b""),
    ]);
    assert_eq!(plain(&layer, "/channel.json"), Ok(Found::Absent));
}

#[test]
fn a_gnu_long_name_names_the_next_entry_less_its_nul() {
    let long = format!("{}/channel.json", "d".repeat(200));
    let path = format!("/{long}");
    // As tar::Builder writes it (a `././@LongLink` record, NUL-terminated).
    let built = tar_of(&[(&long, Some(DATA))]);
    assert_file(&built, &path, DATA);
    // By hand, with and without the NUL; the header's own name is a decoy.
    for name in [format!("{long}\0"), long.clone()] {
        let layer = layer_of(&[
            sized(b'L', "././@LongLink", name.as_bytes()),
            file("decoy", DATA),
        ]);
        assert_eq!(
            plain(&layer, &path),
            Ok(Found::File(DATA.to_vec())),
            "{name:?}"
        );
        assert_eq!(plain(&layer, "/decoy"), Ok(Found::Absent));
    }
    // A long name whiteout deletes what it names.
    let whiteout = format!("{}/.wh.channel.json", "d".repeat(200));
    let layer = tar_of(&[(&whiteout, Some(b""))]);
    assert_eq!(plain(&layer, &path), Ok(Found::Gone));
    // Only the next entry: the one after has its own name.
    let layer = layer_of(&[
        sized(b'L', "././@LongLink", b"other"),
        file("a", b""),
        file("channel.json", DATA),
    ]);
    assert_file(&layer, "/channel.json", DATA);
}

#[test]
fn a_pax_path_renames_the_next_entry_and_a_pax_size_resizes_it_as_the_tar_crate_reads_them() {
    let records = [pax("mtime", "1"), pax("path", "etc/channel.json")].concat();
    let layer = layer_of(&[
        sized(b'x', "PaxHeaders/decoy", &records),
        file("decoy", DATA),
    ]);
    assert_file(&layer, "/etc/channel.json", DATA);
    assert_eq!(plain(&layer, "/decoy"), Ok(Found::Absent));
    // A GNU long name wins over a PAX path (tar::Entry::path_bytes, Go's reader alike);
    // a PAX linkpath is read and not used.
    let records = [pax("path", "pax.json"), pax("linkpath", "/etc/passwd")].concat();
    let layer = layer_of(&[
        sized(b'L', "././@LongLink", b"long.json"),
        sized(b'x', "PaxHeaders/x", &records),
        file("decoy", DATA),
    ]);
    assert_file(&layer, "/long.json", DATA);
    assert_eq!(plain(&layer, "/pax.json"), Ok(Found::Absent));
    // `size` replaces the header's: the data is read at its size, and the next header
    // found after it, as tar::Archive finds it.
    let records = pax("size", &DATA.len().to_string());
    let layer = layer_of(&[
        sized(b'x', "PaxHeaders/a", &records),
        entry(b'0', "a", 0, DATA),
        file("channel.json", b"next"),
    ]);
    assert_file(&layer, "/a", DATA);
    assert_file(&layer, "/channel.json", b"next");
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
    let layer = layer_of(&[
        sized(b'g', "channel.json", &records),
        file("channel.json", DATA),
    ]);
    assert_file(&layer, "/channel.json", DATA);
    for (layer, why) in [
        (
            layer_of(&[
                entry(b'L', "././@LongLink", 1, b"a"),
                entry(b'L', "././@LongLink", 1, b"b"),
                file("c", b""),
            ]),
            "two long name entries",
        ),
        (
            end(sized(b'x', "PaxHeaders/a", &records)),
            "extension records with no entry after them",
        ),
        (
            entry(b'0', "channel.json", 4096, b"cut"),
            "is not a readable uncompressed tar stream",
        ),
    ] {
        let e = plain(&layer, "/channel.json").unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
    let mut bad = file("channel.json", DATA);
    bad[0] ^= 1;
    let e = plain(&end(bad), "/channel.json").unwrap_err();
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
}
