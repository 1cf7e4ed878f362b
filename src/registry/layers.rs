//! One layer searched for the channel file: a blocking `Read` of the blob (run in a
//! blocking task), decompressed and walked as a tar stream entry by entry, so memory stays
//! flat whatever the layer's size. Whiteouts are honoured as the OCI image spec writes them:
//! `.wh.<name>` deletes `<name>` of the layers below, `.wh..wh..opq` hides everything below
//! its directory. The blob is read to its end and checked against its digest.

use std::io::{self, Read};

use ring::digest;

use super::manifest::Compression;

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
    let mut hashed = Hashed {
        inner: blob,
        hash: digest::Context::new(&digest::SHA256),
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
            Compression::Gzip => Box::new(flate2::read::GzDecoder::new(&mut hashed)),
            Compression::Zstd => Box::new(
                ruzstd::decoding::StreamingDecoder::new(&mut hashed).map_err(|e| corrupt(&e))?,
            ),
        };
        let mut counted = Counted {
            inner: decoded,
            left: bounds.layer_budget,
            exceeded: false,
        };
        let result = walk(&mut counted, path, bounds.max_file);
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
    // The rest of the blob: its digest covers every byte.
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

fn walk(decoded: impl Read, path: &str, max_file: u64) -> Result<Found, Walk> {
    let mut archive = tar::Archive::new(decoded);
    let mut gone = false;
    for entry in archive.entries()? {
        let entry = entry?;
        let name = normalise(&entry.path()?.to_string_lossy());
        let kind = entry.header().entry_type();
        if name == path {
            if !kind.is_file() {
                return Err(Walk::Layer(LayerError::NotRegular { path: path.into() }));
            }
            let mut data = Vec::new();
            entry
                .take(max_file.saturating_add(1))
                .read_to_end(&mut data)?;
            if data.len() as u64 > max_file {
                return Err(Walk::Layer(LayerError::FileTooLarge {
                    path: path.into(),
                    limit: max_file,
                }));
            }
            return Ok(Found::File(data));
        }
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
    hash: digest::Context,
    read: u64,
    size: u64,
}

impl<R: Read> Hashed<R> {
    fn matches(self, expected: &str) -> bool {
        let hex: String = self
            .hash
            .finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.read == self.size && expected == format!("sha256:{hex}")
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
