//! The channel server (`--channel-server-address`) against the local cluster: a channel
//! with `spec.serve: true` is served as channel data that a `json` channel of another
//! operator reads back as the same versions (and `304` once unchanged), `/latest` answers
//! the system-upgrade-controller's channel protocol (checked with `curl`, as SUC reads it:
//! no redirect followed), a channel that does not opt in is `404`, a peer holding 300 idle
//! connections leaves another peer served, and a GET costs no request to the API server.
//!
//! The operators run on the host: the upstream json source (a server of the test) and the
//! channel server are on loopback, which the downstream operator is allowed to reach
//! (`--egress-allow-cidr=127.0.0.0/8`).

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use common::*;
use kube::ResourceExt;
use serde_json::{Value, json};

const SYNC: Duration = Duration::from_secs(60);
const ALLOW_LOOPBACK: &str = "--egress-allow-cidr=127.0.0.0/8";

/// A json source whose data the test changes.
async fn source(data: Arc<Mutex<Value>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new()
        .route(
            "/channel.json",
            get(|State(d): State<Arc<Mutex<Value>>>| async move { d.lock().unwrap().to_string() }),
        )
        .with_state(data);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://127.0.0.1:{port}/channel.json")
}

/// A container version as a channel publishes it.
fn entry(name: &str, version: &str, platforms: Option<&[&str]>) -> Value {
    let mut metadata =
        json!({"upgradeImage": format!("rancher/os:{version}"), "displayName": name});
    if let Some(p) = platforms {
        metadata["platforms"] = json!(p);
    }
    json!({"metadata": {"name": name, "labels": {"release": version}, "annotations": {"note": "from the source"}},
           "spec": {"version": version, "type": "container", "minVersion": "0.0.0", "metadata": metadata}})
}

/// The source lists one more version.
fn publish(data: &Mutex<Value>, version: Value) {
    data.lock().unwrap().as_array_mut().unwrap().push(version);
}

fn served_channel(uri: &str, policy: Value) -> Value {
    json!({"type": "json", "serve": true, "registry": "mirror.example.com",
           "syncInterval": "1h", "options": {"uri": uri}, "versions": policy})
}

/// A version as a channel's reader sees it: name, labels and annotations from the data
/// (the operators' own left out), spec.
fn seen(versions: &[kube::api::DynamicObject]) -> BTreeMap<String, Value> {
    versions
        .iter()
        .map(|v| {
            let own = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
                m.iter()
                    .filter(|(k, _)| !k.starts_with("rancheros.cattle.io/"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            let value = json!({"labels": own(v.labels()), "annotations": own(v.annotations()), "spec": v.data["spec"]});
            (v.name_any(), value)
        })
        .collect()
}

async fn versions_of(t: &TestNs) -> BTreeMap<String, Value> {
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        t.client.clone(),
        &t.ns,
        &kube::api::ApiResource::erase::<rancheros_operator::api::ManagedOSVersion>(&()),
    );
    let list = api.list(&Default::default()).await.unwrap().items;
    seen(&list)
}

/// `curl -s -o /dev/null -w '%{http_code} %{redirect_url}' URL`, as SUC reads a channel:
/// the status and where it points, no redirect followed.
fn curl(url: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}",
            url,
        ])
        .output()
        .expect("running curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn server_flags(port: u16) -> Vec<String> {
    vec![
        format!("--channel-server-address=127.0.0.1:{port}"),
        ALLOW_LOOPBACK.to_string(),
    ]
}

