use std::collections::HashMap;

use serde_json::{Value, json};
use std::sync::Arc;

use super::route::{Route, route};
use super::*;
use crate::api::ManagedOSVersion;

/// A version as a sync writes it: the operator's label and hash on it.
fn version(name: &str, version: &str, image: &str, platforms: Option<Value>) -> ManagedOSVersion {
    let mut metadata = json!({"upgradeImage": image});
    if let Some(p) = platforms {
        metadata["platforms"] = p;
    }
    serde_json::from_value(json!({
        "apiVersion": "rancheros.cattle.io/v1",
        "kind": "ManagedOSVersion",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"rancheros.cattle.io/channel": "ch", "tier": "stable"},
            "annotations": {
                "rancheros.cattle.io/content-hash": "abc",
                "rancheros.cattle.io/channel-no-longer-in-sync": "false",
                "note": "kept"
            },
            "ownerReferences": [{"apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel", "name": "ch", "uid": "c-1", "controller": true}]
        },
        "spec": {"version": version, "type": "container", "minVersion": "0.0.0", "metadata": metadata}
    }))
    .unwrap()
}

fn iso(name: &str, version: &str) -> ManagedOSVersion {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"version": version, "type": "iso", "metadata": {"uri": "registry.example.com/iso:x"}}
    }))
    .unwrap()
}

fn store_with(key: (&str, &str), versions: &[ManagedOSVersion]) -> Arc<Store> {
    let store = Arc::new(Store::new(1 << 20));
    std::mem::forget(store.activate());
    store.publish((key.0.into(), key.1.into()), Entry::render(versions));
    store
}

fn get<'a>(path: &'a str, query: Option<&'a str>, inm: Option<&'a str>) -> Request<'a> {
    Request {
        method: "GET",
        path,
        query,
        if_none_match: inm,
    }
}

#[test]
fn the_body_is_channel_data_with_only_what_the_channel_published() {
    let entry = Entry::render(&[
        version("b", "v2", "reg/os:v2", None),
        version("a", "v1", "reg/os:v1", None),
    ]);
    let body: Value = serde_json::from_slice(&entry.body).unwrap();
    assert_eq!(
        body,
        json!([
            {"metadata": {"name": "a", "labels": {"tier": "stable"}, "annotations": {"note": "kept"}},
             "spec": {"version": "v1", "type": "container", "minVersion": "0.0.0", "metadata": {"upgradeImage": "reg/os:v1"}}},
            {"metadata": {"name": "b", "labels": {"tier": "stable"}, "annotations": {"note": "kept"}},
             "spec": {"version": "v2", "type": "container", "minVersion": "0.0.0", "metadata": {"upgradeImage": "reg/os:v2"}}}
        ])
    );
    // The operator reads it back as the same versions.
    let parsed = crate::channel::parse_at_most(&entry.body, 10).unwrap();
    assert_eq!(parsed.versions.len(), 2);
    assert_eq!(parsed.versions[0].labels.get("tier").unwrap(), "stable");
    // Each item's range is its object in the body.
    let first: Value = serde_json::from_slice(&entry.body[entry.items[0].range.clone()]).unwrap();
    assert_eq!(first["metadata"]["name"], "a");
}

#[test]
fn the_etag_follows_the_content_not_the_order_of_writing() {
    let a = Entry::render(&[
        version("a", "v1", "r/os:v1", None),
        version("b", "v2", "r/os:v2", None),
    ]);
    let b = Entry::render(&[
        version("b", "v2", "r/os:v2", None),
        version("a", "v1", "r/os:v1", None),
    ]);
    let c = Entry::render(&[
        version("a", "v1", "r/os:v1", None),
        version("b", "v3", "r/os:v3", None),
    ]);
    assert_eq!(a.etag, b.etag);
    assert_ne!(a.etag, c.etag);
    assert!(a.etag.starts_with('"') && a.etag.ends_with('"') && a.etag.len() == 34);
    assert_eq!(Entry::render(&[]).body.as_ref(), b"[]");
}

#[test]
fn if_none_match_compares_each_tag_weak_or_strong_and_star() {
    let tag = "\"abc\"";
    assert!(not_modified(Some("\"abc\""), tag));
    assert!(not_modified(Some("\"x\", W/\"abc\""), tag));
    assert!(not_modified(Some("*"), tag));
    assert!(!not_modified(Some("\"abcd\""), tag));
    assert!(!not_modified(None, tag));
}

