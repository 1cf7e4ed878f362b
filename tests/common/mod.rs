//! Shared harness of the operator's integration tests. Every test gets its own namespace
//! on the local cluster and its own operator process (the built binary, watching only
//! that namespace), and records every syncer pod created there.
//!
//! The tests need `KUBECONFIG` pointing at the local cluster (`scripts/test` sets it up,
//! with `OPERATOR_IMAGE` and `RANCHEROS_RUNNER_IMAGE` imported into the node). Without a
//! cluster they fail; they never skip.

#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod steps;
pub mod test_crds;

#[allow(unused_imports)] // not every test binary takes every step
pub use steps::*;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Config, ResourceExt};
use rancheros_operator::api::{ManagedOSVersion, ManagedOSVersionChannel, READY};
use serde_json::{Value, json};

pub fn operator_image() -> String {
    std::env::var("OPERATOR_IMAGE").unwrap_or_else(|_| "rancheros-operator:dev".into())
}

pub fn runner_image() -> String {
    std::env::var("RANCHEROS_RUNNER_IMAGE").unwrap_or_else(|_| "rancheros-runner:test".into())
}

/// A client for the local cluster, or a panic that says how to get one.
pub async fn client() -> Client {
    let path = std::env::var("KUBECONFIG").unwrap_or_default();
    assert!(
        !path.is_empty(),
        "KUBECONFIG is not set: the integration tests need the local cluster. \
         Run scripts/test, or: scripts/cluster up && eval \"$(scripts/cluster env)\""
    );
    let config = Config::infer()
        .await
        .unwrap_or_else(|e| panic!("cannot load the kubeconfig {path}: {e}"));
    let client = Client::try_from(config).expect("a kube client");
    client.apiserver_version().await.unwrap_or_else(|e| {
        panic!("cannot reach the cluster with {path}: {e} (scripts/cluster status)")
    });
    client
}

/// Channel data as a runner would print it: `(name, version)` pairs, container type.
pub fn channel_data(versions: &[(impl AsRef<str>, impl AsRef<str>)]) -> Value {
    Value::Array(
        versions
            .iter()
            .map(|(name, v)| {
                let (name, v) = (name.as_ref(), v.as_ref());
                json!({
                    "metadata": {"name": name},
                    "spec": {"version": v, "type": "container", "minVersion": "0.0.0",
                             "metadata": {"upgradeImage": format!("registry.com/repository/image:{v}")}}
                })
            })
            .collect(),
    )
}

/// A custom channel spec whose runner runs `script` in bash, with `/output` mounted. The
/// runner image is imported into the node, not pulled from a registry: `IfNotPresent`
/// (the operator's default, `Always`, is for images published under mutable tags).
pub fn custom_spec(script: &str) -> Value {
    json!({
        "type": "custom",
        "options": {
            "image": runner_image(),
            "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/bash", "-c", "--"],
            "args": [script],
            "mountPath": "/output",
            "outputFile": "/output/data"
        }
    })
}

/// A runner script that waits `secs` seconds before writing `data` (so that a sync under
/// way can be watched).
pub fn slow_script(secs: u32, data: &Value) -> String {
    format!("sleep {secs}; {}", write_script(data))
}

/// A runner script that writes `data` to /output/data.
pub fn write_script(data: &Value) -> String {
    let text = data.to_string();
    assert!(
        !text.contains('\''),
        "test data must not contain single quotes"
    );
    format!("echo '{text}' > /output/data")
}

