//! `type: oci` channels against the local cluster and its test registry (Debian's
//! docker-registry, basic auth, plain HTTP on 127.0.0.1:5050): channel images built as
//! rancher/elemental-channels builds them (a busybox-like rootfs and `/channel.json`,
//! one layer each) as OCI layouts, pushed with `skopeo`; an artifact (a JSON layer) pushed
//! with the registry API. The operator runs on the host with loopback allowed for
//! 127.0.0.1 only, and plain HTTP allowed.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use common::*;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::ResourceExt;
use kube::api::PostParams;
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
        let out = Command::new("skopeo")
            .args([
                "copy",
                "--all",
                "--preserve-digests",
                &tls,
                "--dest-creds",
                &format!("{u}:{p}"),
            ])
            .arg(format!("oci:{}:{tag}", self.dir.display()))
            .arg(format!("docker://{registry}/{repo}:{tag}"))
            .output()
            .expect("skopeo (installed by scripts/cluster up)");
        assert!(
            out.status.success(),
            "skopeo copy: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Pushes the channel image `repo:tag` whose top layer holds `/channel.json`.
fn push_channel(repo: &str, tag: &str, data: &Value) -> String {
    push_channel_to(&registry(), repo, tag, data)
}

fn push_channel_to(registry: &str, repo: &str, tag: &str, data: &Value) -> String {
    let l = Layout::new(&format!("{}-{tag}", repo.replace('/', "-")));
    let top = tar_of(&[("channel.json", data.to_string().as_bytes())]);
    let desc = l.image(&[gz_layer(&rootfs()), gz_layer(&top)], "amd64");
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
    let out = oras.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "oras push: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pushed: Value = serde_json::from_slice(&out.stdout).unwrap();
    pushed["digest"].as_str().unwrap().to_string()
}

async fn pull_secret(t: &TestNs, name: &str, user: &str, pass: &str) {
    pull_secret_for(t, name, &registry(), user, pass).await
}

async fn pull_secret_for(t: &TestNs, name: &str, registry: &str, user: &str, pass: &str) {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    let config = json!({"auths": {registry: {"auth": auth}}}).to_string();
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": config}}))
    .unwrap();
    Api::<Secret>::namespaced(t.client.clone(), &t.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
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
    pull_secret(&t, "pull", &creds().0, &creds().1).await;
    // Building and pushing took a while: this tree's CRDs again, should another tree's
    // tests have installed theirs meanwhile (the cluster is shared).
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
    let image = format!("{}/{repo}:v1", registry());
    t.create_channel("elemental", oci(&image, json!({}))).await;
    let ch = t.wait_ready("elemental", "Synchronized", SYNC).await;
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
    t.request_sync("elemental", "1").await;
    let ch = t.wait_next_attempt("elemental", &before, SYNC).await;
    assert!(
        ready_message(&ch).contains("(the image's digest is unchanged)"),
        "{}",
        ready_message(&ch)
    );
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
    t.request_sync("elemental", "2").await;
    let ch = t.wait_next_attempt("elemental", &before, SYNC).await;
    assert_eq!(
        ch.status.as_ref().unwrap().source_revision.as_deref(),
        Some(format!("v1@{digest2}").as_str())
    );
    assert_eq!(t.versions().await.len(), 3);
    assert_eq!(t.pods_created(), 0);
    t.cleanup().await;
}

#[tokio::test]
async fn indexes_and_zstd_layers_are_read() {
    let mut t = TestNs::new("oci-kinds").await;
    let ns = t.ns.clone();
    // An index of two platforms, each with its own data.
    let l = Layout::new(&format!("{ns}-index"));
    let amd = l.image(
        &[
            gz_layer(&rootfs()),
            gz_layer(&tar_of(&[(
                "channel.json",
                elemental(&["amd"]).to_string().as_bytes(),
            )])),
        ],
        "amd64",
    );
    let arm = l.image(
        &[
            gz_layer(&rootfs()),
            gz_layer(&tar_of(&[(
                "channel.json",
                elemental(&["arm"]).to_string().as_bytes(),
            )])),
        ],
        "arm64",
    );
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
    pull_secret(&t, "pull", &creds().0, &creds().1).await;
    // Building and pushing took a while: this tree's CRDs again, should another tree's
    // tests have installed theirs meanwhile (the cluster is shared).
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
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
    assert_eq!(t.pods_created(), 0);
    t.cleanup().await;
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
    pull_secret(&t, "pull", &creds().0, &creds().1).await;
    // Building and pushing took a while: this tree's CRDs again, should another tree's
    // tests have installed theirs meanwhile (the cluster is shared).
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
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
    assert_eq!(t.pods_created(), 0, "an oci channel creates no pod");
    t.cleanup().await;
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
    let lower = tar_of(&[(
        "channel.json",
        elemental(&["hidden"]).to_string().as_bytes(),
    )]);
    let upper = tar_of(&[(".wh.channel.json", b"")]);
    let whiteout = w.image(
        &[gz_layer(&rootfs()), gz_layer(&lower), gz_layer(&upper)],
        "amd64",
    );
    w.push(whiteout.clone(), &format!("{ns}/whiteout"), "v1");
    pull_secret(&t, "pull", &creds().0, &creds().1).await;
    pull_secret(&t, "wrong", &creds().0, "not-the-password").await;
    // Building and pushing took a while: this tree's CRDs again, should another tree's
    // tests have installed theirs meanwhile (the cluster is shared).
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
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
    assert_eq!(t.pods_created(), 0);
    t.cleanup().await;
}

/// A layer of `mib` MiB of zeros (gzip'd, written as it is made: the test holds none of it).
fn zeros_layer(l: &Layout, mib: u64) -> Layer {
    struct Hashing<W>(W, ring::digest::Context);
    impl<W: Write> Write for Hashing<W> {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = self.0.write(b)?;
            self.1.update(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.0.flush()
        }
    }
    let path = l.dir.join("zeros.gz");
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(Hashing(
        gz,
        ring::digest::Context::new(&ring::digest::SHA256),
    ));
    let mut h = tar::Header::new_gnu();
    h.set_size(mib << 20);
    h.set_mode(0o644);
    tar.append_data(&mut h, "var/zeros", std::io::repeat(0).take(mib << 20))
        .unwrap();
    let Hashing(gz, hash) = tar.into_inner().unwrap();
    gz.finish().unwrap();
    let hex: String = hash
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let blob = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    Layer(GZIP, Blob::Bytes(blob), format!("sha256:{hex}"))
}

/// An uncompressed tar layer of `mib` MiB of zeros, written straight into the layout: what
/// crosses the network is the whole size (nothing held in the test's memory).
fn plain_zeros_layer(l: &Layout, mib: u64) -> Layer {
    struct Hashing<W>(W, ring::digest::Context, usize);
    impl<W: Write> Write for Hashing<W> {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = self.0.write(b)?;
            self.1.update(&b[..n]);
            self.2 += n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.0.flush()
        }
    }
    let path = l.dir.join("zeros.tar");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut tar = tar::Builder::new(Hashing(
        file,
        ring::digest::Context::new(&ring::digest::SHA256),
        0,
    ));
    let mut h = tar::Header::new_gnu();
    h.set_size(mib << 20);
    h.set_mode(0o644);
    tar.append_data(
        &mut h,
        "var/plain-zeros",
        std::io::repeat(0).take(mib << 20),
    )
    .unwrap();
    let Hashing(mut file, hash, size) = tar.into_inner().unwrap();
    file.flush().unwrap();
    let hex: String = hash
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::rename(&path, l.dir.join("blobs/sha256").join(&hex)).unwrap();
    let digest = format!("sha256:{hex}");
    Layer(PLAIN, Blob::Written(digest.clone(), size), digest)
}

use std::io::Read as _;

#[tokio::test]
async fn a_big_layer_before_the_file_is_streamed_with_flat_memory_and_bounded() {
    let mut t = TestNs::new("oci-big-layer").await;
    let ns = t.ns.clone();
    let l = Layout::new(&format!("{ns}-big"));
    let file = tar_of(&[(
        "channel.json",
        elemental(&["after-the-zeros"]).to_string().as_bytes(),
    )]);
    // Top down, a 1 GiB uncompressed layer (1 GiB crosses the network) and 200 MiB of
    // gzip'd zeros (a small blob that inflates) are read before the one with the file.
    let desc = l.image(
        &[
            gz_layer(&rootfs()),
            gz_layer(&file),
            zeros_layer(&l, 200),
            plain_zeros_layer(&l, 1024),
        ],
        "amd64",
    );
    l.push(desc, &format!("{ns}/big"), "v1");
    // The layout's 1.2 GiB are in the registry now.
    let _ = std::fs::remove_dir_all(&l.dir);
    pull_secret(&t, "pull", &creds().0, &creds().1).await;
    // Building and pushing took a while: this tree's CRDs again, should another tree's
    // tests have installed theirs meanwhile (the cluster is shared).
    install_crds(&t.client).await;
    let mut flags = FLAGS.to_vec();
    flags.push("--max-layer-bytes=2Gi");
    t.start_operator(&flags);
    let image = format!("{}/{ns}/big:v1", registry());
    t.create_channel("big", oci(&image, json!({"timeout": "10m"})))
        .await;
    t.wait_ready("big", "Synchronized", Duration::from_secs(300))
        .await;
    assert_eq!(t.version_names().await, ["after-the-zeros"]);
    let (_, peak) = rss_kib(operator_pid(&ns));
    assert!(
        peak < 96 << 10,
        "the operator's peak RSS was {peak} KiB after reading 1.2 GiB of layers"
    );
    t.kill_operator();
    // Under a bound smaller than the layer: refused, naming the flag.
    let mut flags = FLAGS.to_vec();
    flags.push("--max-layer-bytes=64Mi");
    install_crds(&t.client).await;
    t.start_operator(&flags);
    t.patch_spec("big", json!({"options": {"timeout": "31s"}}))
        .await;
    let ch = t.wait_ready("big", "FailedToSync", SYNC).await;
    assert!(ready_message(&ch).contains(&format!("pulling {image}: the layers read to find /channel.json are more than 67108864 bytes (--max-layer-bytes)")), "{}", ready_message(&ch));
    assert_eq!(
        t.version_names().await,
        ["after-the-zeros"],
        "nothing changed"
    );
    t.cleanup().await;
}

#[tokio::test]
async fn validate_image_reads_a_channel_image_with_the_operator_rules() {
    let t = TestNs::new("oci-validate").await;
    let ns = t.ns.clone();
    let r = registry();
    push_channel(
        &format!("{ns}/good"),
        "v1",
        &elemental(&["good-a", "good-b"]),
    );
    let bad = json!([{"metadata": {"name": "Bad_Name"}, "spec": {"type": "container"}}]);
    push_channel(&format!("{ns}/bad"), "v1", &bad);
    let (u, p) = creds();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
    let auth_file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}-auth.json"));
    std::fs::write(
        &auth_file,
        json!({"auths": {r.clone(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let validate = |image: String, with_auth: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rancheros-operator"));
        c.args([
            "validate",
            "--insecure",
            "--format",
            "json",
            "--image",
            &image,
        ]);
        c.env_remove("DOCKER_CONFIG")
            .env("HOME", "/nonexistent")
            .env_remove("XDG_RUNTIME_DIR");
        if with_auth {
            c.env("REGISTRY_AUTH_FILE", &auth_file);
        } else {
            c.env_remove("REGISTRY_AUTH_FILE");
        }
        let o = c.output().unwrap();
        let doc: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|_| json!({"stderr": String::from_utf8_lossy(&o.stderr)}));
        (o.status.code(), doc)
    };
    let (code, doc) = validate(format!("{r}/{ns}/good:v1"), true);
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(doc["files"][0]["versions"], 2, "{doc}");
    assert!(
        doc["files"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with(":/channel.json"),
        "{doc}"
    );
    let (code, doc) = validate(format!("{r}/{ns}/bad:v1"), true);
    assert_eq!(code, Some(1), "{doc}");
    let paths: Vec<&str> = doc["files"][0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["path"].as_str())
        .collect();
    assert!(paths.contains(&"[0].metadata.name"), "{doc}");
    let (code, doc) = validate(format!("{r}/{ns}/good:v1"), false);
    assert_eq!(code, Some(1), "{doc}");
    let why = doc["files"][0]["read_error"].as_str().unwrap();
    assert!(
        why.contains(&format!("401 unauthorized for {r}/{ns}/good")),
        "{why}"
    );
    let (code, doc) = validate(format!("{r}/{ns}/good:nope"), true);
    assert_eq!(code, Some(1));
    let why = doc["files"][0]["read_error"].as_str().unwrap();
    assert!(
        why.ends_with(&format!("manifest unknown {r}/{ns}/good:nope")),
        "{why}"
    );
    t.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// spec.verify: images signed by the real cosign CLI

/// A tool built by `scripts/helm` (cosign, oras), from its bin directory.
fn helm_tool(name: &str) -> PathBuf {
    let bin = Command::new(env!("CARGO_MANIFEST_DIR").to_string() + "/scripts/helm")
        .arg("bin")
        .output()
        .expect("scripts/helm bin");
    let path = PathBuf::from(String::from_utf8_lossy(&bin.stdout).trim()).join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/helm install (scripts/test does)",
        path.display()
    );
    path
}

/// A cosign key pair (no password) in a directory of its own, and a docker config for the
/// test registry: what a publisher's CI has.
struct Signer {
    dir: PathBuf,
}

impl Signer {
    fn new(name: &str) -> Signer {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cosign-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("docker")).unwrap();
        let (u, p) = creds();
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        std::fs::write(
            dir.join("docker/config.json"),
            json!({"auths": {registry(): {"auth": auth}}}).to_string(),
        )
        .unwrap();
        let signer = Signer { dir };
        signer.cosign(&["generate-key-pair"]);
        signer
    }

    fn cosign(&self, args: &[&str]) {
        let out = Command::new(helm_tool("cosign"))
            .args(args)
            .current_dir(&self.dir)
            .env("COSIGN_PASSWORD", "")
            .env("DOCKER_CONFIG", self.dir.join("docker"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cosign {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Signs `repo@digest` in the test registry, with no transparency log (offline).
    fn sign(&self, repo: &str, digest: &str) {
        let image = format!("{}/{repo}@{digest}", registry());
        self.cosign(&[
            "sign",
            "--key",
            "cosign.key",
            "--tlog-upload=false",
            "--allow-http-registry",
            "--yes",
            &image,
        ]);
    }

    fn public_key(&self) -> String {
        std::fs::read_to_string(self.dir.join("cosign.pub")).unwrap()
    }
}

async fn key_secret(t: &TestNs, name: &str, pem: &str) {
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": name},
        "stringData": {"cosign.pub": pem}}))
    .unwrap();
    Api::<Secret>::namespaced(t.client.clone(), &t.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

fn source_verified(
    ch: &rancheros_operator::api::ManagedOSVersionChannel,
) -> Option<(String, String, String)> {
    ch.status
        .as_ref()?
        .condition(rancheros_operator::api::SOURCE_VERIFIED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_verified_channel_uses_only_images_its_key_signed() {
    let mut t = TestNs::new("oci-verify").await;
    let repo = format!("{}/signed-channel", t.ns);
    let publisher = Signer::new("publisher");
    let stranger = Signer::new("stranger");
    let first = push_channel(&repo, "v1", &elemental(&["os-a", "os-b"]));
    publisher.sign(&repo, &first);
    pull_secret(&t, "pull", &creds().0, &creds().1).await;
    key_secret(&t, "channel-key", &publisher.public_key()).await;
    t.start_operator(&FLAGS);
    let image = format!("{}/{repo}:v1", registry());
    let mut spec = oci(&image, json!({}));
    spec["verify"] = json!({"provider": "cosign", "secretRef": {"name": "channel-key"}});
    t.create_channel("signed", spec).await;
    let ch = t.wait_ready("signed", "Synchronized", SYNC).await;
    let (status, reason, message) = source_verified(&ch).expect("a SourceVerified condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Verified"),
        "{message}"
    );
    assert!(message.contains(&first), "{message}");
    assert_eq!(t.version_names().await, ["os-a", "os-b"]);

    // A tampered re-push of the tag, unsigned: refused, nothing changed.
    let tampered = push_channel(&repo, "v1", &elemental(&["os-a", "os-b", "os-evil"]));
    let before = t.channel("signed").await;
    t.request_sync("signed", "tampered").await;
    let ch = t.wait_next_attempt("signed", &before, SYNC).await;
    assert_eq!(ready_reason(&ch).as_deref(), Some("FailedToSync"));
    let (status, reason, message) = source_verified(&ch).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "VerificationFailed")
    );
    assert!(
        message.contains("no cosign signature") && message.contains(&tampered),
        "{message}"
    );
    assert_eq!(
        t.version_names().await,
        ["os-a", "os-b"],
        "unverified data was used"
    );

    // Signed, but by another key: still refused.
    stranger.sign(&repo, &tampered);
    let before = t.channel("signed").await;
    t.request_sync("signed", "stranger").await;
    let ch = t.wait_next_attempt("signed", &before, SYNC).await;
    let message = source_verified(&ch).unwrap().2;
    assert!(message.contains("does not match the key"), "{message}");
    assert_eq!(t.version_names().await, ["os-a", "os-b"]);

    // Signed by the publisher: used.
    publisher.sign(&repo, &tampered);
    let before = t.channel("signed").await;
    t.request_sync("signed", "signed").await;
    let ch = t.wait_next_attempt("signed", &before, SYNC).await;
    assert_eq!(
        ready_reason(&ch).as_deref(),
        Some("Synchronized"),
        "{}",
        ready_message(&ch)
    );
    assert_eq!(source_verified(&ch).unwrap().1, "Verified");
    assert_eq!(t.version_names().await, ["os-a", "os-b", "os-evil"]);
    assert_eq!(t.pods_created(), 0);

    // `validate --image --key`: the same check, for the channel's CI.
    let nobody = Signer::new("nobody");
    let validate = |signer: &Signer| {
        Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
            .args(["validate", "--insecure", "--image", &image, "--key"])
            .arg(signer.dir.join("cosign.pub"))
            .env("REGISTRY_AUTH_FILE", signer.dir.join("docker/config.json"))
            .output()
            .unwrap()
    };
    let out = validate(&publisher);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = validate(&nobody);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("does not match the key"), "{text}");
    t.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// The TLS registries of `scripts/cluster` (certificates of a test CA of their own): one
// with basic auth, one with the token flow (the distribution project's token server).

fn env_of(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: eval \"$(scripts/cluster env)\" (a cluster brought up before \
             the TLS registries existed gets them with scripts/cluster registries)"
        )
    })
}

/// The test CA of the TLS registries (PEM).
fn registry_ca() -> String {
    let path = env_of("RANCHEROS_TEST_REGISTRY_CA");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A directory holding the test CA only: skopeo takes every `*.crt` there for a root (and
/// a `*.key` for a client key, so not the CA's own directory).
fn ca_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("registry-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), registry_ca()).unwrap();
        dir
    })
    .clone()
}

/// A CA that signed nothing the registries serve.
fn other_ca() -> String {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("other-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=another-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ])
        .current_dir(&dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(dir.join("ca.crt")).unwrap()
}

async fn ca_secret(t: &TestNs, name: &str, pem: &str) {
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": name},
        "stringData": {"ca.crt": pem}}))
    .unwrap();
    Api::<Secret>::namespaced(t.client.clone(), &t.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

async fn patch_secret(t: &TestNs, name: &str, string_data: Value) {
    Api::<Secret>::namespaced(t.client.clone(), &t.ns)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "stringData": string_data })),
        )
        .await
        .unwrap();
}

