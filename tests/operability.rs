//! Operating the operator as a GitOps shop does, against the local cluster: a channel image
//! re-pushed under the same tag, a status kstatus-based tools read (Ready kept during a
//! routine resync, Reconciling, Stalled, observedGeneration), a pause, Events only for
//! news, per-channel metrics, and a private operator image for the syncer pods.
//!
//! Images are pushed to the cluster's loopback registry (basic auth) with skopeo, each
//! with a config of its own (a label unique to the push), so that its image ID is new to
//! the node: kubelet ties an image ID pulled with credentials to them, and a private copy
//! with the ID of an imported image would make that image unusable for the other tests.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
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
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": auths.to_string()}
        }))
        .unwrap();
        Api::<Secret>::namespaced(t.client.clone(), &t.ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Pushes a copy of the image at `source` (a skopeo reference; `source_creds` for the
    /// test registry's own images) to `dest` in the registry, with `env` added to its
    /// config and a label unique to this push. Returns the pushed manifest's digest.
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
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    let mut ctr = Command::new("ctr");
    if let Ok(address) = std::env::var("CONTAINERD_ADDRESS") {
        ctr.args(["--address", &address]);
    }
    run(ctr
        .args(["-n", "k8s.io", "images", "export"])
        .arg(&archive)
        .arg(&full));
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

/// A runner script that waits `secs` seconds before writing `data` (so that a sync under
/// way can be watched).
fn slow_script(secs: u32, data: &Value) -> String {
    format!("sleep {secs}; {}", write_script(data))
}

/// The channel's Events with their series count: `(type, reason, note, count)`.
async fn events_with_counts(t: &TestNs, channel: &str) -> Vec<(String, String, String, i32)> {
    channel_event_objects(t, channel)
        .await
        .into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
                e.series.map_or(1, |s| s.count),
            )
        })
        .collect()
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
// 1. A re-pushed channel tag is seen

