//! The Helm chart installed on the local cluster (KUBECONFIG, kubectl on PATH): an operator
//! in-cluster syncs the sample channel under only the RBAC the chart grants. The test runs
//! in phases: install and sync, RBAC (`kubectl auth can-i` for every rule of
//! `files/rbac.yaml` and for what it must not grant), metrics through the Service, upgrade,
//! uninstall. The rendering checks that need no cluster are `tests/chart_render.rs`.

use crate::chart_support;
// The tenant attacks, against the same chart (its own release, beside the test below).
#[path = "chart_install/attacks.rs"]
mod attacks;
#[path = "chart_install/hostile_registry.rs"]
mod hostile_registry;
#[path = "chart_install/phases.rs"]
mod phases;
#[path = "chart_install/rbac_and_upgrade.rs"]
mod rbac_and_upgrade;

use phases::*;
use rbac_and_upgrade::*;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use chart_support::*;
use serde_json::Value;

pub(crate) fn kubectl() -> Command {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: the chart's end-to-end tests need the local cluster. \
         Run scripts/test, or: eval \"$(scripts/cluster env)\" && eval \"$(scripts/helm env)\""
    );
    command("kubectl")
}

pub(crate) fn kubectl_json(args: &[&str]) -> Value {
    let out = run(kubectl().args(args).args(["-o", "json"]));
    serde_json::from_str(&out).unwrap()
}

/// The channels' and the versions' resource types, as kubectl and `auth can-i` name them.
pub(crate) const CHANNELS: &str = "managedosversionchannels.rancheros.cattle.io";
pub(crate) const VERSIONS: &str = "managedosversions.rancheros.cattle.io";

/// The channel `name` in `ns`, as the API server has it.
pub(crate) fn channel_json(ns: &str, name: &str) -> Value {
    kubectl_json(&["get", CHANNELS, name, "--namespace", ns])
}

/// The list of the versions in `ns`.
pub(crate) fn versions_list(ns: &str) -> Value {
    kubectl_json(&["get", VERSIONS, "--namespace", ns])
}

/// The names of a list's items, in its order.
pub(crate) fn item_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