/// Installs (or updates) the CRDs generated from the Rust types, as `crds/` has them (with
/// their schema hash, which the operator checks at start), and waits until they serve.
pub async fn install_crds(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::runtime::wait::{await_condition, conditions};
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in rancheros_operator::crds::crds() {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply("rancheros-operator-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("installing CRD {name}: {e}"));
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not established after 30s"))
        .unwrap_or_else(|e| panic!("waiting for CRD {name}: {e}"));
    }
}

/// An operator process a test started: killed when dropped, so that a failing (panicking)
/// test leaves no operator running behind it.
pub struct Spawned(pub Child);

impl std::ops::Deref for Spawned {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where run `run` of the operator serving `ns` logs.
pub fn operator_log_path(ns: &str, run: usize) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("operator-logs");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{ns}-{run}.log"))
}

/// Run `run` of the operator binary for `ns`, logging to [`operator_log_path`]. Retries
/// start after a minute and leader election is off unless `extra` says otherwise.
pub fn spawn_operator_for(ns: &str, run: usize, extra: &[&str], env: &[(&str, &str)]) -> Spawned {
    let log = std::fs::File::create(operator_log_path(ns, run)).unwrap();
    let mut args = vec!["operator".to_string(), "--namespace".into(), ns.to_string()];
    // Metrics on a port of the system's choosing, unless the test scrapes them.
    if !extra.iter().any(|a| a.starts_with("--metrics-address")) {
        args.push("--metrics-address=127.0.0.1:0".into());
    }
    if !extra.iter().any(|a| a.starts_with("--retry-delay")) {
        args.push("--retry-delay=60s".into());
    }
    // Leader election is off unless a test turns it on.
    if !extra.iter().any(|a| a.starts_with("--leader-election=")) {
        args.push("--leader-election=false".into());
    }
    if !extra.iter().any(|a| a.starts_with("--operator-image")) {
        args.push(format!("--operator-image={}", operator_image()));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    Spawned(
        Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
            .args(&args)
            .env("RUST_LOG", "info,rancheros_operator=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting the operator binary"),
    )
}

/// The operator process serving `ns` (started by a test, on this host).
pub fn operator_pid(ns: &str) -> u32 {
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.contains(&&b"operator"[..]) && args.contains(&ns.as_bytes()) {
            return pid;
        }
    }
    panic!("no operator process for {ns}");
}

/// A TCP port on 127.0.0.1 that was free a moment ago (for a server a test starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `(status line, body)` of a GET on 127.0.0.1:`port` (with `Authorization: Bearer
/// <token>` when given), or `None` while nothing answers there.
pub async fn http_get(port: u16, path: &str, token: Option<&str>) -> Option<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The operator's `/metrics` as text, or `None` until it answers 200.
pub async fn scrape(port: u16) -> Option<String> {
    let (status, body) = http_get(port, "/metrics", None).await?;
    status.starts_with("HTTP/1.1 200").then_some(body)
}

/// `VmRSS` and `VmHWM` (the peak) of a process, in KiB.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub struct TestNs {
    pub client: Client,
    pub ns: String,
    operator: Option<Spawned>,
    operator_runs: usize,
    pod_uids: Arc<Mutex<BTreeSet<String>>>,
    watch_task: tokio::task::JoinHandle<()>,
}

impl TestNs {
    /// A fresh namespace named after the test, with a watch that records syncer pods.
    pub async fn new(test: &str) -> Self {
        let client = client().await;
        install_crds(&client).await;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let ns = format!("{}-{:x}", test.replace('_', "-"), nanos)
            .chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches('-')
            .to_string();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        create_json(
            &namespaces,
            json!({"metadata": {"name": ns}}),
            &format!("namespace {ns}"),
        )
        .await;
        // Pods are refused until the namespace's default ServiceAccount exists.
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &ns);
        let start = Instant::now();
        while accounts.get_opt("default").await.unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no default ServiceAccount in {ns}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pod_uids = Arc::new(Mutex::new(BTreeSet::new()));
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let seen = pod_uids.clone();
        let watch_task = tokio::spawn(async move {
            let mut stream = watcher(pods, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(event) = stream.next().await {
                if let Ok(pod) = event {
                    seen.lock().unwrap().insert(pod.uid().unwrap_or_default());
                }
            }
        });
        Self {
            client,
            ns,
            operator: None,
            operator_runs: 0,
            pod_uids,
            watch_task,
        }
    }

    pub fn log_path(&self, run: usize) -> PathBuf {
        operator_log_path(&self.ns, run)
    }

    /// Starts the operator binary for this namespace. Retries start after a minute unless
    /// `extra` says otherwise, so that a test sees one failure at a time.
    pub fn start_operator(&mut self, extra: &[&str]) {
        assert!(self.operator.is_none(), "an operator is already running");
        self.operator = Some(self.spawn_operator(extra, &[]));
    }