#[tokio::test]
async fn a_re_pushed_channel_tag_is_seen_on_the_next_sync() {
    let registry = Registry::from_env();
    let mut t = TestNs::new("re-pushed-tag").await;
    registry.pull_secret(&t, "regcred").await;
    // A repository of its own: the node has never pulled this tag.
    let image = format!(
        "{}/channels/sl-micro-{}:6.1-baremetal",
        registry.addr,
        nonce()
    );
    let data = |versions: &[(&str, &str)]| format!("CHANNEL_DATA={}", channel_data(versions));
    let first = registry
        .push_variant(
            &registry.runner_source(),
            true,
            &image,
            &[data(&[("a", "v1")])],
        )
        .await;
    t.start_operator(&[]);
    // The channel image prints what it was built with; no imagePullPolicy (default Always).
    let mut spec = custom_spec("echo \"$CHANNEL_DATA\" > /output/data");
    let options = spec["options"].as_object_mut().unwrap();
    options.remove("imagePullPolicy");
    options.insert("image".into(), json!(image));
    options.insert("imagePullSecrets".into(), json!([{"name": "regcred"}]));
    t.create_channel("ch", spec).await;
    let synced = t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_eq!(t.version_names().await, ["a"]);
    let revision = synced.status.as_ref().unwrap().source_revision.clone();
    assert!(
        revision.as_deref().is_some_and(|r| r.ends_with(&first)),
        "sourceRevision {revision:?} is not the pushed digest {first}"
    );

    // The same tag, pushed again with one more version.
    let second = registry
        .push_variant(
            &registry.runner_source(),
            true,
            &image,
            &[data(&[("a", "v1"), ("b", "v2")])],
        )
        .await;
    assert_ne!(first, second);
    t.request_sync("ch", "after-the-re-push").await;
    let ch = t.wait_next_attempt("ch", &synced, SYNC).await;
    let message = ready_message(&ch);
    assert_eq!(
        ready_reason(&ch).as_deref(),
        Some("Synchronized"),
        "{message}"
    );
    assert_eq!(
        message, "synchronized 2 versions (1 created)",
        "the re-pushed image was not read"
    );
    assert_eq!(t.version_names().await, ["a", "b"]);
    let revision = ch.status.as_ref().unwrap().source_revision.clone();
    assert!(
        revision.as_deref().is_some_and(|r| r.ends_with(&second)),
        "sourceRevision {revision:?} is not the re-pushed digest {second}"
    );
    t.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// 1b. A push to the registry syncs the channels whose image it names

/// The address the test registry notifies pushes to (its `notifications` endpoint), and
/// the bearer token it sends; one test at a time listens there.
fn registry_webhook() -> (String, String) {
    (
        registry_env("RANCHEROS_TEST_WEBHOOK_ADDR"),
        registry_env("RANCHEROS_TEST_WEBHOOK_TOKEN_FILE"),
    )
}

/// A custom channel reading `image` from the registry (default pull policy, Always) with
/// the test's pull secret; it syncs only when asked (interval 1h).
fn registry_channel(image: &str) -> Value {
    let mut spec = custom_spec("echo \"$CHANNEL_DATA\" > /output/data");
    spec["syncInterval"] = json!("1h");
    let options = spec["options"].as_object_mut().unwrap();
    options.remove("imagePullPolicy");
    options.insert("image".into(), json!(image));
    options.insert("imagePullSecrets".into(), json!([{"name": "regcred"}]));
    spec
}

#[tokio::test]
async fn a_push_to_the_registry_syncs_the_channels_whose_image_it_names() {
    let registry = Registry::from_env();
    let (hook_addr, token_file) = registry_webhook();
    let mut t = TestNs::new("registry-push").await;
    registry.pull_secret(&t, "regcred").await;
    t.start_operator(&[
        &format!("--webhook-address={hook_addr}"),
        &format!("--webhook-token-file={token_file}"),
    ]);
    let data = |versions: &[(&str, &str)]| format!("CHANNEL_DATA={}", channel_data(versions));
    let image = format!("{}/hook/channel-{}:v1", registry.addr, nonce());
    registry
        .push_variant(
            &registry.runner_source(),
            true,
            &image,
            &[data(&[("a", "v1")])],
        )
        .await;
    t.create_channel("moved", registry_channel(&image)).await;
    // Another tag of the registry that nobody pushes during the test.
    let mut other = registry_channel(&format!("{}/private/runner:with-secret", registry.addr));
    other["options"]["args"] = json!([write_script(&channel_data(&[("o", "v1")]))]);
    t.create_channel("other", other).await;
    t.wait_ready("moved", "Synchronized", SYNC).await;
    t.wait_ready("other", "Synchronized", SYNC).await;
    assert_eq!(t.version_names().await, ["a", "o"]);

    // The same tag pushed again with one more version: the registry notifies the push,
    // and nothing else asks for a sync (no annotation from the test, interval 1h).
    let push_began = k8s_openapi::jiff::Timestamp::now();
    let pushed = std::time::Instant::now();
    registry
        .push_variant(
            &registry.runner_source(),
            true,
            &image,
            &[data(&[("a", "v1"), ("b", "v2")])],
        )
        .await;
    let push_took = pushed.elapsed();
    t.eventually("the push to sync the channel", SYNC, || async {
        let names = t.version_names().await;
        names.contains(&"b".to_string()).then_some(())
    })
    .await;
    let ch = t.wait_ready("moved", "Synchronized", SYNC).await;
    eprintln!(
        "push-to-Synchronized: {:.1} s after the push ended ({:.1} s to push)",
        pushed.elapsed().saturating_sub(push_took).as_secs_f64(),
        push_took.as_secs_f64()
    );
    let requested = ch
        .annotations()
        .get(rancheros_operator::api::SYNC_REQUESTED_AT_ANNOTATION)
        .cloned();
    assert!(
        requested.is_some(),
        "the sync was not requested by the webhook"
    );
    assert!(
        t.operator_log()
            .contains("a registry push requested a sync"),
        "{}",
        t.operator_log()
    );
    // A push of another tag requests nothing of the other channel. (The registry keeps the
    // events of pushes made while nobody listened, such as the cluster's own push of the
    // runner image, and delivers them once the operator listens: a request for the other
    // channel may come from those, never from this push.)
    let other_now = t.channel("other").await;
    if let Some(asked) = other_now
        .annotations()
        .get(rancheros_operator::api::SYNC_REQUESTED_AT_ANNOTATION)
    {
        let asked: k8s_openapi::jiff::Timestamp = asked.parse().unwrap();
        assert!(
            asked < push_began,
            "the other channel was asked to sync ({asked}) by a push that does not name its tag"
        );
    }
    t.cleanup().await;
}

/// `curl -X POST` to the webhook: the status code and the body.
fn post_hook(port: u16, token: Option<&str>, body: &str) -> (u16, String) {
    let mut curl = Command::new("curl");
    curl.args([
        "-s",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "-X",
        "POST",
        "--max-time",
        "20",
    ])
    .args([
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        body,
    ]);
    if let Some(token) = token {
        curl.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    // Not `run`: before the webhook listens, curl fails (and the code is 000).
    let out = curl
        .arg(format!("http://127.0.0.1:{port}/hook/registry"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", out.trim()));
    (code.parse().unwrap_or(0), body.trim_end().to_string())
}

#[tokio::test]
async fn the_webhook_refuses_what_is_not_an_authenticated_push_and_changes_nothing() {
    let registry = Registry::from_env();
    let mut t = TestNs::new("hook-refusals").await;
    registry.pull_secret(&t, "regcred").await;
    let dir = work_dir("hook-token");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "the-token\n").unwrap();
    let port = free_port();
    t.start_operator(&[
        &format!("--webhook-address=127.0.0.1:{port}"),
        &format!("--webhook-token-file={}", token_file.display()),
    ]);
    let image = format!("{}/private/runner:with-secret", registry.addr);
    let mut spec = registry_channel(&image);
    spec["options"]["args"] = json!([write_script(&channel_data(&[("a", "v1")]))]);
    t.create_channel("ch", spec).await;
    let before = t.wait_ready("ch", "Synchronized", SYNC).await;
    let push = json!({"image": image}).to_string();
    t.eventually("the webhook to listen", SYNC, || async {
        (post_hook(port, None, "{}").0 != 0).then_some(())
    })
    .await;

    for (token, body, code) in [
        (None, push.as_str(), 401),
        (Some("the-token-not"), push.as_str(), 401),
        (Some("the-token"), "{not json", 400),
        (Some("the-token"), r#"{"what": "else"}"#, 400),
        (Some("the-token"), r#"{"image": "NOT A REFERENCE"}"#, 400),
    ] {
        let (got, answer) = post_hook(port, token, body);
        assert_eq!(got, code, "{token:?} {body}: {answer}");
        assert!(answer.len() < 300 && !answer.contains("\u{1b}"), "{answer}");
    }
    // A push of another tag of the same repository: accepted, nothing requested.
    let (got, answer) = post_hook(
        port,
        Some("the-token"),
        &json!({"image": format!("{}/private/runner:without-secret", registry.addr)}).to_string(),
    );
    assert_eq!(
        (got, answer.as_str()),
        (202, r#"{"channels":0,"pushes":1}"#)
    );
    let ch = t.channel("ch").await;
    assert_eq!(
        ch.annotations()
            .get(rancheros_operator::api::SYNC_REQUESTED_AT_ANNOTATION),
        None,
        "a refused request asked for a sync"
    );
    assert_eq!(attempt_time(&ch), attempt_time(&before));

    // The token file is read per request: a rotated token works at once, the old one not.
    std::fs::write(&token_file, "rotated\n").unwrap();
    assert_eq!(post_hook(port, Some("the-token"), &push).0, 401);
    let (got, answer) = post_hook(port, Some("rotated"), &push);
    assert_eq!(
        (got, answer.as_str()),
        (202, r#"{"channels":1,"pushes":1}"#)
    );
    t.wait_next_attempt("ch", &before, SYNC).await;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// 2. A status kstatus-based tools read, and a pause

#[tokio::test]
async fn ready_stays_true_during_a_routine_resync_and_reconciling_shows_the_sync() {
    let mut t = TestNs::new("routine-resync").await;
    t.start_operator(&[]);
    let data = channel_data(&[("a", "v1")]);
    t.create_channel("ch", custom_spec(&slow_script(8, &data)))
        .await;
    let synced = t.wait_ready("ch", "Synchronized", SYNC).await;
    let generation = synced.metadata.generation.unwrap();

    // An on-demand resync of a healthy channel: a routine one.
    let recorder = Recorder::start(&t, "ch").await;
    t.request_sync("ch", "routine").await;
    t.wait_next_attempt("ch", &synced, SYNC).await;
    let states = recorder.stop();
    let all = history(&states);
    assert!(
        states.iter().all(|s| s.ready_status() == "True"),
        "Ready left True during a routine resync:\n{all}"
    );
    assert!(
        states
            .iter()
            .any(|s| s.reconciling == Some(("True".into(), "Synchronizing".into()))),
        "no Reconciling=True (Synchronizing) while the sync ran:\n{all}"
    );
    let last = states.last().unwrap();
    assert!(
        !last.reconciling(),
        "still Reconciling after the sync:\n{all}"
    );
    assert!(
        states.iter().all(|s| s.generation == generation
            && s.observed_generation == Some(generation)
            && s.ready.as_ref().unwrap().2 == Some(generation)),
        "observedGeneration is not the channel's generation:\n{all}"
    );

    // A spec change: Ready no longer says anything of the new spec while it syncs.
    let recorder = Recorder::start(&t, "ch").await;
    let before = t.channel("ch").await;
    let data = channel_data(&[("a", "v1"), ("b", "v2")]);
    t.patch_spec("ch", json!({"options": {"args": [slow_script(8, &data)]}}))
        .await;
    let ch = t.wait_next_attempt("ch", &before, SYNC).await;
    let new = generation + 1;
    // The recorder's watch may be a moment behind the read that saw the outcome.
    t.eventually(
        "the recorder to see the outcome",
        Duration::from_secs(15),
        || async {
            recorder
                .states()
                .iter()
                .any(|s| {
                    s.ready
                        .as_ref()
                        .is_some_and(|r| r.1 != "Synchronizing" && r.2 == Some(new))
                })
                .then_some(())
        },
    )
    .await;
    let states = recorder.stop();
    let all = history(&states);
    assert_eq!(ch.metadata.generation, Some(new));
    assert!(
        states.iter().any(|s| s.generation == new
            && s.observed_generation == Some(new)
            && s.reconciling()
            && matches!(&s.ready, Some((status, reason, Some(g)))
                if status != "True" && reason == "Synchronizing" && *g == new)),
        "Ready was not Unknown/False (Synchronizing) for the new generation while its first sync ran:\n{all}"
    );
    // No state claims the new generation is Ready before its sync finished.
    let done = states
        .iter()
        .position(|s| {
            s.ready
                .as_ref()
                .is_some_and(|r| r.1 == "Synchronized" && r.2 == Some(new))
        })
        .unwrap_or_else(|| panic!("never Synchronized for the new generation:\n{all}"));
    assert!(
        states[..done]
            .iter()
            .all(|s| s.observed_generation != Some(new) || s.reconciling()),
        "{all}"
    );
    let last = states.last().unwrap();
    assert_eq!(last.observed_generation, Some(new), "{all}");
    assert_eq!(last.ready_status(), "True", "{all}");
    assert!(!last.reconciling(), "{all}");
    t.cleanup().await;
}

#[tokio::test]
async fn a_failing_channel_past_the_retry_budget_is_stalled() {
    let mut t = TestNs::new("stalled").await;
    t.start_operator(&["--retry-delay=1s"]);
    // A spec no sync can act on: stalled at once.
    t.create_channel(
        "invalid",
        json!({"type": "custom", "options": {"mountPath": "/output"}}),
    )
    .await;
    // A runner that always fails: quick retries, then stalled until a human acts.
    let mut failing = custom_spec("echo 'disk on fire' >&2; exit 3");
    failing["syncInterval"] = json!("1h");
    t.create_channel("failing", failing).await;
    let recorder = Recorder::start(&t, "failing").await;

    let ch = t.wait_ready("invalid", "InvalidConfiguration", SYNC).await;
    let stalled = ch.status.as_ref().unwrap().condition(STALLED).cloned();
    assert!(
        stalled
            .as_ref()
            .is_some_and(|c| c.status == "True" && c.reason == "InvalidConfiguration"),
        "{stalled:?}"
    );

    let ch = t
        .eventually(
            "four failures in a row",
            Duration::from_secs(300),
            || async {
                let ch = t.channel("failing").await;
                let failures = ch.status.as_ref()?.failed_synchronization_attempts;
                (failures >= 4).then_some(ch)
            },
        )
        .await;
    let status = ch.status.as_ref().unwrap();
    assert_eq!(status.failed_synchronization_attempts, 4);
    let stalled = status
        .condition(STALLED)
        .cloned()
        .expect("no Stalled condition");
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "FailedToSync")
    );
    assert!(
        stalled
            .message
            .contains("4 failures in a row; next try in 1h"),
        "{}",
        stalled.message
    );
    assert_eq!(ready_reason(&ch).as_deref(), Some("FailedToSync"));
    // Within the retry budget it was not stalled; past it, it was.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let states = recorder.stop();
    let all = history(&states);
    for s in &states {
        assert_eq!(s.stalled(), s.failures >= 4, "{all}");
    }
    assert!(states.iter().any(|s| s.failures == 1), "{all}");

    // The human acts: a working spec clears Stalled.
    t.patch_spec(
        "failing",
        json!({"options": {"args": [write_script(&channel_data(&[("a", "v1")]))]}}),
    )
    .await;
    let ch = t.wait_ready("failing", "Synchronized", SYNC).await;
    assert!(ch.status.as_ref().unwrap().condition(STALLED).is_none());
    t.cleanup().await;
}

#[tokio::test]
async fn a_suspended_channel_runs_no_pod_and_touches_no_version() {
    let mut t = TestNs::new("suspended").await;
    t.start_operator(&[]);
    let both = channel_data(&[("a", "v1"), ("b", "v2")]);
    t.create_channel("ch", custom_spec(&write_script(&both)))
        .await;
    t.wait_ready("ch", "Synchronized", SYNC).await;
    t.wait_no_pods(SYNC).await;
    let before = t.versions().await;
    let pods = t.pods_created();

    // Paused, and in the same change the runner would list only `a` (a spec change syncs
    // at once, and would flag `b`); a sync is requested too.
    let only_a = channel_data(&[("a", "v1")]);
    t.patch_spec(
        "ch",
        json!({"suspend": true, "options": {"args": [write_script(&only_a)]}}),
    )
    .await;
    t.request_sync("ch", "while-suspended").await;
    let ch = t.wait_ready("ch", "Suspended", SYNC).await;
    let ready = ready(&ch).unwrap().clone();
    assert_eq!(ready.status, "True", "Ready keeps the last outcome");
    assert!(
        ready.message.contains("spec.suspend is true"),
        "{}",
        ready.message
    );
    assert!(ready.message.contains("Synchronized"), "{}", ready.message);
    // What `kubectl get -o wide` shows (the API server's table of the channel).
    let row = table_row(&t, "ch").await;
    assert_eq!(row["Ready"], "True", "{row:?}");
    assert_eq!(row["Reason"], "Suspended", "{row:?}");
    assert!(row["Message"].contains("spec.suspend is true"), "{row:?}");
    assert!(!reconciling(&ch));
    // Long enough for a sync to have started and finished, were one to run.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(t.pods_created(), pods, "a suspended channel ran a pod");
    assert_eq!(
        t.versions().await,
        before,
        "a suspended channel touched its versions"
    );
    assert_eq!(
        ready_reason(&t.channel("ch").await).as_deref(),
        Some("Suspended")
    );

    // Resumed: the pending change syncs, and `b` is flagged.
    t.patch_spec("ch", json!({"suspend": false})).await;
    let ch = t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_eq!(
        ready_message(&ch),
        "synchronized 1 versions (1 flagged as no longer in sync)"
    );
    let versions = t.versions().await;
    let b = versions.iter().find(|v| v.name_any() == "b").unwrap();
    assert_eq!(
        b.annotations()
            .get(NO_LONGER_IN_SYNC_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
    t.cleanup().await;
}

#[tokio::test]
async fn an_unchanged_sync_writes_no_normal_event_and_repeated_failures_are_one_event_with_a_count()
{
    let mut t = TestNs::new("events").await;
    t.start_operator(&["--retry-delay=1s"]);
    let one = channel_data(&[("a", "v1")]);
    t.create_channel("ch", custom_spec(&write_script(&one)))
        .await;
    let ch = t.wait_ready("ch", "Synchronized", SYNC).await;
    // A sync that changes nothing: in the status only.
    t.request_sync("ch", "unchanged").await;
    let ch = t.wait_next_attempt("ch", &ch, SYNC).await;
    assert_eq!(ready_message(&ch), "synchronized 1 versions (no changes)");
    // A sync that changes something: an Event. Events of a channel are published in
    // order, so once this one shows, the unchanged sync's would have too.
    let two = channel_data(&[("a", "v1"), ("b", "v2")]);
    t.patch_spec("ch", json!({"options": {"args": [write_script(&two)]}}))
        .await;
    t.wait_next_attempt("ch", &ch, SYNC).await;
    let normal = t
        .eventually("the Event of the second change", SYNC, || async {
            let normal: Vec<_> = events_with_counts(&t, "ch")
                .await
                .into_iter()
                .filter(|e| e.0 == "Normal")
                .collect();
            normal
                .iter()
                .any(|e| e.2.contains("(1 created)") && e.2.starts_with("synchronized 2"))
                .then_some(normal)
        })
        .await;
    let notes: Vec<&str> = normal.iter().map(|e| e.2.as_str()).collect();
    assert_eq!(
        notes,
        [
            "synchronized 1 versions (1 created)",
            "synchronized 2 versions (1 created)"
        ],
        "{normal:?}"
    );
    assert!(
        normal.iter().all(|e| e.1 == "Synchronized" && e.3 == 1),
        "{normal:?}"
    );

    // The same failure again and again: one Warning whose series counts them.
    t.patch_spec(
        "ch",
        json!({"options": {"args": ["echo 'disk on fire' >&2; exit 3"]}}),
    )
    .await;
    t.eventually(
        "four failures in a row",
        Duration::from_secs(300),
        || async {
            let ch = t.channel("ch").await;
            (ch.status.as_ref()?.failed_synchronization_attempts >= 4).then_some(())
        },
    )
    .await;
    let warnings = t
        .eventually("the failure Event counted four times", SYNC, || async {
            let warnings: Vec<_> = events_with_counts(&t, "ch")
                .await
                .into_iter()
                .filter(|e| e.0 == "Warning")
                .collect();
            (warnings.iter().map(|e| e.3).sum::<i32>() >= 4).then_some(warnings)
        })
        .await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let (_, reason, note, count) = &warnings[0];
    assert_eq!(reason, "FailedToSync");
    assert!(note.contains("exited with code 3"), "{note}");
    assert!(note.contains("disk on fire"), "{note}");
    assert_eq!(*count, 4);

    // The recovery is news.
    let three = channel_data(&[("a", "v1"), ("b", "v2"), ("c", "v3")]);
    t.patch_spec("ch", json!({"options": {"args": [write_script(&three)]}}))
        .await;
    t.wait_ready("ch", "Synchronized", SYNC).await;
    t.eventually("the recovery's Event", SYNC, || async {
        events_with_counts(&t, "ch")
            .await
            .iter()
            .any(|e| e.0 == "Normal" && e.2 == "synchronized 3 versions (1 created)")
            .then_some(())
    })
    .await;
    t.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// 3. Per-channel metrics

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `/metrics` as text, or `None` while the operator does not answer yet.
async fn scrape(port: u16) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The samples of a scrape: `(metric, labels) -> value`.
fn samples(text: &str) -> BTreeMap<(String, BTreeMap<String, String>), f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_string(), v.trim_matches('"').to_string())
            })
            .collect();
        out.insert((name.to_string(), labels), value.parse().unwrap());
    }
    out
}

/// A channel's gauges in a scrape, by metric name.
fn channel_series(text: &str, ns: &str, name: &str) -> BTreeMap<String, f64> {
    samples(text)
        .into_iter()
        .filter(|((_, labels), _)| {
            labels.get("namespace").map(String::as_str) == Some(ns)
                && labels.get("name").map(String::as_str) == Some(name)
        })
        .map(|((metric, _), v)| (metric, v))
        .collect()
}

#[tokio::test]
async fn per_channel_metrics_report_and_disappear_with_the_channel() {
    let mut t = TestNs::new("metrics").await;
    let port = free_port();
    // Open metrics: who may read them is tests/hardening.rs's question.
    t.start_operator(&[
        &format!("--metrics-address=127.0.0.1:{port}"),
        "--metrics-insecure",
    ]);
    let data = channel_data(&[("a", "v1"), ("b", "v2")]);
    t.create_channel("good", custom_spec(&write_script(&data)))
        .await;
    t.create_channel("bad", custom_spec("exit 3")).await;
    let good = t.wait_ready("good", "Synchronized", SYNC).await;
    t.wait_ready("bad", "FailedToSync", SYNC).await;
    let synced_at = good
        .status
        .as_ref()
        .unwrap()
        .last_synced_time
        .as_ref()
        .unwrap()
        .0
        .as_second() as f64;

    let prefix = "rancheros_operator_channel_";
    let ns = t.ns.clone();
    let text = t
        .eventually("both channels' gauges", SYNC, || async {
            let text = scrape(port).await?;
            let good = channel_series(&text, &ns, "good");
            let bad = channel_series(&text, &ns, "bad");
            (good.get(&format!("{prefix}ready")) == Some(&1.0)
                && bad
                    .get(&format!("{prefix}consecutive_failures"))
                    .is_some_and(|n| *n >= 1.0))
            .then_some(text)
        })
        .await;
    let good = channel_series(&text, &ns, "good");
    let bad = channel_series(&text, &ns, "bad");
    assert_eq!(good[&format!("{prefix}ready")], 1.0, "{text}");
    assert_eq!(good[&format!("{prefix}versions")], 2.0, "{text}");
    assert_eq!(
        good[&format!("{prefix}consecutive_failures")],
        0.0,
        "{text}"
    );
    assert_eq!(
        good[&format!("{prefix}last_success_timestamp_seconds")],
        synced_at,
        "{text}"
    );
    // 1h stretched by the channel's share of the 10% interval jitter.
    let interval = good[&format!("{prefix}sync_interval_seconds")];
    assert!((3600.0..=3960.0).contains(&interval), "{text}");
    assert_eq!(good[&format!("{prefix}suspended")], 0.0, "{text}");
    assert_eq!(bad[&format!("{prefix}ready")], 0.0, "{text}");
    assert_eq!(bad[&format!("{prefix}versions")], 0.0, "{text}");
    assert!(
        !bad.contains_key(&format!("{prefix}last_success_timestamp_seconds")),
        "{text}"
    );
    let all = samples(&text);
    assert!(
        all.keys().any(|(m, l)| m == "rancheros_operator_build_info"
            && l.get("version").map(String::as_str) == Some(env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(
        all.keys()
            .any(|(m, _)| m == "rancheros_operator_sync_queue_length"),
        "{text}"
    );

    // Deleted: its series go; the other channel's stay.
    t.channels()
        .delete("good", &DeleteParams::default())
        .await
        .unwrap();
    let text = t
        .eventually("the deleted channel's series to go", SYNC, || async {
            let text = scrape(port).await?;
            channel_series(&text, &ns, "good")
                .is_empty()
                .then_some(text)
        })
        .await;
    assert_eq!(
        channel_series(&text, &ns, "bad").len(),
        // ready, versions, consecutive failures, interval, suspended (no success yet)
        5,
        "the other channel keeps its series: {text}"
    );
    t.cleanup().await;
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
    spec["options"]["timeout"] = json!("30s");

    // Without the flag the syncer pod has no credentials for the display container.
    t.start_operator(&[&operator_image]);
    t.create_channel("ch", spec).await;
    let ch = t.wait_ready("ch", "FailedToSync", SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message.starts_with("timed out after 30s: the syncer pod did not finish (display: "),
        "{message}"
    );
    assert!(
        message.contains("ErrImagePull") || message.contains("ImagePullBackOff"),
        "{message}"
    );
    assert!(message.contains(&image), "{message}");
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