pub(crate) fn kubectl_apply(yaml: &str) {
    let mut cmd = kubectl();
    cmd.args(["apply", "-f", "-"]);
    let out = run_with_stdin(cmd, yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{:x}", nanos ^ std::process::id())
}

/// A Helm release in its own namespace (plus watched namespaces); on drop, uninstalled
/// and every namespace deleted, whatever happened.
pub(crate) struct Release {
    pub(crate) name: String,
    pub(crate) ns: String,
    pub(crate) namespaces: Vec<String>,
}

impl Release {
    pub(crate) fn new(prefix: &str, watched: usize) -> Self {
        let ns = unique(prefix);
        let namespaces: Vec<String> = (0..watched).map(|i| format!("{ns}-w{i}")).collect();
        // Unique: an all-namespaces release's ClusterRole is named after it.
        let name = format!("ros-{}", ns.rsplit('-').next().unwrap());
        let release = Self {
            name,
            ns,
            namespaces,
        };
        for ns in release.all_namespaces() {
            run(kubectl().args(["create", "namespace", &ns]));
        }
        // The operator pod and the `helm test` pod must meet Pod Security `restricted`.
        run(kubectl().args([
            "label",
            "namespace",
            &release.ns,
            "pod-security.kubernetes.io/enforce=restricted",
        ]));
        release
    }

    fn all_namespaces(&self) -> Vec<String> {
        let mut all = vec![self.ns.clone()];
        all.extend(self.namespaces.iter().cloned());
        all
    }

    pub(crate) fn fullname(&self) -> String {
        format!("{}-rancheros-operator", self.name)
    }

    fn sa(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.ns, self.fullname())
    }

    /// `helm install --wait` with the local image and the given extra values; its output
    /// (with the NOTES).
    fn install(&self, extra: &[&str]) -> String {
        let image =
            std::env::var("OPERATOR_IMAGE").unwrap_or_else(|_| "rancheros-operator:dev".into());
        let (repo, tag) = image.rsplit_once(':').expect("OPERATOR_IMAGE is repo:tag");
        let mut cmd = command("helm");
        cmd.args(["install", &self.name])
            .arg(chart_dir())
            .args(["--namespace", &self.ns, "--wait", "--timeout", "180s"])
            .args(["--set", &format!("image.repository={repo},image.tag={tag}")])
            .args(["--set", "image.pullPolicy=IfNotPresent"])
            .args(extra);
        if !self.namespaces.is_empty() {
            cmd.args([
                "--set",
                &format!("operator.namespaces={{{}}}", self.namespaces.join(",")),
            ]);
        }
        let out = output(&mut cmd);
        if !out.status.success() {
            panic!(
                "helm install failed: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.diagnostics()
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl auth can-i` as the chart's ServiceAccount. `resource` is `TYPE`,
    /// `TYPE/NAME` or `TYPE#SUBRESOURCE`; `ns` None means all namespaces.
    fn can_i(&self, verb: &str, resource: &str, ns: Option<&str>) -> bool {
        let mut cmd = kubectl();
        cmd.args(["auth", "can-i", verb, "--as", &self.sa()]);
        match resource.split_once('#') {
            Some((kind, sub)) => cmd.args([kind, "--subresource", sub]),
            None => cmd.arg(resource),
        };
        match ns {
            Some(ns) => cmd.args(["--namespace", ns]),
            None => cmd.arg("--all-namespaces"),
        };
        let out = output(&mut cmd);
        match out.status.code() {
            Some(0) => true,
            Some(1) => false,
            _ => panic!(
                "`{}` failed: {}",
                describe(&cmd),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// Asserts each `(verb, resource, namespace, allowed)` of `rights` with [`Self::can_i`].
    fn assert_rights(&self, rights: &[(&str, &str, Option<&str>, bool)]) {
        for &(verb, resource, ns, allowed) in rights {
            assert_eq!(
                self.can_i(verb, resource, ns),
                allowed,
                "can {} {verb} {resource} in {ns:?}?",
                self.sa()
            );
        }
    }

    /// The release's object `<fullname>-<suffix>` of `kind`, in its namespace.
    pub(crate) fn object(&self, kind: &str, suffix: &str) -> Value {
        kubectl_json(&[
            "get",
            kind,
            &format!("{}-{suffix}", self.fullname()),
            "--namespace",
            &self.ns,
        ])
    }

    pub(crate) fn operator_pods(&self) -> Value {
        kubectl_json(&[
            "get",
            "pods",
            "--namespace",
            &self.ns,
            "--selector",
            &format!("app.kubernetes.io/instance={}", self.name),
        ])
    }

    pub(crate) fn diagnostics(&self) -> String {
        let mut out = String::new();
        for ns in self.all_namespaces() {
            out += &String::from_utf8_lossy(
                &output(kubectl().args(["get", "all,events", "--namespace", &ns, "-o", "wide"]))
                    .stdout,
            );
        }
        out += &String::from_utf8_lossy(
            &output(kubectl().args([
                "logs",
                "--namespace",
                &self.ns,
                "--selector",
                &format!("app.kubernetes.io/instance={}", self.name),
                "--tail",
                "200",
            ]))
            .stdout,
        );
        out
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- diagnostics ---\n{}", self.diagnostics());
        }
        let _ = output(command("helm").args([
            "uninstall",
            &self.name,
            "--namespace",
            &self.ns,
            "--wait",
        ]));
        let _ = output(
            kubectl()
                .args(["delete", "namespace", "--wait=false", "--ignore-not-found"])
                .args(self.all_namespaces()),
        );
    }
}

pub(crate) fn wait_for<T>(
    what: &str,
    timeout: Duration,
    diagnostics: impl Fn() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if start.elapsed() > timeout {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                diagnostics()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The product contract's sample channel (spec section 2), in namespace `ns`, with the
/// image swapped for the local runner image (nothing can be pulled here).
pub(crate) fn sample_channel(ns: &str) -> String {
    let runner =
        std::env::var("RANCHEROS_RUNNER_IMAGE").unwrap_or_else(|_| "rancheros-runner:test".into());
    r#"apiVersion: rancheros.cattle.io/v1
kind: ManagedOSVersionChannel
metadata: {name: testchannel, namespace: NAMESPACE}
spec:
  type: custom
  options:
    image: RUNNER
    command: ["/bin/bash", "-c", "--"]
    args: ["echo '[{\"metadata\":{\"name\":\"foo\"},\"spec\":{\"version\":\"v1\",\"type\":\"container\",\"minVersion\":\"0.0.0\",\"metadata\":{\"upgradeImage\":\"registry.com/repository/image:v1\"}}},{\"metadata\":{\"name\":\"bar\"},\"spec\":{\"version\":\"v2\",\"type\":\"container\",\"minVersion\":\"0.0.0\",\"metadata\":{\"upgradeImage\":\"registry.com/repository/image:v2\"}}}]' > /output/data"]
    mountPath: /output
    outputFile: /output/data
    # The runner image is imported into the cluster, not pulled: the runner's default
    # pull policy (Always) would look for it on a registry.
    imagePullPolicy: IfNotPresent
  upgradeContainer: {}
"#
    .replace("NAMESPACE", ns)
    .replace("RUNNER", &runner)
}

pub(crate) fn ready_condition(channel: &Value) -> Option<(String, String, String)> {
    channel["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"), s("message"))
        })
}

/// GET over plain HTTP/1.0 from this host (Service IPs are reachable through kube-proxy).
fn http_get(addr: &str, path: &str) -> String {
    http_get_as(addr, path, None)
}

/// The same, with `Authorization: Bearer <token>` when given.
fn http_get_as(addr: &str, path: &str, token: Option<&str>) -> String {
    http_request(addr, "GET", path, token, None)
}

/// One HTTP/1.0 request (a JSON body, if any), with a bearer token if any; the whole answer.
fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> String {
    let mut stream =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let body = body.map_or(String::new(), |b| {
        format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
    });
    let end = if body.is_empty() { "\r\n" } else { "" };
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}{end}{body}"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// `clusterIP:port` of the release's Service `<fullname>-<suffix>` (kube-proxy routes it
/// from this host).
fn service_address(rel: &Release, suffix: &str) -> String {
    let svc = rel.object("service", suffix);
    format!(
        "{}:{}",
        svc["spec"]["clusterIP"].as_str().unwrap(),
        svc["spec"]["ports"][0]["port"]
    )
}

/// Runs one phase of the install test and says how long it took.
fn phase<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    eprintln!("--- phase: {name}");
    let out = f();
    eprintln!("--- phase {name}: {:?}", t0.elapsed());
    out
}

#[test]
fn helm_install_runs_the_operator_in_cluster_with_least_rbac() {
    let started = Instant::now();
    let rel = Release::new("chart-e2e", 1);
    let watched = rel.namespaces[0].clone();
    let synced = phase("install and sync", || install_and_sync(&rel, &watched));
    phase("helm test", || helm_test_passes(&rel));
    phase("RBAC (kubectl auth can-i)", || {
        rbac_is_least(&rel, &watched)
    });
    phase("metrics through the Service", || metrics_are_served(&rel));
    let token = phase("registry webhook through the Service", || {
        webhook_is_served(&rel, &watched)
    });
    phase("upgrade", || upgrade_rolls_the_pod(&rel, &watched, &synced));
    assert_eq!(
        webhook_token(&rel),
        token,
        "the generated webhook token is kept across upgrades"
    );
    phase("beside Elemental", || {
        readme_commands_beside_elemental(&rel, &watched, &synced.notes)
    });
    phase("uninstall", || {
        uninstall_keeps_crds_and_versions(&rel, &watched)
    });
    eprintln!("end to end: {:?}", started.elapsed());
}

#[test]
fn helm_install_for_all_namespaces_binds_a_cluster_role() {
    // Zero replicas: the RBAC of the all-namespaces mode, without an operator that would
    // act on the other tests' channels.
    let rel = Release::new("chart-e2e-all", 0);
    let notes = rel.install(&["--set", "replicaCount=0,tests.timeout=3s"]);
    assert!(
        notes.contains("Watches ManagedOSVersionChannels in all namespaces."),
        "{notes}"
    );
    let name = rel.fullname();
    let crds = format!("{name}-crds");
    let auth = format!("{name}-metrics-auth");
    for object in [&name, &crds, &auth] {
        run(kubectl().args(["get", "clusterrole", object]));
        run(kubectl().args(["get", "clusterrolebinding", object]));
    }
    rel.assert_rights(&[
        ("list", CHANNELS, None, true),
        ("watch", "pods", None, true),
        ("create", "pods", Some("default"), true),
        ("patch", VERSIONS, Some("default"), true),
        ("create", "events.events.k8s.io", Some("default"), true),
        (
            "create",
            "leases.coordination.k8s.io",
            Some(rel.ns.as_str()),
            true,
        ),
        ("list", "secrets", None, false),
        // By name, for the Secrets oci channels name (see the namespaced case).
        ("get", "secrets", Some(rel.ns.as_str()), true),
        (
            "create",
            "leases.coordination.k8s.io",
            Some("default"),
            false,
        ),
        ("create", "deployments.apps", Some("default"), false),
        ("delete", CHANNELS, None, false),
        ("list", "namespaces", None, false),
    ]);
    // Reading its CRDs, and no more on CRDs, in this mode too.
    crd_rights_are_least(&rel);
    // `helm test` fails when no operator answers (none runs here), and says why.
    let test_pod = format!("{name}-test-readyz");
    let out = output(command("helm").args([
        "test",
        &rel.name,
        "--namespace",
        &rel.ns,
        "--timeout",
        "90s",
    ]));
    assert!(
        !out.status.success(),
        "helm test passed without an operator: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let log = run(kubectl().args(["logs", &test_pod, "--namespace", &rel.ns]));
    assert!(
        log.contains("did not answer 2xx within 3s") && log.contains("/readyz"),
        "{log}"
    );
    run(command("helm").args(["uninstall", &rel.name, "--namespace", &rel.ns, "--wait"]));
    for object in [&name, &crds] {
        let out = output(kubectl().args(["get", "clusterrole", object]));
        assert!(
            !out.status.success(),
            "the ClusterRole {object} outlived the release"
        );
    }
}

/// `helm test`: the test pod (admitted under Pod Security `restricted`, the release
/// namespace's level) gets 200 from /readyz through the Service, and is deleted.
fn helm_test_passes(rel: &Release) {
    let t0 = Instant::now();
    let out = run(command("helm").args([
        "test",
        &rel.name,
        "--namespace",
        &rel.ns,
        "--timeout",
        "120s",
    ]));
    eprintln!("helm test: {:?}", t0.elapsed());
    let pod = format!("{}-test-readyz", rel.fullname());
    assert!(out.contains(&pod) && out.contains("Succeeded"), "{out}");
    let left = output(kubectl().args(["get", "pod", &pod, "--namespace", &rel.ns]));
    assert!(!left.status.success(), "the passed test pod was kept");
}

/// One of Elemental's two CRDs: group `elemental.cattle.io`, version `v1beta1`, the same
/// kind, plural and singular names as ours, no short names (as Elemental ships them).
fn elemental_crd(kind: &str) -> String {
    let singular = kind.to_lowercase();
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {singular}s.elemental.cattle.io}}
spec:
  group: elemental.cattle.io
  names: {{kind: {kind}, listKind: {kind}List, plural: {singular}s, singular: {singular}}}
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
          status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#
    )
}

const ELEMENTAL_CRD_NAMES: [&str; 2] = [
    "managedosversionchannels.elemental.cattle.io",
    "managedosversions.elemental.cattle.io",
];

/// Elemental's CRDs on the cluster for as long as this lives: deleted on drop, whatever
/// happened (other tests share the cluster, and meanwhile a bare plural may mean
/// Elemental's for them too). A host-wide file lock keeps two such windows apart.
/// Its kubectl calls use the shell's discovery cache, so that the shared one
/// (`~/.kube/cache`) never learns Elemental's group.
struct ElementalCrds {
    _lock: std::fs::File,
    cache: std::path::PathBuf,
}

impl ElementalCrds {
    fn install(shell: &Shell) -> Self {
        let path = std::env::temp_dir().join("rancheros-operator-elemental-crds.lock");
        let lock = std::fs::File::create(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        lock.lock().unwrap();
        let crds = Self {
            _lock: lock,
            cache: shell.dir.join("install-cache"),
        };
        let mut apply = crds.kubectl();
        apply.args(["apply", "-f", "-"]);
        let yaml = format!(
            "{}---\n{}",
            elemental_crd("ManagedOSVersionChannel"),
            elemental_crd("ManagedOSVersion")
        );
        let out = run_with_stdin(apply, &yaml);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        run(crds
            .kubectl()
            .args(["wait", "--for=condition=Established", "--timeout=30s"])
            .args(ELEMENTAL_CRD_NAMES.map(|n| format!("crd/{n}"))));
        crds
    }

    fn kubectl(&self) -> Command {
        let mut cmd = kubectl();
        cmd.env("KUBECACHEDIR", &self.cache);
        cmd
    }
}

impl Drop for ElementalCrds {
    fn drop(&mut self) {
        let out = output(
            self.kubectl()
                .args(["delete", "crd", "--ignore-not-found", "--wait=true"])
                .args(ELEMENTAL_CRD_NAMES),
        );
        if !out.status.success() {
            eprintln!(
                "cannot delete Elemental's CRDs: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// kubectl commands as a user's shell runs them (`sh -c`), with a kubeconfig whose context
/// namespace is `ns` and a discovery cache of its own, first filled once Elemental's group
/// is served (kubectl then knows both groups, as on a cluster where Elemental was there
/// first; a cache filled before would hide Elemental's).
struct Shell {
    dir: std::path::PathBuf,
}

impl Shell {
    fn new(ns: &str) -> Self {
        let dir = temp_dir("elemental-shell");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::copy(std::env::var("KUBECONFIG").unwrap(), &kubeconfig).unwrap();
        run(kubectl()
            .args([
                "config",
                "set-context",
                "--current",
                "--namespace",
                ns,
                "--kubeconfig",
            ])
            .arg(&kubeconfig));
        Self { dir }
    }

    fn run(&self, cmd: &str) -> Output {
        self.run_with_cache(cmd, "cache")
    }

    /// `run` with the discovery cache `cache` (a directory of the shell's).
    fn run_with_cache(&self, cmd: &str, cache: &str) -> Output {
        let kubectl_dir = tool("kubectl").parent().unwrap().to_path_buf();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![kubectl_dir];
        dirs.extend(std::env::split_paths(&path));
        let out = Command::new("sh")
            .args(["-c", cmd])
            .env("PATH", std::env::join_paths(dirs).unwrap())
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .env("KUBECACHEDIR", self.dir.join(cache))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        eprintln!(
            "$ {cmd}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The commands of `text` that look up the operator's resources (not those that install
/// or create), with the README's namespace replaced by `ns`.
fn lookups(commands: Vec<String>, ns: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for cmd in commands {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        // The verb: the first word after `kubectl` and any `-n NS`.
        let verb = match words.get(1) {
            Some(&"-n") => words.get(3),
            other => other,
        };
        let ours = ["mosvc", "mosv", "managedosversion", "rancheros"]
            .iter()
            .any(|w| cmd.contains(w));
        let looks_up =
            verb.is_some_and(|v| ["get", "describe", "annotate", "wait", "explain"].contains(v));
        let cmd = cmd.replace("fleet-default", ns);
        if ours && looks_up && !out.contains(&cmd) {
            out.push(cmd);
        }
    }
    out
}

/// Beside Elemental-shaped CRDs of the same plural names: a bare plural now resolves to
/// Elemental's (so the check has teeth), while every lookup the README shows, those
/// `scripts/demo` runs and those the chart's NOTES print find our channel and versions.
fn readme_commands_beside_elemental(rel: &Release, watched: &str, notes: &str) {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let demo = std::fs::read_to_string(root().join("scripts/demo")).unwrap();
    let readme_cmds = lookups(kubectl_commands(&readme, true), watched);
    let demo_cmds = lookups(kubectl_commands(&demo, false), watched);
    let notes_cmds = lookups(
        notes
            .lines()
            .map(|l| l.trim().split(" #").next().unwrap_or_default().to_string())
            .filter(|l| l.starts_with("kubectl "))
            .collect(),
        watched,
    );
    for verb in ["get", "describe", "annotate", "wait", "explain"] {
        assert!(
            readme_cmds.iter().any(|c| c.contains(&format!(" {verb} "))),
            "the README shows no `kubectl {verb}` of the operator's resources: {readme_cmds:?}"
        );
    }
    assert!(demo_cmds.len() >= 4, "{demo_cmds:?}");
    assert_eq!(notes_cmds.len(), 2, "{notes_cmds:?}\n{notes}");

    let shell = Shell::new(watched);
    // (dropped before the shell: the CRDs go first, whatever happens below)
    let window = Instant::now();
    let _elemental = ElementalCrds::install(&shell);
    // Without our group, kubectl picks Elemental's (once its discovery shows Elemental's
    // group: a fresh cache per try): the commands below would then miss our objects.
    let start = Instant::now();
    for attempt in 0.. {
        let bare = shell.run_with_cache(
            "kubectl get managedosversionchannel testchannel",
            &format!("bare-{attempt}"),
        );
        let stderr = String::from_utf8_lossy(&bare.stderr);
        if !bare.status.success() && stderr.contains("elemental.cattle.io") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "a bare name does not resolve to Elemental's group: the check below would prove \
             nothing\n{}{stderr}",
            String::from_utf8_lossy(&bare.stdout)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut failed = Vec::new();
    for cmd in readme_cmds.iter().chain(&demo_cmds).chain(&notes_cmds) {
        let out = shell.run(cmd);
        let stdout = String::from_utf8_lossy(&out.stdout);
        // A jsonpath lookup prints a field (empty while the operator has not acted on the
        // request yet); the others name our channel or group. Elemental's resolution fails
        // with NotFound, prints nothing, or names its group.
        let ours = cmd.contains("jsonpath")
            || stdout.contains("testchannel")
            || stdout.contains("rancheros.cattle.io");
        if !out.status.success() || !ours || stdout.contains("elemental.cattle.io") {
            failed.push(format!(
                "{cmd}\n{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    eprintln!(
        "{} commands beside Elemental's CRDs, installed for {:?}",
        readme_cmds.len() + demo_cmds.len() + notes_cmds.len(),
        window.elapsed()
    );
    assert!(
        failed.is_empty(),
        "beside Elemental's CRDs these did not show the operator's objects \
         (release {}):\n{}",
        rel.name,
        failed.join("\n")
    );
}

/// A Role `name` in `ns` of one rule (YAML, in flow style) and its RoleBinding to `users`.
fn bound_role(ns: &str, name: &str, rule: &str, users: &[&str]) -> String {
    let subjects: String = users
        .iter()
        .map(|user| {
            format!("  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}\n")
        })
        .collect();
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\n\
         kind: Role\n\
         metadata: {{name: {name}, namespace: {ns}}}\n\
         rules:\n  - {rule}\n\
         ---\n\
         apiVersion: rbac.authorization.k8s.io/v1\n\
         kind: RoleBinding\n\
         metadata: {{name: {name}, namespace: {ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}\n\
         subjects:\n{subjects}"
    )
}

/// A tenant who may create channels but not read the namespace's Secrets, impersonated:
/// the chart's ValidatingAdmissionPolicy refuses a channel whose runner references a
/// Secret (`env[].valueFrom.secretKeyRef`, `envFrom[].secretRef`) unless its author may
/// `get` it. Only the policy is installed (rendered from the chart), not the operator.
#[test]
fn a_channel_referencing_a_secret_its_author_may_not_get_is_refused_by_the_charts_policy() {
    let ns = unique("secret-policy");
    let release = unique("vap");
    run(kubectl().args(["create", "namespace", &ns]));
    // Cluster-wide objects and the namespace go, whatever happens.
    struct Cleanup(String, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let name = format!("{}-rancheros-operator-secret-references", self.1);
            let _ = output(kubectl().args([
                "delete",
                "validatingadmissionpolicybinding,validatingadmissionpolicy",
                &name,
                "--ignore-not-found",
            ]));
            let _ = output(kubectl().args(["delete", "namespace", &self.0, "--wait=false"]));
        }
    }
    let _cleanup = Cleanup(ns.clone(), release.clone());
    run(kubectl()
        .args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(root().join("crds")));
    let policy = run(command("helm")
        .args(["template", &release])
        .arg(chart_dir())
        .args(["--show-only", "templates/secret-policy.yaml"])
        .args(["--set", &format!("operator.namespaces={{{ns}}}")]));
    kubectl_apply(&policy);
    kubectl_apply(&format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: token, namespace: {ns}}}
stringData: {{token: s3cret}}
---
{}---
{}"#,
        bound_role(
            &ns,
            "channels",
            "{apiGroups: [rancheros.cattle.io], resources: [managedosversionchannels], \
             verbs: [get, list, create, update, patch]}",
            &["tenant", "secret-reader"]
        ),
        bound_role(
            &ns,
            "secrets",
            r#"{apiGroups: [""], resources: [secrets], verbs: [get]}"#,
            &["secret-reader"]
        ),
    ));
    let channel = |name: &str, options: &str| {
        format!(
            "apiVersion: rancheros.cattle.io/v1\nkind: ManagedOSVersionChannel\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{type: custom, options: {{image: runner, {options}}}}}\n"
        )
    };
    let env = "env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: token, key: token}}}]";
    let env_from = "envFrom: [{secretRef: {name: token}}]";
    let apply_as = |user: &str, yaml: &str, dry_run: bool| {
        let mut cmd = kubectl();
        cmd.args(["apply", "--as", user, "-f", "-"]);
        if dry_run {
            cmd.arg("--dry-run=server");
        }
        run_with_stdin(cmd, yaml)
    };
    const REFUSED: &str = "the channel references Secrets (token) and tenant may not get them all: the channel would use them";
    let refused = |what: &str, out: Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(REFUSED),
            "{what}: {stderr}"
        );
    };
    let admitted = |what: &str, out: Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
    };
    // A new policy takes effect within seconds: dry runs until it refuses.
    wait_for(
        "the policy to refuse",
        Duration::from_secs(30),
        String::new,
        || {
            let out = apply_as("tenant", &channel("env", env), true);
            String::from_utf8_lossy(&out.stderr)
                .contains(REFUSED)
                .then_some(())
        },
    );
    for (name, options) in [("env", env), ("env-from", env_from)] {
        refused(name, apply_as("tenant", &channel(name, options), false));
        admitted(
            name,
            apply_as("secret-reader", &channel(name, options), false),
        );
    }
    // Without a Secret reference the tenant's channel is admitted (a nullable reference set
    // to null names none: the policy once failed closed on it, for every namespace); every
    // spec change is checked again, so the tenant cannot edit a reader's channel that
    // references one.
    // (the null created as JSON, as a client library sends it: kubectl apply drops it)
    let null_ref = serde_json::json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
        "metadata": {"name": "null-ref", "namespace": ns},
        "spec": {"type": "oci", "options": {"image": "registry.example/channel:v1",
                 "insecure": false, "caSecretRef": null}},
    });
    let mut create = kubectl();
    create.args(["create", "--as", "tenant", "-f", "-"]);
    for (name, out) in [
        (
            "plain",
            apply_as("tenant", &channel("plain", "args: [x]"), false),
        ),
        ("null-ref", run_with_stdin(create, &null_ref.to_string())),
    ] {
        admitted(name, out);
    }
    refused(
        "env changed",
        apply_as(
            "tenant",
            &channel("env", &format!("{env}, args: [changed]")),
            false,
        ),
    );
}
