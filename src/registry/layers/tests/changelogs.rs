//! Changelogs collected in the same pass as the channel file.

use super::*;
use crate::channel::changelogs::{Changelogs, MAX_FILE_BYTES};

fn collecting() -> Bounds {
    Bounds {
        changelogs: Some(Changelogs::default()),
        ..bounds()
    }
}

#[test]
fn changelogs_before_and_after_the_file_in_its_layer_are_kept_the_rest_left() {
    let big = vec![b'x'; MAX_FILE_BYTES as usize + 1];
    let layer = tar_of(&[
        ("changelog", None),
        (
            "changelog/os-v1.updates.log",
            Some(b"- fixed a\n- fixed b\n"),
        ),
        ("channel.json", Some(DATA)),
        ("changelog/os-v2.updates.log", Some(b"- new\x1b[2J\n")),
        ("changelog/os-v3.updates.log", Some(&big)),
        ("changelog/notes.txt", Some(b"not a changelog")),
        ("etc/os-v4.updates.log", Some(b"elsewhere")),
    ]);
    for (blob, c) in [
        (layer.clone(), Compression::None),
        (gzip(&layer), Compression::Gzip),
        (zstd(&layer), Compression::Zstd),
    ] {
        let mut b = collecting();
        assert_eq!(
            look(&blob, c, "/channel.json", &mut b),
            Ok(Found::File(DATA.to_vec())),
            "{c:?}"
        );
        let logs = b.changelogs.unwrap();
        assert_eq!(logs.files.len(), 2, "{c:?}: {:?}", logs.files.keys());
        assert_eq!(logs.files["os-v1"], "- fixed a\n- fixed b\n");
        assert_eq!(logs.files["os-v2"], "- new\u{fffd}[2J\n", "cleaned");
        assert_eq!(logs.left_out, 1, "the one over the cap");
    }
}

#[test]
fn a_layer_above_the_file_gives_its_changelogs_first() {
    let mut b = collecting();
    let above = tar_of(&[("changelog/os-v1.updates.log", Some(b"newer text"))]);
    let below = tar_of(&[
        ("channel.json", Some(DATA)),
        ("changelog/os-v1.updates.log", Some(b"older text")),
    ]);
    assert_eq!(
        look(&above, Compression::None, "/channel.json", &mut b),
        Ok(Found::Absent)
    );
    assert_eq!(
        look(&below, Compression::None, "/channel.json", &mut b),
        Ok(Found::File(DATA.to_vec()))
    );
    assert_eq!(b.changelogs.unwrap().files["os-v1"], "newer text");
    // Without collecting, the search still stops at the file.
    let mut plain = bounds();
    assert_eq!(
        look(&below, Compression::None, "/channel.json", &mut plain),
        Ok(Found::File(DATA.to_vec()))
    );
    assert!(plain.changelogs.is_none());
}

/// The layer searched with `reserve` asked for room (changelogs collected).
fn reserving(layer: &[u8], reserve: &mut Reserve<'_>) -> Result<Found, LayerError> {
    let mut b = collecting();
    search_reserving(
        layer,
        Compression::None,
        "/channel.json",
        &sha(layer),
        layer.len() as u64,
        &mut b,
        reserve,
    )
}

#[test]
fn a_changelog_takes_room_in_the_data_budget_before_it_is_read() {
    let layer = tar_of(&[
        ("changelog/os-v1.updates.log", Some(b"twelve bytes")),
        ("channel.json", Some(DATA)),
    ]);
    let mut asked = Vec::new();
    let mut reserve = |n: u64| {
        asked.push(n);
        Ok(())
    };
    assert_eq!(
        reserving(&layer, &mut reserve),
        Ok(Found::File(DATA.to_vec()))
    );
    assert_eq!(asked, [12, DATA.len() as u64]);
    // No room: the pull fails as for the file itself.
    let mut refuse = |_: u64| Err("the data budget is full".to_string());
    let found = reserving(&layer, &mut refuse);
    assert!(matches!(found, Err(LayerError::NoRoom { .. })), "{found:?}");
}
