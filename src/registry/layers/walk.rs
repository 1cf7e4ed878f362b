//! The tar stream of one layer walked entry by entry for the file, with the bounds the
//! layer module's notes give: each extension record sized before it is read, whiteouts
//! and opaque directories applied as the walk passes them.

use std::io::{self, Read};

use super::{Found, LayerError, MAX_LONG_NAME, MAX_PAX_RECORD, Reserve};
use crate::channel::changelogs::Changelogs;

/// Why a walk stopped: the stream could not be read, or the layer breaks a bound.
pub(super) enum Walk {
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
pub(super) fn walk(
    mut decoded: impl Read,
    path: &str,
    digest: &str,
    max_file: u64,
    reserve: &mut Reserve<'_>,
    mut changelogs: Option<&mut Changelogs>,
) -> Result<Found, Walk> {
    let mut gone = false;
    // With changelogs wanted, the walk goes on past the file to the layer's end.
    let mut file = None;
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
            let data = read_exactly(&mut decoded, size)?;
            skip(&mut decoded, padded(size)?.saturating_sub(size))?;
            if changelogs.is_none() {
                return Ok(Found::File(data));
            }
            file = Some(data);
            continue;
        }
        if let (Some(logs), Some(version)) =
            (changelogs.as_deref_mut(), Changelogs::version_of(&name))
            && kind.is_file()
            && logs.wants(version, size)
        {
            reserve(size).map_err(|why| Walk::Layer(LayerError::NoRoom { why }))?;
            let data = read_exactly(&mut decoded, size)?;
            skip(&mut decoded, padded(size)?.saturating_sub(size))?;
            logs.add(version, &data);
            continue;
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
    Ok(match file {
        Some(data) => Found::File(data),
        None if gone => Found::Gone,
        None => Found::Absent,
    })
}

/// Exactly `size` bytes of the stream (an entry's data).
fn read_exactly(decoded: &mut impl Read, size: u64) -> Result<Vec<u8>, Walk> {
    let mut data = Vec::new();
    decoded.take(size).read_to_end(&mut data)?;
    if (data.len() as u64) < size {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    Ok(data)
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