/// An oci channel of a TLS registry (`extra` adds to or replaces its options).
fn tls_oci(image: &str, extra: Value) -> Value {
    let mut options = json!({"insecure": false, "caSecretRef": {"name": "registry-ca"}});
    options
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    oci(image, options)
}

/// Waits for the sync that `request_sync` asks for; its channel.
/// The channel's Ready reason, that its message holds `part`, and its sourceRevision.
fn assert_outcome(
    ch: rancheros_operator::api::ManagedOSVersionChannel,
    reason: &str,
    part: &str,
    revision: &str,
) {
    let message = ready_message(&ch);
    assert_eq!(ready_reason(&ch).as_deref(), Some(reason), "{message}");
    assert!(message.contains(part), "{message}\nwant: {part}");
    assert_eq!(ch.status.unwrap().source_revision.unwrap(), revision);
}

async fn resync(
    t: &TestNs,
    name: &str,
    why: &str,
) -> rancheros_operator::api::ManagedOSVersionChannel {
    let before = t.channel(name).await;
    t.request_sync(name, why).await;
    t.wait_next_attempt(name, &before, SYNC).await
}

#[tokio::test]
async fn a_registry_of_a_private_ca_is_trusted_through_ca_secret_ref_only() {
    let mut t = TestNs::new("oci-tls").await;
    let reg = env_of("RANCHEROS_TEST_REGISTRY_TLS");
    let repo = format!("{}/channel", t.ns);
    let first = push_channel_to(&reg, &repo, "v1", &elemental(&["tls-a", "tls-b"]));
    let (u, p) = creds();
    pull_secret_for(&t, "pull", &reg, &u, &p).await;
    ca_secret(&t, "registry-ca", &registry_ca()).await;
    ca_secret(&t, "other-ca", &other_ca()).await;
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
    let image = format!("{reg}/{repo}:v1");
    t.create_channel("private", tls_oci(&image, json!({})))
        .await;
    t.create_channel(
        "system-roots",
        tls_oci(&image, json!({"caSecretRef": null})),
    )
    .await;
    t.create_channel(
        "other-ca",
        tls_oci(&image, json!({"caSecretRef": {"name": "other-ca"}})),
    )
    .await;
    let ch = t.wait_ready("private", "Synchronized", SYNC).await;
    assert_eq!(
        ch.status.unwrap().source_revision.unwrap(),
        format!("v1@{first}")
    );
    let untrusted =
        format!("pulling {image}: TLS with {reg} failed: invalid peer certificate: UnknownIssuer");
    for name in ["system-roots", "other-ca"] {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        let got = ready_message(&ch);
        assert!(got.contains(&untrusted), "{name}: {got}\nwant: {untrusted}");
    }
    assert_eq!(t.version_names().await, ["tls-a", "tls-b"]);

    // The tag moves on, and the channel's CA Secret now holds another CA: refused, nothing
    // changed (the revision neither).
    let second = push_channel_to(&reg, &repo, "v1", &elemental(&["tls-a", "tls-b", "tls-c"]));
    patch_secret(&t, "registry-ca", json!({"ca.crt": other_ca()})).await;
    let ch = resync(&t, "private", "other-ca").await;
    assert_outcome(ch, "FailedToSync", &untrusted, &format!("v1@{first}"));
    assert_eq!(t.version_names().await, ["tls-a", "tls-b"]);
    // The right CA again: the new data is read.
    patch_secret(&t, "registry-ca", json!({"ca.crt": registry_ca()})).await;
    let ch = resync(&t, "private", "registry-ca").await;
    assert_outcome(ch, "Synchronized", "", &format!("v1@{second}"));
    assert_eq!(t.version_names().await, ["tls-a", "tls-b", "tls-c"]);
    assert_eq!(t.pods_created(), 0);
    t.cleanup().await;
}

