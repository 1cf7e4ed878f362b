//! The upgrade from the previous release to this one, as a user of the previous release
//! makes it: the previous version's release directory (`scripts/previous-release`: its
//! chart and image built from git history) installed as the README says, with its CRDs,
//! channels synced; then this release's directory (`scripts/release`), its image imported,
//! and the upgrade block of docs/install.md run as written (the new CRDs from the chart
//! first, then `helm upgrade --reset-then-reuse-values`). The new operator syncs every
//! channel again; every channel and version is still there, the same objects, and no
//! version whose content did not change was written (its resourceVersion is the same).
//!
//! It puts the previous release's CRDs on the cluster, which other tests do not work with:
//! scripts/lib/run-tests runs this module alone, and the CRDs of this build are put back
//! when it ends, whatever happened.

use crate::chart_install::{Release, kubectl, kubectl_apply, kubectl_json, sample_channel};
use crate::chart_support::*;
use crate::release_install::{
    deployed_image, doc_block, readme_install, run_script, substitute, version, wait_synced,
    warnings,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// The warning kubectl prints once when it applies over CRDs that Helm (or a server-side
/// apply) created, which have no last-applied annotation yet: harmless (docs/upgrade.md).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// This build's CRDs back on the cluster on drop, as the test harness applies them.
struct RestoreCrds;

impl Drop for RestoreCrds {
    fn drop(&mut self) {
        let out = output(
            kubectl()
                .args(["apply", "--server-side", "--force-conflicts"])
                .args(["--field-manager", "rancheros-operator-tests", "-f"])
                .arg(root().join("crds")),
        );
        if !out.status.success() {
            eprintln!(
                "cannot put this build's CRDs back: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The previous release's directory and its version (from its chart's file name).
fn previous_release() -> (PathBuf, String) {
    let helm = tool("helm");
    let mut path = vec![helm.parent().unwrap().to_path_buf()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let printed = run(Command::new(root().join("scripts/previous-release"))
        .env("PATH", std::env::join_paths(path).unwrap()));
    let dir = PathBuf::from(printed.lines().last().unwrap_or_default().trim());
    let chart = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(".tgz"))
        .unwrap_or_else(|| panic!("no chart in {}", dir.display()));
    let version = chart
        .strip_prefix("rancheros-operator-")
        .and_then(|n| n.strip_suffix(".tgz"))
        .unwrap()
        .to_string();
    assert_ne!(
        version,
        self::version(),
        "the previous release is this version"
    );
    (dir, version)
}

/// A custom channel whose runner prints `data`, with an `upgradeContainer` of its own.
fn channel_with(ns: &str, name: &str, data: &Value) -> String {
    let runner =
        std::env::var("RANCHEROS_RUNNER_IMAGE").unwrap_or_else(|_| "rancheros-runner:test".into());
    json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "custom",
            "syncInterval": "1h",
            "options": {
                "image": runner, "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/bash", "-c", "--"],
                "args": [format!("echo '{data}' > /output/data")],
                "mountPath": "/output", "outputFile": "/output/data"},
            "upgradeContainer": {
                "image": "registry.example.com/os/upgrader:v1",
                "command": ["/usr/sbin/upgrade"],
                "envs": [{"name": "FORCE", "value": "true"}]}}
    })
    .to_string()
}

/// Versions of every kind of content: metadata, an upgradeContainer of their own, iso.
fn fleet_data() -> Value {
    json!([
        {"metadata": {"name": "os-v1-0"}, "spec": {"version": "v1.0", "type": "container",
         "minVersion": "0.0.0", "metadata": {"upgradeImage": "registry.example.com/os:v1.0"}}},
        {"metadata": {"name": "os-v1-1"}, "spec": {"version": "v1.1", "type": "container",
         "metadata": {"upgradeImage": "registry.example.com/os:v1.1", "displayName": "OS 1.1"},
         "upgradeContainer": {"image": "registry.example.com/os/upgrader:v1.1",
                              "args": ["--reboot"],
                              "envs": [{"name": "STAGE", "value": "two"}]}}},
        {"metadata": {"name": "os-v1-1-iso"}, "spec": {"version": "v1.1", "type": "iso",
         "metadata": {"uri": "https://example.com/os-v1.1.iso"}}}
    ])
}

/// What a version is, and what of it must not change unless its content does.
struct Seen {
    uid: Value,
    resource_version: Value,
    content: Value,
}

/// Every channel and version of `ns`, by kind and name.
fn objects(ns: &str) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    for kind in [
        "managedosversionchannels.rancheros.cattle.io",
        "managedosversions.rancheros.cattle.io",
    ] {
        for item in kubectl_json(&["get", kind, "--namespace", ns])["items"]
            .as_array()
            .unwrap()
        {
            let meta = &item["metadata"];
            // A channel's status moves with every sync; a version has no status it writes.
            let content = json!({
                "spec": item["spec"], "labels": meta["labels"],
                "annotations": meta["annotations"], "owners": meta["ownerReferences"],
                "status": if kind.starts_with("managedosversions.") { item["status"].clone() } else { Value::Null },
            });
            out.insert(
                format!(
                    "{}/{}",
                    kind.split('.').next().unwrap(),
                    meta["name"].as_str().unwrap()
                ),
                Seen {
                    uid: meta["uid"].clone(),
                    resource_version: meta["resourceVersion"].clone(),
                    content,
                },
            );
        }
    }
    out
}

