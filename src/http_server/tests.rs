//! Hostile peers against the bounded server, in process: raw TCP streams on 127.0.0.1 (and
//! 127.0.0.2 for a second peer address) against a server whose limits are shrunk to
//! fractions of a second. The assertions are on outcomes (closed, refused, status codes);
//! the time bounds are generous upper bounds, never thresholds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::*;

/// Far beyond any shrunken limit: a peer still connected after this was not bounded.
const PATIENCE: Duration = Duration::from_secs(10);
const PROBES: &[&str] = &["/healthz"];

fn quick() -> Limits {
    Limits {
        header_read: Duration::from_millis(300),
        max_head: MIN_HEAD_BYTES,
        max_connections: 8,
        max_connections_per_peer: 8,
        request: Duration::from_millis(300),
        write_stall: Duration::from_millis(300),
        reserved_connections: 0,
        reserved_per_peer: 0,
        reserved_header_read: Duration::from_millis(300),
    }
}

static CHUNK: [u8; 64 * 1024] = [0; 64 * 1024];

fn app() -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(|| async { "metrics\n" }))
        .route("/stall", get(std::future::pending::<&'static str>))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                "slow\n"
            }),
        )
        .route(
            "/endless",
            get(|| async {
                let chunks = futures::stream::repeat_with(|| {
                    Ok::<_, Infallible>(Bytes::from_static(&CHUNK))
                });
                Body::from_stream(chunks)
            }),
        )
        .route(
            "/echo",
            post(|body: Body| async move {
                match axum::body::to_bytes(body, 1 << 20).await {
                    Ok(bytes) => format!("{}\n", bytes.len()),
                    Err(_) => "unread\n".into(),
                }
            }),
        )
}

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<io::Result<()>>,
}

async fn start(limits: Limits, reserved_paths: &'static [&'static str]) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, app(), reserved_paths, limits, async move {
        let _ = stopped.await;
    }));
    Server { addr, stop, task }
}

/// A connection from `from` (a loopback address: all of 127/8 is loopback on Linux).
pub(crate) async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A connection from 127.0.0.1 that has sent `bytes`.
async fn sent(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = connect_from("127.0.0.1", addr).await;
    stream.write_all(bytes).await.unwrap();
    stream
}

/// A connection that has sent the start of a request head and never its end.
async fn slowloris(from: &str, addr: SocketAddr) -> TcpStream {
    let mut stream = connect_from(from, addr).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    stream
}

/// `n` slowloris connections from `from`, then a pause for the server to accept them all.
async fn slowlorises(from: &str, addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(slowloris(from, addr).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    held
}

/// Everything the server sends until it closes the connection, or `None` if it is still
/// open after `within`. A reset counts as closed.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| seen)
}

fn status_of(answer: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(answer.get(..12)?).ok()?;
    text.strip_prefix("HTTP/1.1 ")?.parse().ok()
}

/// One request on a connection of its own, `Connection: close`: the status and the text.
async fn request(from: &str, addr: SocketAddr, path: &str) -> (Option<u16>, String) {
    let mut stream = connect_from(from, addr).await;
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    // A refused connection may already be closed: then there is no answer.
    let _ = stream.write_all(head.as_bytes()).await;
    let answer = closed_within(&mut stream, PATIENCE)
        .await
        .expect("the server closes a Connection: close request");
    (
        status_of(&answer),
        String::from_utf8_lossy(&answer).into_owned(),
    )
}

/// Asserts that the server still answers a probe (on a connection of its own).
async fn assert_healthz_answers(addr: SocketAddr) {
    assert_eq!(request("127.0.0.1", addr, "/healthz").await.0, Some(200));
}