#[tokio::test]
async fn a_token_auth_registry_is_read_with_the_token_flow() {
    let mut t = TestNs::new("oci-token").await;
    let reg = env_of("RANCHEROS_TEST_REGISTRY_TOKEN");
    let (u, p) = creds();
    // The token server grants a user the repositories under its own name only.
    let repo = format!("{u}/{}/channel", t.ns);
    let first = push_channel_to(&reg, &repo, "v1", &elemental(&["token-a"]));
    pull_secret_for(&t, "pull", &reg, &u, &p).await;
    ca_secret(&t, "registry-ca", &registry_ca()).await;
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
    let image = format!("{reg}/{repo}:v1");
    let elsewhere = format!("{reg}/{}/channel:v1", t.ns);
    t.create_channel("token", tls_oci(&image, json!({}))).await;
    t.create_channel(
        "anonymous",
        tls_oci(&image, json!({"imagePullSecrets": []})),
    )
    .await;
    t.create_channel("not-granted", tls_oci(&elsewhere, json!({})))
        .await;
    let ch = t.wait_ready("token", "Synchronized", SYNC).await;
    assert_eq!(
        ch.status.unwrap().source_revision.unwrap(),
        format!("v1@{first}")
    );
    let cases = [
        (
            "anonymous",
            format!(
                "pulling {image}: 401 unauthorized for {reg}/{repo} (no credentials for it in imagePullSecrets)"
            ),
        ),
        (
            "not-granted",
            format!(
                "pulling {elsewhere}: 401 unauthorized for {reg}/{}/channel (the registry's token for the credentials of imagePullSecrets does not grant pulling it)",
                t.ns
            ),
        ),
    ];
    for (name, want) in &cases {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        let got = ready_message(&ch);
        assert!(got.contains(want.as_str()), "{name}: {got}\nwant: {want}");
    }
    assert_eq!(t.version_names().await, ["token-a"]);

    // The tag moves on, and the pull Secret now holds a wrong password: the token server
    // refuses it, nothing changed.
    push_channel_to(&reg, &repo, "v1", &elemental(&["token-a", "token-b"]));
    let wrong = json!({"auths": {&reg: {"username": u, "password": "not-the-password"}}});
    patch_secret(&t, "pull", json!({".dockerconfigjson": wrong.to_string()})).await;
    let ch = resync(&t, "token", "wrong-password").await;
    let want = format!(
        "pulling {image}: 401 unauthorized for {reg}/{repo} (the registry refused the credentials of imagePullSecrets)"
    );
    assert_outcome(ch, "FailedToSync", &want, &format!("v1@{first}"));
    assert_eq!(t.version_names().await, ["token-a"]);
    assert_eq!(t.pods_created(), 0);
    t.cleanup().await;
}