#[test]
fn the_image_tag_is_the_container_images_tag() {
    let spec = |t: &str, image: &str| crate::api::ManagedOSVersionSpec {
        type_: t.into(),
        metadata: Some(serde_json::from_value(json!({"upgradeImage": image})).unwrap()),
        ..Default::default()
    };
    assert_eq!(
        image_tag(&spec("container", "reg:5000/os:v1.2-3")).as_deref(),
        Some("v1.2-3")
    );
    assert_eq!(
        image_tag(&spec("container", "reg/os")).as_deref(),
        Some("latest")
    );
    let digest = format!("reg/os@sha256:{}", "a".repeat(64));
    assert_eq!(image_tag(&spec("container", &digest)), None);
    let both = format!("reg/os:v2@sha256:{}", "a".repeat(64));
    assert_eq!(image_tag(&spec("container", &both)).as_deref(), Some("v2"));
    assert_eq!(image_tag(&spec("iso", "reg/os:v1")), None);
}

#[test]
fn latest_is_the_policys_newest_with_a_tag_narrowed_by_platform() {
    let entry = Entry::render(&[
        version(
            "os-v2.2.0-3.7",
            "v2.2.0-3.7",
            "r/os:2.2.0-3.7",
            Some(json!(["linux/x86_64"])),
        ),
        version(
            "os-v2.2.0-3.15",
            "v2.2.0-3.15",
            "r/os:2.2.0-3.15",
            Some(json!(["linux/x86_64"])),
        ),
        version(
            "os-v2.1.0",
            "v2.1.0",
            "r/os:2.1.0",
            Some(json!(["linux/aarch64"])),
        ),
        version("os-any", "v1.0.0", "r/os:1.0.0", None),
        // An ISO is newer, and has no image: never the latest image.
        iso("iso-v9", "v9.0.0"),
    ]);
    let tag = |p: Option<&str>| entry.latest(p).unwrap().and_then(|i| i.tag.clone());
    // Numbers compare as numbers: 3.15 is newer than 3.7.
    assert_eq!(tag(None).as_deref(), Some("2.2.0-3.15"));
    assert_eq!(tag(Some("linux/amd64")).as_deref(), Some("2.2.0-3.15"));
    assert_eq!(tag(Some("linux/arm64")).as_deref(), Some("2.1.0"));
    // An entry without platforms runs anywhere, as the policy says.
    assert_eq!(tag(Some("linux/riscv64")).as_deref(), Some("1.0.0"));
    assert_eq!(entry.latest(Some("riscv64")), Err(BadPlatform));
    let only = Entry::render(&[version("a", "v1", "r/os:1", Some(json!(["linux/arm64"])))]);
    assert_eq!(only.latest(Some("linux/amd64")).unwrap(), None);
}

#[test]
fn paths_route_to_what_they_name() {
    assert_eq!(route("/v1/channels"), Route::Index);
    assert_eq!(route("/v1/channels/"), Route::Index);
    assert_eq!(route("/v1/channels/ns/ch"), Route::Channel("ns", "ch"));
    assert_eq!(
        route("/v1/channels/ns/ch/latest"),
        Route::Latest("ns", "ch")
    );
    assert_eq!(
        route("/v1/channels/ns/ch/tags/v1"),
        Route::Tag("ns", "ch", "v1")
    );
    for unknown in [
        "/",
        "/v1/channelsx",
        "/v1/channels/ns",
        "/v1/channels//ch",
        "/v1/channels/ns/ch/other",
        "/v1/channels/ns/ch/tags/a/b",
    ] {
        assert_eq!(route(unknown), Route::Unknown, "{unknown}");
    }
}

#[test]
fn a_get_answers_the_data_with_its_etag_and_304_when_it_matches() {
    let store = store_with(("ns", "ch"), &[version("a", "v1", "r/os:v1", None)]);
    let a = answer(&store, get("/v1/channels/ns/ch", None, None));
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/json"));
    let etag = a.header("etag").unwrap().to_string();
    let again = answer(&store, get("/v1/channels/ns/ch", None, Some(&etag)));
    assert_eq!((again.status, again.body.len()), (304, 0));
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    let other = answer(&store, get("/v1/channels/ns/ch", None, Some("\"old\"")));
    assert_eq!(other.status, 200);
    // A channel that is not served, and a path that names nothing.
    let missing = answer(&store, get("/v1/channels/ns/other", None, None));
    assert_eq!(missing.status, 404);
    assert!(String::from_utf8_lossy(&missing.body).contains("spec.serve"));
    assert_eq!(answer(&store, get("/metrics", None, None)).status, 404);
    let post = answer(
        &store,
        Request {
            method: "POST",
            ..get("/v1/channels/ns/ch", None, None)
        },
    );
    assert_eq!(
        (post.status, post.header("allow")),
        (405, Some("GET, HEAD"))
    );
}

