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

mod zstd;

pub use zstd::MAX_ZSTD_WINDOW;

/// The largest GNU long-name or long-link record (`L`, `K`) read: a path, which Linux holds
/// within `PATH_MAX` (4096 bytes with its NUL); real images need far less.
pub const MAX_LONG_NAME: u64 = 4 << 10;

/// The largest PAX extended header (`x`, and a global one, `g`) read. It carries a path, a
/// link target, times and the entry's extended attributes, each of which Linux holds within
/// 64 KiB (`XATTR_SIZE_MAX`): room for a path and sixteen of the largest.
pub const MAX_PAX_RECORD: u64 = 1 << 20;

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
        let result = walk(&mut counted, path, digest_name, bounds.max_file, reserve);
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

enum Walk {
    Io(io::Error),
    Layer(LayerError),
}

impl From<io::Error> for Walk {
    fn from(e: io::Error) -> Self {
        Walk::Io(e)
    }
}

/// The tar stream read entry by entry. The tar crate's `Archive::entries` would read a GNU
/// long name or a PAX header whole, however large: here each header is parsed by
/// `tar::Header`, the extension records are sized before they are read, and what they
/// say of the next entry is applied as `Archive` applies it.
fn walk(
    mut decoded: impl Read,
    path: &str,
    digest: &str,
    max_file: u64,
    reserve: &mut Reserve<'_>,
) -> Result<Found, Walk> {
    let mut gone = false;
    let mut next = Pending::default();
    let mut header = tar::Header::new_old();
    loop {
        // The end: no more blocks, or a block of zeros.
        if !read_block(&mut decoded, header.as_mut_bytes())?
            || header.as_bytes().iter().all(|b| *b == 0)
        {
            if next.any() {
                return Err(other("extension records with no entry after them").into());
            }
            break;
        }
        check_sum(&header)?;
        let kind = header.entry_type();
        // As `Archive`: extension types count only in GNU and ustar headers.
        let extension = header.as_gnu().is_some() || header.as_ustar().is_some();
        let mut size = header.entry_size()?;
        if extension && (kind.is_gnu_longname() || kind.is_gnu_longlink()) {
            let (slot, what) = if kind.is_gnu_longname() {
                (&mut next.long_name, "GNU long-name")
            } else {
                (&mut next.long_link, "GNU long-link")
            };
            if slot.is_some() {
                return Err(other("two long name entries describing the same member").into());
            }
            *slot = Some(read_record(
                &mut decoded,
                size,
                what,
                MAX_LONG_NAME,
                digest,
            )?);
            continue;
        }
        if extension && kind.is_pax_local_extensions() {
            if next.pax.is_some() {
                return Err(other("two pax extensions entries describing the same member").into());
            }
            let pax = read_record(
                &mut decoded,
                size,
                "PAX extended header",
                MAX_PAX_RECORD,
                digest,
            )?;
            next.pax = Some(pax);
            continue;
        }
        if kind.is_pax_global_extensions() {
            // Not a file: containerd ignores it, and, as in Go's and the tar crate's
            // readers, it takes the records meant for the next entry with it.
            if size > MAX_PAX_RECORD {
                return Err(too_large("PAX global header", size, MAX_PAX_RECORD, digest));
            }
            skip(&mut decoded, padded(size)?)?;
            next = Pending::default();
            continue;
        }
        let pending = std::mem::take(&mut next);
        if let Some(s) = pending.pax_size() {
            size = s;
        }
        let name = normalise(&String::from_utf8_lossy(&pending.path(&header)));
        if name == path {
            if !kind.is_file() {
                return Err(Walk::Layer(LayerError::NotRegular { path: path.into() }));
            }
            if size > max_file {
                return Err(Walk::Layer(LayerError::FileTooLarge {
                    path: path.into(),
                    limit: max_file,
                }));
            }
            reserve(size).map_err(|why| Walk::Layer(LayerError::NoRoom { why }))?;
            let mut data = Vec::new();
            (&mut decoded).take(size).read_to_end(&mut data)?;
            if (data.len() as u64) < size {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
            return Ok(Found::File(data));
        }
        if kind.is_gnu_sparse() {
            skip_sparse_extensions(&mut decoded, &header)?;
        }
        skip(&mut decoded, padded(size)?)?;
        let (dir, base) = name.rsplit_once('/').unwrap_or(("", name.as_str()));
        if base == ".wh..wh..opq" {
            gone |= below(path, dir);
        } else if let Some(hidden) = base.strip_prefix(".wh.") {
            let hidden = format!("{dir}/{hidden}");
            gone |= hidden == path || below(path, &hidden);
        } else if below(path, &name) && !kind.is_dir() {
            gone = true;
        }
    }
    Ok(if gone { Found::Gone } else { Found::Absent })
}

/// What extension records say of the entry after them.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    /// Read (to be refused over its cap, and as `Archive` pairs them) but not used: no link
    /// is followed.
    long_link: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
}

