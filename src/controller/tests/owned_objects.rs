//! Only what it owns: objects of every kind the operator writes (a version, a pod, a
//! ConfigMap) that a channel does not control are left as they are by every path (syncs,
//! disable, suspend, the Orphan finalizer); a changelogs ConfigMap name held by someone
//! else is a conflict said on the channel, never adopted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;

use super::*;
use kube::Resource;

use crate::api::ManagedOSVersion;
use crate::channel::changelogs::Changelogs;
use crate::controller::io::Kind;
use crate::controller::objects::owned::{self, Done};

/// An oci channel image: 1 ships a changelog for v1, 2 ships none.
fn image_source(image: Arc<AtomicU8>) -> crate::controller::tests::fake::Source {
    Box::new(move |known: &Validators| {
        let which = image.load(Ordering::SeqCst);
        let revision = format!("v{which}@sha256:{which}");
        if known.etag.as_deref() == Some(revision.as_str()) {
            return Response::NotModified;
        }
        // An image is read for changelogs whether it ships any or not.
        let mut logs = Changelogs::default();
        if which == 1 {
            logs.add("v1", b"what changed in v1\n");
        }
        let changelogs = Some(Arc::new(logs));
        Response::Body {
            data: DATA.as_bytes().to_vec(),
            validators: Validators {
                etag: Some(revision),
                last_modified: None,
            },
            changelogs,
        }
    })
}

fn oci() -> Value {
    json!({
        "type": "oci",
        "options": {"image": "registry.example/channels/os:v1"},
        "versionPolicy": {"onChannelDelete": "Orphan"},
    })
}

/// A tenant's object: `owner` its controller (kind, name, uid), or none.
fn meta(name: &str, owner: Option<(&str, &str, &str)>) -> Value {
    let mut meta = json!({
        "name": name,
        "namespace": "a",
        "uid": format!("tenant-{name}"),
        "resourceVersion": "7",
        "labels": {CHANNEL_LABEL: "foo"},
    });
    if let Some((kind, name, uid)) = owner {
        meta["ownerReferences"] = json!([{
            "apiVersion": "rancheros.cattle.io/v1",
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": true,
        }]);
    }
    meta
}

/// The tenant's objects, as they are now (JSON, to compare whole).
fn foreign(h: &Harness) -> Value {
    let world = h.ctx.io.world();
    json!({
        "unowned version": world.versions.get(&key("a", "v9")),
        "other channel's version": world.versions.get(&key("a", "v8")),
        "pod": world.pods.get(&key("a", "bar")),
        "configmap": world.configmaps.get(&key("a", "foo-changelogs")),
    })
}

fn ready_message(h: &Harness, c: &Key) -> String {
    let status = h.channel(c).status.unwrap_or_default();
    status.condition("Ready").unwrap().message.clone()
}

fn events(h: &Harness, reason: &str) -> usize {
    let world = h.ctx.io.world();
    world
        .events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .count()
}

fn tenant_configmap(h: &Harness) {
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": meta("foo-changelogs", None),
        "data": {"mine": "the tenant's own"},
    }))
    .unwrap();
    h.ctx
        .io
        .world()
        .configmaps
        .insert(key("a", "foo-changelogs"), map);
}

