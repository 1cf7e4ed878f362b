//! The Helm chart (`charts/rancheros-operator`): its CRDs are `crds/`, it lints and renders
//! with default and non-default values, the rendered manifests pass the Kubernetes schemas
//! and yamllint, and (against the local cluster) it installs an operator that syncs the
//! sample channel in-cluster under only the RBAC the chart grants.
//!
//! Tools come from PATH: `helm`, `kubernetes-validate`, `yamllint` (installed by
//! `scripts/helm install`; `eval "$(scripts/helm env)"` puts them on PATH) and, for the
//! end-to-end test, the local cluster's `kubectl` and `KUBECONFIG`
//! (`eval "$(scripts/cluster env)"`). A missing tool fails the test; nothing is skipped.
//!
//! `UPDATE_CRDS=1 cargo test --test chart` copies `crds/` into the chart.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CHART: &str = "charts/rancheros-operator";
/// The Kubernetes versions the rendered manifests are validated against: the oldest the
/// operator supports (its client's floor) and the local cluster's.
const SCHEMA_VERSIONS: &[&str] = &["1.33.0", "1.37.0"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart_dir() -> PathBuf {
    root().join(CHART)
}

/// A tool on PATH (the chart tools also in `scripts/helm bin`, where `scripts/helm
/// install` puts them), or a panic that says how to install it.
fn tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    if name != "kubectl"
        && let Ok(out) = Command::new(root().join("scripts/helm"))
            .arg("bin")
            .output()
    {
        dirs.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    let how = match name {
        "kubectl" => "the local cluster's kubectl: eval \"$(scripts/cluster env)\"",
        _ => "scripts/helm install && eval \"$(scripts/helm env)\" (scripts/test does this)",
    };
    panic!("`{name}` is not on PATH; the chart tests need it. Install it with: {how}");
}

fn command(name: &str) -> Command {
    let mut cmd = Command::new(tool(name));
    cmd.stdin(Stdio::null());
    cmd
}

fn describe(cmd: &Command) -> String {
    let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy()).collect();
    format!(
        "{} {}",
        Path::new(cmd.get_program())
            .file_name()
            .unwrap_or_default()
            .to_string_lossy(),
        args.join(" ")
    )
}

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", describe(cmd)))
}

/// Runs the command; its stdout, or a panic with everything it printed.
fn run(cmd: &mut Command) -> String {
    let out = output(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`{}` failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        describe(cmd),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs the command, which must fail; its stderr.
fn run_failing(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        !out.status.success(),
        "`{}` succeeded but should have failed:\n{}",
        describe(cmd),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("chart")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Non-default values files: every `ci/*.yaml` of the chart.
fn ci_values() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("ci"))
        .expect("the chart's ci/ directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no values files in {CHART}/ci");
    files
}

/// `helm template` of the chart in namespace `ops` as release `rel`, CRDs included.
fn helm_template(args: &[&str]) -> Command {
    let mut cmd = command("helm");
    cmd.args(["template", "rel"])
        .arg(chart_dir())
        .args([
            "--namespace",
            "ops",
            "--include-crds",
            "--kube-version",
            "1.33.0",
        ])
        .args(args);
    cmd
}

/// YAML documents as JSON values, through PyYAML in the chart tools' venv (the python
/// next to kubernetes-validate).
fn yaml_docs(yaml: &str) -> Vec<Value> {
    let validate = std::fs::canonicalize(tool("kubernetes-validate")).unwrap();
    let python = validate.parent().unwrap().join("python3");
    let mut cmd = Command::new(&python);
    cmd.args([
        "-c",
        "import json, sys, yaml\n\
         json.dump([d for d in yaml.safe_load_all(sys.stdin) if d is not None], sys.stdout)",
    ]);
    let out = run_with_stdin(cmd, yaml);
    assert!(
        out.status.success(),
        "the rendered manifests are not YAML: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn render(args: &[&str]) -> Vec<Value> {
    yaml_docs(&run(&mut helm_template(args)))
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| {
            panic!(
                "no {kind} {name} among {:?}",
                docs.iter()
                    .map(|d| format!("{}/{}", d["kind"], d["metadata"]["name"]))
                    .collect::<Vec<_>>()
            )
        })
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn env_of(container: &Value) -> Vec<(String, Value)> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let value = e
                .get("value")
                .cloned()
                .unwrap_or_else(|| e["valueFrom"].clone());
            (e["name"].as_str().unwrap().to_string(), value)
        })
        .collect()
}

