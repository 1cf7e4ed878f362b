//! `spec.versions` on the cluster: an Elemental channel image (OS images and ISOs, some
//! for both architectures, some x86_64 only, one without `platforms`; changelogs beside
//! the file and in a layer above it) read as `oci` by an ARM fleet's channel, and
//! `changelog` printing them; then `keep`, which flags and never deletes; `minAge` across
//! an operator restart; and `validate --policy` on the same file.

use super::*;

/// Elemental's shape, with the architectures real files carry: the kernel's names.
fn mixed_platforms() -> Value {
    let entry = |version: &str, kind: &str, platforms: Option<&[&str]>| {
        let mut metadata = json!({"displayName": format!("SL Micro 6.1 {kind}")});
        let image = format!(
            "registry.suse.com/suse/sl-micro/6.1/baremetal-{kind}:{}",
            &version[1..]
        );
        metadata[if kind == "iso" { "uri" } else { "upgradeImage" }] = json!(image);
        if let Some(p) = platforms {
            metadata["platforms"] = json!(p);
        }
        let kind_type = if kind == "iso" { "iso" } else { "container" };
        json!({"metadata": {"name": format!("baremetal-{version}-{kind}")},
               "spec": {"version": version, "type": kind_type, "metadata": metadata}})
    };
    let both: &[&str] = &["linux/x86_64", "linux/aarch64"];
    let x86: &[&str] = &["linux/x86_64"];
    json!([
        entry("v2.2.0-3.15", "os", Some(both)),
        entry("v2.2.0-3.15", "iso", Some(both)),
        entry("v2.2.0-3.7", "os", Some(x86)),
        entry("v2.2.0-3.7", "iso", Some(x86)),
        entry("v2.1.1-3.36", "os", Some(both)),
        entry("v2.1.1-3.29", "os", None),
    ])
}