#[tokio::test]
async fn slowloris_connections_are_closed_at_the_header_read_timeout() {
    let server = start(quick(), &[]).await;
    let mut peers = Vec::new();
    for _ in 0..6 {
        let mut stream = slowloris("127.0.0.1", server.addr).await;
        // Each keeps dripping header bytes: progress does not extend the timeout.
        let drip = tokio::spawn(async move {
            for _ in 0..100 {
                if stream.write_all(b"a").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            stream
        });
        peers.push(drip);
    }
    for drip in peers {
        let mut stream = drip.await.unwrap();
        let answer = closed_within(&mut stream, PATIENCE).await;
        let answer = answer.expect("a slow head is closed by the header-read timeout");
        assert_ne!(status_of(&answer), Some(200), "{answer:?}");
    }
    // The server is still there for a real request.
    assert_healthz_answers(server.addr).await;
}

#[tokio::test]
async fn an_oversized_head_is_refused_with_431_and_closed() {
    let server = start(quick(), &[]).await;
    let stream = sent(server.addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ").await;
    // 4 MiB of one header, sent while the server answers: it reads no more than its
    // buffer's worth, so the write stops on a reset or a full window.
    let (mut reader, mut writer) = stream.into_split();
    let send = tokio::spawn(async move {
        let mut sent = 0usize;
        for _ in 0..64 {
            match tokio::time::timeout(Duration::from_secs(2), writer.write_all(&[b'a'; 64 * 1024]))
                .await
            {
                Ok(Ok(())) => sent += 64 * 1024,
                _ => break,
            }
        }
        sent
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, reader.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection is closed");
    assert!(
        answer.is_empty() || status_of(&answer) == Some(431),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    send.await.unwrap();
    assert_healthz_answers(server.addr).await;
}

#[tokio::test]
async fn connections_over_the_cap_are_refused_at_once_and_healthz_answers_once_it_frees() {
    let limits = Limits {
        header_read: Duration::from_secs(1),
        ..quick()
    };
    let cap = limits.max_connections;
    let server = start(limits, &[]).await;
    // The server accepts them all before the next one.
    let mut holders = slowlorises("127.0.0.1", server.addr, cap).await;
    let mut excess = connect_from("127.0.0.1", server.addr).await;
    let _ = excess
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let refused = closed_within(&mut excess, Duration::from_millis(900)).await;
    // Closed before any slowloris timed out, and without an answer: refused, not queued.
    assert_eq!(
        refused,
        Some(Vec::new()),
        "the excess connection is closed at once"
    );
    for holder in &mut holders {
        assert!(closed_within(holder, PATIENCE).await.is_some());
    }
    assert_healthz_answers(server.addr).await;
}

#[tokio::test]
async fn the_probes_keep_a_reserve_that_one_peer_cannot_fill() {
    let limits = Limits {
        header_read: Duration::from_secs(5),
        max_connections: 4,
        max_connections_per_peer: 4,
        reserved_connections: 4,
        reserved_per_peer: 2,
        reserved_header_read: Duration::from_secs(5),
        ..quick()
    };
    let server = start(limits, PROBES).await;
    let mut held = slowlorises("127.0.0.1", server.addr, 4).await;
    // A second peer takes its share of the reserve, and no more.
    held.extend(slowlorises("127.0.0.2", server.addr, 2).await);
    let (status, answer) = request("127.0.0.2", server.addr, "/healthz").await;
    assert_eq!(status, None, "refused: {answer}");
    // The kubelet's address still has its share: the probe is answered, one request a
    // connection; anything but a probe is not served from the reserve.
    let (status, answer) = request("127.0.0.1", server.addr, "/healthz").await;
    assert_eq!(status, Some(200), "{answer}");
    let (status, answer) = request("127.0.0.1", server.addr, "/metrics").await;
    assert_eq!(status, Some(503), "{answer}");
    assert!(answer.contains("too many connections"), "{answer}");
}

#[tokio::test]
async fn one_peer_holds_at_most_its_share_and_another_peer_is_served() {
    let limits = Limits {
        header_read: Duration::from_secs(30),
        max_connections_per_peer: 3,
        ..quick()
    };
    let share = limits.max_connections_per_peer;
    let server = start(limits, &[]).await;
    let held = slowlorises("127.0.0.2", server.addr, share).await;
    // Past its share the peer is refused (closed without an answer), though the cap of 8
    // is not full; the connections it holds stay open.
    let (status, answer) = request("127.0.0.2", server.addr, "/healthz").await;
    assert_eq!(status, None, "refused: {answer}");
    // Another address is served.
    let (status, answer) = request("127.0.0.3", server.addr, "/healthz").await;
    assert_eq!(status, Some(200), "{answer}");
    drop(held);
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let server = start(quick(), &[]).await;
    let mut stream = sent(server.addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.ends_with(b"ok\n") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "answered before closing");
        answer.extend_from_slice(&buf[..n]);
    }
    assert_eq!(status_of(&answer), Some(200));
    // Kept alive, then idle: closed, with nothing more sent.
    assert_eq!(closed_within(&mut stream, PATIENCE).await, Some(Vec::new()));
}

#[tokio::test]
async fn a_stalled_handler_is_answered_503_at_the_request_timeout() {
    let server = start(quick(), &[]).await;
    let (status, answer) = request("127.0.0.1", server.addr, "/stall").await;
    assert_eq!(status, Some(503), "{answer}");
    assert!(answer.contains("took too long"), "{answer}");
}

#[tokio::test]
async fn a_dripping_body_is_ended_at_the_request_timeout() {
    let server = start(quick(), &[]).await;
    let stream = connect_from("127.0.0.1", server.addr).await;
    let head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
    let answer = drip(stream, head, b'a').await;
    assert_eq!(
        status_of(&answer),
        Some(503),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// Sends `head`, then a body of 1000 `byte`s one every 20 ms, and reads the answer until
/// the server closes the connection (which it must within [`PATIENCE`]).
pub(crate) async fn drip(mut stream: TcpStream, head: &[u8], byte: u8) -> Vec<u8> {
    stream.write_all(head).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let drip = tokio::spawn(async move {
        for _ in 0..1000 {
            if writer.write_all(&[byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, reader.read_to_end(&mut answer)).await;
    drip.abort();
    assert!(read.is_ok(), "the connection is closed");
    answer
}

#[tokio::test]
async fn a_peer_that_never_reads_its_answer_is_closed() {
    let server = start(quick(), &[]).await;
    let mut stream = sent(server.addr, b"GET /endless HTTP/1.1\r\nHost: x\r\n\r\n").await;
    // Not reading: the endless answer fills the socket buffers and the server's writes
    // wait, until the write-stall timeout closes the connection.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // What was buffered drains, then the end.
    assert!(closed_within(&mut stream, PATIENCE).await.is_some());
}

#[tokio::test]
async fn shutdown_answers_the_request_under_way_then_returns() {
    let server = start(quick(), &[]).await;
    let addr = server.addr;
    let slow = tokio::spawn(async move { request("127.0.0.1", addr, "/slow").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.stop.send(()).unwrap();
    let (status, answer) = slow.await.unwrap();
    assert_eq!(status, Some(200), "{answer}");
    let returned = tokio::time::timeout(PATIENCE, server.task).await;
    assert!(matches!(returned, Ok(Ok(Ok(())))), "{returned:?}");
    // The port is closed.
    assert!(TcpStream::connect(addr).await.is_err());
}
