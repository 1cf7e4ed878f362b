//! The install as the README writes it, run as a new user runs it: `scripts/release`'s
//! directory checked, its image imported into the node's containerd, the chart installed
//! from its `.tgz` and nothing else, then the sample channel synced by the operator the
//! chart runs (the image pinned by digest). The README's block itself is run, with only
//! the names this shared cluster needs swapped in, so the docs cannot drift from what works.
//! And the CRDs, as a fresh install creates them, draw no warning from the API server.
//!
//! Needs the local cluster (`eval "$(scripts/cluster env)"`: kubectl, ctr and
//! CONTAINERD_ADDRESS, root) and the chart tools (`eval "$(scripts/helm env)"`).
//! `scripts/release` takes the operator image's archive from `scripts/images operator`
//! (scripts/test exports OPERATOR_BINARY: the test build's binary, nothing compiled again).

use crate::chart_install::{
    Release, kubectl, kubectl_apply, kubectl_json, ready_condition, sample_channel, unique,
    wait_for,
};
use crate::chart_support::*;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// The shell block of `doc` (a path under the repository) whose skip marker says
/// `runs_it` runs it: the commands a test runs as the docs write them.
pub(crate) fn doc_block(doc: &str, runs_it: &str) -> String {
    let text = std::fs::read_to_string(root().join(doc)).unwrap();
    let mut lines = text.lines();
    let mut found = Vec::new();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("<!-- doc: skip:") && line.contains(runs_it) {
            let fence = lines.next().unwrap_or_default().trim();
            assert!(fence.starts_with("```"), "{doc}: no block after {line}");
            let body: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.trim_start().starts_with("```"))
                .map(str::trim_start)
                .collect();
            found.push(body.join("\n"));
        }
    }
    assert_eq!(
        found.len(),
        1,
        "{doc}: one block marked `<!-- doc: skip: ... {runs_it} ... -->`"
    );
    found.remove(0)
}

/// `block` with each `(from, to)` replaced, each of which must occur (a doc that no longer
/// says `from` fails here instead of running something else).
pub(crate) fn substitute(block: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = block.to_string();
    for (from, to) in pairs {
        assert!(
            out.contains(from),
            "the block no longer says {from:?}:\n{block}"
        );
        out = out.replace(from, to);
    }
    out
}

/// Runs `script` with bash (-e: the first failing command fails it) from the repository
/// root, with the chart tools on PATH; its stdout and stderr, or a panic with both.
pub(crate) fn run_script(script: &str, what: &str) -> (String, String) {
    let helm = tool("helm");
    let mut path = vec![helm.parent().unwrap().to_path_buf()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    eprintln!("--- {what}:\n{script}");
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(root())
        .env("PATH", std::env::join_paths(path).unwrap())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{stdout}{stderr}");
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{script}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The lines of a command's stderr that are warnings: kubectl's `Warning: ...`, client-go's
/// `W1204 ... warnings.go:...] ...` (helm), except `ignoring` (the one kubectl prints for a
/// CRD without its last-applied annotation, which docs/upgrade.md calls harmless).
pub(crate) fn warnings(stderr: &str, ignoring: Option<&str>) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains("Warning:") || l.contains("warnings.go"))
        .filter(|l| ignoring.is_none_or(|i| !l.contains(i)))
        .map(str::to_string)
        .collect()
}

/// The crate's version (Cargo.toml; the chart's and the image tag's too, tests/release.rs).
pub(crate) fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Waits until the operator of `rel` synced `channel` in `ns` (Ready, Synchronized) after
/// the sync request `requested` (the annotation's value; None: any sync); the channel.
pub(crate) fn wait_synced(
    rel: &Release,
    ns: &str,
    channel: &str,
    requested: Option<&str>,
) -> Value {
    wait_for(
        &format!("{ns}/{channel} to be synchronized"),
        Duration::from_secs(180),
        || rel.diagnostics(),
        || {
            let ch = kubectl_json(&[
                "get",
                "managedosversionchannels.rancheros.cattle.io",
                channel,
                "--namespace",
                ns,
            ]);
            let ready = matches!(ready_condition(&ch), Some((s, r, _)) if s == "True" && r == "Synchronized");
            let served = requested.is_none_or(|r| ch["status"]["syncRequestedAt"] == r);
            (ready && served).then_some(ch)
        },
    )
}

