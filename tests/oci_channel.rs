//! `type: oci` channels against the local cluster and its test registry (Debian's
//! docker-registry, basic auth, plain HTTP on 127.0.0.1:5050): channel images built as
//! rancher/elemental-channels builds them (a busybox-like rootfs and `/channel.json`,
//! one layer each) as OCI layouts, pushed with `skopeo`; an artifact (a JSON layer) pushed
//! with the registry API. The operator runs on the host with loopback allowed for
//! 127.0.0.1 only, and plain HTTP allowed.

use crate::common;
#[path = "oci_channel/layers.rs"]
mod layers;
#[path = "oci_channel/mirror.rs"]
mod mirror;
#[path = "oci_channel/policy.rs"]
mod policy;
#[path = "oci_channel/registries.rs"]
mod registries;
#[path = "oci_channel/signatures.rs"]
mod signatures;

use registries::ca_dir;
use signatures::helm_tool;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use common::*;
use kube::ResourceExt;
use serde_json::{Value, json};

const SYNC: Duration = Duration::from_secs(60);
const FLAGS: [&str; 3] = [
    "--egress-allow-cidr=127.0.0.1/32",
    "--allow-insecure-registries",
    "--min-sync-interval=1s",
];

fn registry() -> String {
    std::env::var("RANCHEROS_TEST_REGISTRY").unwrap_or_else(|_| "127.0.0.1:5050".into())
}

fn creds() -> (String, String) {
    let user = std::env::var("RANCHEROS_TEST_REGISTRY_USER")
        .expect("RANCHEROS_TEST_REGISTRY_USER (scripts/cluster env)");
    let pass = std::env::var("RANCHEROS_TEST_REGISTRY_PASSWORD")
        .expect("RANCHEROS_TEST_REGISTRY_PASSWORD (scripts/cluster env)");
    (user, pass)
}

fn sha(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A channel file shaped as Elemental publishes them: free-form `spec.metadata`.
fn elemental(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| {
                json!({
                    "metadata": {"name": n},
                    "spec": {
                        "version": format!("v1.6.{}", n.len()),
                        "type": "container",
                        "metadata": {
                            "upgradeImage": format!("registry.suse.com/suse/sl-micro/6.0/baremetal-os-container:{n}"),
                            "displayName": format!("SL Micro {n}"),
                            "platforms": ["linux/x86_64", "linux/aarch64"],
                            "created": "2024-11-05T10:11:12Z",
                            "baseImage": {"name": "sl-micro", "build": 42}
                        }
                    }
                })
            })
            .collect(),
    )
}

/// A tar stream of files.
fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o755);
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A tar of `/channel.json` holding `data`, as a channel image's top layer has it.
fn channel_tar(data: &Value) -> Vec<u8> {
    tar_of(&[("channel.json", data.to_string().as_bytes())])
}

/// A busybox-like base layer (the channel image's rootfs).
fn rootfs() -> Vec<u8> {
    let busybox = std::fs::read("/bin/busybox").unwrap_or_else(|_| b"#!/bin/sh\n".to_vec());
    tar_of(&[("bin/busybox", &busybox), ("bin/cp", b"#!/bin/busybox\n")])
}

/// An OCI image layout being written.
struct Layout {
    dir: PathBuf,
}

