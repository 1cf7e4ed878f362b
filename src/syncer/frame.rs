//! The framing of the `display` container's output (the command is `commands::display`).
//!
//! The syncer pod's `display` container prints the runner's file between a header that
//! carries its length and an end marker. Reading the container log, the operator can then
//! tell complete output from output that is still being written or was cut short, and can
//! refuse output above its cap from the header alone.

use std::io::Write;

pub const BEGIN: &str = "#rancheros-operator:begin bytes=";
pub const END: &[u8] = b"\n#rancheros-operator:end\n";
/// Room for the header and end marker on top of the data, when capping a log read.
pub const FRAME_OVERHEAD: u64 = 128;

/// Writes `data` framed, as the operator expects to find it in the log.
pub fn write_framed(out: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    writeln!(out, "{BEGIN}{}", data.len())?;
    out.write_all(data)?;
    out.write_all(END)?;
    out.flush()
}

/// What the operator found in a `display` container's log.
#[derive(Debug, PartialEq, Eq)]
pub enum Output<'a> {
    /// All of the data, checked against the length in the header.
    Complete(&'a [u8]),
    /// Not all written (or not all collected) yet.
    Incomplete,
    /// The header announces more than the operator accepts.
    TooLarge { bytes: u64 },
    /// Not output of `display`, or damaged.
    Corrupt(String),
}

pub fn decode(log: &[u8], max_bytes: u64) -> Output<'_> {
    let Some(newline) = log.iter().position(|b| *b == b'\n') else {
        return if BEGIN.as_bytes().starts_with(log) || log.starts_with(BEGIN.as_bytes()) {
            Output::Incomplete
        } else {
            Output::Corrupt(not_display(log))
        };
    };
    let (header, _) = log.split_at(newline);
    let Some(len) = header
        .strip_prefix(BEGIN.as_bytes())
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return Output::Corrupt(not_display(log));
    };
    if len > max_bytes {
        return Output::TooLarge { bytes: len };
    }
    let body = log.get(newline.saturating_add(1)..).unwrap_or_default();
    let Ok(len) = usize::try_from(len) else {
        return Output::TooLarge { bytes: len };
    };
    let (Some(data), Some(end)) = (body.get(..len), body.get(len..)) else {
        return Output::Incomplete;
    };
    if end.len() < END.len() {
        return Output::Incomplete;
    }
    if !end.starts_with(END) {
        return Output::Corrupt(format!(
            "the display log has {} bytes after a header announcing {len}: the output was changed or cut",
            body.len()
        ));
    }
    Output::Complete(data)
}

fn not_display(log: &[u8]) -> String {
    let head: String = String::from_utf8_lossy(log.get(..80).unwrap_or(log)).into();
    format!(
        "the display container's log does not start with the display header (it starts with {head:?}); is the display container running the operator's image?"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_framed(&mut out, data).unwrap();
        out
    }

    #[test]
    fn round_trip() {
        let log = framed(b"[1,2]");
        assert_eq!(decode(&log, 100), Output::Complete(b"[1,2]"));
        assert_eq!(decode(&framed(b""), 100), Output::Complete(b""));
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let log = framed(b"[{\"a\":\n1}]");
        for cut in 0..log.len() {
            assert_eq!(decode(&log[..cut], 100), Output::Incomplete, "cut at {cut}");
        }
    }

    #[test]
    fn too_large_from_the_header_alone() {
        let log = framed(&[b'x'; 50]);
        assert_eq!(decode(&log[..40], 10), Output::TooLarge { bytes: 50 });
    }

    #[test]
    fn foreign_or_damaged_logs_are_corrupt() {
        assert!(matches!(decode(b"hello\n", 10), Output::Corrupt(_)));
        assert!(matches!(decode(b"hello", 10), Output::Corrupt(_)));
        let mut log = framed(b"abc");
        log.insert(40, b'z');
        assert!(matches!(decode(&log, 100), Output::Corrupt(_)));
    }
}
