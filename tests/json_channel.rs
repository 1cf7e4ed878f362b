//! `type: json` channels against the local cluster: the operator fetches channel data
//! from a local HTTP server (run by the test), conditionally once it has a validator, and
//! turns every kind of failure into `FailedToSync` with its cause. The egress policy
//! (`--egress-deny-cidr`, `--egress-allow-cidr`) holds at every hop, and no failure shows
//! bytes of a response body.
//!
//! The operator runs on the host, like the servers: a server on a loopback address is one
//! the default policy refuses, a server on the node's own address (its InternalIP) one it
//! allows.

use crate::common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

const SYNC: Duration = Duration::from_secs(60);

/// Loopback is refused by default: tests that serve from loopback to try something else
/// than the policy allow it.
const ALLOW_LOOPBACK: &str = "--egress-allow-cidr=127.0.0.0/8";

/// A secret-looking string the test servers put in bodies that break a rule.
const SECRET: &str = "Tok3n-s3cr3t-Q9zX";

#[derive(Default)]
struct Server {
    port: u16,
    requests: AtomicUsize,
    not_modified: AtomicUsize,
}

async fn channel(State(s): State<Arc<Server>>, headers: HeaderMap) -> impl IntoResponse {
    s.requests.fetch_add(1, Ordering::SeqCst);
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some("\"rev-1\"")
    {
        s.not_modified.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, "\"rev-1\"")],
            String::new(),
        );
    }
    let body = channel_data(&[("web-a", "v1"), ("web-b", "v2")]).to_string();
    (StatusCode::OK, [(header::ETAG, "\"rev-1\"")], body)
}

/// `/r/NAME/N` redirects N times, then serves channel data with one version, NAME.
async fn chain(State(s): State<Arc<Server>>, Path((name, n)): Path<(String, u32)>) -> Response {
    s.requests.fetch_add(1, Ordering::SeqCst);
    match n.checked_sub(1) {
        Some(rest) => Redirect::to(&format!("/r/{name}/{rest}")).into_response(),
        None => channel_data(&[(&name, "v1")]).to_string().into_response(),
    }
}

/// `/to-loopback/PORT` redirects to channel data (version `loopback`) on 127.0.0.1:PORT.
async fn to_loopback(State(s): State<Arc<Server>>, Path(port): Path<u16>) -> Redirect {
    s.requests.fetch_add(1, Ordering::SeqCst);
    Redirect::to(&format!("http://127.0.0.1:{port}/r/loopback/0"))
}

/// Channel data that breaks a rule with [`SECRET`] in the offending place.
async fn hostile(Path(case): Path<String>) -> String {
    let item = |name: &str, labels: serde_json::Value, type_: &str| {
        json!([{"metadata": {"name": name, "labels": labels},
                "spec": {"type": type_, "metadata": {"uri": "u", "upgradeImage": "i"}}}])
        .to_string()
    };
    match case.as_str() {
        "name" => item(SECRET, json!({}), "iso"),
        "type" => item("a", json!({}), SECRET),
        "label-key" => item("a", json!({format!("{SECRET}!"): "v"}), "iso"),
        "label-value" => item("a", json!({"k": format!("{SECRET}!")}), "iso"),
        "syntax" => format!("[{{\"metadata\": {{\"name\": \"a\"}}, \"spec\": {SECRET}}}]"),
        _ => format!("{SECRET}: {SECRET}"),
    }
}

/// Headers at once, then one byte of body every 2 s, for ten minutes.
async fn trickle(State(s): State<Arc<Server>>) -> Response {
    s.requests.fetch_add(1, Ordering::SeqCst);
    let bytes = futures::stream::unfold(0u32, |n| async move {
        if n > 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        (n < 300).then(|| {
            let byte = if n == 0 { "[" } else { " " };
            (Ok::<_, std::convert::Infallible>(byte), n + 1)
        })
    });
    axum::body::Body::from_stream(bytes).into_response()
}

/// Serves the test routes on an ephemeral port of `ip`; returns the base URL.
async fn serve_on(ip: &str) -> (String, Arc<Server>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(Server {
        port: addr.port(),
        ..Default::default()
    });
    let app = Router::new()
        .route("/channel.json", get(channel))
        .route("/r/{name}/{n}", get(chain))
        .route("/hostile/{case}", get(hostile))
        .route("/to-loopback/{port}", get(to_loopback))
        .route("/missing.json", get(|| async { StatusCode::NOT_FOUND }))
        .route(
            "/slow.json",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "[]"
            }),
        )
        .route(
            "/big.json",
            get(|| async { format!("[{}]", " ".repeat(5000)) }),
        )
        .route("/trickle.json", get(trickle))
        .route(
            "/broken.json",
            get(|| async { "[{\"metadata\": {\"name\": \"x\"}" }),
        )
        .with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), state)
}