#[tokio::test]
async fn no_path_changes_an_object_the_channel_does_not_control() {
    let mut h = Harness::new(settings());
    let foo = h.create("a", "foo", oci());
    let bar = h.create("a", "bar", custom());
    let image = Arc::new(AtomicU8::new(1));
    h.ctx.io.world().source = Some(image_source(image.clone()));
    {
        let mut world = h.ctx.io.world();
        // A version that carries foo's label and no owner, one another channel controls.
        for (name, owner) in [
            ("v9", None),
            (
                "v8",
                Some(("ManagedOSVersionChannel", "other", "uid-other")),
            ),
        ] {
            let v: ManagedOSVersion = serde_json::from_value(json!({
                "apiVersion": "rancheros.cattle.io/v1",
                "kind": "ManagedOSVersion",
                "metadata": meta(name, owner),
                "spec": {"version": name, "type": "container"},
            }))
            .unwrap();
            world.versions.insert(key("a", name), v);
        }
        // A pod named after bar, claiming bar by name with another uid.
        let pod: Pod = serde_json::from_value(json!({
            "metadata": meta("bar", Some(("ManagedOSVersionChannel", "bar", "uid-forged"))),
        }))
        .unwrap();
        world.pods.insert(key("a", "bar"), pod);
    }
    tenant_configmap(&h);
    let before = foreign(&h);
    let unchanged = |h: &Harness, path: &str| {
        assert_eq!(foreign(h), before, "{path} changed a tenant's object");
    };

    // A sync of an image with changelogs: the versions written, the ConfigMap left alone
    // and the conflict said in Ready and an Event.
    h.ok(&foo).await;
    unchanged(&h, "an oci sync with changelogs");
    assert_eq!(h.ready_reason(&foo), "Synchronized");
    let message = ready_message(&h, &foo);
    assert!(
        message.contains(
            "the changelogs were not stored: ConfigMap \"foo-changelogs\" already exists and is not controlled by any channel"
        ),
        "{message}"
    );
    assert_eq!(events(&h, "ChangelogsConflict"), 1);
    assert!(h.ctx.io.world().versions.contains_key(&key("a", "v1")));
    assert_eq!(h.calls("apply_configmap"), 0);

    // An image without changelogs: nothing to store, the tenant's ConfigMap stays.
    image.store(2, Ordering::SeqCst);
    h.bump(&foo);
    h.ok(&foo).await;
    unchanged(&h, "an oci sync without changelogs");
    assert_eq!(h.calls("apply_configmap") + h.calls("delete_configmap"), 0);

    // A custom channel whose pod name is the tenant's pod: a conflict, the pod stays.
    h.ok(&bar).await;
    unchanged(&h, "a custom channel's sync");
    assert_eq!(h.ready_reason(&bar), "FailedToCreatePod");

    // Suspended, then disabled (deleting what it no longer lists).
    for (field, value) in [("suspend", true), ("enabled", false)] {
        for c in [&foo, &bar] {
            h.edit(c, |ch| {
                ch.spec.delete_no_longer_in_sync_versions = Some(true);
                ch.spec.suspend = Some(field == "suspend" && value);
                if field == "enabled" {
                    ch.spec.enabled = Some(value);
                }
            });
            h.bump(c);
            h.ok(c).await;
            unchanged(&h, field);
        }
    }
    assert!(
        !h.ctx.io.world().versions.contains_key(&key("a", "v1")),
        "the disabled channel deleted its own version"
    );

    // Enabled again (v1 back), then deleted: the Orphan finalizer lets go of its own only.
    h.edit(&foo, |ch| ch.spec.enabled = Some(true));
    image.store(1, Ordering::SeqCst);
    h.bump(&foo);
    h.ok(&foo).await;
    assert!(h.ctx.io.world().versions.contains_key(&key("a", "v1")));
    h.mark_deleted(&foo);
    h.ok(&foo).await;
    assert!(
        h.channel(&foo).finalizers().is_empty(),
        "the channel is let go"
    );
    assert!(
        h.ctx.io.world().versions[&key("a", "v1")]
            .owner_references()
            .is_empty(),
        "its own version orphaned"
    );
    unchanged(&h, "the Orphan finalizer");
    assert_eq!(h.calls("delete_pod"), 0);
}