/// What an ARM fleet should see, by the file alone: entries listing aarch64, or no list.
fn arm_entries(data: &Value) -> Vec<String> {
    let mut names: Vec<String> = data
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| match e["spec"]["metadata"]["platforms"].as_array() {
            None => true,
            Some(p) => p.iter().any(|p| p == "linux/aarch64"),
        })
        .map(|e| e["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn flagged(v: &rancheros_operator::api::ManagedOSVersion) -> bool {
    v.annotations()
        .contains_key("rancheros.cattle.io/channel-no-longer-in-sync")
}

#[tokio::test]
async fn an_arm_fleet_sees_the_arm_versions_of_an_elemental_image_and_keep_only_flags() {
    let mut t = TestNs::new("oci-policy").await;
    let data = mixed_platforms();
    let repo = format!("{}/elemental-channel", t.ns);
    // Built as the channel images are (a busybox rootfs, /channel.json), with the
    // changelogs of two versions in a layer of their own, and one beside the file.
    let l = Layout::new(&format!("{}-changelogs", t.ns));
    let os_log = "- kernel: 6.4.0-29 (CVE-2025-1234)\n- üñïçødé and a tab\there\n";
    let logs = tar_of(&[
        (
            "changelog/baremetal-v2.2.0-3.15-os.updates.log",
            os_log.as_bytes(),
        ),
        (
            "changelog/baremetal-v2.2.0-3.7-os.updates.log",
            b"- x86 only\n",
        ),
    ]);
    let top = tar_of(&[
        ("channel.json", data.to_string().as_bytes()),
        (
            "changelog/baremetal-v2.1.1-3.36-os.updates.log",
            b"- beside the file\n",
        ),
    ]);
    let desc = l.image(
        &[gz_layer(&rootfs()), gz_layer(&top), gz_layer(&logs)],
        "amd64",
    );
    l.push(desc, &repo, "6.1-baremetal");
    start_pulling(&mut t, &FLAGS).await;
    let image = format!("{}/{repo}:6.1-baremetal", registry());
    let mut spec = oci(&image, json!({}));
    spec["versions"] = json!({"platforms": ["linux/arm64"]});
    spec["deleteNoLongerInSyncVersions"] = json!(true);
    let ch = t.create_synced("arm", spec, SYNC).await;
    let want = arm_entries(&data);
    assert_eq!(want.len(), 4, "the file has 4 entries for aarch64 or any");
    assert_eq!(t.version_names().await, want);
    let status = ch.status.unwrap();
    assert_eq!(
        status.latest_version.as_deref(),
        Some("baremetal-v2.2.0-3.15-iso")
    );
    assert_eq!(status.held_back, [("platforms".to_string(), 2)].into());
    assert_eq!(status.synced_versions, Some(4));
    assert_message_contains(
        &t.channel("arm").await,
        "2 held back by spec.versions (platforms 2)",
    );

    // The changelogs, as the image ships them; a version without one says so (exit 1).
    let changelog = |version: &str| {
        Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
            .args(["changelog", &format!("{}/{version}", t.ns)])
            .output()
            .unwrap()
    };
    let out = changelog("baremetal-v2.2.0-3.15-os");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), os_log);
    let out = changelog("baremetal-v2.1.1-3.36-os");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "- beside the file\n"
    );
    let out = changelog("baremetal-v2.2.0-3.15-iso");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "error: version {}/baremetal-v2.2.0-3.15-iso has no changelog (the image of channel arm ships none for it)\n",
            t.ns
        )
    );
    // In one ConfigMap the channel owns (it goes with the channel).
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(t.client.clone(), &t.ns);
    let map = maps.get("arm-changelogs").await.unwrap();
    assert_eq!(map.data.as_ref().unwrap().len(), 3);
    assert_eq!(map.owner_references()[0].name, "arm");

    // keep: 1 (the newest version, its OS image and its ISO): the rest flagged, even with
    // deleteNoLongerInSyncVersions, and none deleted.
    let before = t.channel("arm").await;
    t.patch_spec(
        "arm",
        json!({"versions": {"platforms": ["linux/arm64"], "keep": 1}}),
    )
    .await;
    let ch = t.wait_next_attempt("arm", &before, SYNC).await;
    assert_eq!(
        ready_reason(&ch).as_deref(),
        Some("Synchronized"),
        "{:?}",
        ch.status
    );
    let versions = t.versions().await;
    assert_eq!(versions.len(), 4, "the policy deletes nothing");
    let mut live: Vec<String> = versions
        .iter()
        .filter(|v| !flagged(v))
        .map(|v| v.name_any())
        .collect();
    live.sort();
    assert_eq!(
        live,
        ["baremetal-v2.2.0-3.15-iso", "baremetal-v2.2.0-3.15-os"]
    );
    assert_eq!(
        ch.status.unwrap().held_back,
        [("keep".to_string(), 2), ("platforms".to_string(), 2)].into()
    );

    // The image re-pushed without changelogs: the ConfigMap is emptied (never deleted:
    // the garbage collector removes it with the channel).
    push_channel(&repo, "6.1-baremetal", &data);
    let before = t.channel("arm").await;
    t.sync_again("arm", "no-changelogs", &before, SYNC).await;
    let emptied = maps.get("arm-changelogs").await.unwrap();
    assert!(emptied.data.unwrap_or_default().is_empty());
    assert_eq!(emptied.metadata.uid, map.metadata.uid, "the same ConfigMap");
    assert_eq!(changelog("baremetal-v2.2.0-3.15-os").status.code(), Some(1));

    // validate --policy says the same of the file.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("policy-{}", t.ns));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("c.json"), data.to_string()).unwrap();
    std::fs::write(
        dir.join("policy.yaml"),
        "platforms: [linux/arm64]\nkeep: 1\n",
    )
    .unwrap();
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
            .args(["validate", "--format", "json", "--policy"])
            .arg(dir.join("policy.yaml"))
            .arg(dir.join("c.json")),
        "validate --policy",
    );
    let report: Value = serde_json::from_slice(&out).unwrap();
    let policy = &report["files"][0]["policy"];
    assert_eq!(policy["published"], 2, "{report:#}");
    assert_eq!(
        policy["held_back"],
        json!({"keep": 2, "platforms": 2}),
        "{report:#}"
    );
    t.cleanup().await;
}