/// Serves the test routes on an ephemeral loopback port; returns the base URL.
async fn serve() -> (String, Arc<Server>) {
    serve_on("127.0.0.1").await
}

/// The node's own address (its InternalIP): not loopback, so allowed by default.
/// A namespace, a server on the node's address (which the operator's default rules allow)
/// and the operator, started after the server.
async fn on_node_server(test: &str) -> (TestNs, String, Arc<Server>) {
    let mut t = TestNs::new(test).await;
    let (node, server) = serve_on(&node_ip(&t).await).await;
    t.start_operator(&[]);
    (t, node, server)
}

async fn node_ip(t: &TestNs) -> String {
    let nodes: Api<Node> = Api::all(t.client.clone());
    let nodes = nodes.list(&ListParams::default()).await.unwrap().items;
    nodes
        .iter()
        .flat_map(|n| n.status.iter().flat_map(|s| s.addresses.iter().flatten()))
        .find(|a| a.type_ == "InternalIP" && a.address.parse::<std::net::Ipv4Addr>().is_ok())
        .map(|a| a.address.clone())
        .expect("the node has an IPv4 InternalIP")
}

/// Waits for `FailedToSync`, checks that its message starts with `start`, returns it.
async fn refused(t: &TestNs, name: &str, start: &str) -> String {
    let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
    let message = ready_message(&ch);
    assert!(message.starts_with(start), "{name}: {message}");
    message
}

fn json_spec(uri: &str) -> serde_json::Value {
    json!({"type": "json", "options": {"uri": uri, "timeout": "3s"}})
}

#[tokio::test]
async fn a_json_channel_syncs_and_then_asks_conditionally() {
    let (base, server) = serve().await;
    let t = TestNs::started("json-ok", &[ALLOW_LOOPBACK]).await;
    let mut ch = t
        .create_synced("web", json_spec(&format!("{base}/channel.json")), SYNC)
        .await;
    assert_eq!(t.version_names().await, ["web-a", "web-b"]);
    assert_eq!(
        ch.status.as_ref().unwrap().source_revision.as_deref(),
        Some("\"rev-1\"")
    );
    let versions = t.versions().await;

    ch = t.sync_again("web", "again", &ch, SYNC).await;
    assert_eq!(
        ready_message(&ch),
        "synchronized 2 versions (no changes) (the source answered: not modified)"
    );
    assert_eq!(server.not_modified.load(Ordering::SeqCst), 1);
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
    assert_eq!(t.versions().await, versions, "a 304 wrote versions");
    assert_eq!(t.pods_created(), 0, "json channels need no pod");

    // Drift: someone deletes one version and edits the other. The source still answers
    // 304, and the next sync restores both from the body it confirmed.
    t.versions_api()
        .delete("web-a", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    t.versions_api()
        .patch(
            "web-b",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"version": "hacked"}})),
        )
        .await
        .unwrap();
    ch = t.sync_again("web", "after-drift", &ch, SYNC).await;
    assert_eq!(
        ready_message(&ch),
        "synchronized 2 versions (1 created, 1 updated) (the source answered: not modified)"
    );
    assert_eq!(server.not_modified.load(Ordering::SeqCst), 2);
    let restored = t.versions().await;
    assert_eq!(
        restored.iter().map(|v| v.spec.clone()).collect::<Vec<_>>(),
        versions.iter().map(|v| v.spec.clone()).collect::<Vec<_>>()
    );
    t.cleanup().await;
}

#[tokio::test]
async fn json_channel_failures_name_their_cause() {
    let (base, _server) = serve().await;
    let t = TestNs::started("json-fail", &["--max-output-bytes=1000", ALLOW_LOOPBACK]).await;
    // A port nothing listens on: bind one, note it, let it go.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cases = [
        (
            "missing",
            format!("{base}/missing.json"),
            "the server answered HTTP 404 Not Found",
        ),
        ("slow", format!("{base}/slow.json"), "timed out after 3s"),
        (
            "big",
            format!("{base}/big.json"),
            "more than the operator's limit of 1000 bytes",
        ),
        (
            "broken",
            format!("{base}/broken.json"),
            "invalid channel data: line 1, column 27: not valid JSON",
        ),
        (
            "refused",
            format!("http://127.0.0.1:{closed}/c.json"),
            "cannot connect",
        ),
        (
            "nxdomain",
            "http://no-such-host.invalid/c.json".to_string(),
            "cannot connect",
        ),
        (
            "tls",
            format!(
                "https://{}/channel.json",
                base.trim_start_matches("http://")
            ),
            "fetching https://",
        ),
    ];
    for (name, uri, _) in &cases {
        t.create_channel(name, json_spec(uri)).await;
    }
    for (name, _, want) in &cases {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        let message = ready_message(&ch);
        assert!(message.contains(want), "{name}: {message}");
        assert_eq!(
            ch.status.as_ref().unwrap().failed_synchronization_attempts,
            1,
            "{name}"
        );
    }
    assert!(t.versions().await.is_empty());
    t.cleanup().await;
}