#[test]
fn latest_redirects_to_a_path_ending_in_the_tag() {
    let store = store_with(
        ("ns", "ch"),
        &[
            version("a", "v1.0.0", "r/os:v1.0.0", Some(json!(["linux/amd64"]))),
            version("b", "v1.1.0", "r/os:v1.1.0", Some(json!(["linux/arm64"]))),
        ],
    );
    let a = answer(&store, get("/v1/channels/ns/ch/latest", None, None));
    assert_eq!(a.status, 302);
    assert_eq!(a.header("location"), Some("/v1/channels/ns/ch/tags/v1.1.0"));
    let amd = answer(
        &store,
        get(
            "/v1/channels/ns/ch/latest",
            Some("platform=linux%2Famd64"),
            None,
        ),
    );
    assert_eq!(
        amd.header("location"),
        Some("/v1/channels/ns/ch/tags/v1.0.0")
    );
    let none = answer(
        &store,
        get(
            "/v1/channels/ns/ch/latest",
            Some("platform=linux/s390x"),
            None,
        ),
    );
    assert_eq!(none.status, 404);
    assert!(
        String::from_utf8_lossy(&none.body).contains("for linux/s390x"),
        "{none:?}"
    );
    let bad = answer(
        &store,
        get("/v1/channels/ns/ch/latest", Some("platform=s390x"), None),
    );
    assert_eq!(bad.status, 400);
    // The tag's path answers the versions of that image, as channel data.
    let tagged = answer(&store, get("/v1/channels/ns/ch/tags/v1.0.0", None, None));
    let body: Value = serde_json::from_slice(&tagged.body).unwrap();
    assert_eq!(body.as_array().unwrap().len(), 1);
    assert_eq!(body[0]["metadata"]["name"], "a");
    assert_eq!(
        answer(&store, get("/v1/channels/ns/ch/tags/v9", None, None)).status,
        404
    );
    // A channel without versions has no latest.
    let empty = store_with(("ns", "e"), &[]);
    assert_eq!(
        answer(&empty, get("/v1/channels/ns/e/latest", None, None)).status,
        404
    );
}

#[test]
fn the_index_lists_what_is_served() {
    let store = store_with(("ns", "ch"), &[version("a", "v1", "r/os:v1", None)]);
    store.publish(("a-ns".into(), "x".into()), Entry::render(&[]));
    let index: Value =
        serde_json::from_slice(&answer(&store, get("/v1/channels", None, None)).body).unwrap();
    assert_eq!(index[0]["namespace"], "a-ns");
    assert_eq!(index[1]["url"], "/v1/channels/ns/ch");
    assert_eq!(index[1]["versions"], 1);
    assert_eq!(index[1]["latest"], "v1");
    store.remove(&("ns".into(), "ch".into()));
    assert!(!store.holds(&("ns".into(), "ch".into())));
    assert_eq!(
        answer(&store, get("/v1/channels/ns/ch", None, None)).status,
        404
    );
}

#[test]
fn one_namespace_holds_at_most_half_of_the_bound() {
    let key = |ns: &str, n: &str| (ns.to_string(), n.to_string());
    let mut held = HashMap::new();
    held.insert(key("a", "1"), 40);
    held.insert(key("b", "1"), 30);
    assert!(fits(&held, &key("a", "2"), 10, 100).is_ok());
    // Namespace a would hold 51 of 100.
    let over = fits(&held, &key("a", "2"), 11, 100).unwrap_err();
    assert!(
        over.contains("half of --channel-server-max-bytes"),
        "{over}"
    );
    // Replacing a channel's own data counts it once.
    assert!(fits(&held, &key("a", "1"), 50, 100).is_ok());
    // All namespaces together: at most the bound.
    held.insert(key("c", "1"), 30);
    let full = fits(&held, &key("d", "1"), 11, 100).unwrap_err();
    assert!(full.contains("memory is full"), "{full}");

    // The store answers 503 with the reason, and the namespace's other channels stay.
    let store = Arc::new(Store::new(400));
    std::mem::forget(store.activate());
    let big: Vec<_> = (0..3)
        .map(|i| version(&format!("v{i}"), "v1", "r/os:v1", None))
        .collect();
    store.publish(key("ns", "big"), Entry::render(&big));
    let a = answer(&store, get("/v1/channels/ns/big", None, None));
    assert_eq!(a.status, 503);
    assert!(String::from_utf8_lossy(&a.body).contains("--channel-server-max-bytes"));
}

#[test]
fn a_replica_without_the_controllers_answers_503_and_forgets_its_data() {
    let store = Arc::new(Store::new(1 << 20));
    let request = get("/v1/channels/ns/ch", None, None);
    let idle = answer(&store, request);
    assert_eq!((idle.status, idle.header("retry-after")), (503, Some("10")));
    let active = store.activate();
    store.publish(("ns".into(), "ch".into()), Entry::render(&[]));
    assert_eq!(answer(&store, request).status, 200);
    // The Lease lost: nothing it might no longer keep current is served.
    drop(active);
    assert_eq!(answer(&store, request).status, 503);
    assert!(!store.holds(&("ns".into(), "ch".into())));
}