#[tokio::test]
async fn a_json_channel_reading_the_server_ends_with_exactly_what_was_published() {
    let data = Arc::new(Mutex::new(json!([
        entry("os-v1-0-0", "v1.0.0", None),
        entry("os-v1-1-0", "v1.1.0", None),
        entry("os-v1-2-0-rc1", "v1.2.0-rc1", None),
    ])));
    let uri = source(data.clone()).await;
    let port = free_port();
    let mut up = TestNs::new("serve-up").await;
    let flags = server_flags(port);
    up.start_operator(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    up.create_channel("up", served_channel(&uri, json!({"exclude": ["*-rc*"]})))
        .await;
    // (its policy publishes none of the names, which are up's)
    let mut quiet_spec = served_channel(&uri, json!({"include": ["none-*"]}));
    quiet_spec["serve"] = json!(false);
    up.create_channel("quiet", quiet_spec).await;
    up.wait_ready("up", "Synchronized", SYNC).await;
    up.wait_ready("quiet", "Synchronized", SYNC).await;
    let base = format!("http://127.0.0.1:{port}/v1/channels/{}", up.ns);
    assert_eq!(
        curl(&format!("{base}/quiet")),
        "404 ",
        "a channel that did not opt in is served"
    );

    // Another operator, in another namespace, reads it as a json channel.
    let mut down = TestNs::new("serve-down").await;
    down.start_operator(&[ALLOW_LOOPBACK]);
    down.create_channel(
        "down",
        json!({"type": "json", "options": {"uri": format!("{base}/up")}}),
    )
    .await;
    let synced = down.wait_ready("down", "Synchronized", SYNC).await;
    let published = versions_of(&up).await;
    assert_eq!(
        published.keys().collect::<Vec<_>>(),
        ["os-v1-0-0", "os-v1-1-0"],
        "the policy did not hold the rc back"
    );
    assert_eq!(
        versions_of(&down).await,
        published,
        "the downstream channel's versions differ from what the upstream one published"
    );
    assert_eq!(
        published["os-v1-0-0"]["spec"]["metadata"]["upgradeImage"],
        "mirror.example.com/rancher/os:v1.0.0"
    );

    // Unchanged: the second sync is answered 304.
    let again = down.sync_again("down", "again", &synced, SYNC).await;
    let message = ready_message(&again);
    assert!(
        message.ends_with("(the source answered: not modified)"),
        "{message}"
    );
    down.cleanup().await;
    up.cleanup().await;
}

#[tokio::test]
async fn latest_redirects_to_the_newest_tag_and_moves_with_what_is_published() {
    let data = Arc::new(Mutex::new(json!([
        entry(
            "os-v1-0-0",
            "v1.0.0",
            Some(&["linux/aarch64", "linux/x86_64"])
        ),
        entry("os-v1-1-0", "v1.1.0", Some(&["linux/x86_64"])),
    ])));
    let uri = source(data.clone()).await;
    let port = free_port();
    let mut t = TestNs::new("serve-latest").await;
    let flags = server_flags(port);
    t.start_operator(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    t.create_channel("up", served_channel(&uri, json!({})))
        .await;
    let last = t.wait_ready("up", "Synchronized", SYNC).await;
    let base = format!("http://127.0.0.1:{port}/v1/channels/{}/up", t.ns);
    let latest = format!("{base}/latest");
    assert_eq!(curl(&latest), format!("302 {base}/tags/v1.1.0"));
    assert_eq!(
        curl(&format!("{latest}?platform=linux/arm64")),
        format!("302 {base}/tags/v1.0.0")
    );
    assert_eq!(curl(&format!("{latest}?platform=linux/s390x")), "404 ");
    // The tag's path answers the version of that image.
    let (status, body) = http_get(port, &format!("/v1/channels/{}/up/tags/v1.1.0", t.ns), None)
        .await
        .unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body[0]["metadata"]["name"], "os-v1-1-0");

    // A newer version is published: /latest moves.
    publish(&data, entry("os-v1-2-0", "v1.2.0", None));
    t.sync_again("up", "1", &last, SYNC).await;
    assert_eq!(curl(&latest), format!("302 {base}/tags/v1.2.0"));

    // With minAge, a newer version moves it only once it is of age.
    t.patch_spec("up", json!({"versions": {"minAge": "20s"}}))
        .await;
    let last = t.wait_ready("up", "Synchronized", SYNC).await;
    publish(&data, entry("os-v1-3-0", "v1.3.0", None));
    let held = t.sync_again("up", "2", &last, SYNC).await;
    assert!(
        ready_message(&held).contains("minAge 1"),
        "{}",
        ready_message(&held)
    );
    assert_eq!(
        curl(&latest),
        format!("302 {base}/tags/v1.2.0"),
        "a version under minAge is served"
    );
    t.eventually("v1.3.0 to come of age and be served", SYNC, || async {
        (curl(&latest) == format!("302 {base}/tags/v1.3.0")).then_some(())
    })
    .await;
    t.cleanup().await;
}

/// A TCP proxy to the API server that counts the bytes its clients send.
struct ApiProxy {
    port: u16,
    sent: Arc<AtomicU64>,
    held: Arc<AtomicBool>,
}

async fn api_proxy() -> ApiProxy {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = Arc::new(AtomicU64::new(0));
    let held = Arc::new(AtomicBool::new(false));
    let (count, hold) = (sent.clone(), held.clone());
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect("127.0.0.1:6443").await else {
                continue;
            };
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let (count, hold) = (count.clone(), hold.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = client_read.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    count.fetch_add(n as u64, Ordering::SeqCst);
                    // Held: nothing reaches the API server (a request would stall).
                    while hold.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
        }
    });
    ApiProxy { port, sent, held }
}

