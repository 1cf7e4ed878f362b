use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::egress::Cidr;

const SECRET: &str = "s3cr3t-Tok3n";

/// A raw HTTP/1.1 server on `ip`: `answer(path)` is the whole response. Counts the
/// connections it accepts.
async fn serve(
    ip: &str,
    answer: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split(' ').nth(1).unwrap_or("/");
                let _ = socket.write_all(answer(path).as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (addr, connections)
}

fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn redirect(to: &str) -> String {
    format!(
        "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
}

/// `/r/N` redirects N times (relative), then answers `[]`.
fn chain(path: &str) -> String {
    match path.strip_prefix("/r/").and_then(|n| n.parse::<u32>().ok()) {
        Some(0) | None => ok("[]"),
        Some(n) => redirect(&format!("/r/{}", n - 1)),
    }
}

fn policy(deny: &[&str], allow: &[&str]) -> Policy {
    let cidrs = |l: &[&str]| l.iter().map(|c| c.parse::<Cidr>().unwrap()).collect();
    Policy::new(cidrs(deny), cidrs(allow))
}

async fn fetch(policy: Policy, uri: &str) -> Response {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::new(policy).unwrap();
    let options = JsonOptions {
        uri: uri.to_string(),
        timeout: Duration::from_secs(5),
    };
    let budget = crate::budget::Budget::new(1 << 20, Duration::from_secs(5));
    get(
        &client,
        &options,
        &Validators::default(),
        1 << 20,
        &mut budget.hold(),
    )
    .await
}

/// Headers, then `bytes` of body one at a time, `every` apart, then silence.
async fn trickle(bytes: usize, every: Duration) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0; 1024];
                let _ = socket.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                for _ in 0..bytes {
                    tokio::time::sleep(every).await;
                    let _ = socket.write_all(b" ").await;
                }
                tokio::time::sleep(Duration::from_secs(3600)).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_source_that_sends_nothing_fails_after_the_idle_bound_and_holds_only_what_it_sent() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::new(policy(&["127.0.0.0/8"], &["127.0.0.1/32"])).unwrap();
    let addr = trickle(5, Duration::from_millis(20)).await;
    let options = JsonOptions {
        uri: format!("http://{addr}/c.json"),
        timeout: Duration::from_secs(600),
    };
    // A budget of 8 KiB; reads fail after 300 ms without a byte.
    let budget = crate::budget::Budget::new(8 << 10, Duration::from_millis(300));
    let mut hold = budget.hold();
    let none = Validators::default();
    let done = std::sync::atomic::AtomicBool::new(false);
    let fetching = async {
        let r = get(&client, &options, &none, 1 << 20, &mut hold).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    };
    // While it trickles, the fetch holds one KiB of the eight, never more: others read on.
    // (looked at until the fetch ends, not at one moment: a loaded machine runs late)
    let watching = async {
        let mut least = budget.free();
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            least = least.min(budget.free());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        least
    };
    let (response, free) = tokio::join!(fetching, watching);
    assert_eq!(
        free, 7,
        "a trickling source held more than what it sent, or nothing"
    );
    let why = failure(response);
    assert!(why.contains("nothing arrived for 0.3s"), "{why}");
    drop(hold);
    assert_eq!(budget.free(), 8);
}

