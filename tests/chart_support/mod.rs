//! Shared code of the chart's tests: `tests/chart_render.rs` (no cluster) and
//! `tests/chart_install.rs` (the local cluster).
//!
//! Tools come from PATH: `helm`, `kubernetes-validate`, `yamllint` (installed by
//! `scripts/helm install`; `eval "$(scripts/helm env)"` puts them on PATH; `scripts/helm
//! bin` is searched too), `promcheck` (built by `scripts/helm install` into the same
//! directory) and, for the install test, the local cluster's `kubectl` and `KUBECONFIG`
//! (`eval "$(scripts/cluster env)"`). A missing tool fails the test; nothing is skipped.

#![allow(dead_code)] // each chart test binary uses a different part of it

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub const CHART: &str = "charts/rancheros-operator";
/// The RBAC rules of the chart, in one place: the templates render them, the render test
/// compares them with docs/install.md's tables, the install test asks the API server
/// about each of them.
pub const RBAC_FILE: &str = "charts/rancheros-operator/files/rbac.yaml";

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn chart_dir() -> PathBuf {
    root().join(CHART)
}

/// A tool on PATH (the chart tools also in `scripts/helm bin`, where `scripts/helm
/// install` puts them), or a panic that says how to install it.
pub fn tool(name: &str) -> PathBuf {
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

pub fn command(name: &str) -> Command {
    let mut cmd = Command::new(tool(name));
    cmd.stdin(Stdio::null());
    cmd
}

pub fn describe(cmd: &Command) -> String {
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

pub fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", describe(cmd)))
}

/// Runs the command; its stdout, or a panic with everything it printed.
pub fn run(cmd: &mut Command) -> String {
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
pub fn run_failing(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        !out.status.success(),
        "`{}` succeeded but should have failed:\n{}",
        describe(cmd),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("chart")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Non-default values files: every `ci/*.yaml` of the chart.
pub fn ci_values() -> Vec<PathBuf> {
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
pub fn helm_template(args: &[&str]) -> Command {
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
pub fn yaml_docs(yaml: &str) -> Vec<Value> {
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

pub fn render(args: &[&str]) -> Vec<Value> {
    yaml_docs(&run(&mut helm_template(args)))
}

pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
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

pub fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

pub fn env_of(container: &Value) -> Vec<(String, Value)> {
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

pub fn env_value(container: &Value, name: &str) -> Option<Value> {
    env_of(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// Runs `cmd` with `input` on its standard input; its output, captured.
pub fn run_with_stdin(mut cmd: Command, input: &str) -> std::process::Output {
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

/// `files/rbac.yaml`: `rules` (in every watched namespace or cluster-wide), `leaseRules`
/// (the release namespace; `LEASE_NAME` stands for the Lease's name), `crdRules`
/// (cluster-wide in every mode: reading the operator's own CRDs), `admissionRules`
/// (cluster-wide in every mode: watching what could refuse a version write) and `reviewRules`
/// (cluster-wide unless metrics.insecure: asking who may read /metrics).
pub fn rbac_file() -> Value {
    let text = std::fs::read_to_string(root().join(RBAC_FILE))
        .unwrap_or_else(|e| panic!("cannot read {RBAC_FILE}: {e}"));
    let mut docs = yaml_docs(&text);
    assert_eq!(docs.len(), 1, "{RBAC_FILE} is one YAML document");
    docs.remove(0)
}

/// The rules the operator needs on its own resources, as the chart renders them: the
/// same in the ClusterRole and in every watched namespace's Role.
pub fn expected_rules() -> Value {
    let rules = rbac_file()["rules"].clone();
    assert!(
        rules.as_array().is_some_and(|r| !r.is_empty()),
        "no rules in {RBAC_FILE}"
    );
    rules
}

/// The leader Lease's rules, for the Lease `lease`.
pub fn expected_lease_rules(lease: &str) -> Value {
    let text = serde_json::to_string(&rbac_file()["leaseRules"]).unwrap();
    assert!(text.contains("LEASE_NAME"), "{RBAC_FILE}: {text}");
    serde_json::from_str(&text.replace("LEASE_NAME", lease)).unwrap()
}

/// The names of the operator's CRDs: those of `crds/` (generated from the operator's
/// types; the ones it checks at start).
pub fn crd_names() -> Vec<String> {
    let dir = root().join("crds");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .flat_map(|p| yaml_docs(&std::fs::read_to_string(p).unwrap()))
        .map(|crd| crd["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "crds/ holds the two CRDs: {names:?}");
    names
}

/// The cluster-wide rules of every mode: `get` on the operator's own CRDs, by name, for
/// its startup check of their schema.
pub fn expected_crd_rules() -> Value {
    let rules = rbac_file()["crdRules"].clone();
    let names: Vec<Value> = crd_names().into_iter().map(Value::String).collect();
    assert_eq!(
        rules,
        serde_json::json!([{
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": names,
            "verbs": ["get"],
        }]),
        "{RBAC_FILE}: crdRules must grant get on exactly the CRDs of crds/, by name, and nothing else"
    );
    rules
}

/// The cluster-wide rules of every mode: list and watch, nothing else, on the webhook
/// configurations and admission policies that could refuse a version write.
pub fn expected_admission_rules() -> Value {
    let rules = rbac_file()["admissionRules"].clone();
    let resources = [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ];
    let expected: Vec<Value> = resources
        .iter()
        .map(|r| serde_json::json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": [r], "verbs": ["list", "watch"]}))
        .collect();
    assert_eq!(
        rules,
        Value::Array(expected),
        "{RBAC_FILE}: admissionRules must grant list and watch on the four admission kinds, and nothing else"
    );
    rules
}

/// The cluster-wide rules of every mode unless `metrics.insecure`: creating the
/// TokenReviews and SubjectAccessReviews that decide who may read `/metrics`.
pub fn expected_review_rules() -> Value {
    let rules = rbac_file()["reviewRules"].clone();
    assert_eq!(
        rules,
        serde_json::json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        ]),
        "{RBAC_FILE}: reviewRules must grant create on tokenreviews and subjectaccessreviews, and nothing else"
    );
    rules
}

/// What the chart's `-metrics-reader` ClusterRole grants: `get /metrics`, nothing else.
pub fn metrics_reader_rules() -> Value {
    serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
}

/// The chart's own version (Chart.yaml).
pub fn chart_version() -> String {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    yaml_docs(&text)[0]["version"].as_str().unwrap().to_string()
}

/// The kubectl commands a document or script shows: in Markdown, the lines of code blocks
/// that start with `kubectl` or `$ kubectl` (continued lines joined, a trailing `# comment`
/// cut) and the inline code spans that start with `kubectl `; in a script, each `kubectl ` up to a redirection, pipe or `||`
/// (continued lines joined), those that are echoed (`\$ kubectl`) too.
pub fn kubectl_commands(text: &str, markdown: bool) -> Vec<String> {
    let mut out = Vec::new();
    if markdown {
        // Inline code may run over a line break: spans are read per paragraph.
        let spans = |paragraph: &mut String, out: &mut Vec<String>| {
            for (i, span) in paragraph.split('`').enumerate() {
                if i % 2 == 1 && span.trim_start().starts_with("kubectl ") {
                    out.push(span.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            }
            paragraph.clear();
        };
        let mut in_block = false;
        let mut paragraph = String::new();
        for line in text.replace("\\\n", " ").lines() {
            if line.trim_start().starts_with("```") {
                spans(&mut paragraph, &mut out);
                in_block = !in_block;
                continue;
            }
            if in_block {
                let line = line.trim_start();
                let line = line.strip_prefix("$ ").unwrap_or(line);
                if line.starts_with("kubectl ") {
                    let cmd = line.split(" #").next().unwrap_or_default();
                    out.push(cmd.split_whitespace().collect::<Vec<_>>().join(" "));
                }
                continue;
            }
            if line.trim().is_empty() {
                spans(&mut paragraph, &mut out);
            } else {
                paragraph.push_str(line);
                paragraph.push('\n');
            }
        }
        spans(&mut paragraph, &mut out);
        return out;
    }
    let joined = text.replace("\\\n", " ");
    for line in joined.lines() {
        let line = line.trim_start();
        if line.starts_with('#') {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("kubectl ") {
            let cmd = &rest[at..];
            let end = [" >", " 2>", " |"]
                .iter()
                .filter_map(|stop| cmd.find(stop))
                .min()
                .unwrap_or(cmd.len());
            let mut cmd = cmd[..end].trim();
            // An echoed command ends with the echo's closing quote.
            if cmd.matches('"').count() % 2 == 1 {
                cmd = cmd.strip_suffix('"').unwrap_or(cmd);
            }
            out.push(cmd.split_whitespace().collect::<Vec<_>>().join(" "));
            rest = &rest[at + end.max(1)..];
        }
    }
    out
}

/// The names of the operator's two resource types in `cmd` that are neither a short name
/// nor group-qualified (`managedosversionchannels`, `managedosversion/foo`): on a cluster
/// with Elemental's CRDs of the same names these may resolve to `elemental.cattle.io`.
pub fn ambiguous_resource_names(cmd: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = cmd;
    while let Some(at) = rest.find("managedosversion") {
        let word: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase())
            .collect();
        let after = &rest[at + word.len()..];
        if !after.starts_with(".rancheros.cattle.io") {
            found.push(word.clone());
        }
        rest = after;
    }
    found
}