fn env_value(container: &Value, name: &str) -> Option<Value> {
    env_of(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// The rules the operator needs on its own resources (src/controller.rs), as
/// `(apiGroup, resource, verbs)`; the same in the ClusterRole and in every watched
/// namespace's Role.
fn expected_rules() -> Value {
    json!([
        {"apiGroups": ["rancheros.cattle.io"], "resources": ["managedosversionchannels"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["rancheros.cattle.io"], "resources": ["managedosversionchannels/status"], "verbs": ["patch"]},
        {"apiGroups": ["rancheros.cattle.io"], "resources": ["managedosversions"], "verbs": ["list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ])
}

fn expected_lease_rules(lease: &str) -> Value {
    json!([
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease], "verbs": ["get", "patch"]},
    ])
}

/// The checks every rendering must pass: the operator container's image is its
/// OPERATOR_IMAGE, the downward API gives POD_NAME/POD_NAMESPACE, the security context
/// is locked down, and the ServiceAccount is bound to nothing but the expected rules.
fn check_common(docs: &[Value], deployment: &str) -> Value {
    let dep = find(docs, "Deployment", deployment);
    let pod = &dep["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container: {pod:#}");
    let c = &containers[0];
    assert_eq!(c["args"], json!(["operator"]));
    assert_eq!(
        env_value(c, "OPERATOR_IMAGE"),
        Some(c["image"].clone()),
        "OPERATOR_IMAGE must be the deployed image"
    );
    for (var, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        assert_eq!(
            env_value(c, var),
            Some(json!({"fieldRef": {"fieldPath": field}})),
            "{var} from the downward API"
        );
    }
    let names: Vec<String> = env_of(c).into_iter().map(|(n, _)| n).collect();
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "duplicate env vars: {names:?}");

    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    let psc = &pod["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true);
    assert_eq!(psc["runAsUser"], 65532);
    assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");

    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
    let port = c["ports"][0]["containerPort"].as_i64().unwrap();
    assert_eq!(
        env_value(c, "METRICS_ADDRESS"),
        Some(json!(format!("0.0.0.0:{port}")))
    );

    // Every binding names the chart's ServiceAccount, and only it.
    let sa = pod["serviceAccountName"].as_str().unwrap();
    find(docs, "ServiceAccount", sa);
    for binding in of_kind(docs, "RoleBinding")
        .into_iter()
        .chain(of_kind(docs, "ClusterRoleBinding"))
    {
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": "ops"}]),
            "{binding:#}"
        );
    }
    // The CRDs are the chart's crds/.
    for crd in [
        "managedosversionchannels.rancheros.cattle.io",
        "managedosversions.rancheros.cattle.io",
    ] {
        find(docs, "CustomResourceDefinition", crd);
    }
    c.clone()
}

#[test]
fn chart_crds_are_the_crds_directory() {
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    let ours = root().join("crds");
    let chart = chart_dir().join("crds");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    for name in names(&ours) {
        let want = std::fs::read(ours.join(&name)).unwrap();
        let path = chart.join(&name);
        if update {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        assert!(
            std::fs::read(&path).ok().as_ref() == Some(&want),
            "{} differs from crds/{name}; run `UPDATE_CRDS=1 cargo test --test crds --test chart`",
            path.display()
        );
    }
    if update {
        for stale in names(&chart).difference(&names(&ours)) {
            std::fs::remove_file(chart.join(stale)).unwrap();
        }
    }
    assert_eq!(
        names(&chart),
        names(&ours),
        "{CHART}/crds must hold exactly the files of crds/"
    );
}

#[test]
fn helm_lint_strict_passes_with_default_and_ci_values() {
    run(command("helm").args(["lint", "--strict"]).arg(chart_dir()));
    for values in ci_values() {
        run(command("helm")
            .args(["lint", "--strict"])
            .arg(chart_dir())
            .arg("--values")
            .arg(&values));
    }
}

#[test]
fn default_values_watch_all_namespaces_with_a_cluster_role() {
    let docs = render(&[]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(
        c["image"], "rancheros-operator:0.1.0",
        "default tag: appVersion"
    );
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(env_value(&c, "SYNC_NAMESPACES"), None, "all namespaces");
    assert_eq!(env_value(&c, "LOG_FORMAT"), Some(json!("text")));
    assert_eq!(env_value(&c, "SYNC_TIMEOUT"), Some(json!("5m")));
    assert_eq!(env_value(&c, "MAX_CONCURRENT_SYNCS"), Some(json!("10")));
    assert_eq!(env_value(&c, "LEADER_ELECTION"), Some(json!("true")));
    assert_eq!(
        env_value(&c, "LEADER_ELECTION_NAMESPACE"),
        Some(json!("ops"))
    );
    assert_eq!(
        env_value(&c, "LEADER_ELECTION_LEASE"),
        Some(json!("rel-rancheros-operator"))
    );
    assert!(c["resources"]["requests"]["memory"].is_string());
    let dep = find(&docs, "Deployment", "rel-rancheros-operator");
    assert_eq!(dep["spec"]["replicas"], 1);

    let role = find(&docs, "ClusterRole", "rel-rancheros-operator");
    assert_eq!(role["rules"], expected_rules());
    let binding = find(&docs, "ClusterRoleBinding", "rel-rancheros-operator");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], "rel-rancheros-operator");
    // The only namespaced Role is the Lease's, in the release namespace.
    let roles = of_kind(&docs, "Role");
    assert_eq!(roles.len(), 1, "{roles:#?}");
    assert_eq!(roles[0]["metadata"]["namespace"], "ops");
    assert_eq!(
        roles[0]["rules"],
        expected_lease_rules("rel-rancheros-operator")
    );

    let svc = find(&docs, "Service", "rel-rancheros-operator-metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    assert_eq!(
        svc["spec"]["selector"],
        dep["spec"]["selector"]["matchLabels"]
    );
    assert!(of_kind(&docs, "ServiceMonitor").is_empty());
    for doc in &docs {
        if doc["kind"] != "CustomResourceDefinition"
            && doc["kind"] != "ClusterRole"
            && doc["kind"] != "ClusterRoleBinding"
        {
            assert_eq!(doc["metadata"]["namespace"], "ops", "{doc:#}");
        }
    }
}

#[test]
fn ci_values_watch_listed_namespaces_with_roles() {
    let values = chart_dir().join("ci/namespaced-values.yaml");
    let docs = render(&["--values", values.to_str().unwrap()]);
    let c = check_common(&docs, "ros-operator");
    let image = "registry.example.com/rancheros/rancheros-operator:1.2.3";
    assert_eq!(c["image"], image);
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        env_value(&c, "SYNC_NAMESPACES"),
        Some(json!("fleet-default,fleet-local"))
    );
    assert_eq!(env_value(&c, "LOG_FORMAT"), Some(json!("json")));
    assert_eq!(env_value(&c, "SYNC_TIMEOUT"), Some(json!("10m")));
    assert_eq!(env_value(&c, "MAX_OUTPUT_BYTES"), Some(json!("32Mi")));
    assert_eq!(env_value(&c, "RETRY_DELAY"), Some(json!("30s")));
    assert_eq!(
        env_value(&c, "RUST_LOG"),
        Some(json!("info,rancheros_operator=debug"))
    );
    assert_eq!(
        env_value(&c, "HTTPS_PROXY"),
        Some(json!("http://proxy.example.com:3128"))
    );
    assert_eq!(
        env_value(&c, "LEADER_ELECTION_LEASE"),
        Some(json!("ros-operator-leader"))
    );
    assert_eq!(c["resources"]["limits"]["cpu"], "500m");
    let dep = find(&docs, "Deployment", "ros-operator");
    assert_eq!(dep["spec"]["replicas"], 2);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ros-operator-sa");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        dep["spec"]["template"]["metadata"]["labels"]["example.com/tier"],
        "control"
    );

    assert!(of_kind(&docs, "ClusterRole").is_empty());
    assert!(of_kind(&docs, "ClusterRoleBinding").is_empty());
    for ns in ["fleet-default", "fleet-local"] {
        let role = of_kind(&docs, "Role")
            .into_iter()
            .find(|r| r["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no Role in {ns}"));
        assert_eq!(role["metadata"]["name"], "ros-operator");
        assert_eq!(role["rules"], expected_rules());
        let binding = of_kind(&docs, "RoleBinding")
            .into_iter()
            .find(|r| r["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no RoleBinding in {ns}"));
        assert_eq!(
            binding["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ros-operator"})
        );
    }
    let lease = find(&docs, "Role", "ros-operator-leader-election");
    assert_eq!(lease["metadata"]["namespace"], "ops");
    assert_eq!(lease["rules"], expected_lease_rules("ros-operator-leader"));
    assert_eq!(of_kind(&docs, "Role").len(), 3);

    let svc = find(&docs, "Service", "ros-operator-metrics");
    assert_eq!(svc["spec"]["ports"][0]["port"], 9443);
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    let sm = find(&docs, "ServiceMonitor", "ros-operator");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["interval"], "15s");
    assert_eq!(
        sm["spec"]["namespaceSelector"]["matchNames"],
        json!(["ops"])
    );
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
}