/// The image of the release's operator container.
pub(crate) fn deployed_image(rel: &Release) -> String {
    let dep = kubectl_json(&["get", "deployment", &rel.fullname(), "--namespace", &rel.ns]);
    dep["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The README's install block, its lines as this test runs them: the README's names
/// swapped for the test's own directory `dir`, release and namespace, the version for
/// `version` (the README names this release's), and (the cluster is shared) the one
/// namespace its operator watches.
pub(crate) fn readme_install(rel: &Release, dir: &str, version: &str) -> Vec<String> {
    let block = doc_block("README.md", "tests/release_install.rs runs this block");
    let script = substitute(
        &block,
        &[
            ("/tmp/release", dir),
            (
                "helm install rancheros-operator ",
                &format!("helm install {} ", rel.name),
            ),
            (
                "--namespace rancheros-operator --create-namespace",
                &format!(
                    "--namespace {} --create-namespace --set operator.namespaces={{{}}}",
                    rel.ns, rel.namespaces[0]
                ),
            ),
            (
                &format!("rancheros-operator-{}.", self::version()),
                &format!("rancheros-operator-{version}."),
            ),
        ],
    );
    script.lines().map(str::to_string).collect()
}

#[test]
fn the_readme_install_from_a_release_directory_syncs_the_sample_channel() {
    let rel = Release::new("release-install", 1);
    let watched = rel.namespaces[0].clone();
    let dir = temp_dir("release-install").join("release");
    let dir = dir.to_str().unwrap();
    let v = version();
    let script = readme_install(&rel, dir, v).join("\n");
    let (stdout, stderr) = run_script(&script, "the README's install");
    // scripts/release printed the digest, sha256sum -c checked both files.
    let digest = stdout
        .lines()
        .find(|l| l.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("scripts/release printed no digest:\n{stdout}"))
        .to_string();
    for file in [
        format!("rancheros-operator-{v}.oci.tar"),
        format!("rancheros-operator-{v}.tgz"),
    ] {
        assert!(
            stdout.contains(&format!("{file}: OK")),
            "sha256sum -c did not check {file}:\n{stdout}"
        );
    }
    assert_eq!(
        warnings(&stderr, None),
        Vec::<String>::new(),
        "the install printed warnings"
    );
    // The operator runs the image of the release directory, by digest (imported, not
    // pulled: nothing here can pull), and leads.
    assert_eq!(
        deployed_image(&rel),
        format!("rancheros-operator@{digest}"),
        "the chart does not run the image scripts/release printed"
    );
    run(kubectl()
        .args(["rollout", "status", "deployment"])
        .arg(rel.fullname())
        .args(["--namespace", &rel.ns, "--timeout", "180s"]));
    // The README's first channel (its image swapped for the local runner) syncs.
    kubectl_apply(&sample_channel(&watched));
    let channel = wait_synced(&rel, &watched, "testchannel", None);
    assert_eq!(channel["status"]["syncedVersions"], 2, "{channel:#}");
    let versions = kubectl_json(&[
        "get",
        "managedosversions.rancheros.cattle.io",
        "--namespace",
        &watched,
    ]);
    let mut names: Vec<&str> = versions["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["bar", "foo"]);
    let _ = std::fs::remove_dir_all(Path::new(dir).parent().unwrap());
}

/// The chart's CRDs (what `helm install` creates on a fresh cluster), moved to a group of
/// their own so that nothing of the shared cluster changes.
fn crds_in_group(crds: &str, group: &str) -> String {
    crds.replace("rancheros.cattle.io", group)
}

/// The warnings the API server answers to creating `crds` (a server-side dry run: checked
/// and answered as a real create, nothing stored).
fn create_warnings(crds: &str) -> Vec<String> {
    let mut cmd = kubectl();
    cmd.args(["create", "--dry-run=server", "-f", "-"]);
    let out = run_with_stdin(cmd, crds);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "creating the CRDs failed: {stderr}");
    warnings(&stderr, None)
}

#[test]
fn installing_the_crds_prints_no_warning() {
    let crds = run(command("helm").args(["show", "crds"]).arg(chart_dir()));
    assert_eq!(crds.matches("kind: CustomResourceDefinition").count(), 2);
    let group = format!("{}.crd-warnings.test", unique("g"));
    let ours = crds_in_group(&crds, &group);
    assert_eq!(create_warnings(&ours), Vec::<String>::new());
    // The check can fail: a format the API server does not know (as schemars writes for
    // unsigned integers) is warned about at create.
    let doctored = ours.replacen("format: int64", "format: uint32", 1);
    assert_ne!(doctored, ours);
    let warned = create_warnings(&doctored);
    assert!(
        warned
            .iter()
            .any(|w| w.contains("unrecognized format \"uint32\"")),
        "{warned:?}"
    );
}
