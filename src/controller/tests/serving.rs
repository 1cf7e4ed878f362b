//! The channel server's store over the fake: what a served channel's sync publishes (after
//! its policy), what leaves it, and what a start rebuilds without a sync.

use super::*;
use crate::channel_server::{Request, Served, Store, answer};

const THREE: &str = r#"[
 {"metadata":{"name":"v1","labels":{"tier":"a"}},"spec":{"version":"v1.0.0","type":"container","metadata":{"upgradeImage":"r/i:v1.0.0"}}},
 {"metadata":{"name":"v2"},"spec":{"version":"v2.0.0","type":"container","metadata":{"upgradeImage":"r/i:v2.0.0"}}},
 {"metadata":{"name":"v3"},"spec":{"version":"v3.0.0","type":"container","metadata":{"upgradeImage":"r/i:v3.0.0"}}}
]"#;

fn serving(store: &Arc<Store>) -> Harness {
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: "test".into(),
    };
    let ctx = Context::new(FakeIo::default(), settings(), Arc::default(), reporter)
        .serving(Some(store.clone()));
    // The controllers run for the whole test.
    std::mem::forget(store.activate());
    Harness {
        ctx: Arc::new(ctx),
        serial: 0,
    }
}

fn source(h: &Harness, data: &'static str) {
    h.ctx.io.world().source = Some(Box::new(move |_: &Validators| Response::Body {
        data: data.as_bytes().to_vec(),
        validators: Validators::default(),
        changelogs: None,
    }));
}

/// The names the server answers for the channel, or its status code.
fn served(store: &Store, ns: &str, name: &str) -> Result<Vec<String>, u16> {
    let path = format!("/v1/channels/{ns}/{name}");
    let a = answer(
        store,
        Request {
            method: "GET",
            path: &path,
            query: None,
            if_none_match: None,
        },
    );
    if a.status != 200 {
        return Err(a.status);
    }
    let body: Vec<Value> = serde_json::from_slice(&a.body).unwrap();
    Ok(body
        .iter()
        .map(|v| v["metadata"]["name"].as_str().unwrap().to_string())
        .collect())
}

/// What the store serves for channel `a/name`.
fn data_of(store: &Store, name: &str) -> Arc<crate::channel_server::Entry> {
    match store.get(&("a".into(), name.into())) {
        Some(Served::Data(entry)) => entry,
        other => panic!("a/{name} is not served: {other:?}"),
    }
}

/// A served json channel `a/c` after its first sync (its policy holds `v2` back).
async fn synced_served_channel() -> (Arc<Store>, Harness, Key) {
    let store = Arc::new(Store::new(1 << 20));
    let mut h = serving(&store);
    source(&h, THREE);
    let c = h.create("a", "c", served_json("v2", true));
    h.ok(&c).await;
    (store, h, c)
}

fn served_json(exclude: &str, serve: bool) -> Value {
    json!({"type": "json", "serve": serve, "options": {"uri": "https://example.com/c.json"},
           "registry": "mirror.example", "versions": {"exclude": [exclude]}})
}

#[tokio::test]
async fn a_served_channel_publishes_what_its_sync_wrote_and_only_that() {
    let store = Arc::new(Store::new(1 << 20));
    let mut h = serving(&store);
    source(&h, THREE);
    let c = h.create("a", "c", served_json("v2", true));
    let quiet = h.create("a", "quiet", served_json("v2", false));
    h.ok(&c).await;
    h.ok(&quiet).await;
    assert_eq!(h.ready_reason(&c), "Synchronized");
    // The policy held v2 back: not served.
    assert_eq!(served(&store, "a", "c"), Ok(vec!["v1".into(), "v3".into()]));
    assert_eq!(served(&store, "a", "quiet"), Err(404));
    // As written: the registry applied, the channel data's labels, no bookkeeping.
    let entry = data_of(&store, "c");
    let body: Value = serde_json::from_slice(&entry.body).unwrap();
    assert_eq!(
        body[0],
        json!({"metadata": {"name": "v1", "labels": {"tier": "a"}},
               "spec": {"version": "v1.0.0", "type": "container", "metadata": {"upgradeImage": "mirror.example/r/i:v1.0.0"}}})
    );
    // The policy changes: what is served follows the next sync.
    h.edit(&c, |ch| {
        ch.spec.versions.as_mut().unwrap().exclude = vec!["v3".into()];
    });
    h.bump(&c);
    h.ok(&c).await;
    assert_eq!(served(&store, "a", "c"), Ok(vec!["v1".into(), "v2".into()]));
    // No longer opted in: gone at its next look; deleted: gone.
    h.edit(&c, |ch| ch.spec.serve = Some(false));
    h.ok(&c).await;
    assert_eq!(served(&store, "a", "c"), Err(404));
    h.edit(&quiet, |ch| ch.spec.serve = Some(true));
    h.bump(&quiet);
    h.ok(&quiet).await;
    assert!(served(&store, "a", "quiet").is_ok());
    h.delete(&quiet);
    assert_eq!(served(&store, "a", "quiet"), Err(404));
}

#[tokio::test]
async fn after_a_start_a_served_channel_is_published_from_its_versions_without_a_sync() {
    let (store, h, c) = synced_served_channel().await;
    let before = data_of(&store, "c");
    // A new operator process: the same cluster, an empty store, and no sync due.
    let restarted = Arc::new(Store::new(1 << 20));
    let h2 = serving(&restarted);
    *h2.ctx.io.world() = std::mem::take(&mut *h.ctx.io.world());
    h2.ctx.io.world().calls.clear();
    h2.ctx.io.world().metadata_cache = true;
    h2.ok(&c).await;
    assert_eq!(h2.calls("fetch"), 0, "a start synced");
    assert_eq!(h2.calls("read_version"), 2);
    let after = data_of(&restarted, "c");
    assert_eq!(after.body, before.body);
    assert_eq!(after.etag, before.etag);
    // Published once: the next look reads nothing.
    h2.ok(&c).await;
    assert_eq!(h2.calls("read_version"), 2);
}

#[tokio::test]
async fn a_disabled_served_channel_publishes_nothing() {
    let (store, h, c) = synced_served_channel().await;
    h.edit(&c, |ch| ch.spec.enabled = Some(false));
    h.bump(&c);
    h.ok(&c).await;
    assert_eq!(served(&store, "a", "c"), Ok(vec![]));
}