#[test]
fn other_values_render_as_documented() {
    // Pinned by digest: the same reference in the pod and in OPERATOR_IMAGE.
    let digest = format!("sha256:{}", "ab".repeat(32));
    let docs = render(&["--set", &format!("image.digest={digest}")]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(c["image"], format!("rancheros-operator@{digest}"));

    // No leader election: no Lease role, LEADER_ELECTION=false.
    let docs = render(&["--set", "leaderElection.enabled=false"]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(env_value(&c, "LEADER_ELECTION"), Some(json!("false")));
    assert_eq!(env_value(&c, "LEADER_ELECTION_NAMESPACE"), None);
    assert!(of_kind(&docs, "Role").is_empty());

    // No RBAC, an existing ServiceAccount, no metrics Service.
    let docs = render(&[
        "--set",
        "rbac.create=false,serviceAccount.create=false,serviceAccount.name=mine,metrics.service.enabled=false",
    ]);
    let dep = find(&docs, "Deployment", "rel-rancheros-operator");
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"],
        "mine"
    );
    for kind in [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
    ] {
        assert!(of_kind(&docs, kind).is_empty(), "{kind} rendered");
    }

    // A namespace listed twice gets one Role.
    let docs = render(&["--set", "operator.namespaces={a,b,a}"]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(env_value(&c, "SYNC_NAMESPACES"), Some(json!("a,b")));
    assert_eq!(
        of_kind(&docs, "RoleBinding").len(),
        3,
        "a, b and the Lease's"
    );
}

#[test]
fn bad_values_are_refused_with_a_reason() {
    for (set, reason) in [
        (
            "replicaCount=2,leaderElection.enabled=false",
            "replicaCount > 1 needs leaderElection.enabled=true",
        ),
        (
            "operator.logFormat=xml",
            "value must be one of 'text', 'json'",
        ),
        (
            "operator.namespaces={Not_A_Namespace}",
            "does not match pattern",
        ),
        ("operator.syncTimeout=soon", "does not match pattern"),
        ("image.pullPolicy=Sometimes", "value must be one of"),
        (
            "metrics.service.enabled=false,metrics.serviceMonitor.enabled=true",
            "needs metrics.service.enabled",
        ),
        (
            "imagee.tag=typo",
            "additional properties 'imagee' not allowed",
        ),
    ] {
        let stderr = run_failing(&mut helm_template(&["--set", set]));
        assert!(
            stderr.contains(reason),
            "--set {set}: expected {reason:?} in:\n{stderr}"
        );
    }
}

/// `helm template --output-dir` with the given values: the rendered files.
fn render_to_dir(name: &str, args: &[&str]) -> (PathBuf, Vec<PathBuf>) {
    let dir = temp_dir(name);
    run(helm_template(args).arg("--output-dir").arg(&dir));
    let mut files = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("templates/deployment.yaml"))
            && files
                .iter()
                .any(|f| f.ends_with("crds/managedosversions.yaml")),
        "unexpected rendering: {files:?}"
    );
    (dir, files)
}

