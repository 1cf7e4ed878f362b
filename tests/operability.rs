//! Operating the operator as a GitOps shop does, against the local cluster: a channel image
//! re-pushed under the same tag, a status kstatus-based tools read (Ready kept during a
//! routine resync, Reconciling, Stalled, observedGeneration), a pause, Events only for
//! news, per-channel metrics, and a private operator image for the syncer pods.
//!
//! Images are pushed to the cluster's loopback registry (basic auth) with skopeo, each
//! with a config of its own (a label unique to the push), so that its image ID is new to
//! the node: kubelet ties an image ID pulled with credentials to them, and a private copy
//! with the ID of an imported image would make that image unusable for the other tests.

use crate::common;
#[path = "operability/conditions.rs"]
mod conditions;
#[path = "operability/metrics.rs"]
mod metrics;
#[path = "operability/registry_push.rs"]
mod registry_push;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::runtime::{WatchStreamExt, watcher};
use rancheros_operator::api::{
    ManagedOSVersionChannel, NO_LONGER_IN_SYNC_ANNOTATION, READY, RECONCILING, STALLED,
};
use serde_json::{Value, json};

const SYNC: Duration = Duration::from_secs(120);

fn nonce() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("{:x}", now.as_nanos())
}

// ---------------------------------------------------------------------------------------
// The test registry and images in it

struct Registry {
    addr: String,
    user: String,
    password: String,
}

fn registry_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: the local cluster's test registry is needed; run scripts/test, or eval \"$(scripts/cluster env)\"")
    })
}

impl Registry {
    fn from_env() -> Self {
        Registry {
            addr: registry_env("RANCHEROS_TEST_REGISTRY"),
            user: registry_env("RANCHEROS_TEST_REGISTRY_USER"),
            password: registry_env("RANCHEROS_TEST_REGISTRY_PASSWORD"),
        }
    }

    fn creds(&self) -> String {
        format!("{}:{}", self.user, self.password)
    }

    /// A `kubernetes.io/dockerconfigjson` Secret for the registry in the test's namespace.
    async fn pull_secret(&self, t: &TestNs, name: &str) {
        let auths =
            json!({"auths": {&self.addr: {"username": self.user, "password": self.password}}});
        t.create_pull_secret(name, auths).await;
    }

    /// Pushes a copy of the image at `source` (a skopeo reference; `source_creds` for the
    /// test registry's own images) to `dest` in the registry, with `env` added to its
    /// config and a label unique to this push. Returns the pushed manifest's digest.
    /// Pushes the runner image as `image`, built to print `versions` as its channel data.
    async fn push_channel(&self, image: &str, versions: &[(&str, &str)]) -> String {
        let data = format!("CHANNEL_DATA={}", channel_data(versions));
        self.push_variant(&self.runner_source(), true, image, &[data])
            .await
    }

    async fn push_variant(
        &self,
        source: &str,
        source_creds: bool,
        dest: &str,
        env: &[String],
    ) -> String {
        let (source, dest, env) = (source.to_string(), dest.to_string(), env.to_vec());
        let creds = self.creds();
        tokio::task::spawn_blocking(move || {
            push_variant_blocking(
                &source,
                source_creds.then_some(creds.as_str()),
                &dest,
                &env,
                &creds,
            )
        })
        .await
        .unwrap()
    }

    /// The runner image as the registry holds it (pushed there by `scripts/cluster up`).
    fn runner_source(&self) -> String {
        format!("docker://{}/private/runner:with-secret", self.addr)
    }
}

fn run(cmd: &mut Command) -> String {
    let what = format!("{cmd:?}");
    String::from_utf8_lossy(&run_ok(cmd, &what)).into_owned()
}

fn sha256_hex(path: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(path));
    out.split_whitespace().next().unwrap().to_string()
}

