//! The webhook behind the bounded server, against raw TCP peers: the token is checked before
//! a byte of the body is read, and an authorised body that drips ends at the request
//! timeout. The kube client is a fake that no test here reaches.

use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::http_server::tests::connect_from;
use crate::http_server::{self, Limits};

const PATIENCE: Duration = Duration::from_secs(10);
const TOKEN: &str = "s3cret";

fn limits() -> Limits {
    Limits {
        request: Duration::from_millis(300),
        ..Limits::default()
    }
}

/// A webhook on 127.0.0.1 whose token file holds [`TOKEN`].
async fn start(name: &str) -> (SocketAddr, Arc<Metrics>) {
    start_with(name, limits()).await
}

async fn start_with(name: &str, limits: Limits) -> (SocketAddr, Arc<Metrics>) {
    let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    // The handle is dropped: a request to the fake API server would fail, and none is made.
    let client = Client::new(service, "default");
    let dir = std::env::temp_dir().join(format!("hook-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let metrics = Arc::new(Metrics::default());
    let hook = Arc::new(Hook::new(client, vec![], token_file, metrics.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(http_server::serve(
        listener,
        router(hook),
        RESERVED,
        limits,
        std::future::pending(),
    ));
    (addr, metrics)
}

/// Sends `head` (and no body), then reads the answer until the connection closes.
async fn answer_to(addr: SocketAddr, head: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    read_answer(&mut stream).await
}

/// What the server sends until it closes the connection (which it must within [`PATIENCE`]).
async fn read_answer(from: &mut (impl AsyncRead + Unpin)) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, from.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "answered and closed");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Asserts that the metrics hold `line`.
#[track_caller]
fn assert_counted(metrics: &Metrics, line: &str) {
    let text = metrics.encode();
    assert!(text.contains(line), "{text}");
}

/// An authorised POST of `body` (an empty notification is accepted with `202`).
fn authorised_post(body: &str) -> String {
    format!(
        "POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn a_token_less_post_declaring_100_mib_is_401_without_its_body_being_read() {
    let (addr, metrics) = start("no-token").await;
    for authorization in ["", "Authorization: Bearer wrong\r\n"] {
        // Content-Length: 100 MiB, and no byte of it sent: the answer cannot wait for it.
        let head = format!(
            "POST {PATH} HTTP/1.1\r\nHost: x\r\n{authorization}Content-Length: 104857600\r\n\r\n"
        );
        let answer = answer_to(addr, &head).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    assert_counted(
        &metrics,
        "webhook_requests_total{result=\"unauthorized\"} 2",
    );
}

#[tokio::test]
async fn an_authorised_body_that_drips_ends_at_the_request_timeout() {
    let (addr, _) = start("drip").await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 1000\r\n\r\n"
    );
    let answer = http_server::tests::drip(stream, head.as_bytes(), b'{').await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
}

#[tokio::test]
async fn an_authorised_body_is_read_and_one_over_1_mib_is_413() {
    let (addr, _) = start("read").await;
    let head = authorised_post(r#"{"events": []}"#);
    let answer = answer_to(addr, &head).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    assert!(answer.contains(r#"{"channels":0,"pushes":0}"#), "{answer}");

    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let send = tokio::spawn(async move {
        let _ = writer.write_all(&vec![b' '; MAX_BODY + 1]).await;
    });
    let answer = read_answer(&mut reader).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    send.abort();
}

#[tokio::test]
async fn a_peer_with_300_idle_connections_leaves_a_registrys_pushes_served() {
    let (addr, metrics) = start_with(
        "idle",
        Limits {
            // The idle connections outlive the test.
            header_read: Duration::from_secs(120),
            ..limits()
        },
    )
    .await;
    // One pod opens 300 connections and sends nothing: more than the whole cap of 256.
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(connect_from("127.0.0.2", addr).await);
    }
    // Its last connection has been through the accept loop once it is closed (refused).
    let mut last = connect_from("127.0.0.2", addr).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENCE, last.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "a connection past the peer's share is refused"
    );
    // A registry sends several notifications at once, more than the reserve gives one peer.
    let head = authorised_post(r#"{"events": []}"#);
    let mut pushes = Vec::new();
    for _ in 0..4 {
        let mut stream = connect_from("127.0.0.3", addr).await;
        // (a refused connection may be closed already)
        let _ = stream.write_all(head.as_bytes()).await;
        pushes.push(stream);
    }
    for mut stream in pushes {
        let answer = read_answer(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    }
    assert_counted(&metrics, "webhook_requests_total{result=\"accepted\"} 4");
    drop(idle);
}
