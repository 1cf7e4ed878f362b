//! One layer searched for the channel file: a blocking `Read` of the blob (run in a
//! blocking task), decompressed and walked as a tar stream entry by entry, so memory stays
//! flat whatever the layer's size. Whiteouts are honoured as the OCI image spec writes them:
//! `.wh.<name>` deletes `<name>` of the layers below, `.wh..wh..opq` hides everything below
//! its directory. The blob is read to its end and checked against its digest.
//!
//! The layer is the image's author's to choose, so every byte of it is hostile input, and
//! what one search holds in memory is bounded whatever it says:
//!
//! - a tar header (512 bytes) and the names its extension records give the next entry:
//!   a GNU long name and long link of at most [`MAX_LONG_NAME`] each, a PAX header of at
//!   most [`MAX_PAX_RECORD`] (the tar crate's `Archive` reads any size of them whole);
//! - the decompressor's state: gzip's 32 KiB window (and flate2's 32 KiB buffer), or a zstd
//!   frame's window of at most [`MAX_ZSTD_WINDOW`] and a block (at most 128 KiB); ruzstd's
//!   ring buffer grows by powers of two, so at the cap it becomes 16 MiB, and holds the
//!   8 MiB one too while it copies: 24 MiB at the peak;
//! - the file itself, at most `max_file` (`--max-output-bytes`), and 8 KiB copy buffers.
//!
//! About 25 MiB plus the file for zstd, 1.1 MiB plus the file otherwise (measured by
//! `tests::one_search_holds_its_documented_bound_whatever_the_layer_declares`). The work is
//! bounded apart: the decompressed bytes walked count against `layer_budget`
//! (`--max-layer-bytes`), and what follows the tar's end is hashed as the registry sent it,
//! not decompressed, so it is at most the descriptor's size, which `pull` holds within the
//! budget before fetching the blob.

use std::io::{self, Read};

use ring::digest;

use super::Algorithm;
use super::manifest::Compression;
use walk::{Walk, walk};

mod walk;
mod zstd;

pub use zstd::MAX_ZSTD_WINDOW;

/// The largest GNU long-name or long-link record (`L`, `K`) read: a path, which Linux holds
/// within `PATH_MAX` (4096 bytes with its NUL); real images need far less.
const MAX_LONG_NAME: u64 = 4 << 10;

/// The largest PAX extended header (`x`, and a global one, `g`) read. It carries a path, a
/// link target, times and the entry's extended attributes, each of which Linux holds within
/// 64 KiB (`XATTR_SIZE_MAX`): room for a path and sixteen of the largest.
const MAX_PAX_RECORD: u64 = 1 << 20;

/// What one layer says of the file.
#[derive(Debug, PartialEq)]
pub enum Found {
    /// The file's bytes.
    File(Vec<u8>),
    /// Deleted here (a whiteout of it or of a directory above it, an opaque directory
    /// above it, or a non-directory in its way): the layers below do not count.
    Gone,
    /// Not in this layer: look in the one below.
    Absent,
}

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum LayerError {
    #[error("the layers read to find {path} are more than {limit} bytes (--max-layer-bytes)")]
    TooMuch { path: String, limit: u64 },
    #[error("{path} is more than {limit} bytes (--max-output-bytes)")]
    FileTooLarge { path: String, limit: u64 },
    /// The data budget had no room for the file (it was not read).
    #[error("{why}")]
    NoRoom { why: String },
    #[error("{path} is not a regular file in the layer (a link or a directory)")]
    NotRegular { path: String },
    #[error("layer {digest} does not match its digest (it was changed or cut short)")]
    Digest { digest: String },
    #[error("layer {digest} is not a readable {kind} tar stream ({why})")]
    Corrupt {
        digest: String,
        kind: &'static str,
        why: String,
    },
    #[error("layer {digest}: {why}")]
    Read { digest: String, why: String },
    /// A tar extension record larger than real images write: refused before it is read.
    #[error("layer {digest} has a {kind} record of {size} bytes, over the {cap}-byte cap")]
    Record {
        digest: String,
        kind: &'static str,
        size: u64,
        cap: u64,
    },
    /// A zstd frame asking to keep more history than real layers do: refused before any of
    /// it is decoded.
    #[error("layer {digest} has a zstd frame with a {window}-byte window, over the {cap}-byte cap")]
    ZstdWindow {
        digest: String,
        window: u64,
        cap: u64,
    },
    #[error(
        "layer {digest} is named by a digest algorithm this client cannot verify (sha256 and sha512 are)"
    )]
    Algorithm { digest: String },
}

/// What bounds a search: the file's size, and the decompressed bytes every layer searched
/// so far may take together (what is left of it).
pub struct Bounds {
    pub max_file: u64,
    pub layer_budget: u64,
    pub layer_limit: u64,
    /// Changelogs to collect on the way (`None`: only the file is looked for).
    pub changelogs: Option<crate::channel::changelogs::Changelogs>,
}

/// Reads `blob` (its digest and size as the manifest gives them) and says whether it holds
/// `path`; `bounds.layer_budget` is lowered by what was read.
pub fn search(
    blob: impl Read,
    compression: Compression,
    path: &str,
    digest_name: &str,
    size: u64,
    bounds: &mut Bounds,
) -> Result<Found, LayerError> {
    search_reserving(
        blob,
        compression,
        path,
        digest_name,
        size,
        bounds,
        &mut |_| Ok(()),
    )
}