fn failure(r: Response) -> String {
    match r {
        Response::Failed(why) => why,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_denied_ip_literal_is_refused_before_any_connection() {
    let (addr, connections) = serve("127.0.0.1", |_| ok("[]")).await;
    let port = addr.port();
    for (host, refused) in [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("[::ffff:127.0.0.1]", "127.0.0.1"),
        ("[::1]", "::1"),
        ("169.254.169.254", "169.254.169.254"),
    ] {
        let uri = format!("http://{host}:{port}/c.json");
        assert_eq!(
            failure(fetch(Policy::default(), &uri).await),
            format!("fetching {uri}: address {refused} is not allowed (--json-deny-cidr)")
        );
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_name_is_judged_by_what_it_resolves_to() {
    let (addr, connections) = serve("127.0.0.1", |_| ok("[]")).await;
    let uri = format!("http://localhost:{}/c.json", addr.port());
    let why = failure(fetch(Policy::default(), &uri).await);
    assert!(
        why.ends_with("is not allowed (--json-deny-cidr)") && why.contains(": address "),
        "{why}"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 0);
    // Allowed, the same name is fetched.
    let allowed = policy(&["127.0.0.0/8", "::1/128"], &["127.0.0.0/8", "::1/128"]);
    assert!(matches!(fetch(allowed, &uri).await, Response::Body { .. }));
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn allowed_addresses_are_fetched_and_at_most_five_redirects_followed() {
    let (addr, _) = serve("127.0.0.1", chain).await;
    let allow = || policy(&["127.0.0.0/8"], &["127.0.0.0/8"]);
    for hops in 0..=MAX_REDIRECTS {
        let uri = format!("http://{addr}/r/{hops}");
        match fetch(allow(), &uri).await {
            Response::Body { data, .. } => assert_eq!(data, b"[]"),
            other => panic!("{hops} redirects: {other:?}"),
        }
    }
    let uri = format!("http://{addr}/r/{}", MAX_REDIRECTS + 1);
    assert_eq!(
        failure(fetch(allow(), &uri).await),
        format!("fetching {uri}: more than 5 redirects (the most a json channel follows)")
    );
}

#[tokio::test]
async fn every_redirect_hop_is_checked() {
    // Allowed: 127.0.0.2 only. Its server redirects to a denied IP literal, and to a
    // name that resolves to a denied address.
    let (denied, connections) = serve("127.0.0.1", |_| ok("[]")).await;
    let port = denied.port();
    let (addr, _) = serve("127.0.0.2", move |path| match path {
        "/to-ip" => redirect(&format!("http://127.0.0.1:{port}/{SECRET}")),
        "/to-mapped" => redirect(&format!("http://[::ffff:127.0.0.1]:{port}/")),
        _ => redirect(&format!("http://localhost:{port}/{SECRET}")),
    })
    .await;
    let only_2 = || policy(&["127.0.0.0/8", "::1/128"], &["127.0.0.2/32"]);
    for path in ["to-ip", "to-mapped", "to-name"] {
        let uri = format!("http://{addr}/{path}");
        assert_eq!(
            failure(fetch(only_2(), &uri).await),
            format!("fetching {uri}: address 127.0.0.1 is not allowed (--json-deny-cidr)"),
            "{path}"
        );
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn failure_messages_carry_no_byte_of_the_response() {
    let (addr, _) = serve("127.0.0.1", |path| match path {
        "/status" => format!(
            "HTTP/1.1 500 {SECRET}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{SECRET}",
            SECRET.len()
        ),
        "/odd-status" => format!("HTTP/1.1 599 {SECRET}\r\ncontent-length: 0\r\n\r\n"),
        "/chunks" => {
            format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{SECRET}\r\n{SECRET}\r\n")
        }
        "/scheme" => redirect(&format!("ftp://{SECRET}/")),
        "/garbage" => format!("{SECRET} {SECRET}\r\n\r\n"),
        "/header" => format!("HTTP/1.1 200 OK\r\n{SECRET}\r\n\r\n"),
        "/length" => format!("HTTP/1.1 200 OK\r\ncontent-length: {SECRET}\r\n\r\n"),
        _ => ok("[]"),
    })
    .await;
    let allow = || policy(&["127.0.0.0/8"], &["127.0.0.1/32"]);
    for path in [
        "status",
        "odd-status",
        "chunks",
        "scheme",
        "garbage",
        "header",
        "length",
    ] {
        let why = failure(fetch(allow(), &format!("http://{addr}/{path}")).await);
        assert!(!why.contains("s3cr3t"), "{path}: {why}");
    }
}

#[tokio::test]
async fn a_failure_toward_a_private_address_says_nothing_of_what_answered() {
    let (addr, _) = serve("127.0.0.1", |path| match path {
        "/status" => "HTTP/1.1 503 Busy\r\ncontent-length: 0\r\n\r\n".into(),
        "/big" => "HTTP/1.1 200 OK\r\ncontent-length: 99999999\r\n\r\n".into(),
        _ => ok("[]"),
    })
    .await;
    // Not denied, not allowed by name: reachable, but what answers is withheld.
    let open = || policy(&[], &[]);
    for path in ["status", "big"] {
        let uri = format!("http://{addr}/{path}");
        assert_eq!(
            failure(fetch(open(), &uri).await),
            format!("fetching {uri}: {PRIVATE}")
        );
    }
    // Nothing listens there: no connect error either.
    let closed = format!("http://127.0.0.1:{}/", addr.port().wrapping_add(1));
    assert_eq!(
        failure(fetch(open(), &closed).await),
        format!("fetching {closed}: {PRIVATE}")
    );
    // Allowed by --json-allow-cidr, the operator's admin vouched for it: the cause shows.
    let vouched = policy(&[], &["127.0.0.0/8"]);
    let why = failure(fetch(vouched, &format!("http://{addr}/status")).await);
    assert!(
        why.ends_with("the server answered HTTP 503 Service Unavailable"),
        "{why}"
    );
}