/// The tester's case: a tenant keeps a ConfigMap of their own named `foo-changelogs`; an
/// oci channel `foo` syncs an image without changelogs, then one with: the tenant's
/// ConfigMap is never changed, deleted, adopted or owned, the conflict is said in `Ready`
/// and an Event (the sync stands), `changelog` does not show the tenant's data; once the
/// tenant removes theirs, the next sync stores the channel's own.
#[tokio::test]
async fn a_tenants_changelogs_configmap_is_never_written_and_the_conflict_is_said() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let mut t = TestNs::new("oci-owned").await;
    let maps: kube::Api<ConfigMap> = kube::Api::namespaced(t.client.clone(), &t.ns);
    let tenants: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "foo-changelogs"},
        "data": {"settings": "the tenant's own"},
    }))
    .unwrap();
    let tenants = maps.create(&Default::default(), &tenants).await.unwrap();
    let untouched = |map: &ConfigMap, after: &str| {
        assert_eq!(
            (&map.metadata.uid, &map.metadata.resource_version, &map.data),
            (
                &tenants.metadata.uid,
                &tenants.metadata.resource_version,
                &tenants.data
            ),
            "after {after}: the tenant's ConfigMap was written"
        );
        assert!(map.owner_references().is_empty(), "after {after}: adopted");
    };
    let data = channel_data(&[("v1", "v1.0.0")]);
    let repo = format!("{}/owned-channel", t.ns);
    push_channel(&repo, "latest", &data);
    start_pulling(&mut t, &FLAGS).await;
    let image = format!("{}/{repo}:latest", registry());
    let ch = t.create_synced("foo", oci(&image, json!({})), SYNC).await;
    untouched(
        &maps.get("foo-changelogs").await.unwrap(),
        "an image without changelogs",
    );
    assert!(
        !ready_message(&ch).contains("changelogs"),
        "nothing to store is no conflict: {}",
        ready_message(&ch)
    );

    // The image again, with a changelog for v1.
    let l = Layout::new(&format!("{}-owned", t.ns));
    let top = tar_of(&[
        ("channel.json", data.to_string().as_bytes()),
        ("changelog/v1.updates.log", b"- what changed\n"),
    ]);
    let desc = l.image(&[gz_layer(&rootfs()), gz_layer(&top)], "amd64");
    l.push(desc, &repo, "latest");
    let before = t.channel("foo").await;
    let ch = t.sync_again("foo", "with-changelogs", &before, SYNC).await;
    untouched(
        &maps.get("foo-changelogs").await.unwrap(),
        "an image with changelogs",
    );
    assert_eq!(
        ready_reason(&ch).as_deref(),
        Some("Synchronized"),
        "the sync stands"
    );
    let said = "the changelogs were not stored: ConfigMap \"foo-changelogs\" already exists and is not controlled by any channel";
    assert_message_contains(&ch, said);
    let events = channel_events(&t, "foo").await;
    assert!(
        events.iter().any(|(type_, reason, note)| type_ == "Warning"
            && reason == "ChangelogsConflict"
            && note.contains(said)),
        "{events:?}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
        .args(["changelog", &format!("{}/v1", t.ns)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not channel foo's"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The tenant removes theirs: the next sync (the image read again) stores the channel's.
    maps.delete("foo-changelogs", &Default::default())
        .await
        .unwrap();
    let before = t.channel("foo").await;
    let ch = t.sync_again("foo", "name-free", &before, SYNC).await;
    assert!(
        !ready_message(&ch).contains("changelogs"),
        "{}",
        ready_message(&ch)
    );
    let ours = maps.get("foo-changelogs").await.unwrap();
    let owner = &ours.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (ch.uid().unwrap().as_str(), Some(true))
    );
    assert_eq!(ours.data.unwrap()["v1"], "- what changed\n");
    t.cleanup().await;
}

#[tokio::test]
async fn min_age_is_timed_from_the_first_sync_across_an_operator_restart() {
    let mut t = TestNs::new("oci-min-age").await;
    let data = elemental(&["sl-micro-a", "sl-micro-b"]);
    let repo = format!("{}/elemental-channel", t.ns);
    push_channel(&repo, "v1", &data);
    start_pulling(&mut t, &FLAGS).await;
    let image = format!("{}/{repo}:v1", registry());
    let mut spec = oci(&image, json!({}));
    spec["versions"] = json!({"minAge": "40s"});
    let ch = t.create_synced("wary", spec, SYNC).await;
    assert!(
        t.versions().await.is_empty(),
        "nothing is published before its age"
    );
    let first_seen = ch.status.unwrap().first_seen;
    assert_eq!(first_seen.len(), 2, "{first_seen:?}");
    // Another operator process: it has only the status to go by.
    t.kill_operator();
    t.start_operator(&FLAGS);
    let before = t.channel("wary").await;
    let ch = t.sync_again("wary", "after-restart", &before, SYNC).await;
    assert_eq!(
        ch.status.as_ref().unwrap().first_seen,
        first_seen,
        "the clock kept"
    );
    assert!(t.versions().await.is_empty());
    // Published by the sync that comes due when they are of age (no request needed), and
    // never before it.
    let versions = t
        .eventually("the versions, of age", Duration::from_secs(120), || async {
            let v = t.versions().await;
            (v.len() == 2).then_some(v)
        })
        .await;
    let seen = first_seen.values().map(|t| t.0).max().unwrap();
    for v in &versions {
        let created = v.metadata.creation_timestamp.as_ref().unwrap().0;
        assert!(
            created.duration_since(seen) >= k8s_openapi::jiff::SignedDuration::from_secs(39),
            "{} created {created}, first seen {seen}",
            v.name_any()
        );
    }
    // (the status is written after the versions)
    t.eventually("firstSeen emptied", SYNC, || async {
        let ch = t.channel("wary").await;
        ch.status.unwrap().first_seen.is_empty().then_some(())
    })
    .await;
    t.cleanup().await;
}