/// A TCP proxy in front of the test registry that passes requests whole and answers
/// until `after` bytes of a connection's answers have passed; then it sends nothing more
/// and holds the connection open: a registry that stalls mid-layer. `stalled` is set when
/// it does.
async fn stalling_proxy(
    after: usize,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let stalled = stalled.clone();
            tokio::spawn(async move {
                let Ok(upstream) = tokio::net::TcpStream::connect(registry()).await else {
                    return;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_registry, mut to_registry) = upstream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_client, &mut to_registry).await;
                });
                let (mut sent, mut buf) = (0usize, vec![0u8; 16 << 10]);
                loop {
                    let n = match from_registry.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n.min(after - sent),
                    };
                    if n == 0 {
                        stalled.store(true, std::sync::atomic::Ordering::SeqCst);
                        // Held open and silent (for the rest of the test binary).
                        std::future::pending::<()>().await;
                    }
                    if to_client.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    sent += n;
                }
            });
        }
    });
    address
}

/// `n` bytes that do not compress (xorshift), so a gzip'd layer of them is `n` on the wire.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn a_registry_that_stalls_mid_layer_fails_that_pull_alone_after_the_idle_bound() {
    let mut t = TestNs::new("oci-stall").await;
    let ns = t.ns.clone();
    let l = Layout::new(&format!("{ns}-stall"));
    let file = tar_of(&[("channel.json", elemental(&["never"]).to_string().as_bytes())]);
    let noisy = tar_of(&[("var/noise", &noise(2 << 20))]);
    // Top down, the 2 MiB layer of noise is read first: the proxy stalls inside it.
    let desc = l.image(
        &[gz_layer(&rootfs()), gz_layer(&file), gz_layer(&noisy)],
        "amd64",
    );
    l.push(desc, &format!("{ns}/stall"), "v1");
    push_channel(&format!("{ns}/good"), "v1", &elemental(&["good"]));
    let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let proxy = stalling_proxy(256 << 10, stalled.clone()).await;
    // One Secret with the registry's credentials under both addresses.
    let (u, p) = creds();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
    let config =
        json!({"auths": {registry(): {"auth": auth}, proxy.clone(): {"auth": auth}}}).to_string();
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "pull"},
        "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": config}}))
    .unwrap();
    Api::<Secret>::namespaced(t.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
    // A long timeout, as a big layer on a slow link needs: the idle bound still applies.
    let started = std::time::Instant::now();
    let stalled_image = format!("{proxy}/{ns}/stall:v1");
    t.create_channel("stall", oci(&stalled_image, json!({"timeout": "10m"})))
        .await;
    while !stalled.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            started.elapsed() < SYNC,
            "the operator never read the layer through the proxy"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // While that pull hangs, another channel's pull is not held up by it.
    let good = format!("{}/{ns}/good:v1", registry());
    t.create_channel("good", oci(&good, json!({}))).await;
    t.wait_ready("good", "Synchronized", SYNC).await;
    assert_ne!(
        ready_reason(&t.channel("stall").await).as_deref(),
        Some("FailedToSync"),
        "the stalled pull ended before the other channel synced; the test proves nothing"
    );
    // Well inside the channel's 10 minutes.
    let ch = t.wait_ready("stall", "FailedToSync", SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message.contains(&format!("{proxy}: nothing arrived for 30s")),
        "{message}"
    );
    assert_eq!(
        t.version_names().await,
        ["good"],
        "nothing of the stalled image was written"
    );
    t.cleanup().await;
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
    pull_secret(&t, "pull", &creds().0, &creds().1).await;
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
    let image = format!("{}/{ns}/sl-micro-61-baremetal:2.1.1", registry());
    t.create_channel("sl-micro", oci(&image, json!({}))).await;
    let ch = t.wait_ready("sl-micro", "Synchronized", SYNC).await;
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
    assert_eq!(t.pods_created(), 0, "an oci channel starts no pod");
    t.cleanup().await;
}