/// Room for the file, asked before its bytes are read: its size, from its tar header
/// (already within `max_file`); `Err` says why there is none.
pub type Reserve<'a> = dyn FnMut(u64) -> Result<(), String> + 'a;

/// [`search`], asking `reserve` for room before the file's bytes are read (the data budget
/// all syncs share), so the file is never in memory uncounted.
pub fn search_reserving(
    blob: impl Read,
    compression: Compression,
    path: &str,
    digest_name: &str,
    size: u64,
    bounds: &mut Bounds,
    reserve: &mut Reserve<'_>,
) -> Result<Found, LayerError> {
    let algorithm = Algorithm::of(digest_name).ok_or_else(|| LayerError::Algorithm {
        digest: digest_name.to_string(),
    })?;
    let mut hashed = Hashed {
        inner: blob,
        algorithm,
        hash: digest::Context::new(algorithm.ring()),
        read: 0,
        size,
    };
    let kind = match compression {
        Compression::None => "uncompressed",
        Compression::Gzip => "gzip",
        Compression::Zstd => "zstd",
    };
    let corrupt = |e: &dyn std::fmt::Display| LayerError::Corrupt {
        digest: digest_name.to_string(),
        kind,
        why: e.to_string(),
    };
    let walked = {
        let decoded: Box<dyn Read + '_> = match compression {
            Compression::None => Box::new(&mut hashed),
            // Every member and every frame, as containerd reads them: a layer may be several
            // concatenated (`pigz --independent`, `zstd` of parts).
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut hashed)),
            Compression::Zstd => Box::new(zstd::Frames::new(&mut hashed)),
        };
        let mut counted = Counted {
            inner: decoded,
            left: bounds.layer_budget,
            exceeded: false,
        };
        let result = walk(
            &mut counted,
            path,
            digest_name,
            bounds.max_file,
            reserve,
            bounds.changelogs.as_mut(),
        );
        bounds.layer_budget = counted.left;
        if counted.exceeded {
            return Err(LayerError::TooMuch {
                path: path.to_string(),
                limit: bounds.layer_limit,
            });
        }
        result
    };
    let found = match walked {
        Ok(found) => found,
        Err(Walk::Layer(e)) => return Err(e),
        Err(Walk::Io(e)) => {
            if let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<Transport>()) {
                return Err(LayerError::Read {
                    digest: digest_name.to_string(),
                    why: t.0.clone(),
                });
            }
            if let Some(w) = e
                .get_ref()
                .and_then(|i| i.downcast_ref::<zstd::WindowTooLarge>())
            {
                return Err(LayerError::ZstdWindow {
                    digest: digest_name.to_string(),
                    window: w.0,
                    cap: MAX_ZSTD_WINDOW,
                });
            }
            // Data that cannot be read: a blob cut short or changed says so, else it is
            // corrupt as published.
            let _ = io::copy(&mut hashed, &mut io::sink());
            return Err(if hashed.matches(digest_name) {
                corrupt(&e)
            } else {
                LayerError::Digest {
                    digest: digest_name.to_string(),
                }
            });
        }
    };
    // The rest of the blob: its digest covers every byte. Read as sent, not decompressed
    // (whatever follows the tar's end is never inflated), and no longer than its size.
    let drained = io::copy(&mut hashed, &mut io::sink());
    if let Err(e) = drained {
        return Err(
            match e.get_ref().and_then(|i| i.downcast_ref::<Transport>()) {
                Some(t) => LayerError::Read {
                    digest: digest_name.to_string(),
                    why: t.0.clone(),
                },
                None => LayerError::Digest {
                    digest: digest_name.to_string(),
                },
            },
        );
    }
    if !hashed.matches(digest_name) {
        return Err(LayerError::Digest {
            digest: digest_name.to_string(),
        });
    }
    Ok(found)
}

/// A transport failure, carried through the `Read` chain to be told apart from bad data.
#[derive(Debug)]
pub struct Transport(pub String);

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Transport {}

#[derive(Debug)]
struct TooLong;

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the blob is longer than its descriptor says")
    }
}

impl std::error::Error for TooLong {}

/// The blob as sent: hashed, and no longer than its descriptor's size.
struct Hashed<R> {
    inner: R,
    algorithm: Algorithm,
    hash: digest::Context,
    read: u64,
    size: u64,
}

impl<R: Read> Hashed<R> {
    fn matches(self, expected: &str) -> bool {
        self.read == self.size && expected == self.algorithm.name(&self.hash.finish())
    }
}

impl<R: Read> Read for Hashed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let chunk = buf.get(..n).unwrap_or_default();
        self.hash.update(chunk);
        self.read = self.read.saturating_add(n as u64);
        if self.read > self.size {
            return Err(io::Error::other(TooLong));
        }
        Ok(n)
    }
}

/// The decompressed stream, cut off (with an error) past the bytes left in the budget.
struct Counted<R> {
    inner: R,
    left: u64,
    exceeded: bool,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more tells a stream that ends exactly at the bound from a longer one.
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? == 0 {
                return Ok(0);
            }
            self.exceeded = true;
            return Err(io::Error::other("--max-layer-bytes"));
        }
        let room = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.inner.read(buf.get_mut(..room).unwrap_or_default())?;
        self.left = self.left.saturating_sub(n as u64);
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