#[tokio::test]
async fn json_uri_on_a_loopback_address_is_refused() {
    let (base, server) = serve_on("127.0.0.2").await;
    let t = TestNs::started("json-loopback", &[]).await;
    let uri = format!("{base}/channel.json");
    t.create_channel("loopback", json_spec(&uri)).await;
    refused(
        &t,
        "loopback",
        &format!("fetching {uri}: address 127.0.0.2 is not allowed (--json-deny-cidr)"),
    )
    .await;
    assert_eq!(server.requests.load(Ordering::SeqCst), 0);
    assert!(t.versions().await.is_empty());
    wait_for_event(&t, "loopback", |(_, reason, note)| {
        reason == "FailedToSync"
            && note.ends_with("address 127.0.0.2 is not allowed (--json-deny-cidr)")
    })
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn json_uri_on_the_metadata_address_is_refused_without_connecting() {
    let t = TestNs::started("json-metadata", &[]).await;
    // A connection would end in that server's answer (where one answers: this machine's
    // answered HTTP 403), a connect error or a timeout; the refusal comes before any.
    let uri = "http://169.254.169.254/latest/meta-data/";
    t.create_channel(
        "metadata",
        json!({"type": "json", "options": {"uri": uri, "timeout": "20s"}}),
    )
    .await;
    refused(
        &t,
        "metadata",
        &format!("fetching {uri}: address 169.254.169.254 is not allowed (--json-deny-cidr)"),
    )
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn json_uri_redirecting_to_loopback_is_refused_at_the_hop() {
    let mut t = TestNs::new("json-hop").await;
    let (_, target) = serve().await;
    let (node, server) = serve_on(&node_ip(&t).await).await;
    t.start_operator(&[]);
    // The node's own address is allowed: its channel syncs.
    t.create_synced("node", json_spec(&format!("{node}/channel.json")), SYNC)
        .await;
    // Its redirect to the loopback server is not followed.
    t.create_channel(
        "to-loopback",
        json_spec(&format!("{node}/to-loopback/{}", target.port)),
    )
    .await;
    refused(
        &t,
        "to-loopback",
        &format!(
            "fetching {node}/to-loopback/{}: address 127.0.0.1 is not allowed (--json-deny-cidr)",
            target.port
        ),
    )
    .await;
    assert!(server.requests.load(Ordering::SeqCst) >= 2);
    assert_eq!(
        target.requests.load(Ordering::SeqCst),
        0,
        "the hop reached loopback"
    );
    assert_eq!(t.version_names().await, ["web-a", "web-b"]);
    t.cleanup().await;
}

#[tokio::test]
async fn json_uri_with_six_redirects_is_refused() {
    let (t, node, _) = on_node_server("json-redirects").await;
    t.create_channel("five", json_spec(&format!("{node}/r/five/5")))
        .await;
    t.create_channel("six", json_spec(&format!("{node}/r/six/6")))
        .await;
    t.wait_ready("five", "Synchronized", SYNC).await;
    refused(
        &t,
        "six",
        &format!(
            "fetching {node}/r/six/6: more than 5 redirects (the most a json channel follows)"
        ),
    )
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn json_uri_naming_localhost_is_refused() {
    let (base, server) = serve().await;
    let t = TestNs::started("json-localhost", &[]).await;
    // The name resolves to loopback: what the resolver returned is what is checked, and
    // connected to.
    let uri = base.replace("127.0.0.1", "localhost") + "/channel.json";
    t.create_channel("localhost", json_spec(&uri)).await;
    let message = refused(&t, "localhost", &format!("fetching {uri}: address ")).await;
    let loopback = ["127.0.0.1", "::1"]
        .iter()
        .any(|a| message.contains(&format!(": address {a} is not allowed (--json-deny-cidr)")));
    assert!(loopback, "{message}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 0);
    t.cleanup().await;
}

#[tokio::test]
async fn json_allow_cidr_for_loopback_lets_a_loopback_uri_sync() {
    let (base, server) = serve_on("127.0.0.2").await;
    // The flag's old name (an alias of --egress-allow-cidr) still works.
    let t = TestNs::started("json-allow", &["--json-allow-cidr", "127.0.0.0/8"]).await;
    t.create_channel("loopback", json_spec(&format!("{base}/channel.json")))
        .await;
    t.create_channel(
        "metadata",
        json_spec("http://169.254.169.254/latest/meta-data/"),
    )
    .await;
    t.wait_ready("loopback", "Synchronized", SYNC).await;
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    assert_eq!(t.version_names().await, ["web-a", "web-b"]);
    // The exception is for what it lists only.
    refused(
        &t,
        "metadata",
        "fetching http://169.254.169.254/latest/meta-data/: address 169.254.169.254 is not allowed (--json-deny-cidr)",
    )
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn json_data_with_a_secret_breaking_a_rule_is_not_shown_in_status_or_events() {
    let (t, node, _) = on_node_server("json-secret").await;
    let cases = ["name", "type", "label-key", "label-value", "syntax", "yaml"];
    for case in cases {
        t.create_channel(case, json_spec(&format!("{node}/hostile/{case}")))
            .await;
    }
    for case in cases {
        let message = refused(&t, case, "invalid channel data: line 1, column ").await;
        assert!(!message.contains("s3cr3t"), "{case}: {message}");
        let events = t
            .eventually(&format!("the failure Event of {case}"), SYNC, || async {
                let events = channel_events(&t, case).await;
                events
                    .iter()
                    .any(|(_, reason, _)| reason == "FailedToSync")
                    .then_some(events)
            })
            .await;
        for (_, _, note) in events {
            assert!(!note.contains("s3cr3t"), "{case}: {note}");
        }
    }
    t.cleanup().await;
}

/// A CIDR flag that does not parse stops the operator before it starts: a usage error
/// (exit 2) that names the value, from the flag or its environment variable.
#[test]
fn json_cidr_flags_with_a_bad_value_are_a_usage_error() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
            .args([
                "operator",
                "--operator-image=x",
                "--kubeconfig=/no/such/kubeconfig",
            ])
            .args(args)
            .env_remove("JSON_DENY_CIDRS")
            .env_remove("EGRESS_DENY_CIDRS")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    for (args, env, value) in [
        (
            &["--json-deny-cidr", "10.0.0.0/33"][..],
            &[][..],
            "10.0.0.0/33",
        ),
        (&["--json-allow-cidr=localhost"][..], &[][..], "localhost"),
        (&["--egress-allow-cidr=localhost"][..], &[][..], "localhost"),
        (
            &[][..],
            &[("JSON_ALLOW_CIDRS", "10.0.0.0/8,fd00::/x")][..],
            "fd00::/x",
        ),
        (
            &[][..],
            &[("EGRESS_DENY_CIDRS", "10.0.0.0/8,fd00::/x")][..],
            "fd00::/x",
        ),
    ] {
        let out = run(args, env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{value:?}")),
            "{args:?} {env:?}: {stderr}"
        );
    }
}

/// An `openssl s_server -WWW` on loopback serving `dir`'s files over HTTPS with a server
/// certificate for 127.0.0.1 signed by the CA `ca`; killed on drop.
struct TlsServer {
    child: std::process::Child,
    base: String,
}

impl TlsServer {
    fn start(dir: &std::path::Path, ca: &str, name: &str) -> Self {
        let openssl = |args: &[&str]| {
            run_ok(
                Command::new("openssl").args(args).current_dir(dir),
                &format!("openssl {args:?} (Debian package openssl, installed with the cluster)"),
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        if !dir.join(format!("{ca}.pem")).exists() {
            let subject = format!("/CN={ca}");
            let (key, pem) = (format!("{ca}.key"), format!("{ca}.pem"));
            let mut args = vec!["req", "-x509", "-days", "2", "-subj", &subject];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &pem]);
            openssl(&args);
        }
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        let mut args = vec![
            "req",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            &key,
            "-out",
            &csr,
        ];
        args.extend(ec);
        openssl(&args);
        let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            &pem,
        ]);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("openssl")
            .args(["s_server", "-quiet", "-WWW", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["-cert", &pem, "-key", &key])
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "s_server did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        TlsServer {
            child,
            base: format!("https://127.0.0.1:{port}"),
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private CA (docs/install.md): with `SSL_CERT_DIR` naming a directory that holds it,
/// the operator trusts a server whose certificate that CA signed, and still refuses one
/// signed by a CA it was not given.
#[tokio::test]
async fn https_json_channel_trusts_the_private_ca_in_ssl_cert_dir() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("private-ca-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("channel.json"),
        channel_data(&[("tls-a", "v1")]).to_string(),
    )
    .unwrap();
    let trusted = TlsServer::start(&dir, "private-ca", "trusted");
    let unknown = TlsServer::start(&dir, "other-ca", "unknown");
    // The directory the operator is given holds only the private CA.
    let ca_dir = dir.join("trusted-cas");
    std::fs::create_dir_all(&ca_dir).unwrap();
    std::fs::copy(dir.join("private-ca.pem"), ca_dir.join("ca.crt")).unwrap();

    let mut t = TestNs::new("json-private-ca").await;
    let ca_dir_text = ca_dir.display().to_string();
    let _operator = t.spawn_operator(&[ALLOW_LOOPBACK], &[("SSL_CERT_DIR", &ca_dir_text)]);
    t.create_channel(
        "trusted",
        json_spec(&format!("{}/channel.json", trusted.base)),
    )
    .await;
    t.create_channel(
        "unknown",
        json_spec(&format!("{}/channel.json", unknown.base)),
    )
    .await;
    t.wait_ready("trusted", "Synchronized", SYNC).await;
    assert_eq!(t.version_names().await, ["tls-a"]);
    let message = refused(&t, "unknown", "fetching https://").await;
    assert!(message.contains("certificate"), "{message}");
    t.cleanup().await;
    drop((trusted, unknown));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An operator process the test spawned, killed when the test ends (also on failure).
#[tokio::test]
async fn a_json_source_that_trickles_does_not_stop_another_json_channel_syncing() {
    let (base, server) = serve().await;
    let mut a = TestNs::new("json-trickle-a").await;
    let b = TestNs::new("json-trickle-b").await;
    a.start_operator(&[
        ALLOW_LOOPBACK,
        "--max-concurrent-syncs=2",
        &format!("--namespace={}", b.ns),
    ]);
    a.create_channel(
        "trickle",
        json!({"type": "json", "options": {"uri": format!("{base}/trickle.json"), "timeout": "10m"}}),
    )
    .await;
    a.eventually("the trickling fetch to start", SYNC, || async {
        (server.requests.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    // It sends a byte every 2 s: it makes progress, and holds only what it sent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.create_channel("other", json_spec(&format!("{base}/channel.json")))
        .await;
    b.wait_ready("other", "Synchronized", Duration::from_secs(30))
        .await;
    // Its fetch goes on (no outcome yet): the other synced beside it.
    let trickling = a.channel("trickle").await;
    assert!(
        matches!(
            ready_reason(&trickling).as_deref(),
            None | Some("Synchronizing")
        ),
        "the trickling fetch ended: the test did not run beside it: {}",
        ready_message(&trickling)
    );
    b.cleanup().await;
    a.cleanup().await;
}

#[tokio::test]
async fn json_uris_on_ipv6_forms_of_denied_ipv4_addresses_are_refused() {
    let (base, server) = serve().await;
    let port = base.rsplit(':').next().unwrap().to_string();
    let t = TestNs::started("json-ipv6-forms", &[]).await;
    // Each reaches 127.0.0.1 or a metadata service through a translator, a relay or the
    // host's own IPv4 stack; judged as IPv6 they pass a list of IPv4 networks.
    let cases = [
        ("compatible", format!("[::127.0.0.1]:{port}"), "127.0.0.1"),
        ("siit", format!("[::ffff:0:127.0.0.1]:{port}"), "127.0.0.1"),
        ("nat64", format!("[64:ff9b::7f00:1]:{port}"), "127.0.0.1"),
        ("sixtofour", format!("[2002:7f00:1::1]:{port}"), "127.0.0.1"),
        (
            "alibaba-metadata",
            "100.100.100.200".into(),
            "100.100.100.200",
        ),
        (
            "aws-ipv6-metadata",
            "[fd00:ec2::254]".into(),
            "fd00:ec2::254",
        ),
    ];
    for (name, host, _) in &cases {
        t.create_channel(name, json_spec(&format!("http://{host}/channel.json")))
            .await;
    }
    for (name, host, address) in &cases {
        refused(
            &t,
            name,
            &format!(
                "fetching http://{host}/channel.json: address {address} is not allowed (--json-deny-cidr)"
            ),
        )
        .await;
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 0);
    t.cleanup().await;
}