#[test]
fn rendered_manifests_pass_kubernetes_schemas_and_yamllint() {
    let config = root().join("charts/.yamllint.yaml");
    let mut cases: Vec<(String, Vec<String>)> = vec![("default".into(), vec![])];
    for values in ci_values() {
        let name = values.file_stem().unwrap().to_string_lossy().into_owned();
        cases.push((name, vec!["--values".into(), values.display().to_string()]));
    }
    for (name, args) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (dir, files) = render_to_dir(name, &args);
        for version in SCHEMA_VERSIONS {
            let out = run(command("kubernetes-validate")
                .args(["--strict", "--kubernetes-version", version])
                .args(&files));
            // Only the Prometheus Operator's ServiceMonitor has no schema here; every
            // other object must have been checked.
            for line in out.lines().filter(|l| !l.starts_with("INFO")) {
                assert!(
                    line.contains("Couldn't find schema for kind ServiceMonitor"),
                    "{name}, Kubernetes {version}: {line}\n{out}"
                );
            }
            assert!(out.contains("passed for resource deployment/"), "{out}");
        }
        // The templates' output; the CRDs are linted as the chart's files below (helm's
        // --output-dir adds a blank line at their end).
        run(command("yamllint")
            .args(["--strict", "--config-file"])
            .arg(&config)
            .arg(dir.join("rancheros-operator/templates")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // The chart's own YAML files too.
    let chart = chart_dir();
    run(command("yamllint")
        .args(["--strict", "--config-file"])
        .arg(&config)
        .arg(chart.join("Chart.yaml"))
        .arg(chart.join("values.yaml"))
        .arg(chart.join("ci"))
        .arg(chart.join("crds")));
}

#[test]
fn packaged_chart_carries_the_crds_and_not_the_ci_values() {
    let dir = temp_dir("package");
    run(command("helm")
        .arg("package")
        .arg(chart_dir())
        .arg("--destination")
        .arg(&dir));
    let tgz = dir.join("rancheros-operator-0.1.0.tgz");
    let listing = run(Command::new("tar").arg("-tzf").arg(&tgz));
    for file in [
        "rancheros-operator/Chart.yaml",
        "rancheros-operator/values.yaml",
        "rancheros-operator/values.schema.json",
        "rancheros-operator/templates/NOTES.txt",
        "rancheros-operator/crds/managedosversionchannels.yaml",
        "rancheros-operator/crds/managedosversions.yaml",
    ] {
        assert!(
            listing.lines().any(|l| l == file),
            "{file} not in {listing}"
        );
    }
    assert!(!listing.contains("/ci/"), "{listing}");
    // The packaged chart renders like the directory.
    let from_tgz = run(command("helm").args(["template", "rel"]).arg(&tgz).args([
        "--namespace",
        "ops",
        "--include-crds",
        "--kube-version",
        "1.33.0",
    ]));
    assert_eq!(from_tgz, run(&mut helm_template(&[])));
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------------------
// End to end, against the local cluster (KUBECONFIG, kubectl on PATH).

fn kubectl() -> Command {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: the chart's end-to-end tests need the local cluster. \
         Run scripts/test, or: eval \"$(scripts/cluster env)\" && eval \"$(scripts/helm env)\""
    );
    command("kubectl")
}

fn kubectl_json(args: &[&str]) -> Value {
    let out = run(kubectl().args(args).args(["-o", "json"]));
    serde_json::from_str(&out).unwrap()
}

fn kubectl_apply(yaml: &str) {
    let mut cmd = kubectl();
    cmd.args(["apply", "-f", "-"]);
    let out = run_with_stdin(cmd, yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `cmd` with `input` on its standard input; its output, captured.
fn run_with_stdin(mut cmd: Command, input: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{:x}", nanos ^ std::process::id())
}

/// A Helm release in its own namespace (plus watched namespaces); on drop, uninstalled
/// and every namespace deleted, whatever happened.
struct Release {
    name: String,
    ns: String,
    namespaces: Vec<String>,
}

impl Release {
    fn new(prefix: &str, watched: usize) -> Self {
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
        release
    }

    fn all_namespaces(&self) -> Vec<String> {
        let mut all = vec![self.ns.clone()];
        all.extend(self.namespaces.iter().cloned());
        all
    }

    fn fullname(&self) -> String {
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

    fn operator_pods(&self) -> Value {
        kubectl_json(&[
            "get",
            "pods",
            "--namespace",
            &self.ns,
            "--selector",
            &format!("app.kubernetes.io/instance={}", self.name),
        ])
    }

    fn diagnostics(&self) -> String {
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

fn wait_for<T>(
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
fn sample_channel(ns: &str) -> String {
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

fn ready_condition(channel: &Value) -> Option<(String, String, String)> {
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
    let mut stream =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    body
}

#[test]
fn helm_install_runs_the_operator_in_cluster_with_least_rbac() {
    let started = Instant::now();
    let rel = Release::new("chart-e2e", 1);
    let watched = rel.namespaces[0].clone();
    let diag = || rel.diagnostics();
    let notes = rel.install(&["--set", "operator.retryDelay=5s"]);
    assert!(
        notes.contains(&format!("Watches ManagedOSVersionChannels in: {watched}")),
        "{notes}"
    );
    eprintln!("helm install --wait: {:?}", started.elapsed());

    // The operator runs as a pod under the chart's ServiceAccount and leads.
    let pods = rel.operator_pods();
    let pod = &pods["items"][0];
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(pod["spec"]["serviceAccountName"], rel.fullname());
    let lease = wait_for("the leader Lease", Duration::from_secs(60), diag, || {
        let lease = kubectl_json(&["get", "lease", &rel.fullname(), "--namespace", &rel.ns]);
        (lease["spec"]["holderIdentity"] == pod_name.as_str()).then_some(lease)
    });
    assert_eq!(lease["metadata"]["namespace"], rel.ns.as_str());

    // The sample channel syncs to foo and bar.
    kubectl_apply(&sample_channel(&watched));
    let t0 = Instant::now();
    let versions = wait_for(
        "versions foo and bar",
        Duration::from_secs(120),
        diag,
        || {
            let list = kubectl_json(&["get", "managedosversions", "--namespace", &watched]);
            let names: BTreeSet<String> = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["metadata"]["name"].as_str().unwrap().to_string())
                .collect();
            (names == BTreeSet::from(["bar".to_string(), "foo".to_string()])).then_some(list)
        },
    );
    eprintln!("sample channel synced in {:?}", t0.elapsed());
    for v in versions["items"].as_array().unwrap() {
        assert_eq!(
            v["metadata"]["labels"]["rancheros.cattle.io/channel"],
            "testchannel"
        );
        assert_eq!(
            v["metadata"]["ownerReferences"][0]["kind"],
            "ManagedOSVersionChannel"
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
    }
    let channel = wait_for(
        "Ready=True Synchronized",
        Duration::from_secs(60),
        diag,
        || {
            let ch = kubectl_json(&[
                "get",
                "managedosversionchannel",
                "testchannel",
                "--namespace",
                &watched,
            ]);
            matches!(ready_condition(&ch), Some((s, r, _)) if s == "True" && r == "Synchronized")
                .then_some(ch)
        },
    );
    assert_eq!(channel["status"]["syncedVersions"], 2, "{channel:#}");
    // Its Events were written, reported by this pod (POD_NAME from the downward API).
    let events = wait_for(
        "an Event on the channel",
        Duration::from_secs(30),
        diag,
        || {
            let list = kubectl_json(&["get", "events.events.k8s.io", "--namespace", &watched]);
            let ours: Vec<Value> = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| {
                    e["regarding"]["kind"] == "ManagedOSVersionChannel"
                        && e["regarding"]["name"] == "testchannel"
                        && e["reportingController"] == "rancheros-operator"
                })
                .cloned()
                .collect();
            (!ours.is_empty()).then_some(ours)
        },
    );
    assert_eq!(
        events[0]["reportingInstance"],
        pod_name.as_str(),
        "{events:#?}"
    );
    // The syncer pod is gone once the sync is done.
    wait_for(
        "the syncer pod to be deleted",
        Duration::from_secs(60),
        diag,
        || {
            let pods = kubectl_json(&["get", "pods", "--namespace", &watched]);
            pods["items"].as_array().unwrap().is_empty().then_some(())
        },
    );

    // Name resolution in the static scratch image: a json channel whose URL names the
    // `kubernetes` Service resolves and connects (plain HTTP to the API server's TLS port
    // is answered with 400), while a name the cluster DNS does not know fails as a DNS error.
    kubectl_apply(&format!(
        "apiVersion: rancheros.cattle.io/v1\nkind: ManagedOSVersionChannel\n\
         metadata: {{name: dns-known, namespace: {watched}}}\n\
         spec: {{type: json, options: {{uri: \"http://kubernetes.default.svc:443/\", timeout: 10s}}}}\n\
         ---\n\
         apiVersion: rancheros.cattle.io/v1\nkind: ManagedOSVersionChannel\n\
         metadata: {{name: dns-unknown, namespace: {watched}}}\n\
         spec: {{type: json, options: {{uri: \"http://no-such-service.default.svc.cluster.local/\", timeout: 10s}}}}\n"
    ));
    let failed = |name: &str| {
        wait_for(
            &format!("{name} FailedToSync"),
            Duration::from_secs(60),
            diag,
            || {
                let ch = kubectl_json(&[
                    "get",
                    "managedosversionchannel",
                    name,
                    "--namespace",
                    &watched,
                ]);
                match ready_condition(&ch) {
                    Some((_, r, m)) if r == "FailedToSync" => Some(m),
                    _ => None,
                }
            },
        )
    };
    let known = failed("dns-known");
    assert!(
        known.contains("HTTP 400"),
        "kubernetes.default.svc did not resolve and connect: {known}"
    );
    let unknown = failed("dns-unknown");
    assert!(
        !unknown.contains("HTTP") && unknown.contains("failed to lookup address"),
        "an unknown name did not fail as a DNS error: {unknown}"
    );
    eprintln!("json channel via kubernetes.default.svc: {known}\nunknown name: {unknown}");

    // Metrics through the chart's Service.
    let svc = kubectl_json(&[
        "get",
        "service",
        &format!("{}-metrics", rel.fullname()),
        "--namespace",
        &rel.ns,
    ]);
    let addr = format!(
        "{}:{}",
        svc["spec"]["clusterIP"].as_str().unwrap(),
        svc["spec"]["ports"][0]["port"]
    );
    let metrics = http_get(&addr, "/metrics");
    assert!(
        metrics.starts_with("HTTP/1.0 200") || metrics.starts_with("HTTP/1.1 200"),
        "{metrics}"
    );
    assert!(metrics.contains("rancheros_operator_leader 1"), "{metrics}");

    // Least privilege, as the API server's authorizer sees it.
    let ns = rel.ns.as_str();
    let w = Some(watched.as_str());
    let lease_name = format!("leases/{}", rel.fullname());
    for (verb, resource, ns, allowed) in [
        (
            "get",
            "managedosversionchannels.rancheros.cattle.io",
            w,
            true,
        ),
        (
            "watch",
            "managedosversionchannels.rancheros.cattle.io",
            w,
            true,
        ),
        (
            "patch",
            "managedosversionchannels.rancheros.cattle.io#status",
            w,
            true,
        ),
        ("list", "managedosversions.rancheros.cattle.io", w, true),
        ("watch", "managedosversions.rancheros.cattle.io", w, true),
        ("create", "managedosversions.rancheros.cattle.io", w, true),
        ("patch", "managedosversions.rancheros.cattle.io", w, true),
        ("update", "managedosversions.rancheros.cattle.io", w, true),
        ("delete", "managedosversions.rancheros.cattle.io", w, true),
        ("create", "pods", w, true),
        ("delete", "pods", w, true),
        ("get", "pods#log", w, true),
        ("create", "events.events.k8s.io", w, true),
        ("create", "leases.coordination.k8s.io", Some(ns), true),
        ("patch", &lease_name, Some(ns), true),
        // Not: secrets, other kinds, other namespaces, its own channels' spec, other Leases.
        ("get", "secrets", w, false),
        ("list", "secrets", Some(ns), false),
        ("list", "secrets", None, false),
        ("get", "configmaps", w, false),
        ("create", "deployments.apps", w, false),
        ("create", "pods#exec", w, false),
        ("update", "pods", w, false),
        ("create", "serviceaccounts#token", w, false),
        (
            "create",
            "managedosversionchannels.rancheros.cattle.io",
            w,
            false,
        ),
        (
            "update",
            "managedosversionchannels.rancheros.cattle.io",
            w,
            false,
        ),
        (
            "delete",
            "managedosversionchannels.rancheros.cattle.io",
            w,
            false,
        ),
        (
            "update",
            "managedosversionchannels.rancheros.cattle.io#status",
            w,
            false,
        ),
        ("create", "pods", Some(ns), false),
        ("list", "pods", Some("default"), false),
        (
            "list",
            "managedosversionchannels.rancheros.cattle.io",
            None,
            false,
        ),
        ("create", "leases.coordination.k8s.io", w, false),
        (
            "patch",
            "leases.coordination.k8s.io/someone-else",
            Some(ns),
            false,
        ),
        ("delete", &lease_name, Some(ns), false),
        ("create", "events", w, false),
        ("create", "events.events.k8s.io", Some("default"), false),
        (
            "update",
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            false,
        ),
        (
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            None,
            false,
        ),
        ("escalate", "roles.rbac.authorization.k8s.io", w, false),
        ("list", "nodes", None, false),
    ] {
        assert_eq!(
            rel.can_i(verb, resource, ns),
            allowed,
            "can {} {verb} {resource} in {ns:?}?",
            rel.sa()
        );
    }

    // An upgrade rolls the pod: the new one takes the Lease, and the restart starts no
    // sync (the channel's last sync stays as it was).
    let synced_at = channel["status"]["lastSyncedTime"].clone();
    let t0 = Instant::now();
    run(command("helm")
        .args(["upgrade", &rel.name])
        .arg(chart_dir())
        .args([
            "--namespace",
            &rel.ns,
            "--reuse-values",
            "--wait",
            "--timeout",
            "180s",
        ])
        .args(["--set", "operator.logFormat=json"]));
    let new_pod = wait_for(
        "the upgraded pod to lead",
        Duration::from_secs(90),
        diag,
        || {
            let pods = rel.operator_pods();
            let items = pods["items"].as_array().unwrap();
            let [pod] = items.as_slice() else { return None };
            let name = pod["metadata"]["name"].as_str().unwrap().to_string();
            let lease = kubectl_json(&["get", "lease", &rel.fullname(), "--namespace", &rel.ns]);
            (name != pod_name && lease["spec"]["holderIdentity"] == name.as_str()).then_some(name)
        },
    );
    eprintln!("helm upgrade, new leader {new_pod}: {:?}", t0.elapsed());
    let log = run(kubectl().args(["logs", &new_pod, "--namespace", &rel.ns]));
    assert!(
        log.lines().next().is_some_and(|l| l.starts_with('{')),
        "logFormat=json: {log}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let channel = kubectl_json(&[
        "get",
        "managedosversionchannel",
        "testchannel",
        "--namespace",
        &watched,
    ]);
    assert_eq!(
        channel["status"]["lastSyncedTime"], synced_at,
        "a restart started a sync"
    );

    // Uninstall keeps the CRDs and what the operator made.
    let t0 = Instant::now();
    run(command("helm").args(["uninstall", &rel.name, "--namespace", &rel.ns, "--wait"]));
    eprintln!("helm uninstall --wait: {:?}", t0.elapsed());
    run(kubectl().args(["get", "crd", "managedosversions.rancheros.cattle.io"]));
    let left = kubectl_json(&["get", "managedosversions", "--namespace", &watched]);
    assert_eq!(left["items"].as_array().unwrap().len(), 2);
    let roles = kubectl_json(&["get", "roles,rolebindings", "--namespace", &watched]);
    assert!(roles["items"].as_array().unwrap().is_empty(), "{roles:#}");
    eprintln!("end to end: {:?}", started.elapsed());
}

#[test]
fn helm_install_for_all_namespaces_binds_a_cluster_role() {
    // Zero replicas: the RBAC of the all-namespaces mode, without an operator that would
    // act on the other tests' channels.
    let rel = Release::new("chart-e2e-all", 0);
    let notes = rel.install(&["--set", "replicaCount=0"]);
    assert!(
        notes.contains("Watches ManagedOSVersionChannels in all namespaces."),
        "{notes}"
    );
    let name = rel.fullname();
    run(kubectl().args(["get", "clusterrole", &name]));
    run(kubectl().args(["get", "clusterrolebinding", &name]));
    for (verb, resource, ns, allowed) in [
        (
            "list",
            "managedosversionchannels.rancheros.cattle.io",
            None,
            true,
        ),
        ("watch", "pods", None, true),
        ("create", "pods", Some("default"), true),
        (
            "patch",
            "managedosversions.rancheros.cattle.io",
            Some("default"),
            true,
        ),
        ("create", "events.events.k8s.io", Some("default"), true),
        (
            "create",
            "leases.coordination.k8s.io",
            Some(rel.ns.as_str()),
            true,
        ),
        ("list", "secrets", None, false),
        ("get", "secrets", Some(rel.ns.as_str()), false),
        (
            "create",
            "leases.coordination.k8s.io",
            Some("default"),
            false,
        ),
        ("create", "deployments.apps", Some("default"), false),
        (
            "delete",
            "managedosversionchannels.rancheros.cattle.io",
            None,
            false,
        ),
        ("list", "namespaces", None, false),
    ] {
        assert_eq!(
            rel.can_i(verb, resource, ns),
            allowed,
            "can {} {verb} {resource} in {ns:?}?",
            rel.sa()
        );
    }
    run(command("helm").args(["uninstall", &rel.name, "--namespace", &rel.ns, "--wait"]));
    let out = output(kubectl().args(["get", "clusterrole", &name]));
    assert!(
        !out.status.success(),
        "the ClusterRole outlived the release"
    );
}
