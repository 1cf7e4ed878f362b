//! Heap bytes per cached ManagedOSVersion: as the API server sends it (with its
//! `managedFields`), as the metadata-only watch decodes it (`VersionMeta`: no spec, no field
//! sets), and as the operator's cache keeps it (`VersionIndex`, its maps included), all
//! measured here with a counting allocator over the same 10,000 versions.
//!
//!     cargo bench --bench cache_memory
//!
//! Versions are shaped like published channel data (free-form `displayName`, `platforms`,
//! `created` in `spec.metadata`). A report, not a test: it prints figures and a ratio.

mod common;

use std::sync::atomic::Ordering;

use kube::runtime::watcher::Event;

use common::counting::LIVE;
use common::published_spec;
use rancheros_operator::api::ManagedOSVersion;
use rancheros_operator::controller::versions::index::VersionIndex;
use rancheros_operator::controller::versions::meta::VersionMeta;

const VERSIONS: usize = 10_000;

/// One version as a watch event carries it (the operator's server-side apply record included).
fn from_the_api_server(i: usize) -> String {
    let owner = "0b9c4f0e-8d0a-4a57-9a55-1c9d6c0b7f11";
    serde_json::json!({
        "apiVersion": "rancheros.cattle.io/v1",
        "kind": "ManagedOSVersion",
        "metadata": {
            "name": format!("v1-{i}"),
            "namespace": "fleet-default",
            "uid": format!("6f1c2a9e-1111-4c4c-9e9e-{i:012}"),
            "resourceVersion": (100_000 + i).to_string(),
            "generation": 1,
            "creationTimestamp": "2026-11-30T12:00:00Z",
            "labels": {"rancheros.cattle.io/channel": "sle-micro"},
            "annotations": {"rancheros.cattle.io/content-hash": format!("{i:032x}")},
            "ownerReferences": [{
                "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
                "name": "sle-micro", "uid": owner, "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [{
                "manager": "rancheros-operator", "operation": "Apply",
                "apiVersion": "rancheros.cattle.io/v1", "time": "2026-11-30T12:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:labels": {"f:rancheros.cattle.io/channel": {}},
                        "f:annotations": {"f:rancheros.cattle.io/content-hash": {}},
                        "f:ownerReferences": {format!("k:{{\"uid\":\"{owner}\"}}"): {}}
                    },
                    "f:spec": {
                        "f:metadata": {"f:upgradeImage": {}, "f:displayName": {}, "f:platforms": {}, "f:created": {}},
                        "f:minVersion": {}, "f:type": {}, "f:version": {}
                    }
                }
            }]
        },
        "spec": published_spec(i)
    })
    .to_string()
}

fn heap_per_version(lean: bool) -> usize {
    let texts: Vec<String> = (0..VERSIONS).map(from_the_api_server).collect();
    let before = LIVE.load(Ordering::Relaxed);
    let cached: Vec<ManagedOSVersion> = texts
        .iter()
        .map(|text| {
            if lean {
                serde_json::from_str::<VersionMeta>(text)
                    .expect("a valid version")
                    .0
            } else {
                serde_json::from_str::<ManagedOSVersion>(text).expect("a valid version")
            }
        })
        .collect();
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    drop(cached);
    bytes / VERSIONS
}

/// The cache itself, filled as the watch fills it (one list), with its maps, remembering
/// for every version the resourceVersion the operator wrote (as after its first sync).
fn heap_per_version_cached() -> usize {
    let texts: Vec<String> = (0..VERSIONS).map(from_the_api_server).collect();
    let written: Vec<(String, String)> = (0..VERSIONS)
        .map(|i| (format!("v1-{i}"), (100_000 + i).to_string()))
        .collect();
    let before = LIVE.load(Ordering::Relaxed);
    let index = VersionIndex::default();
    index.apply(Event::Init);
    for text in &texts {
        let v = serde_json::from_str::<VersionMeta>(text).expect("a valid version");
        index.apply(Event::InitApply(v.0));
    }
    index.apply(Event::InitDone);
    index.remember("fleet-default", &written);
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(index.len(), VERSIONS);
    drop(index);
    bytes / VERSIONS
}

fn main() {
    let full = heap_per_version(false);
    let lean = heap_per_version(true);
    let cached = heap_per_version_cached();
    let mib = |per: usize| (per * VERSIONS) as f64 / 1_048_576.0;
    println!("heap per cached version, {VERSIONS} versions:");
    println!(
        "  as sent by the API server: {full} bytes ({:.1} MiB)",
        mib(full)
    );
    println!(
        "  as the metadata watch decodes it: {lean} bytes ({:.1} MiB)",
        mib(lean)
    );
    println!(
        "  the operator's cache (VersionIndex): {cached} bytes ({:.1} MiB)",
        mib(cached)
    );
    println!(
        "  ratio cache / full:        {:.2}",
        cached as f64 / full as f64
    );
    assert!(
        cached <= 1024,
        "{cached} bytes per cached version: over 1 KiB"
    );
}