impl Pending {
    fn any(&self) -> bool {
        self.long_name.is_some() || self.long_link.is_some() || self.pax.is_some()
    }

    /// The entry's name, as `tar::Entry::path_bytes` gives it: a GNU long name (less its
    /// trailing NUL), else the PAX `path`, else the header's (with a ustar prefix).
    fn path<'a>(&'a self, header: &'a tar::Header) -> std::borrow::Cow<'a, [u8]> {
        if let Some(long) = &self.long_name {
            return long.strip_suffix(&[0]).unwrap_or(long).into();
        }
        let pax = self.pax.as_deref().and_then(|p| {
            tar::PaxExtensions::new(p)
                .filter_map(Result::ok)
                .find(|e| e.key_bytes() == b"path")
                .map(|e| e.value_bytes())
        });
        match pax {
            Some(p) => p.into(),
            None => header.path_bytes(),
        }
    }

    /// The PAX `size`, which replaces the header's as `Archive` reads it (the first record
    /// named `size`; none when a record before it is malformed or it is not a number).
    fn pax_size(&self) -> Option<u64> {
        for e in tar::PaxExtensions::new(self.pax.as_deref()?) {
            let e = e.ok()?;
            if e.key() == Ok("size") {
                return e.value().ok()?.parse().ok();
            }
        }
        None
    }
}

fn other(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

fn too_large(kind: &'static str, size: u64, cap: u64, digest: &str) -> Walk {
    Walk::Layer(LayerError::Record {
        digest: digest.to_string(),
        kind,
        size,
        cap,
    })
}

/// An extension record's data, refused before a byte of it is read when over `cap`.
fn read_record(
    decoded: &mut impl Read,
    size: u64,
    kind: &'static str,
    cap: u64,
    digest: &str,
) -> Result<Vec<u8>, Walk> {
    if size > cap {
        return Err(too_large(kind, size, cap, digest));
    }
    let mut data = Vec::new();
    decoded.take(size).read_to_end(&mut data)?;
    if (data.len() as u64) < size {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    skip(decoded, padded(size)?.saturating_sub(size))?;
    Ok(data)
}

/// One 512-byte block; `false`: the stream ended before it (a part of one is an error).
fn read_block(decoded: &mut impl Read, block: &mut [u8]) -> io::Result<bool> {
    let mut read = 0;
    while let Some(rest) = block.get_mut(read..).filter(|r| !r.is_empty()) {
        match decoded.read(rest) {
            Ok(0) if read == 0 => return Ok(false),
            Ok(0) => return Err(other("failed to read entire block")),
            Ok(n) => read = read.saturating_add(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The header's checksum, as `Archive` checks it: the bytes summed with the checksum field
/// counted as spaces.
fn check_sum(header: &tar::Header) -> io::Result<()> {
    let bytes = header.as_bytes();
    let summed = |r: &[u8]| r.iter().map(|b| u32::from(*b)).sum::<u32>();
    let sum = summed(bytes.get(..148).unwrap_or_default())
        .saturating_add(summed(bytes.get(156..).unwrap_or_default()))
        .saturating_add(8 * 32);
    if header.cksum()? != sum {
        return Err(other("archive header checksum mismatch"));
    }
    Ok(())
}

/// An entry's data as stored: rounded up to whole blocks.
fn padded(size: u64) -> io::Result<u64> {
    size.checked_next_multiple_of(512)
        .ok_or_else(|| other("size overflow"))
}

/// Reads and drops `n` bytes (the budget counts them: an entry's data is never held).
fn skip(decoded: &mut impl Read, n: u64) -> io::Result<()> {
    if io::copy(&mut decoded.take(n), &mut io::sink())? < n {
        return Err(other("unexpected EOF during skip"));
    }
    Ok(())
}

/// The extension blocks of a GNU sparse entry's map, which come before its data: never the
/// file (it is not a regular one), but its data is found past them.
fn skip_sparse_extensions(decoded: &mut impl Read, header: &tar::Header) -> io::Result<()> {
    let gnu = header
        .as_gnu()
        .ok_or_else(|| other("sparse entry type listed but not GNU header"))?;
    if !gnu.is_extended() {
        return Ok(());
    }
    let mut ext = tar::GnuExtSparseHeader::new();
    loop {
        if !read_block(decoded, ext.as_mut_bytes())? {
            return Err(other("failed to read extension"));
        }
        if !ext.is_extended() {
            return Ok(());
        }
    }
}

/// Whether `path` lies below the directory `dir` (`""`: the root).
fn below(path: &str, dir: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// A tar entry name as an absolute path: `./a//b/` is `/a/b`.
fn normalise(name: &str) -> String {
    let parts: Vec<&str> = name
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

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