fn work_dir(what: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("operability-images")
        .join(format!("{what}-{}", nonce()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn push_variant_blocking(
    source: &str,
    source_creds: Option<&str>,
    dest: &str,
    env: &[String],
    dest_creds: &str,
) -> String {
    let dir = work_dir("variant");
    let layout = dir.join("image");
    let mut pull = Command::new("skopeo");
    pull.args(["copy", "--quiet", "--src-tls-verify=false"]);
    if let Some(creds) = source_creds {
        pull.args(["--src-creds", creds]);
    }
    pull.arg(source).arg(format!("dir:{}", layout.display()));
    run(&mut pull);
    // The `dir:` layout: manifest.json and every blob under its hex digest.
    let manifest_path = layout.join("manifest.json");
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let old_digest = manifest["config"]["digest"].as_str().unwrap().to_string();
    let old_path = layout.join(old_digest.trim_start_matches("sha256:"));
    let mut config: Value = serde_json::from_slice(&std::fs::read(&old_path).unwrap()).unwrap();
    let inner = config["config"].as_object_mut().unwrap();
    let envs = inner.entry("Env").or_insert_with(|| json!([]));
    if envs.is_null() {
        *envs = json!([]);
    }
    for e in env {
        envs.as_array_mut().unwrap().push(json!(e));
    }
    let labels = inner.entry("Labels").or_insert_with(|| json!({}));
    if labels.is_null() {
        *labels = json!({});
    }
    labels["rancheros.test/push"] = json!(nonce());
    let bytes = serde_json::to_vec(&config).unwrap();
    let tmp = layout.join("config.tmp");
    std::fs::write(&tmp, &bytes).unwrap();
    let hex = sha256_hex(&tmp);
    std::fs::rename(&tmp, layout.join(&hex)).unwrap();
    std::fs::remove_file(&old_path).unwrap();
    manifest["config"]["digest"] = json!(format!("sha256:{hex}"));
    manifest["config"]["size"] = json!(bytes.len());
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let digest_file = dir.join("digest");
    run(Command::new("skopeo")
        .args([
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            "--dest-creds",
            dest_creds,
        ])
        .arg("--digestfile")
        .arg(&digest_file)
        .arg(format!("dir:{}", layout.display()))
        .arg(format!("docker://{dest}")));
    let digest = std::fs::read_to_string(&digest_file)
        .unwrap()
        .trim()
        .to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(digest.starts_with("sha256:"), "{digest}");
    digest
}

/// The operator image the tests use, exported from the node's containerd (where the
/// cluster imported it) as an archive skopeo reads.
fn export_operator_image() -> (PathBuf, String) {
    let image = operator_image();
    let first = image.split('/').next().unwrap_or_default();
    let full = if !image.contains('/') {
        format!("docker.io/library/{image}")
    } else if !first.contains('.') && !first.contains(':') && first != "localhost" {
        format!("docker.io/{image}")
    } else {
        image.clone()
    };
    let archive = work_dir("operator-export").join("operator.tar");
    let export = || {
        let mut ctr = Command::new("ctr");
        if let Ok(address) = std::env::var("CONTAINERD_ADDRESS") {
            ctr.args(["--address", &address]);
        }
        run(ctr
            .args(["-n", "k8s.io", "images", "export"])
            .arg(&archive)
            .arg(&full));
    };
    export();
    // Once, on a loaded node, ctr exited 0 with the archive cut short (skopeo then read
    // "unexpected EOF"): read it through, and export again if it does not end.
    let whole = || {
        Command::new("tar")
            .arg("-tf")
            .arg(&archive)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !whole() {
        eprintln!("{}: cut short; exporting again", archive.display());
        export();
        assert!(whole(), "{} is cut short twice", archive.display());
    }
    (archive, full)
}

// ---------------------------------------------------------------------------------------
// Watching a channel's status

/// One observed state of a channel.
#[derive(Clone, Debug)]
struct Seen {
    generation: i64,
    observed_generation: Option<i64>,
    /// `(status, reason, observedGeneration)`
    ready: Option<(String, String, Option<i64>)>,
    reconciling: Option<(String, String)>,
    stalled: Option<(String, String)>,
    failures: i64,
}

impl Seen {
    fn of(ch: &ManagedOSVersionChannel) -> Self {
        let status = ch.status.clone().unwrap_or_default();
        let cond = |t: &str| status.condition(t).cloned();
        Seen {
            generation: ch.metadata.generation.unwrap_or_default(),
            observed_generation: status.observed_generation,
            ready: cond(READY).map(|c| (c.status, c.reason, c.observed_generation)),
            reconciling: cond(RECONCILING).map(|c| (c.status, c.reason)),
            stalled: cond(STALLED).map(|c| (c.status, c.reason)),
            failures: status.failed_synchronization_attempts,
        }
    }

    fn ready_status(&self) -> &str {
        self.ready.as_ref().map_or("", |r| r.0.as_str())
    }

    fn reconciling(&self) -> bool {
        self.reconciling.as_ref().is_some_and(|r| r.0 == "True")
    }

    fn stalled(&self) -> bool {
        self.stalled.as_ref().is_some_and(|r| r.0 == "True")
    }
}

/// Every state of one channel, as a watch delivers them.
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Starts watching and returns once the watch has delivered the current state.
    async fn start(t: &TestNs, name: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(t.channels(), config).applied_objects();
        let task = tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Some(event) = stream.next().await {
                if let Ok(ch) = event {
                    sink.lock().unwrap().push(Seen::of(&ch));
                }
            }
        });
        let recorder = Recorder { seen, task };
        t.eventually("the watch to start", SYNC, || async {
            (!recorder.states().is_empty()).then_some(())
        })
        .await;
        recorder
    }

    fn states(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Stops watching; every state seen.
    fn stop(self) -> Vec<Seen> {
        self.task.abort();
        self.states()
    }
}

fn history(states: &[Seen]) -> String {
    states
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The channel's row as `kubectl get -o wide` prints it: the API server's Table of it,
/// column name to cell (priority-1 columns included, as `-o wide` shows them).
async fn table_row(t: &TestNs, name: &str) -> BTreeMap<String, String> {
    let request = http::Request::get(format!(
        "/apis/rancheros.cattle.io/v1/namespaces/{}/managedosversionchannels/{name}",
        t.ns
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let text = t.client.request_text(request).await.unwrap();
    let table: Value = serde_json::from_str(&text).unwrap();
    let columns = table["columnDefinitions"].as_array().unwrap();
    let cells = table["rows"][0]["cells"].as_array().unwrap();
    columns
        .iter()
        .zip(cells)
        .map(|(c, v)| {
            let cell = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            (c["name"].as_str().unwrap().to_string(), cell)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// 5. A private operator image

#[tokio::test]
async fn a_private_operator_image_reaches_syncer_pods_through_the_syncer_pull_secret() {
    let registry = Registry::from_env();
    let mut t = TestNs::new("private-operator").await;
    registry.pull_secret(&t, "operator-pull").await;
    // The operator image, as a private image new to the node.
    let (archive, _) = tokio::task::spawn_blocking(export_operator_image)
        .await
        .unwrap();
    let image = format!("{}/private/rancheros-operator:{}", registry.addr, nonce());
    registry
        .push_variant(
            &format!("oci-archive:{}", archive.display()),
            false,
            &image,
            &[],
        )
        .await;
    let _ = std::fs::remove_dir_all(archive.parent().unwrap());
    let operator_image = format!("--operator-image={image}");
    let data = channel_data(&[("a", "v1")]);
    let mut spec = custom_spec(&write_script(&data));
    // Long enough for the runner (init container) to finish on a loaded node, so that the
    // timeout finds the display container's pull failing, not the pod still initialising.
    spec["options"]["timeout"] = json!("60s");

    // Without the flag the syncer pod has no credentials for the display container.
    t.start_operator(&[&operator_image]);
    t.create_channel("ch", spec).await;
    let ch = t.wait_ready("ch", "FailedToSync", SYNC).await;
    let message = assert_pull_failed(
        &ch,
        "timed out after 1m: the syncer pod did not finish (display: ",
        &image,
    );
    eprintln!("without --syncer-image-pull-secret: {message}");
    t.wait_no_pods(SYNC).await;

    // With it, every syncer pod carries the operator's pull secret.
    t.kill_operator();
    t.start_operator(&[&operator_image, "--syncer-image-pull-secret=operator-pull"]);
    t.request_sync("ch", "with-the-pull-secret").await;
    let ch = t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_eq!(ready_message(&ch), "synchronized 1 versions (1 created)");
    assert_eq!(t.version_names().await, ["a"]);
    t.cleanup().await;
}
