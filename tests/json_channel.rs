//! `type: json` channels against the local cluster: the operator fetches channel data
//! from a local HTTP server (run by the test), conditionally once it has a validator, and
//! turns every kind of failure into `FailedToSync` with its cause.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use common::*;
use serde_json::json;

const SYNC: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Server {
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

/// Serves the test routes on an ephemeral loopback port; returns the base URL.
async fn serve() -> (String, Arc<Server>) {
    let state = Arc::new(Server::default());
    let app = Router::new()
        .route("/channel.json", get(channel))
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
        .route(
            "/broken.json",
            get(|| async { "[{\"metadata\": {\"name\": \"x\"}" }),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), state)
}

fn json_spec(uri: &str) -> serde_json::Value {
    json!({"type": "json", "options": {"uri": uri, "timeout": "3s"}})
}

#[tokio::test]
async fn a_json_channel_syncs_and_then_asks_conditionally() {
    let (base, server) = serve().await;
    let mut t = TestNs::new("json-ok").await;
    t.start_operator(&[]);
    t.create_channel("web", json_spec(&format!("{base}/channel.json")))
        .await;
    let mut ch = t.wait_ready("web", "Synchronized", SYNC).await;
    assert_eq!(t.version_names().await, ["web-a", "web-b"]);
    assert_eq!(
        ch.status.as_ref().unwrap().source_revision.as_deref(),
        Some("\"rev-1\"")
    );
    let versions = t.versions().await;

    t.request_sync("web", "again").await;
    ch = t.wait_next_attempt("web", &ch, SYNC).await;
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
    t.request_sync("web", "after-drift").await;
    ch = t.wait_next_attempt("web", &ch, SYNC).await;
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
    let mut t = TestNs::new("json-fail").await;
    t.start_operator(&["--max-output-bytes=1000"]);
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