/// A layer: media type, blob, the uncompressed tar's digest.
struct Layer(&'static str, Blob, String);

/// A layer's blob: in memory, or already written into the layout (digest, size).
enum Blob {
    Bytes(Vec<u8>),
    Written(String, usize),
}

const GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
const PLAIN: &str = "application/vnd.oci.image.layer.v1.tar";

fn gz_layer(tar: &[u8]) -> Layer {
    Layer(GZIP, Blob::Bytes(gzip(tar)), sha(tar))
}

impl Layout {
    fn new(name: &str) -> Layout {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oci-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        Layout { dir }
    }

    fn blob(&self, data: &[u8]) -> (String, usize) {
        let d = sha(data);
        let hex = d.strip_prefix("sha256:").unwrap();
        std::fs::write(self.dir.join("blobs/sha256").join(hex), data).unwrap();
        (d, data.len())
    }

    /// Writes an image manifest (layers bottom first); its descriptor.
    fn image(&self, layers: &[Layer], arch: &str) -> Value {
        let config = json!({"architecture": arch, "os": "linux",
            "config": {"Cmd": ["/bin/cp", "/channel.json", "/data/output"]},
            "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.2.clone()).collect::<Vec<_>>()}});
        let (cd, cs) = self.blob(config.to_string().as_bytes());
        let manifest = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
            "layers": layers.iter().map(|l| { let (d, s) = match &l.1 { Blob::Bytes(b) => self.blob(b), Blob::Written(d, s) => (d.clone(), *s) }; json!({"mediaType": l.0, "digest": d, "size": s}) }).collect::<Vec<_>>()});
        let (d, s) = self.blob(manifest.to_string().as_bytes());
        json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": s,
            "platform": {"os": "linux", "architecture": arch}})
    }

    /// Writes an image index of these manifests; its descriptor.
    fn index(&self, manifests: Vec<Value>) -> Value {
        let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
        let (d, s) = self.blob(index.to_string().as_bytes());
        json!({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": d, "size": s})
    }

    /// Tags `top` and pushes it with skopeo as `repo:tag` to the plain HTTP registry.
    fn push(&self, top: Value, repo: &str, tag: &str) {
        self.push_to(top, &registry(), repo, tag)
    }

    /// The same, to `registry`: a TLS one of the test CA unless it is the plain HTTP one.
    fn push_to(&self, mut top: Value, registry: &str, repo: &str, tag: &str) {
        top["annotations"] = json!({"org.opencontainers.image.ref.name": tag});
        let index = json!({"schemaVersion": 2, "manifests": [top]});
        std::fs::write(self.dir.join("index.json"), index.to_string()).unwrap();
        let (u, p) = creds();
        let tls = if registry == self::registry() {
            "--dest-tls-verify=false".to_string()
        } else {
            format!("--dest-cert-dir={}", ca_dir().display())
        };
        run_ok(
            Command::new("skopeo")
                .args([
                    "copy",
                    "--all",
                    "--preserve-digests",
                    &tls,
                    "--dest-creds",
                    &format!("{u}:{p}"),
                ])
                .arg(format!("oci:{}:{tag}", self.dir.display()))
                .arg(format!("docker://{registry}/{repo}:{tag}")),
            "skopeo copy (installed by scripts/cluster up)",
        );
    }
}

/// Pushes the channel image `repo:tag` whose top layer holds `/channel.json`.
fn push_channel(repo: &str, tag: &str, data: &Value) -> String {
    push_channel_to(&registry(), repo, tag, data)
}

fn push_channel_to(registry: &str, repo: &str, tag: &str, data: &Value) -> String {
    let l = Layout::new(&format!("{}-{tag}", repo.replace('/', "-")));
    let desc = l.image(
        &[gz_layer(&rootfs()), gz_layer(&channel_tar(data))],
        "amd64",
    );
    l.push_to(desc.clone(), registry, repo, tag);
    desc["digest"].as_str().unwrap().to_string()
}

/// Pushes an artifact whose one layer is the channel data, of media type `media_type`,
/// with the real `oras` CLI as a publisher does (`oras push REF channel.json:TYPE`); its
/// manifest's digest.
fn push_artifact(repo: &str, tag: &str, data: &Value, media_type: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "oras-{}-{tag}-{}",
        repo.replace('/', "-"),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("channel.json"), data.to_string()).unwrap();
    let (u, p) = creds();
    let mut oras = Command::new(helm_tool("oras"))
        .args(["push", "--plain-http", "--no-tty", "--format", "json"])
        .args([
            "--artifact-type",
            "application/vnd.rancheros.channel.v1+json",
        ])
        .args(["--username", &u, "--password-stdin"])
        .arg(format!("{}/{repo}:{tag}", registry()))
        .arg(format!("channel.json:{media_type}"))
        .current_dir(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    oras.stdin.take().unwrap().write_all(p.as_bytes()).unwrap();
    let pushed: Value = serde_json::from_slice(&success_stdout(oras, "oras push")).unwrap();
    pushed["digest"].as_str().unwrap().to_string()
}

async fn pull_secret(t: &TestNs, name: &str, user: &str, pass: &str) {
    pull_secret_for(t, name, &registry(), user, pass).await
}

async fn pull_secret_for(t: &TestNs, name: &str, registry: &str, user: &str, pass: &str) {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    t.create_pull_secret(name, json!({"auths": {registry: {"auth": auth}}}))
        .await;
}

/// The end of a test of oci channels only: none of them started a pod.
async fn cleanup_podless(t: TestNs) {
    assert_eq!(t.pods_created(), 0, "an oci channel starts no pod");
    t.cleanup().await;
}

/// Once the test's images are pushed: the `pull` Secret with the registry's credentials
/// (every `oci()` spec names it), this tree's CRDs again (building and pushing took a
/// while: another tree's tests may have installed theirs meanwhile, the cluster is shared)
/// and the operator.
async fn start_pulling(t: &mut TestNs, flags: &[&str]) {
    pull_secret(t, "pull", &creds().0, &creds().1).await;
    install_crds(&t.client).await;
    t.start_operator(flags);
}

fn oci(image: &str, extra: Value) -> Value {
    let mut options =
        json!({"image": image, "insecure": true, "imagePullSecrets": [{"name": "pull"}]});
    options
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"type": "oci", "syncInterval": "1h", "options": options})
}