#[tokio::test]
async fn a_changelogs_conflict_is_said_until_resolved_then_the_changelogs_are_stored() {
    let mut h = Harness::new(settings());
    let foo = h.create("a", "foo", oci());
    let image = Arc::new(AtomicU8::new(1));
    h.ctx.io.world().source = Some(image_source(image.clone()));
    tenant_configmap(&h);
    h.ok(&foo).await;
    assert_eq!(events(&h, "ChangelogsConflict"), 1);
    // Said again at the next sync: the image is read again, not answered from kept data.
    h.bump(&foo);
    h.ok(&foo).await;
    assert!(
        ready_message(&h, &foo).contains("not controlled by any channel"),
        "{}",
        ready_message(&h, &foo)
    );
    // The tenant removes theirs: the next sync stores the changelogs, owned by the channel.
    h.ctx
        .io
        .world()
        .configmaps
        .remove(&key("a", "foo-changelogs"));
    h.bump(&foo);
    h.ok(&foo).await;
    let uid = h.channel(&foo).uid().unwrap();
    let stored = h.ctx.io.world().configmaps[&key("a", "foo-changelogs")].clone();
    let owner = &stored.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (uid.as_str(), Some(true))
    );
    assert_eq!(stored.labels()[CHANNEL_LABEL], "foo");
    assert_eq!(
        stored.data.as_ref().unwrap()["v1"],
        "what changed in v1\n",
        "stored"
    );
    assert!(!ready_message(&h, &foo).contains("changelogs"));
    // An image without changelogs empties the channel's own ConfigMap (never deleted: the
    // garbage collector removes it with the channel).
    image.store(2, Ordering::SeqCst);
    h.bump(&foo);
    h.ok(&foo).await;
    let emptied = h.ctx.io.world().configmaps[&key("a", "foo-changelogs")].clone();
    assert_eq!(emptied.uid(), stored.uid(), "the same ConfigMap");
    assert!(emptied.data.unwrap_or_default().is_empty());
    assert_eq!(h.calls("delete_configmap"), 0);
}

#[tokio::test]
async fn a_pod_no_longer_controlled_by_the_channel_is_not_deleted() {
    let mut h = Harness::new(settings());
    let c = h.create("a", "c", custom());
    let channel = h.channel(&c);
    let uid = channel.uid().unwrap();
    // Decided on as the channel's (the cache saw its owner reference); read fresh, its
    // controller is someone else now.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "c", "namespace": "a", "uid": "pod-1",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ReplicaSet", "name": "r", "uid": "rs", "controller": true}],
        },
    }))
    .unwrap();
    h.ctx.io.world().pods.insert(c.clone(), pod);
    let io = &h.ctx.io;
    let metrics = &h.ctx.metrics;
    let done = owned::delete(io, metrics, Kind::Pod, "a", "c", "pod-1", &channel).await;
    assert_eq!(
        done.unwrap(),
        Done::Conflict("pod \"c\" already exists and is controlled by ReplicaSet \"r\"".into())
    );
    assert!(h.has_pod(&c));
    // Its own, it goes; one replaced meanwhile (another uid) is left alone.
    h.ctx
        .io
        .world()
        .pods
        .get_mut(&c)
        .unwrap()
        .metadata
        .owner_references = channel.controller_owner_ref(&()).map(|o| vec![o]);
    let done = owned::delete(io, metrics, Kind::Pod, "a", "c", "pod-0", &channel).await;
    assert_eq!(done.unwrap(), Done::Replaced);
    assert!(h.has_pod(&c));
    let done = owned::delete(io, metrics, Kind::Pod, "a", "c", "pod-1", &channel).await;
    assert_eq!(done.unwrap(), Done::Changed);
    assert!(!h.has_pod(&c));
    assert_eq!(uid, h.channel(&c).uid().unwrap());
}

#[tokio::test]
async fn an_events_series_is_never_added_to_a_namesake_someone_else_made() {
    let mut h = Harness::new(crate::syncer::Settings {
        retry_delay: std::time::Duration::ZERO,
        ..settings()
    });
    let c = h.create("a", "c", json_channel());
    h.ctx.io.world().source = Some(Box::new(|_: &Validators| {
        Response::Failed("fetching https://example.com/c.json: HTTP 500".into())
    }));
    h.ok(&c).await;
    // The Event expired, and someone made one of its name.
    let theirs = {
        let mut world = h.ctx.io.world();
        let event = &mut world.events[0];
        event.metadata.uid = Some("tenant-event".into());
        event.clone()
    };
    h.ok(&c).await;
    let world = h.ctx.io.world();
    assert_eq!(world.events[0], theirs, "the tenant's Event was patched");
    assert_eq!(world.events.len(), 2, "a new Event: {:?}", world.calls);
}
