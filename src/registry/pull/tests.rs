//! Pulls against hostile registries on loopback (raw HTTP servers of the test's own).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::budget::Hold;
use crate::config::ImageRef;
use crate::egress::Policy;

/// A request's head, as text; `None`: the peer went away first.
async fn read_head(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&head).to_string())
}

/// A registry whose one layer is sent one byte every 20 ms (far inside the idle bound, far
/// outside any timeout). Counts the layer downloads it has open.
struct Dripping {
    addr: SocketAddr,
    open_layers: Arc<AtomicUsize>,
    layer_started: Arc<AtomicBool>,
}

async fn dripping_registry() -> Dripping {
    dripping_registry_of("application/vnd.oci.image.layer.v1.tar+gzip").await
}

/// [`dripping_registry`] with a layer of this media type.
async fn dripping_registry_of(media_type: &'static str) -> Dripping {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let layer = "sha256:".to_string() + &"ab".repeat(32);
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","layers":[{{"mediaType":"{media_type}","digest":"{layer}","size":1048576}}]}}"#,
        OCI_MANIFEST = manifest::OCI_MANIFEST
    );
    let digest = sha256(manifest.as_bytes());
    let open_layers = Arc::new(AtomicUsize::new(0));
    let layer_started = Arc::new(AtomicBool::new(false));
    let (open, started) = (open_layers.clone(), layer_started.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (manifest, digest, open, started) = (
                manifest.clone(),
                digest.clone(),
                open.clone(),
                started.clone(),
            );
            tokio::spawn(async move {
                let Some(head) = read_head(&mut socket).await else {
                    return;
                };
                let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                if path.contains("/blobs/") {
                    open.fetch_add(1, Ordering::SeqCst);
                    started.store(true, Ordering::SeqCst);
                    let _ = socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\n\r\n\x1f")
                        .await;
                    // Until the client closes: a write then fails.
                    loop {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        if socket.write_all(b"\x8b").await.is_err() {
                            break;
                        }
                    }
                    open.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
                let answer = if head.starts_with("HEAD") {
                    format!(
                        "HTTP/1.1 200 OK\r\ndocker-content-digest: {digest}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        manifest.len()
                    )
                } else {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{manifest}",
                        manifest::OCI_MANIFEST,
                        manifest.len()
                    )
                };
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    Dripping {
        addr,
        open_layers,
        layer_started,
    }
}

/// A client, the options of the image `a:v1` at `addr` and nothing known: what every pull
/// here shares.
struct Puller {
    client: Client,
    options: OciOptions,
    known: Validators,
    access: Access,
}

impl Puller {
    fn new(addr: SocketAddr, timeout: Duration) -> Puller {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Puller {
            client: Client::new(Policy::new(Vec::new(), Vec::new()), 512 << 20).unwrap(),
            options: OciOptions {
                insecure: true,
                ..OciOptions::of_image(ImageRef::parse(&format!("{addr}/a:v1")).unwrap(), timeout)
            },
            known: Validators::default(),
            access: Access::default(),
        }
    }

    /// A pull of at most 1 MiB whose data takes room in `hold`.
    async fn pull(&self, hold: &mut Hold) -> Response {
        pull(
            &self.client,
            &self.options,
            &self.access,
            &self.known,
            1 << 20,
            hold,
        )
        .await
    }

    /// Asserts that a pull into `hold` reads `data`.
    async fn assert_reads(&self, hold: &mut Hold, data: &[u8]) {
        match self.pull(hold).await {
            Response::Body { data: got, .. } => assert_eq!(got, data),
            other => panic!("{other:?}"),
        }
    }

    /// Asserts that a pull into `hold` fails for want of room in the data budget.
    async fn assert_no_room(&self, hold: &mut Hold) {
        match self.pull(hold).await {
            Response::Failed(why) => {
                assert!(why.contains("no room for more channel data"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// `n` pulls at once, each with a hold of one 16 MiB budget.
    async fn pull_at_once(&self, n: usize) -> Vec<Response> {
        let budget = crate::budget::Budget::new(16 << 20, crate::budget::IDLE);
        let mut holds: Vec<_> = (0..n).map(|_| budget.hold()).collect();
        futures::future::join_all(holds.iter_mut().map(|hold| self.pull(hold))).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_pull_stops_reading_its_layer_and_closes_the_connection_at_once() {
    let registry = dripping_registry().await;
    let puller = Puller::new(registry.addr, Duration::from_millis(700));
    for response in puller.pull_at_once(3).await {
        match response {
            Response::Failed(why) => assert!(why.contains("timed out after"), "{why}"),
            other => panic!("not a timeout: {other:?}"),
        }
    }
    assert!(registry.layer_started.load(Ordering::SeqCst));
    // The layer downloads end with their pulls (before the fix they went on until the
    // registry stopped dripping: 1 MiB at 50 bytes a second).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while registry.open_layers.load(Ordering::SeqCst) > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} layer downloads still open 5 s after their pulls timed out",
            registry.open_layers.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A registry serving one artifact whose layer is `data` (application/json).
async fn artifact_registry(data: &'static str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let layer = sha256(data.as_bytes());
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"{}","artifactType":"application/vnd.rancheros.channel.v1+json","layers":[{{"mediaType":"application/json","digest":"{layer}","size":{}}}]}}"#,
        manifest::OCI_MANIFEST,
        data.len()
    );
    let digest = sha256(manifest.as_bytes());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (manifest, digest) = (manifest.clone(), digest.clone());
            tokio::spawn(async move {
                let Some(head) = read_head(&mut socket).await else {
                    return;
                };
                let body = if head.contains("/blobs/") {
                    data
                } else {
                    &manifest
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ndocker-content-digest: {digest}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                    manifest::OCI_MANIFEST,
                    body.len(),
                    if head.starts_with("HEAD") { "" } else { body }
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_oci_pulls_data_takes_room_in_the_data_budget_json_fetches_share() {
    let data = r#"[{"metadata":{"name":"v1"},"spec":{"version":"v1"}}]"#;
    let puller = Puller::new(artifact_registry(data).await, Duration::from_secs(10));
    // A budget of 4 KiB whose reads give up after 300 ms without room.
    let budget = crate::budget::Budget::new(4 << 10, Duration::from_millis(300));

    // Room free: the data is read and held.
    let mut hold = budget.hold();
    puller.assert_reads(&mut hold, data.as_bytes()).await;
    assert_eq!(budget.free(), 3, "the pulled data holds 1 KiB of the 4");
    drop(hold);

    // Another sync (a json fetch, say) holds it all: the pull waits the idle bound, fails,
    // and holds nothing.
    let mut other = budget.hold();
    other.grow(4 << 10).await.unwrap();
    let mut hold = budget.hold();
    puller.assert_no_room(&mut hold).await;
    drop(other);
    assert_eq!(budget.free(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_layers_are_decoded_a_few_at_a_time_whatever_the_number_of_pulls() {
    let registry = dripping_registry_of("application/vnd.oci.image.layer.v1.tar+zstd").await;
    let puller = Puller::new(registry.addr, Duration::from_millis(1500));
    let most = Arc::new(AtomicUsize::new(0));
    let (seen, open) = (most.clone(), registry.open_layers.clone());
    // Watched until just before the pulls time out (then a waiting pull may start as one
    // ends, and the registry sees both for a moment).
    let watch = tokio::spawn(async move {
        let until = tokio::time::Instant::now() + Duration::from_millis(1200);
        while tokio::time::Instant::now() < until {
            seen.fetch_max(open.load(Ordering::SeqCst), Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    puller.pull_at_once(5).await;
    watch.await.unwrap();
    // Five pulls of a dripping layer: as many read at once as there are decoders.
    let most = most.load(Ordering::SeqCst);
    assert_eq!(most, ZSTD_DECODERS_AT_ONCE, "zstd layers read at once");
}

#[tokio::test]
async fn a_layers_file_takes_room_in_the_data_budget_before_it_is_read() {
    let file = format!("[{}]", vec![r#"{"metadata":{"name":"v"}}"#; 100].join(","));
    let puller = Puller::new(image_registry(&file).await, Duration::from_secs(10));
    let budget = crate::budget::Budget::new(4 << 10, Duration::from_millis(300));
    // 2 of the 4 KiB held elsewhere; the 2.6 KiB file (3 KiB of room) does not fit, and
    // is not read.
    let mut other = budget.hold();
    other.grow(2 << 10).await.unwrap();
    let mut hold = budget.hold();
    puller.assert_no_room(&mut hold).await;
    assert_eq!(budget.free(), 2, "the failed pull holds nothing");
    drop(other);
    puller.assert_reads(&mut hold, file.as_bytes()).await;
    assert_eq!(budget.free(), 1, "the file holds its 3 KiB");
}

/// A registry serving one image whose one gzip layer holds `/channel.json` = `file`.
async fn image_registry(file: &str) -> SocketAddr {
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(file.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, "channel.json", file.as_bytes())
        .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar.into_inner().unwrap()).unwrap();
    let layer: &'static [u8] = gz.finish().unwrap().leak();
    let manifest: &'static str = format!(
        r#"{{"schemaVersion":2,"mediaType":"{}","layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":{}}}]}}"#,
        manifest::OCI_MANIFEST,
        sha256(layer),
        layer.len()
    )
    .leak();
    let digest = sha256(manifest.as_bytes());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let digest = digest.clone();
            tokio::spawn(async move {
                let Some(head) = read_head(&mut socket).await else {
                    return;
                };
                let body: &[u8] = if head.contains("/blobs/") {
                    layer
                } else {
                    manifest.as_bytes()
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ndocker-content-digest: {digest}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    manifest::OCI_MANIFEST,
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                if !head.starts_with("HEAD") {
                    let _ = socket.write_all(body).await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    addr
}