/// The registry requests the operator's last pulls of `image` took (its debug log).
fn pull_requests(t: &TestNs, image: &str) -> Vec<u32> {
    // Without the colours of the text log.
    let mut log = String::new();
    let mut escape = false;
    for c in t.operator_log().chars() {
        match (escape, c) {
            (false, '\x1b') => escape = true,
            (true, 'm') => escape = false,
            (false, c) => log.push(c),
            _ => {}
        }
    }
    log.lines()
        .filter(|l| l.contains("registry requests of one pull") && l.contains(image))
        .filter_map(|l| {
            l.split("requests=")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[tokio::test]
async fn an_elemental_channel_image_syncs_with_no_pod_and_follows_a_repushed_tag() {
    let mut t = TestNs::new("oci-elemental").await;
    let repo = format!("{}/elemental-channel", t.ns);
    let data = elemental(&["sl-micro-6-0-a", "sl-micro-6-0-b"]);
    let digest = push_channel(&repo, "v1", &data);
    start_pulling(&mut t, &FLAGS).await;
    let image = format!("{}/{repo}:v1", registry());
    let ch = t
        .create_synced("elemental", oci(&image, json!({})), SYNC)
        .await;
    assert_eq!(
        ch.status.as_ref().unwrap().source_revision.as_deref(),
        Some(format!("v1@{digest}").as_str())
    );
    // Every free-form key as published.
    let versions = t.versions().await;
    assert_eq!(versions.len(), 2);
    for (v, want) in versions.iter().zip(data.as_array().unwrap()) {
        assert_eq!(v.name_any(), want["metadata"]["name"].as_str().unwrap());
        let got = serde_json::to_value(&v.spec).unwrap();
        assert_eq!(
            got["metadata"],
            want["spec"]["metadata"],
            "{}",
            v.name_any()
        );
    }
    assert_eq!(t.pods_created(), 0, "an oci channel creates no pod");
    // Unchanged: one HEAD, the version deleted behind the operator's back comes back.
    t.versions_api()
        .delete("sl-micro-6-0-a", &Default::default())
        .await
        .unwrap();
    let before = t.channel("elemental").await;
    let ch = t.sync_again("elemental", "1", &before, SYNC).await;
    assert_message_contains(&ch, "(the image's digest is unchanged)");
    assert_eq!(
        t.version_names().await,
        ["sl-micro-6-0-a", "sl-micro-6-0-b"]
    );
    assert_eq!(
        pull_requests(&t, &image).last(),
        Some(&1),
        "an unchanged digest costs one HEAD"
    );
    // Re-pushed: the new digest is read.
    let digest2 = push_channel(
        &repo,
        "v1",
        &elemental(&["sl-micro-6-0-a", "sl-micro-6-0-b", "sl-micro-6-1"]),
    );
    assert_ne!(digest, digest2);
    let before = t.channel("elemental").await;
    let ch = t.sync_again("elemental", "2", &before, SYNC).await;
    assert_eq!(
        ch.status.as_ref().unwrap().source_revision.as_deref(),
        Some(format!("v1@{digest2}").as_str())
    );
    assert_eq!(t.versions().await.len(), 3);
    cleanup_podless(t).await;
}

#[tokio::test]
async fn indexes_and_zstd_layers_are_read() {
    let mut t = TestNs::new("oci-kinds").await;
    let ns = t.ns.clone();
    // An index of two platforms, each with its own data.
    let l = Layout::new(&format!("{ns}-index"));
    let platform = |name: &str, arch: &str| {
        let data = channel_tar(&elemental(&[name]));
        l.image(&[gz_layer(&rootfs()), gz_layer(&data)], arch)
    };
    let amd = platform("amd", "amd64");
    let arm = platform("arm", "arm64");
    l.push(l.index(vec![amd, arm]), &format!("{ns}/multi"), "v1");
    // zstd layers, the file elsewhere than the default path.
    let z = Layout::new(&format!("{ns}-zstd"));
    let top = tar_of(&[(
        "etc/channel/data.json",
        elemental(&["zstd"]).to_string().as_bytes(),
    )]);
    let zstd = |t: &[u8]| {
        Layer(
            ZSTD,
            Blob::Bytes(ruzstd::encoding::compress_to_vec(
                t,
                ruzstd::encoding::CompressionLevel::Fastest,
            )),
            sha(t),
        )
    };
    let desc = z.image(&[zstd(&rootfs()), zstd(&top)], "amd64");
    z.push(desc, &format!("{ns}/zstd"), "v1");
    start_pulling(&mut t, &FLAGS).await;
    let r = registry();
    t.create_channel(
        "arm",
        oci(
            &format!("{r}/{ns}/multi:v1"),
            json!({"platform": "linux/arm64"}),
        ),
    )
    .await;
    t.create_channel(
        "zstd",
        oci(
            &format!("{r}/{ns}/zstd:v1"),
            json!({"path": "/etc/channel/data.json"}),
        ),
    )
    .await;
    for name in ["arm", "zstd"] {
        t.wait_ready(name, "Synchronized", SYNC).await;
    }
    assert_eq!(t.version_names().await, ["arm", "zstd"]);
    cleanup_podless(t).await;
}

/// Channel artifacts as `oras push` makes them, the layer of either JSON media type: the
/// data itself, every free-form key kept, no pod.
#[tokio::test]
async fn artifacts_pushed_with_oras_are_the_channel_data() {
    let mut t = TestNs::new("oci-oras").await;
    let ns = t.ns.clone();
    let kinds = [
        ("rancheros", "application/vnd.rancheros.channel.v1+json"),
        ("json", "application/json"),
    ];
    let mut pushed = Vec::new();
    for (name, media_type) in kinds {
        let data = elemental(&[&format!("{name}-a"), &format!("{name}-b")]);
        let digest = push_artifact(&format!("{ns}/{name}"), "v1", &data, media_type);
        pushed.push((name, data, digest));
    }
    start_pulling(&mut t, &FLAGS).await;
    for (name, _, _) in &pushed {
        let image = format!("{}/{ns}/{name}:v1", registry());
        t.create_channel(name, oci(&image, json!({}))).await;
    }
    for (name, data, digest) in &pushed {
        let ch = t.wait_ready(name, "Synchronized", SYNC).await;
        assert_eq!(
            ch.status.unwrap().source_revision.unwrap(),
            format!("v1@{digest}")
        );
        for want in data.as_array().unwrap() {
            let version = want["metadata"]["name"].as_str().unwrap();
            let v = t.versions_api().get(version).await.unwrap();
            let got = serde_json::to_value(&v.spec).unwrap();
            assert_eq!(got["metadata"], want["spec"]["metadata"], "{version}");
        }
    }
    assert_eq!(t.versions().await.len(), 4);
    cleanup_podless(t).await;
}

#[tokio::test]
async fn registry_failures_are_named_and_change_nothing() {
    let mut t = TestNs::new("oci-failures").await;
    let ns = t.ns.clone();
    let r = registry();
    push_channel(&format!("{ns}/good"), "v1", &elemental(&["good"]));
    // No /channel.json at all; and one deleted by a whiteout in the layer above it.
    let l = Layout::new(&format!("{ns}-nofile"));
    let nofile = l.image(&[gz_layer(&rootfs())], "amd64");
    l.push(nofile.clone(), &format!("{ns}/nofile"), "v1");
    let w = Layout::new(&format!("{ns}-whiteout"));
    let lower = channel_tar(&elemental(&["hidden"]));
    let upper = tar_of(&[(".wh.channel.json", b"")]);
    let whiteout = w.image(
        &[gz_layer(&rootfs()), gz_layer(&lower), gz_layer(&upper)],
        "amd64",
    );
    w.push(whiteout.clone(), &format!("{ns}/whiteout"), "v1");
    pull_secret(&t, "wrong", &creds().0, "not-the-password").await;
    start_pulling(&mut t, &FLAGS).await;
    let cases = [
        (
            "wrong-creds",
            oci(
                &format!("{r}/{ns}/good:v1"),
                json!({"imagePullSecrets": [{"name": "wrong"}]}),
            ),
            format!(
                "pulling {r}/{ns}/good:v1: 401 unauthorized for {r}/{ns}/good (the registry refused the credentials of imagePullSecrets)"
            ),
        ),
        (
            "anonymous",
            oci(
                &format!("{r}/{ns}/good:v1"),
                json!({"imagePullSecrets": []}),
            ),
            format!(
                "pulling {r}/{ns}/good:v1: 401 unauthorized for {r}/{ns}/good (no credentials for it in imagePullSecrets)"
            ),
        ),
        (
            "unknown-tag",
            oci(&format!("{r}/{ns}/good:nope"), json!({})),
            format!("pulling {r}/{ns}/good:nope: manifest unknown {r}/{ns}/good:nope"),
        ),
        (
            "no-file",
            oci(&format!("{r}/{ns}/nofile:v1"), json!({})),
            format!(
                "pulling {r}/{ns}/nofile:v1: no file /channel.json in {r}/{ns}/nofile@{}",
                nofile["digest"].as_str().unwrap()
            ),
        ),
        (
            "whiteout",
            oci(&format!("{r}/{ns}/whiteout:v1"), json!({})),
            format!(
                "pulling {r}/{ns}/whiteout:v1: no file /channel.json in {r}/{ns}/whiteout@{}",
                whiteout["digest"].as_str().unwrap()
            ),
        ),
        (
            "denied",
            oci(&format!("127.0.0.2:5050/{ns}/good:v1"), json!({})),
            format!(
                "pulling 127.0.0.2:5050/{ns}/good:v1: address 127.0.0.2 is not allowed (--json-deny-cidr)"
            ),
        ),
        (
            "no-secret",
            oci(
                &format!("{r}/{ns}/good:v1"),
                json!({"imagePullSecrets": [{"name": "absent"}]}),
            ),
            format!(
                "pulling {r}/{ns}/good:v1: imagePullSecrets: Secret absent not found in the channel's namespace"
            ),
        ),
    ];
    for (name, spec, _) in &cases {
        t.create_channel(name, spec.clone()).await;
    }
    for (name, _, message) in &cases {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        let got = ready_message(&ch);
        assert!(
            got.contains(message.as_str()),
            "{name}: {got}\nwant: {message}"
        );
        assert_eq!(
            ch.status.unwrap().failed_synchronization_attempts,
            1,
            "{name}"
        );
    }
    assert!(
        t.versions().await.is_empty(),
        "a failed pull changes nothing"
    );
    cleanup_podless(t).await;
}

/// The channel file Elemental publishes for SL Micro 6.1 baremetal (rancher/elemental-channels
/// `channels/sl-micro-61-baremetal.json`, as published), in an image built the way that
/// project builds its channel images (a busybox rootfs and `/channel.json`).
#[tokio::test]
async fn a_published_elemental_channel_file_syncs_as_oci_with_every_metadata_key_intact() {
    let mut t = TestNs::new("oci-published").await;
    let ns = t.ns.clone();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/valid-elemental-sl-micro-61-baremetal.json");
    let published: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let digest = push_channel(&format!("{ns}/sl-micro-61-baremetal"), "2.1.1", &published);
    start_pulling(&mut t, &FLAGS).await;
    let image = format!("{}/{ns}/sl-micro-61-baremetal:2.1.1", registry());
    let ch = t
        .create_synced("sl-micro", oci(&image, json!({})), SYNC)
        .await;
    assert_eq!(
        ch.status.unwrap().source_revision.as_deref(),
        Some(format!("2.1.1@{digest}").as_str())
    );
    let mut versions = t.versions().await;
    versions.sort_by_key(|v| v.name_any());
    let got: Vec<Value> = versions
        .iter()
        .map(|v| json!({"name": v.name_any(), "spec": serde_json::to_value(&v.spec).unwrap()}))
        .collect();
    for item in published.as_array().unwrap() {
        let name = item["metadata"]["name"].as_str().unwrap();
        let version = got
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no version {name}: {got:?}"));
        for key in ["version", "type"] {
            assert_eq!(version["spec"][key], item["spec"][key], "{name} {key}");
        }
        assert_eq!(
            version["spec"]["metadata"], item["spec"]["metadata"],
            "{name}: every published spec.metadata key, as published"
        );
    }
    assert_eq!(got.len(), 2, "{got:?}");
    cleanup_podless(t).await;
}

/// An `upgradeContainer` as Elemental's documentation writes one (the
/// system-upgrade-controller's container: `envs`, host `volumes`), next to one with `env`,
/// the old spelling, whose version an earlier operator stored with `env`: the sync
/// succeeds, the first version carries the container as published, the second has its
/// variables as `envs` and no `env` left, as the API server stored them (nothing pruned).
#[tokio::test]
async fn an_upgrade_container_with_envs_and_volumes_syncs_and_env_becomes_envs() {
    let mut t = TestNs::new("oci-envs").await;
    let ns = t.ns.clone();
    let read = |name: &str| -> Value {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(name);
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let elemental = read("valid-elemental-upgrade-container.json");
    let old = read("warn-upgrade-container-old-env.json");
    let mut data = elemental.as_array().unwrap().clone();
    data.extend(old.as_array().unwrap().iter().cloned());
    push_channel(&format!("{ns}/envs"), "1", &Value::Array(data));
    let image = format!("{}/{ns}/envs:1", registry());
    let ch = t.create_channel("envs", oci(&image, json!({}))).await;
    // The version as an operator that wrote `env` applied it (its field manager, owner,
    // label and a hash of that content), before this operator's first sync.
    let stored = json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersion",
        "metadata": {"name": "os-v1", "namespace": ns,
            "labels": {"rancheros.cattle.io/channel": "envs"},
            "annotations": {"rancheros.cattle.io/content-hash": "0123456789abcdef"},
            "ownerReferences": [{"apiVersion": "rancheros.cattle.io/v1",
                "kind": "ManagedOSVersionChannel", "name": "envs",
                "uid": ch.uid().unwrap(), "controller": true}]},
        "spec": old[0]["spec"].clone(),
    });
    t.versions_api()
        .patch(
            "os-v1",
            &kube::api::PatchParams::apply(rancheros_operator::api::FIELD_MANAGER),
            &kube::api::Patch::Apply(&stored),
        )
        .await
        .unwrap();
    let before = t.versions_api().get("os-v1").await.unwrap();
    assert!(before.spec.upgrade_container.unwrap().contains_key("env"));
    start_pulling(&mut t, &FLAGS).await;
    t.wait_ready("envs", "Synchronized", SYNC).await;

    let versions = t.versions().await;
    let container = |name: &str| -> Value {
        let v = versions
            .iter()
            .find(|v| v.name_any() == name)
            .unwrap_or_else(|| panic!("no version {name}"));
        Value::Object(v.spec.upgrade_container.clone().unwrap())
    };
    assert_eq!(versions.len(), 2);
    let published = &elemental[0]["spec"]["upgradeContainer"];
    assert_eq!(&container("baremetal-v2.1.1-3.29-os"), published);
    assert_eq!(
        container("os-v1"),
        json!({"envs": old[0]["spec"]["upgradeContainer"]["env"]})
    );
    t.cleanup().await;
}
