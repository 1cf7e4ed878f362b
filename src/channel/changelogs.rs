//! Changelogs an `oci` channel image ships beside its channel file, as Elemental's channel
//! images do: `/changelog/<version name>.updates.log`, read in the same pass over the
//! layers as the channel file. The image is the publisher's, so every file is bounded and
//! its text cleaned as status messages are (line breaks kept).

use std::collections::BTreeMap;

/// The largest changelog kept; a larger one is left out (and counted).
pub const MAX_FILE_BYTES: u64 = 64 << 10;
/// The most changelog bytes one image gives, all files together: they are stored in one
/// ConfigMap per channel, which must stay well under the API server's object size limit.
pub const MAX_TOTAL_BYTES: u64 = 512 << 10;
/// The most changelogs one image gives.
pub const MAX_FILES: usize = 1000;

/// The ConfigMap that holds a channel's changelogs, one key per version:
/// `<channel>-changelogs`, or, for a name too long for that, its first 200 characters and
/// a hash of the whole, then `.changelogs`: a suffix no short name gets, so that no channel
/// can be named to take a long-named channel's ConfigMap (a name held by anyone else is
/// still a conflict the operator reports, never writes).
pub fn configmap_name(channel: &str) -> String {
    const SUFFIX: &str = "-changelogs";
    if channel.len().saturating_add(SUFFIX.len()) <= 253 {
        return format!("{channel}{SUFFIX}");
    }
    let hex = crate::digest::sha256_hex_prefix(channel.as_bytes(), 6);
    let head = channel
        .get(..200)
        .unwrap_or(channel)
        .trim_end_matches(['-', '.']);
    format!("{head}-{hex}.changelogs")
}

/// The changelogs found so far, by version name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changelogs {
    pub files: BTreeMap<String, String>,
    bytes: u64,
    /// Files left out: over a cap, or a name that is not a version's.
    pub left_out: usize,
}

impl Changelogs {
    /// The version a path (as the layer walk normalises it, `/changelog/NAME.updates.log`)
    /// is the changelog of, if it is one.
    pub fn version_of(path: &str) -> Option<&str> {
        let name = path
            .strip_prefix("/changelog/")?
            .strip_suffix(".updates.log")?;
        let valid = !name.is_empty()
            && name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        valid.then_some(name)
    }

    /// Whether a changelog of `size` bytes for `name` is to be read: not one found already
    /// (a layer above wins), and within the caps. A refusal is counted.
    pub fn wants(&mut self, name: &str, size: u64) -> bool {
        if self.files.contains_key(name) {
            return false;
        }
        let fits = size <= MAX_FILE_BYTES
            && self.bytes.saturating_add(size) <= MAX_TOTAL_BYTES
            && self.files.len() < MAX_FILES;
        if !fits {
            self.left_out = self.left_out.saturating_add(1);
        }
        fits
    }

    /// Keeps a changelog's bytes, as text: invalid UTF-8 replaced, control characters and
    /// bidirectional overrides replaced as in status messages, line breaks and tabs kept;
    /// left out (and counted) when the cleaned text would pass the total.
    pub fn add(&mut self, name: &str, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let clean: Vec<String> = text
            .split('\n')
            .map(|line| {
                let cells: Vec<String> = line
                    .split('\t')
                    .map(|cell| crate::text::clean(cell, usize::MAX))
                    .collect();
                cells.join("\t")
            })
            .collect();
        // Counted as stored: a replaced control character takes 3 bytes for 1, and the
        // total must stay what one ConfigMap holds.
        let text = clean.join("\n");
        let total = self.bytes.saturating_add(text.len() as u64);
        if total > MAX_TOTAL_BYTES {
            self.left_out = self.left_out.saturating_add(1);
            return;
        }
        self.bytes = total;
        self.files.insert(name.to_string(), text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_channel_name_gives_a_long_named_channels_configmap() {
        assert_eq!(configmap_name("foo"), "foo-changelogs");
        let long = "a".repeat(250);
        let shortened = configmap_name(&long);
        assert!(shortened.len() <= 253, "{}", shortened.len());
        assert!(shortened.ends_with(".changelogs"), "{shortened}");
        // The channel named as the shortened name's head and hash gets another name.
        let head = shortened.trim_end_matches(".changelogs");
        assert_ne!(configmap_name(head), shortened);
        assert_ne!(configmap_name(&"a".repeat(251)), shortened);
    }

    #[test]
    fn only_version_named_files_under_changelog_count() {
        assert_eq!(
            Changelogs::version_of("/changelog/base-v2.2.0-3.15-os.updates.log"),
            Some("base-v2.2.0-3.15-os")
        );
        for other in [
            "/changelog/.updates.log",
            "/changelog/a/b.updates.log",
            "/changelog/UPPER.updates.log",
            "/changelog/x.log",
            "/etc/changelog/x.updates.log",
        ] {
            assert_eq!(Changelogs::version_of(other), None, "{other}");
        }
    }

    #[test]
    fn the_caps_hold_and_the_first_found_wins() {
        let mut c = Changelogs::default();
        assert!(c.wants("a", 10));
        c.add("a", b"first\n\x1b[31mred\x1b[0m\r\n\xff");
        assert!(!c.wants("a", 10), "a layer above gave it already");
        assert_eq!(c.files["a"], "first\n\u{fffd}[31mred\u{fffd}[0m \n\u{fffd}");
        assert!(!c.wants("big", MAX_FILE_BYTES + 1));
        assert_eq!(c.left_out, 1);
        let mut n = 0;
        while c.wants(&format!("v{n}"), MAX_FILE_BYTES) {
            c.add(&format!("v{n}"), &vec![b'x'; MAX_FILE_BYTES as usize]);
            n += 1;
        }
        assert_eq!(n, (MAX_TOTAL_BYTES / MAX_FILE_BYTES) as usize - 1);
        assert_eq!(c.left_out, 2);
    }

    #[test]
    fn the_total_counts_the_text_as_stored_not_as_read() {
        // Control characters become 3-byte replacements: 64 KiB read, 192 KiB stored.
        let mut c = Changelogs::default();
        let mut kept = 0;
        for n in 0..8 {
            let name = format!("v{n}");
            if c.wants(&name, MAX_FILE_BYTES) {
                c.add(&name, &vec![0x01; MAX_FILE_BYTES as usize]);
            }
            kept = c.files.len();
        }
        assert_eq!(kept, 2, "two of 192 KiB fit in 512 KiB");
        assert!(c.files.values().map(String::len).sum::<usize>() as u64 <= MAX_TOTAL_BYTES);
        assert!(c.left_out >= 1);
    }
}