/// Asks every channel of `ns` for a sync now and waits until the operator of `rel` made it.
fn sync_all(rel: &Release, ns: &str, channels: &[&str], stamp: &str) {
    for channel in channels {
        run(kubectl()
            .args(["annotate", "--overwrite", "--namespace", ns])
            .args([
                &format!("managedosversionchannels.rancheros.cattle.io/{channel}"),
                &format!("rancheros.cattle.io/sync-requested-at={stamp}"),
            ]));
    }
    for channel in channels {
        wait_synced(rel, ns, channel, Some(stamp));
    }
}

#[test]
fn upgrade_from_the_previous_release_keeps_every_channel_and_version() {
    let (previous, previous_version) = previous_release();
    let previous = previous.to_str().unwrap().to_string();
    let now = version();
    eprintln!("upgrading from {previous_version} ({previous}) to {now}");
    let _restore = RestoreCrds;
    let rel = Release::new("release-upgrade", 1);
    let watched = rel.namespaces[0].clone();

    // The previous release, installed as its users did: its CRDs, as its first install
    // created them, then the README's steps from its release directory.
    let (_, stderr) = run_script(
        &format!(
            "helm show crds {previous}/rancheros-operator-{previous_version}.tgz | kubectl apply -f -"
        ),
        "the previous release's CRDs",
    );
    assert_eq!(warnings(&stderr, Some(LAST_APPLIED)), Vec::<String>::new());
    let install: Vec<String> = readme_install(&rel, &previous, &previous_version)
        .into_iter()
        .filter(|l| !l.starts_with("scripts/release"))
        .collect();
    run_script(
        &install.join("\n"),
        "the README's install of the previous release",
    );
    let old_image = deployed_image(&rel);
    run(kubectl()
        .args(["rollout", "status", "deployment"])
        .arg(rel.fullname())
        .args(["--namespace", &rel.ns, "--timeout", "180s"]));

    // Channels, synced by the previous operator.
    kubectl_apply(&sample_channel(&watched));
    kubectl_apply(&channel_with(&watched, "fleet", &fleet_data()));
    let channels = ["testchannel", "fleet"];
    sync_all(&rel, &watched, &channels, "before-upgrade");
    let before = objects(&watched);
    assert_eq!(
        before.len(),
        channels.len() + 2 + fleet_data().as_array().unwrap().len(),
        "{:?}",
        before.keys().collect::<Vec<_>>()
    );

    // This release: its directory and image as the README makes them, then the upgrade
    // block of docs/install.md.
    let dir = temp_dir("release-upgrade").join("release");
    let dir = dir.to_str().unwrap().to_string();
    let prepare: Vec<String> = readme_install(&rel, &dir, now)
        .into_iter()
        .filter(|l| !l.starts_with("helm install"))
        .collect();
    let (stdout, _) = run_script(&prepare.join("\n"), "this release's directory and image");
    let digest = stdout
        .lines()
        .find(|l| l.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("scripts/release printed no digest:\n{stdout}"))
        .to_string();
    let upgrade = substitute(
        &doc_block(
            "docs/install.md",
            "tests/release_upgrade.rs runs this block",
        ),
        &[
            ("VERSION", now),
            (
                "helm upgrade rancheros-operator ",
                &format!("helm upgrade {} ", rel.name),
            ),
            (
                "--namespace rancheros-operator",
                &format!("--namespace {}", rel.ns),
            ),
            (
                "--reset-then-reuse-values",
                "--reset-then-reuse-values --wait --timeout 180s",
            ),
        ],
    );
    let (_, stderr) = run_script(&format!("cd {dir}\n{upgrade}"), "the docs' upgrade");
    assert_eq!(
        warnings(&stderr, Some(LAST_APPLIED)),
        Vec::<String>::new(),
        "the upgrade printed warnings"
    );
    let new_image = deployed_image(&rel);
    assert_eq!(new_image, format!("rancheros-operator@{digest}"));
    assert_ne!(new_image, old_image, "the upgrade kept the previous image");
    // The installed CRDs are this release's (the operator checked their hash at start).
    let installed = kubectl_json(&["get", "crd", "managedosversionchannels.rancheros.cattle.io"]);
    let ours = std::fs::read_to_string(root().join("crds/managedosversionchannels.yaml")).unwrap();
    let hash = installed["metadata"]["annotations"]["rancheros.cattle.io/schema-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        ours.contains(&hash),
        "the installed CRD's schema hash {hash} is not this build's"
    );

    // The new operator syncs every channel again.
    sync_all(&rel, &watched, &channels, "after-upgrade");
    let after = objects(&watched);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "channels or versions were lost or added by the upgrade"
    );
    let mut rewritten = Vec::new();
    let mut changed = Vec::new();
    for (name, was) in &before {
        let is = &after[name];
        assert_eq!(was.uid, is.uid, "{name} was replaced by another object");
        if !name.starts_with("managedosversions/") {
            assert_eq!(
                was.content["spec"], is.content["spec"],
                "{name}'s spec changed"
            );
            continue;
        }
        if was.content == is.content {
            if was.resource_version != is.resource_version {
                rewritten.push(name.clone());
            }
        } else {
            changed.push(format!("{name}: {} -> {}", was.content, is.content));
        }
    }
    assert!(
        rewritten.is_empty(),
        "versions rewritten by the upgrade although nothing of them changed: {rewritten:?}"
    );
    // (a version whose content the new release writes otherwise may change: none here)
    assert!(
        changed.is_empty(),
        "versions changed by the upgrade: {changed:#?}"
    );
    let _ = std::fs::remove_dir_all(Path::new(&dir).parent().unwrap());
}
