//! A hostile registry on the node's address, for the chart-deployed attacks: plain HTTP (the
//! chart is installed with `allowInsecureRegistries`), one image per attack, each a valid
//! OCI image whose one layer is built to cost its reader memory or time:
//!
//! - `longname:v1`: a gzip layer (~260 KiB) whose tar starts with a GNU long-name record of
//!   256 MiB, then `/channel.json`;
//! - `zstdwindow:v1`: a zstd layer (~10 KiB) whose frame declares a 64 MiB window and
//!   decompresses to a 100 MiB file before `/channel.json` (a decoder that honours the
//!   window keeps 64 MiB of it per pull);
//! - `drip:v1`: a layer sent one byte every 100 ms (below any idle bound, past any timeout).

use std::io::{BufRead, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// `host:port` of the registry, on the node's address.
pub struct Hostile {
    pub address: String,
}

struct Image {
    manifest: Vec<u8>,
    manifest_digest: String,
    layer: Vec<u8>,
    layer_digest: String,
}

fn sha256(data: &[u8]) -> String {
    rancheros_operator::registry::sha256(data)
}

fn image(layer: Vec<u8>, media_type: &str) -> Image {
    let layer_digest = sha256(&layer);
    let config = b"{}";
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha256(config), "size": config.len()},
        "layers": [{"mediaType": media_type, "digest": layer_digest, "size": layer.len()}],
    })
    .to_string()
    .into_bytes();
    Image {
        manifest_digest: sha256(&manifest),
        manifest,
        layer,
        layer_digest,
    }
}

/// A tar header block (ustar) for `name`, of `size` bytes and type `kind`.
fn header(name: &str, size: u64, kind: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h
}

fn padded(data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(data.len().div_ceil(512) * 512, 0);
    v
}

/// The tail of every hostile layer: `/channel.json` and the end of the archive.
fn channel_file() -> Vec<u8> {
    let data = br#"[{"metadata":{"name":"hostile"},"spec":{"version":"v1","type":"container"}}]"#;
    let mut tail = header("channel.json", data.len() as u64, b'0').to_vec();
    tail.extend(padded(data));
    tail.extend([0u8; 1024]);
    tail
}

fn long_name_layer() -> Vec<u8> {
    const NAME: usize = 256 << 20;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&header("././@LongLink", NAME as u64, b'L'))
        .unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..NAME / chunk.len() {
        gz.write_all(&chunk).unwrap();
    }
    gz.write_all(&header("x", 0, b'0')).unwrap();
    gz.write_all(&channel_file()).unwrap();
    gz.finish().unwrap()
}

/// A zstd frame by hand: a window of 2^(10 + `exponent`) bytes, raw blocks for the tar
/// headers, RLE blocks for a 100 MiB file of `a`.
fn zstd_window_layer(exponent: u8) -> Vec<u8> {
    const FILE: u64 = 100 << 20;
    const BLOCK: u64 = 128 << 10;
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    // Frame header: no checksum, no content size, not single segment: a window descriptor.
    out.push(0x00);
    // Window_Descriptor: the exponent (16: 2^(10+16) = 64 MiB), mantissa 0.
    out.push(exponent << 3);
    let block = |out: &mut Vec<u8>, last: bool, kind: u32, size: u32, body: &[u8]| {
        let h = u32::from(last) | (kind << 1) | (size << 3);
        out.extend(&h.to_le_bytes()[..3]);
        out.extend(body);
    };
    let head = header("pad", FILE, b'0');
    block(&mut out, false, 0, 512, &head);
    for _ in 0..FILE / BLOCK {
        block(&mut out, false, 1, BLOCK as u32, b"a");
    }
    let tail = channel_file();
    block(&mut out, true, 0, tail.len() as u32, &tail);
    out
}

impl Hostile {
    /// Builds the images and serves them on `ip` (the node's address), on a thread per
    /// connection, for as long as the test runs.
    pub fn serve(ip: &str) -> Self {
        let images: Arc<Vec<(&str, Image)>> = Arc::new(vec![
            (
                "longname",
                image(
                    long_name_layer(),
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                ),
            ),
            (
                "zstdwindow",
                image(
                    zstd_window_layer(16),
                    "application/vnd.oci.image.layer.v1.tar+zstd",
                ),
            ),
            (
                // At the cap (8 MiB): read, within the decoders' bound (benches only).
                "zstdcap",
                image(
                    zstd_window_layer(13),
                    "application/vnd.oci.image.layer.v1.tar+zstd",
                ),
            ),
            (
                "drip",
                image(
                    vec![0u8; 1 << 20],
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                ),
            ),
        ]);
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let images = images.clone();
                std::thread::spawn(move || answer(stream, &images));
            }
        });
        Hostile {
            address: format!("{ip}:{port}"),
        }
    }
}

fn answer(stream: TcpStream, images: &[(&str, Image)]) {
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    // The rest of the head.
    let mut rest = String::new();
    while reader.read_line(&mut rest).is_ok_and(|n| n > 2) {
        rest.clear();
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let mut out = &stream;
    let found = images
        .iter()
        .find(|(name, _)| path.starts_with(&format!("/v2/{name}/")));
    let Some((name, img)) = found else {
        let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    if path.contains("/manifests/") {
        let body: &[u8] = if method == "HEAD" { b"" } else { &img.manifest };
        let _ = write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nDocker-Content-Digest: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            img.manifest_digest,
            img.manifest.len()
        );
        let _ = out.write_all(body);
        return;
    }
    if !path.ends_with(&img.layer_digest) {
        let _ = out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        return;
    }
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        img.layer.len()
    );
    if *name == "drip" {
        for b in &img.layer {
            std::thread::sleep(Duration::from_millis(100));
            if out.write_all(&[*b]).is_err() {
                return;
            }
        }
        return;
    }
    let _ = out.write_all(&img.layer);
}
