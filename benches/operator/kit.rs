//! The benchmark's hands on the cluster: the API through kube (polls, watches, metrics,
//! annotations), kubectl where it is the baseline or the creator whose time is measured,
//! the operator as a local process with its RSS and CPU read from /proc.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use futures::{Future, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use rancheros_operator::api::{ManagedOSVersion, ManagedOSVersionChannel};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::parse;

pub fn log(msg: &str) {
    let (_, _, _, h, m, s) = crate::date::civil(now_secs());
    eprintln!("[{h:02}:{m:02}:{s:02}] {msg}");
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Names of this run (`HHMMSS`): a namespace of an earlier run may still be terminating.
pub fn run_id() -> String {
    let (_, _, _, h, m, s) = crate::date::civil(now_secs());
    format!("{h:02}{m:02}{s:02}")
}

/// Runs a command to its end; its stdout, or its stderr as the error.
pub fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .wrap_err_with(|| format!("running {program}"))?;
    if let Some(input) = stdin {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kubectl ARGS` off the async workers (it blocks until kubectl ends).
pub async fn kubectl(args: &[&str]) -> Result<String> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run("kubectl", &args, None)
    })
    .await?
}

pub fn write_json(path: &Path, value: &Value) -> Result<()> {
    std::fs::write(path, value.to_string()).wrap_err_with(|| format!("writing {}", path.display()))
}

/// `kubectl create -f` of `items` by `writers` kubectl processes at once; seconds.
pub async fn create_parallel(items: &[Value], workdir: &Path, writers: usize) -> Result<f64> {
    let mut paths = Vec::new();
    for w in 0..writers {
        let path = workdir.join(format!("writer-{w}.json"));
        write_json(
            &path,
            &crate::objects::list(&crate::objects::share(items, w, writers)),
        )?;
        paths.push(path);
    }
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let children: Vec<Child> = paths
            .iter()
            .map(|p| {
                Command::new("kubectl")
                    .args(["create", "-f"])
                    .arg(p)
                    .args(["-o", "name"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .collect::<std::io::Result<_>>()?;
        for child in children {
            let out = child.wait_with_output()?;
            if !out.status.success() {
                bail!(
                    "kubectl create: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(t.elapsed().as_secs_f64())
    })
    .await?
}

/// Polls `check` every `every` until it holds; fails after `timeout`.
pub async fn wait<F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let start = Instant::now();
    loop {
        if check().await? {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("bench-operator: timed out waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
}

pub const MINUTES_30: Duration = Duration::from_secs(1800);

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Blocks on one watch of the object named `name` until `done` holds for it; the instant
/// it was seen to. One watch, not a poll loop: the machine's CPU goes to the operator
/// being timed (as it goes to kubectl in the baseline).
pub async fn watch_until<K>(
    what: &str,
    api: Api<K>,
    name: &str,
    done: impl Fn(&K) -> bool,
) -> Result<Instant>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    // The watcher re-lists after an error (another tree's tests re-installing the CRDs).
    let mut events = watcher(api, config).default_backoff().boxed();
    let seen = async {
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) if done(&o) => {
                    return Ok(Instant::now());
                }
                _ => {}
            }
        }
        Err(eyre!(
            "bench-operator: gave up waiting for {what} (watch ended)"
        ))
    };
    tokio::time::timeout(MINUTES_30, seen)
        .await
        .map_err(|_| eyre!("bench-operator: timed out waiting for {what}"))?
}

pub fn ready(ch: &ManagedOSVersionChannel) -> Option<&Condition> {
    ch.status.as_ref()?.condition("Ready")
}

pub fn ready_reason(ch: &ManagedOSVersionChannel) -> &str {
    ready(ch).map_or("", |c| c.reason.as_str())
}

pub fn ready_message(ch: &ManagedOSVersionChannel) -> String {
    ready(ch).map(|c| c.message.clone()).unwrap_or_default()
}

/// Whether the sync asked for with `value` has ended `Synchronized`. The status takes the
/// value when that sync starts, and Ready keeps the last outcome while it runs: its end is
/// Reconciling no longer True.
pub fn synced_after(ch: &ManagedOSVersionChannel, value: &str) -> bool {
    let status = ch.status.as_ref();
    status.and_then(|s| s.sync_requested_at.as_deref()) == Some(value)
        && ready_reason(ch) == "Synchronized"
        && status
            .and_then(|s| s.condition("Reconciling"))
            .is_none_or(|r| r.status != "True")
}

/// Whether the display container of the syncer pod runs (its data is in the log).
pub fn display_started(pod: &Pod) -> bool {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    statuses.is_some_and(|cs| {
        cs.iter().any(|c| {
            c.name == "display"
                && c.state
                    .as_ref()
                    .and_then(|s| s.running.as_ref())
                    .is_some_and(|r| r.started_at.is_some())
        })
    })
}

/// The cluster and what the scenarios share.
pub struct Kit {
    pub client: Client,
    pub root: PathBuf,
    pub workdir: PathBuf,
    pub runner_image: String,
    pub operator_image: String,
}

impl Kit {
    pub fn channels(&self, ns: &str) -> Api<ManagedOSVersionChannel> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub async fn list_channels(&self, ns: &str) -> Result<Vec<ManagedOSVersionChannel>> {
        Ok(self.channels(ns).list(&ListParams::default()).await?.items)
    }

    pub async fn no_pods(&self, ns: &str) -> Result<bool> {
        Ok(self
            .pods(ns)
            .list(&ListParams::default())
            .await?
            .items
            .is_empty())
    }

    /// The instant the display container of syncer pod `name` is seen running (its data is
    /// in the log).
    pub async fn display_running(&self, ns: &str, name: &str) -> Result<Instant> {
        watch_until(
            "the display container",
            self.pods(ns),
            name,
            display_started,
        )
        .await
    }

    /// Until the namespace holds no pod (the syncer pods gone).
    pub async fn wait_no_pods(&self, ns: &str, every: f64) -> Result<()> {
        wait("the syncer pods to go", MINUTES_30, secs(every), || {
            self.no_pods(ns)
        })
        .await
    }

    pub async fn metrics(&self) -> Result<String> {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        Ok(self.client.request_text(req).await?)
    }

    pub async fn api_metrics(&self) -> Result<(parse::Tally<parse::Kind3, f64>, f64)> {
        Ok(parse::api_metrics(&self.metrics().await?))
    }

    /// Server-side apply of a channel manifest.
    pub async fn apply_channel(&self, ns: &str, spec: &Value) -> Result<()> {
        let name = spec["metadata"]["name"].as_str().unwrap_or_default();
        let pp = PatchParams::apply("bench-operator").force();
        self.channels(ns)
            .patch(name, &pp, &Patch::Apply(spec))
            .await?;
        Ok(())
    }

    /// Asks for a sync now (the annotation `rancheros.cattle.io/sync-requested-at`).
    pub async fn request_sync(&self, ns: &str, name: &str, value: &str) -> Result<()> {
        let patch =
            json!({"metadata": {"annotations": {crate::objects::SYNC_REQUESTED_AT: value}}});
        self.channels(ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    pub async fn crds(&self) -> Result<()> {
        let crds = self.root.join("crds");
        let crds = crds.to_string_lossy();
        kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &crds]).await?;
        Ok(())
    }

    /// A fresh, empty namespace `name`, with its default service account (pods need it).
    pub async fn namespace(&self, name: &str) -> Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        if namespaces.get_opt(name).await?.is_some() {
            let _ = namespaces.delete(name, &DeleteParams::default()).await;
            wait("the namespace to go", secs(300.0), secs(0.5), || async {
                Ok(namespaces.get_opt(name).await?.is_none())
            })
            .await?;
        }
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        namespaces.create(&PostParams::default(), &ns).await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), name);
        for _ in 0..300 {
            if accounts.get_opt("default").await?.is_some() {
                break;
            }
            tokio::time::sleep(secs(0.1)).await;
        }
        Ok(())
    }

    /// Deletes the run's namespaces, each one's versions first with one DELETECOLLECTION:
    /// a namespace deleted with its channels makes the garbage collector cascade to every
    /// version they own, one paced request at a time (about 20 a second), which after
    /// 100,000 versions kept it busy, and other owners' dependents waiting, for over an hour.
    pub async fn drop_namespaces(&self, names: &[&str]) {
        for ns in names {
            let versions: Api<ManagedOSVersion> = Api::namespaced(self.client.clone(), ns);
            let _ = versions
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
        }
        self.delete_namespaces(names).await;
    }

    /// Deletes namespaces without waiting for them to go.
    pub async fn delete_namespaces(&self, names: &[&str]) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        for ns in names {
            let _ = namespaces.delete(ns, &DeleteParams::default()).await;
        }
    }
}

/// The operator binary as a local process watching one namespace (or every one), with its
/// peak RSS and CPU from /proc.
pub struct Operator {
    child: Child,
    pub logfile: PathBuf,
    pub started: Instant,
}

impl Operator {
    pub fn start(
        kit: &Kit,
        binary: &Path,
        namespace: Option<&str>,
        logfile: PathBuf,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let log = std::fs::File::create(&logfile)?;
        let mut cmd = Command::new(binary);
        cmd.arg("operator");
        if let Some(ns) = namespace {
            cmd.args(["--namespace", ns]);
        }
        cmd.args([
            "--leader-election=false",
            "--metrics-address",
            "127.0.0.1:0",
            "--operator-image",
            &kit.operator_image,
        ])
        .args(extra)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
        let started = Instant::now();
        let child = cmd
            .spawn()
            .wrap_err_with(|| format!("starting {}", binary.display()))?;
        Ok(Self {
            child,
            logfile,
            started,
        })
    }

    /// The log with the API client's requests (`parse::REQUEST_LOG`).
    pub fn request_log() -> [(&'static str, &'static str); 2] {
        [("RUST_LOG", parse::REQUEST_LOG), ("NO_COLOR", "1")]
    }

    /// The operator watching `namespace`, logging its API client's requests.
    pub fn start_logged(
        kit: &Kit,
        binary: &Path,
        namespace: &str,
        logfile: PathBuf,
    ) -> Result<Self> {
        Self::start(
            kit,
            binary,
            Some(namespace),
            logfile,
            &[],
            &Self::request_log(),
        )
    }

    pub fn log_text(&self) -> String {
        std::fs::read(&self.logfile)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    pub fn status(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()));
        parse::proc_status_bytes(&text.unwrap_or_default(), field)
    }

    pub fn peak_rss(&self) -> u64 {
        self.status("VmHWM")
    }

    pub fn cpu_seconds(&self) -> f64 {
        let text = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()));
        let ticks = parse::proc_stat_ticks(&text.unwrap_or_default()).unwrap_or(0);
        // SAFETY: sysconf only reads a configuration value.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
        ticks as f64 / hz as f64
    }

    /// Whether the process has ended (a zombie, or gone): an operator that stopped at start
    /// (another tree's tests installed their CRDs, say) is never waited for.
    pub fn exited(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()));
        stat.map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
    }

    /// Until the operator's version cache holds the first list (needs `request_log`); the
    /// seconds it took from the operator's start.
    pub async fn wait_filled(&self, timeout: f64) -> Result<f64> {
        wait(
            "the version cache to fill",
            secs(timeout),
            secs(0.5),
            || async {
                if self.exited() {
                    let text = self.log_text();
                    bail!("the operator ended: {}", text.lines().last().unwrap_or(""));
                }
                Ok(parse::cache_filled(&self.log_text()))
            },
        )
        .await?;
        Ok(self.started.elapsed().as_secs_f64())
    }

    /// The RSS once it has stopped moving: at least `least` s after the call, then
    /// unchanged (within 64 KiB) over `quiet` samples a second apart; at most `most` s.
    pub async fn settled_rss(&self, least: f64, quiet: u32, most: f64) -> u64 {
        let t0 = Instant::now();
        let (mut last, mut still) = (None::<u64>, 0);
        while t0.elapsed().as_secs_f64() < most {
            tokio::time::sleep(secs(1.0)).await;
            let rss = self.status("VmRSS");
            still = match last {
                Some(l) if rss.abs_diff(l) <= 64 * 1024 => still + 1,
                _ => 0,
            };
            last = Some(rss);
            if t0.elapsed().as_secs_f64() >= least && still >= quiet {
                break;
            }
        }
        last.unwrap_or(0)
    }

    /// SIGTERM, then SIGKILL after 30 s.
    pub fn stop(mut self) {
        // SAFETY: a signal to the child this value owns (its pid is not reused before wait).
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
