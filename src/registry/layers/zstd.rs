//! A zstd layer, frame after frame. ruzstd's `StreamingDecoder` reads one frame and keeps
//! as much history as the frame declares (up to 100 MiB, or the whole content for a
//! single-segment frame): each frame's header is read here first and a window over
//! [`MAX_ZSTD_WINDOW`] refused before the decoder is given anything.

use std::io::{self, Read};

use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// The largest window a frame may declare: what `zstd -19` and containerd's encoder write
/// (`zstd --ultra -20` and above, or `--long`, write more and are refused).
pub const MAX_ZSTD_WINDOW: u64 = 8 << 20;

const MAGIC: u32 = 0xFD2F_B528;
const SKIPPABLE: std::ops::RangeInclusive<u32> = 0x184D_2A50..=0x184D_2A5F;

/// A frame whose window is over the cap, carried through the `Read` chain.
#[derive(Debug)]
pub struct WindowTooLarge(pub u64);

impl std::fmt::Display for WindowTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a zstd frame with a {}-byte window, over the {MAX_ZSTD_WINDOW}-byte cap",
            self.0
        )
    }
}

impl std::error::Error for WindowTooLarge {}

/// The decompressed content of every frame of `source`, one after another.
pub struct Frames<R> {
    source: R,
    decoder: FrameDecoder,
    /// A frame is being decoded (its header was read).
    in_frame: bool,
    frames: u64,
}

impl<R: Read> Frames<R> {
    pub fn new(source: R) -> Self {
        Frames {
            source,
            decoder: FrameDecoder::new(),
            in_frame: false,
            frames: 0,
        }
    }
}

impl<R: Read> Read for Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_frame {
                // As `StreamingDecoder::read`: decode until the bytes asked for can be
                // collected (the window stays behind) or the frame ends.
                while self.decoder.can_collect() < buf.len() && !self.decoder.is_finished() {
                    let wanted = buf.len().saturating_sub(self.decoder.can_collect());
                    self.decoder
                        .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBytes(wanted))
                        .map_err(io::Error::other)?;
                }
                let n = self.decoder.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                self.in_frame = false;
            }
            match next_frame(&mut self.source)? {
                Next::End if self.frames == 0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "no zstd frame in the stream",
                    ));
                }
                Next::End => return Ok(0),
                Next::Skip(length) => {
                    let n = io::copy(&mut (&mut self.source).take(length), &mut io::sink())?;
                    if n < length {
                        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
                    }
                }
                Next::Frame { header, window } => {
                    if window > MAX_ZSTD_WINDOW {
                        return Err(io::Error::other(WindowTooLarge(window)));
                    }
                    // The header read here is the whole of what `init` reads.
                    self.decoder
                        .init(header.as_slice())
                        .map_err(io::Error::other)?;
                    self.in_frame = true;
                    self.frames = self.frames.saturating_add(1);
                }
            }
        }
    }
}

enum Next {
    /// The stream ended at a frame's boundary.
    End,
    /// A skippable frame of this many bytes after its header.
    Skip(u64),
    /// A frame's header (at most 14 bytes) and the window it declares.
    Frame { header: Vec<u8>, window: u64 },
}

/// Reads a frame header (the zstd format, section Frame_Header).
fn next_frame(source: &mut impl Read) -> io::Result<Next> {
    let mut magic = [0u8; 4];
    let first = source.read(&mut magic)?;
    if first == 0 {
        return Ok(Next::End);
    }
    source.read_exact(magic.get_mut(first..).unwrap_or_default())?;
    let magic_number = u32::from_le_bytes(magic);
    if SKIPPABLE.contains(&magic_number) {
        let mut length = [0u8; 4];
        source.read_exact(&mut length)?;
        return Ok(Next::Skip(u64::from(u32::from_le_bytes(length))));
    }
    if magic_number != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a zstd frame (magic number {magic_number:#010x})"),
        ));
    }
    let mut header = magic.to_vec();
    let mut byte = [0u8; 1];
    source.read_exact(&mut byte)?;
    let [descriptor] = byte;
    header.push(descriptor);
    let single_segment = descriptor & 0x20 != 0;
    let window_descriptor = if single_segment {
        None
    } else {
        source.read_exact(&mut byte)?;
        header.extend_from_slice(&byte);
        let [w] = byte;
        Some(w)
    };
    let dictionary_bytes: usize = match descriptor & 0x3 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => 4,
    };
    let content_size_bytes = match descriptor >> 6 {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let mut rest = [0u8; 12];
    let rest = rest
        .get_mut(..dictionary_bytes.saturating_add(content_size_bytes))
        .unwrap_or_default();
    source.read_exact(rest)?;
    header.extend_from_slice(rest);
    let window = match window_descriptor {
        // Window_Size = (1 << (10 + Exponent)) * (1 + Mantissa / 8), at most 2^41 * 15/8.
        Some(w) => {
            let base = 1u64 << u32::from(w >> 3).saturating_add(10);
            base.saturating_add((base >> 3).saturating_mul(u64::from(w & 0x7)))
        }
        // Single segment: the window is the whole content.
        None => {
            let mut size = [0u8; 8];
            let field = rest.get(dictionary_bytes..).unwrap_or_default();
            for (to, from) in size.iter_mut().zip(field) {
                *to = *from;
            }
            let size = u64::from_le_bytes(size);
            // The two-byte form counts from 256.
            if content_size_bytes == 2 {
                size.saturating_add(256)
            } else {
                size
            }
        }
    };
    Ok(Next::Frame { header, window })
}