    /// Starts one more operator process for this namespace (with extra environment, such
    /// as `POD_NAME`, its leader identity); the caller owns it, and dropping it kills it.
    pub fn spawn_operator(&mut self, extra: &[&str], env: &[(&str, &str)]) -> Spawned {
        self.operator_runs += 1;
        spawn_operator_for(&self.ns, self.operator_runs, extra, env)
    }

    /// Whether the operator started by `start_operator` is still running.
    pub fn operator_running(&mut self) -> bool {
        self.operator
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Kills the operator at once (SIGKILL), as a crash would.
    pub fn kill_operator(&mut self) {
        if let Some(mut child) = self.operator.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits for the operator to exit; returns its status and how long
    /// it took.
    pub fn term_operator(&mut self) -> (std::process::ExitStatus, Duration) {
        let mut child = self.operator.take().expect("an operator is running");
        let started = Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return (status, started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!(
                    "the operator did not stop within 30s of SIGTERM\n{}",
                    self.operator_log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The operator's log so far, for failure messages.
    pub fn operator_log(&self) -> String {
        (1..=self.operator_runs)
            .map(|run| std::fs::read_to_string(self.log_path(run)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n--- restart ---\n")
    }

    pub fn channels(&self) -> Api<ManagedOSVersionChannel> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn versions_api(&self) -> Api<ManagedOSVersion> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub async fn create_channel(&self, name: &str, spec: Value) -> ManagedOSVersionChannel {
        let channel: ManagedOSVersionChannel = serde_json::from_value(json!({
            "apiVersion": "rancheros.cattle.io/v1",
            "kind": "ManagedOSVersionChannel",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": spec
        }))
        .unwrap();
        self.channels()
            .create(&PostParams::default(), &channel)
            .await
            .unwrap_or_else(|e| panic!("creating channel {name}: {e}"))
    }

    /// Merge-patches the channel's spec.
    pub async fn patch_spec(&self, name: &str, spec: Value) {
        merge_patch(&self.channels(), name, json!({"spec": spec})).await;
    }

    pub async fn request_sync(&self, name: &str, value: &str) {
        let patch =
            json!({"metadata": {"annotations": {"rancheros.cattle.io/sync-requested-at": value}}});
        merge_patch(&self.channels(), name, patch).await;
    }

    pub async fn channel(&self, name: &str) -> ManagedOSVersionChannel {
        self.channels().get(name).await.unwrap()
    }

    pub async fn versions(&self) -> Vec<ManagedOSVersion> {
        let mut list = self
            .versions_api()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        list.sort_by_key(|v| v.name_any());
        list
    }

    pub async fn version_names(&self) -> Vec<String> {
        self.versions().await.iter().map(|v| v.name_any()).collect()
    }

    /// How many distinct pods were ever seen in the namespace.
    pub fn pods_created(&self) -> usize {
        self.pod_uids.lock().unwrap().len()
    }

    /// Polls `check` until it returns `Some`, or fails the test with `what` and the
    /// operator's log.
    pub async fn eventually<T, F, Fut>(&self, what: &str, timeout: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = Instant::now();
        loop {
            if let Some(v) = check().await {
                return v;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out after {timeout:?} waiting for {what} in namespace {}\n--- operator log ---\n{}",
                    self.ns,
                    self.operator_log()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the channel's Ready condition has this reason for its current
    /// generation (and, when `after` is given, a sync attempt finished after it).
    pub async fn wait_ready(
        &self,
        name: &str,
        reason: &str,
        timeout: Duration,
    ) -> ManagedOSVersionChannel {
        self.eventually(
            &format!("channel {name} to be {reason}"),
            timeout,
            || async {
                let ch = self.channel(name).await;
                let ok = ready_reason(&ch).as_deref() == Some(reason)
                    && ready_generation(&ch) == ch.metadata.generation;
                ok.then_some(ch)
            },
        )
        .await
    }

    /// Waits for the channel's next finished sync attempt after the one recorded in `before`
    /// (`Ready` keeps the last outcome while a routine resync runs: `Reconciling` says one
    /// does).
    pub async fn wait_next_attempt(
        &self,
        name: &str,
        before: &ManagedOSVersionChannel,
        timeout: Duration,
    ) -> ManagedOSVersionChannel {
        let last = attempt_time(before);
        self.eventually(
            &format!("another sync of channel {name}"),
            timeout,
            || async {
                let ch = self.channel(name).await;
                let done = attempt_time(&ch) != last
                    && ready_reason(&ch).as_deref() != Some("Synchronizing")
                    && !reconciling(&ch);
                done.then_some(ch)
            },
        )
        .await
    }

    /// Waits until the channel's syncer pod exists and the channel's status records it
    /// (`syncerPodUid`, the operator's proof that it made the pod).
    pub async fn wait_pod_recorded(&self, name: &str, timeout: Duration) {
        self.eventually("the syncer pod, recorded", timeout, || async {
            let recorded = self
                .channel(name)
                .await
                .status
                .is_some_and(|s| s.syncer_pod_uid.is_some());
            let pod = self.pods().get_opt(name).await.unwrap();
            (pod.is_some() && recorded).then_some(())
        })
        .await;
    }

    pub async fn wait_no_pods(&self, timeout: Duration) {
        self.eventually("the syncer pod to be gone", timeout, || async {
            self.pods()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
                .then_some(())
        })
        .await
    }

    /// Stops the operator and deletes the namespace (without waiting for it to go).
    pub async fn cleanup(mut self) {
        self.kill_operator();
        self.watch_task.abort();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        self.kill_operator();
    }
}

pub fn ready(
    ch: &ManagedOSVersionChannel,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    ch.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
}

/// Whether a sync of the channel is under way (started, or queued for a slot).
pub fn reconciling(ch: &ManagedOSVersionChannel) -> bool {
    ch.status
        .as_ref()
        .and_then(|s| s.sync_under_way())
        .is_some()
}

pub fn ready_reason(ch: &ManagedOSVersionChannel) -> Option<String> {
    ready(ch).map(|c| c.reason.clone())
}

pub fn ready_message(ch: &ManagedOSVersionChannel) -> String {
    ready(ch).map(|c| c.message.clone()).unwrap_or_default()
}

fn ready_generation(ch: &ManagedOSVersionChannel) -> Option<i64> {
    ready(ch).and_then(|c| c.observed_generation)
}

/// What changes with every finished sync attempt. Times have one-second resolution, so
/// the generation, the on-demand request and the failure count are part of it too.
pub fn attempt_time(ch: &ManagedOSVersionChannel) -> String {
    let Some(s) = ch.status.as_ref() else {
        return String::new();
    };
    format!(
        "{:?} {:?} {:?} {} {:?}",
        s.last_sync_attempt_time.as_ref().map(|t| t.0.to_string()),
        s.sync_requested_at,
        ready(ch).and_then(|c| c.observed_generation),
        s.failed_synchronization_attempts,
        s.last_synced_time.as_ref().map(|t| t.0.to_string()),
    )
}

pub const MINUTE: Duration = Duration::from_secs(60);

/// Write requests on ManagedOSVersions in namespace `ns` the API server has served so far,
/// by verb, as its audit log records them (dry runs included; the cluster's audit policy
/// logs those requests and nothing else). Read until two reads a moment apart agree: the
/// server logs a request once it has answered it.
pub async fn version_writes(ns: &str) -> std::collections::BTreeMap<String, u64> {
    audited_until_stable(ns, |event| {
        event["verb"].as_str().unwrap_or_default().to_string()
    })
    .await
}

/// As [`version_writes`], with the creates and patches sent as server-side dry runs counted
/// apart (`create (dry run)`, `patch (dry run)`: their URI asks `dryRun=All`; a delete
/// asks in its body, which the audit log does not keep).
pub async fn version_requests(ns: &str) -> std::collections::BTreeMap<String, u64> {
    audited_until_stable(ns, |event| {
        let verb = event["verb"].as_str().unwrap_or_default();
        let uri = event["requestURI"].as_str().unwrap_or_default();
        if uri.contains("dryRun=All") {
            format!("{verb} (dry run)")
        } else {
            verb.to_string()
        }
    })
    .await
}

async fn audited_until_stable(
    ns: &str,
    key: fn(&Value) -> String,
) -> std::collections::BTreeMap<String, u64> {
    let mut last = audited_version_writes(ns, key);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = audited_version_writes(ns, key);
        if now == last {
            return now;
        }
        last = now;
    }
}

fn audited_version_writes(
    ns: &str,
    key: fn(&Value) -> String,
) -> std::collections::BTreeMap<String, u64> {
    let log = std::path::PathBuf::from(
        std::env::var("RANCHEROS_TEST_AUDIT_LOG")
            .expect("RANCHEROS_TEST_AUDIT_LOG (set by `scripts/cluster env`)"),
    );
    let dir = log.parent().expect("the audit log's directory");
    let stem = log.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let needle = format!("\"namespace\":\"{ns}\"");
    let mut writes = std::collections::BTreeMap::new();
    // The current file and the rotated ones (`versions-<time>.log`).
    for entry in std::fs::read_dir(dir).expect("reading the audit log's directory") {
        let path = entry.expect("an audit log entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with(stem) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("reading the audit log");
        for line in text.lines().filter(|l| l.contains(&needle)) {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue; // a line the server is still writing
            };
            let object = &event["objectRef"];
            if event["stage"] == "ResponseComplete"
                && object["resource"] == "managedosversions"
                && object["namespace"] == ns
            {
                *writes.entry(key(&event)).or_default() += 1;
            }
        }
    }
    writes
}

/// Creates a ResourceQuota in the test's namespace and waits until the quota controller has
/// counted its usage (admission refuses everything it covers until then).
pub async fn create_quota(t: &TestNs, name: &str, hard: Value) {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let quotas: Api<ResourceQuota> = Api::namespaced(t.client.clone(), &t.ns);
    let quota: ResourceQuota =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"hard": hard}}))
            .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    t.eventually(
        "the quota to be counted",
        Duration::from_secs(90),
        || async {
            let q = quotas.get(name).await.unwrap();
            q.status
                .and_then(|s| s.used)
                .is_some_and(|u| !u.is_empty())
                .then_some(())
        },
    )
    .await;
}

/// The Events about a channel, oldest first (the syncer pod has the channel's name: the
/// kubelet's Events on it are not the channel's).
pub async fn channel_event_objects(
    t: &TestNs,
    channel: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    use k8s_openapi::api::events::v1::Event;
    let events: Api<Event> = Api::namespaced(t.client.clone(), &t.ns);
    let mut list: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("ManagedOSVersionChannel")
                    && r.name.as_deref() == Some(channel)
            })
        })
        .collect();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    list
}

/// Events the operator published on a channel: `(type, reason, note)`.
pub async fn channel_events(t: &TestNs, channel: &str) -> Vec<(String, String, String)> {
    events_with_counts(t, channel)
        .await
        .into_iter()
        .map(|(type_, reason, note, _)| (type_, reason, note))
        .collect()
}

/// The channel's Events with their series count: `(type, reason, note, count)`.
pub async fn events_with_counts(t: &TestNs, channel: &str) -> Vec<(String, String, String, i32)> {
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

/// Sets labels on the test's namespace (Pod Security levels, for example).
pub async fn label_namespace(t: &TestNs, labels: Value) {
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    merge_patch(&namespaces, &t.ns, json!({"metadata": {"labels": labels}})).await;
}

/// Merge-patches the object `name` through `api`.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: Value)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("merge-patching {name} with {patch}: {e}"));
}

/// The channel's Events once one of them matches `wanted` (Events are written after the
/// status that reports the same outcome, so a test that has just seen the status waits).
pub async fn wait_for_event<F>(
    t: &TestNs,
    channel: &str,
    wanted: F,
) -> Vec<(String, String, String)>
where
    F: Fn(&(String, String, String)) -> bool,
{
    t.eventually(
        &format!("the Event on channel {channel}"),
        MINUTE,
        || async {
            let events = channel_events(t, channel).await;
            events.iter().any(&wanted).then_some(events)
        },
    )
    .await
}
