//! The `display` subcommand: the syncer pod's main container prints the runner's file,
//! framed (`syncer::frame`), then stays up until the operator has read it and deletes the pod.

use std::io::Write;
use std::path::Path;

use crate::syncer::frame::{BEGIN, END};

#[derive(Debug, thiserror::Error)]
pub enum DisplayError {
    #[error(
        "cannot read {path}: {source}; the runner container must write its JSON to that file (options.outputFile)"
    )]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "cannot read {path}: permission denied; display runs as user 65532, so the runner must leave the file readable by others (for example `chmod a+r` it, or write it with umask 022), or run as user 65532 itself (options.securityContext.runAsUser)"
    )]
    Unreadable { path: String },
    #[error("{path} changed while it was printed ({expected} bytes announced, {copied} printed)")]
    Changed {
        path: String,
        expected: u64,
        copied: u64,
    },
    #[error("cannot write to stdout: {0}")]
    Write(std::io::Error),
    #[error("cannot wait for a stop signal: {0}")]
    Signal(std::io::Error),
}

/// The `display --file PATH` subcommand: print the file, then stay up until SIGTERM/SIGINT.
pub async fn run(path: &Path) -> Result<(), DisplayError> {
    // Caught before printing: the operator deletes the pod as soon as it read the end marker.
    let stop = crate::stop::StopSignals::install().map_err(DisplayError::Signal)?;
    print_file(path, &mut std::io::stdout().lock())?;
    stop.recv().await;
    Ok(())
}

/// Prints the file framed, streaming it (a few KiB of memory whatever its size).
fn print_file(path: &Path, out: &mut impl Write) -> Result<(), DisplayError> {
    let shown = || path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::PermissionDenied => DisplayError::Unreadable { path: shown() },
        _ => DisplayError::Read {
            path: shown(),
            source,
        },
    })?;
    let read_err = |source| DisplayError::Read {
        path: shown(),
        source,
    };
    let len = file.metadata().map_err(read_err)?.len();
    writeln!(out, "{BEGIN}{len}").map_err(DisplayError::Write)?;
    let mut reader = std::io::BufReader::new(std::io::Read::take(file, len));
    let copied = std::io::copy(&mut reader, out).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => DisplayError::Unreadable { path: shown() },
        _ => DisplayError::Write(e),
    })?;
    if copied != len {
        return Err(DisplayError::Changed {
            path: shown(),
            expected: len,
            copied,
        });
    }
    out.write_all(END).map_err(DisplayError::Write)?;
    out.flush().map_err(DisplayError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syncer::frame::{Output, decode};

    #[test]
    fn printing_a_file_frames_it() {
        let dir = std::env::temp_dir().join(format!("display-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.json");
        std::fs::write(&path, "[\"ü\"]").unwrap();
        let mut out = Vec::new();
        print_file(&path, &mut out).unwrap();
        assert_eq!(decode(&out, 100), Output::Complete("[\"ü\"]".as_bytes()));
        let missing = print_file(&dir.join("nope"), &mut Vec::new()).unwrap_err();
        assert!(
            missing.to_string().contains("must write its JSON"),
            "{missing}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