#[tokio::test]
async fn a_peer_with_300_idle_connections_leaves_another_served_and_a_get_costs_no_api_request() {
    let data = Arc::new(Mutex::new(json!([entry("os-v1-0-0", "v1.0.0", None)])));
    let uri = source(data).await;
    let proxy = api_proxy().await;
    let kubeconfig = std::fs::read_to_string(std::env::var("KUBECONFIG").unwrap()).unwrap();
    assert!(
        kubeconfig.contains("https://127.0.0.1:6443"),
        "the cluster's API server moved"
    );
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("channel-server-kubeconfig-{}", std::process::id()));
    std::fs::write(
        &path,
        kubeconfig.replace(
            "https://127.0.0.1:6443",
            &format!("https://127.0.0.1:{}", proxy.port),
        ),
    )
    .unwrap();
    let port = free_port();
    let mut t = TestNs::new("serve-bounds").await;
    let mut flags = server_flags(port);
    flags.push(format!("--kubeconfig={}", path.display()));
    t.start_operator(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    t.create_channel("up", served_channel(&uri, json!({})))
        .await;
    t.wait_ready("up", "Synchronized", SYNC).await;
    let channel_path = format!("/v1/channels/{}/up", t.ns);
    t.eventually("the channel to be served", SYNC, || async {
        let (status, _) = http_get(port, &channel_path, None).await?;
        status.starts_with("HTTP/1.1 200").then_some(())
    })
    .await;
    assert!(
        proxy.sent.load(Ordering::SeqCst) > 0,
        "the operator did not go through the proxy"
    );

    // GETs with the API server out of reach: every one answered (one that needed the API
    // server would stall), and nothing sent its way. The operator's own background traffic
    // (a watch renewed, an Event) may fall into a window: one window of five without a
    // byte is the proof, where a request per GET would put bytes in every one.
    let mut windows = Vec::new();
    for _ in 0..5 {
        proxy.held.store(true, Ordering::SeqCst);
        let before = proxy.sent.load(Ordering::SeqCst);
        for _ in 0..100 {
            let (status, body) = http_get(port, &channel_path, None).await.unwrap();
            assert!(status.starts_with("HTTP/1.1 200"), "{status}");
            assert!(body.contains("os-v1-0-0"));
        }
        let (status, _) = http_get(port, "/v1/channels", None).await.unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let sent = proxy.sent.load(Ordering::SeqCst) - before;
        proxy.held.store(false, Ordering::SeqCst);
        windows.push(sent);
        if sent == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        windows.last(),
        Some(&0),
        "bytes sent to the API server in each window of 101 GETs: {windows:?}"
    );

    // 300 idle connections from 127.0.0.1; a GET from 127.0.0.2 is still served.
    let mut idle = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            idle.push(s);
        }
    }
    assert_eq!(idle.len(), 300);
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut stream = other
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("GET {channel_path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "another peer was not served: {answer:?}"
    );
    drop(idle);
    t.cleanup().await;
    let _ = std::fs::remove_file(path);
}
