//! The binary's command line: exit codes (0 success, 1 failed work, 2 usage) and one-line
//! errors, for `display` and `operator` (`validate` is covered by tests/corpus.rs), and the
//! user commands `sync` and `status` against the local cluster (an operator process per
//! test, see tests/common).

use crate::common;
#[path = "cli/formats.rs"]
mod formats;
#[path = "cli/sync_wait.rs"]
mod sync_wait;
#[path = "cli/watch_and_check.rs"]
mod watch_and_check;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use rancheros_operator::api::SYNC_REQUESTED_AT_ANNOTATION;
use serde_json::{Value, json};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).env_remove("KUBECONFIG").output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn display_names_a_missing_file_and_what_must_write_it() {
    let o = run(&["display", "--file", "/no/such/dir/data"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: cannot read /no/such/dir/data: No such file or directory (os error 2); the runner container must write its JSON to that file (options.outputFile)\n"
    );
}

/// Waits up to `limit` for the child to exit (a hang fails the test instead of the run).
fn wait_with_limit(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn display_prints_the_framed_file_and_exits_0_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("display-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("data");
    std::fs::write(&file, "[]").unwrap();
    // Also with both signals inherited as ignored, as a shell's background job and a
    // container's PID 1 get them: the signal sent right after the end marker still counts.
    for inherit_ignored in [false, true] {
        for signal in ["TERM", "INT"] {
            let mut command = if inherit_ignored {
                let mut c = Command::new("sh");
                c.args(["-c", r#"trap "" INT TERM; exec "$0" display --file "$1""#])
                    .arg(env!("CARGO_BIN_EXE_rancheros-operator"))
                    .arg(&file);
                c
            } else {
                let mut c = bin();
                c.args(["display", "--file"]).arg(&file);
                c
            };
            let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
            // Read until the end marker: everything is printed...
            let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
            let mut printed = String::new();
            while !printed.ends_with("#rancheros-operator:end\n") {
                let mut line = String::new();
                let n = std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
                assert!(n > 0, "display closed its output early: {printed:?}");
                printed.push_str(&line);
            }
            // ...and the process is still up, waiting (alive, not a zombie).
            assert!(child.try_wait().unwrap().is_none(), "display exited");
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
            let state = stat.rsplit(") ").next().unwrap().chars().next().unwrap();
            assert!(matches!(state, 'S' | 'R'), "display is in state {state}");
            let killed = Command::new("kill")
                .args([&format!("-{signal}"), &child.id().to_string()])
                .status()
                .unwrap();
            assert!(killed.success());
            let status = wait_with_limit(&mut child, Duration::from_secs(5));
            let case = format!("SIG{signal}, inherited as ignored: {inherit_ignored}");
            assert!(status.is_some(), "display did not stop within 5s ({case})");
            assert_eq!(status.unwrap().code(), Some(0), "{case}");
            assert_eq!(
                printed,
                "#rancheros-operator:begin bytes=2\n[]\n#rancheros-operator:end\n"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(run(&["display"]).status.code(), Some(2));
    let o = bin()
        .arg("operator")
        .env_remove("OPERATOR_IMAGE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--operator-image"), "{}", stderr(&o));
    let o = run(&[
        "operator",
        "--operator-image",
        "x",
        "--sync-timeout",
        "soon",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("\"soon\" is not a duration"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn an_unreachable_cluster_is_a_one_line_error() {
    let o = bin()
        .args([
            "operator",
            "--operator-image",
            "x",
            "--leader-election=false",
        ])
        .env("KUBECONFIG", "/no/such/kubeconfig")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: cannot load the Kubernetes client configuration"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn sync_and_status_usage_errors_exit_2() {
    for (args, says) in [
        (&["sync"][..], "<NAMESPACE/CHANNEL>"),
        (&["sync", "a/b/c"], "write NAMESPACE/CHANNEL"),
        (&["sync", "a/b", "--all", "-n", "a"], "cannot be used with"),
        (&["sync", "--all"], "--namespace"),
        (&["sync", "a/b", "--timeout", "1m"], "--wait"),
        (
            &["sync", "a/b", "--wait", "--timeout", "soon"],
            "\"soon\" is not a duration",
        ),
        (&["sync", "a/b", "-n", "c"], "not in --namespace c"),
        (&["status", "-A", "-n", "x"], "cannot be used with"),
        (&["status", "a/b", "-n", "c"], "not in --namespace c"),
    ] {
        assert_usage_error(args, says);
    }
}

/// `args` exit 2 and say `says` on stderr, with no cluster reached: the usage is checked
/// first.
#[track_caller]
fn assert_usage_error(args: &[&str], says: &str) {
    let o = bin()
        .args(args)
        .env("KUBECONFIG", "/no/such/kubeconfig")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
}

// ---- against the cluster ----

const SYNC: Duration = Duration::from_secs(120);
/// The most a `sync --wait` run may take in these tests (its own --timeout is shorter).
const CLI_LIMIT: Duration = Duration::from_secs(300);

/// Runs the binary with the test's kubeconfig; fails the test if it does not exit within
/// `limit` (a hang must fail, not stall the suite).
async fn cli(args: &[&str], limit: Duration) -> Output {
    cli_env(args, &[], limit).await
}

/// [`cli`] within [`CLI_LIMIT`], which must exit with `code` (else its stderr is shown).
async fn cli_exit(args: &[&str], code: i32) -> Output {
    let o = cli(args, CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(code), "{}", stderr(&o));
    o
}

fn read_all(mut r: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The lines of stderr that report errors (the others are progress lines).
fn error_lines(o: &Output) -> Vec<String> {
    lines_starting(&stderr(o), "error:")
}

/// A custom channel whose runner prints what the ConfigMap `data` holds under `key`: the
/// channel data can change without a spec change (which would sync by itself), so that
/// only a request syncs it.
fn configmap_spec(key: &str) -> Value {
    let mut spec = custom_spec(r#"printf '%s' "$DATA" > /output/data"#);
    spec["syncInterval"] = json!("1h");
    spec["options"]["env"] = json!([{
        "name": "DATA",
        "valueFrom": {"configMapKeyRef": {"name": "data", "key": key}}
    }]);
    spec
}

async fn set_data(t: &TestNs, key: &str, versions: &[(&str, &str)]) {
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &t.ns);
    let patch = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "data"},
        "data": {key: channel_data(versions).to_string()}
    });
    api.patch(
        "data",
        // One field manager per key: an apply leaves the other keys alone.
        &PatchParams::apply(&format!("cli-tests-{key}")).force(),
        &Patch::Apply(&patch),
    )
    .await
    .unwrap();
}

/// Asserts that the command exited 0, showing its stderr and the operator's log when not.
#[track_caller]
fn assert_success(o: &Output, t: &TestNs) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        stderr(o),
        t.operator_log()
    );
}

/// A namespace that no operator watches yet, with channel "ch" of `spec`; and the channel's
/// `NAMESPACE/NAME`.
async fn unwatched_channel(test: &str, spec: Value) -> (TestNs, String) {
    let t = TestNs::new(test).await;
    t.create_channel("ch", spec).await;
    let target = format!("{}/ch", t.ns);
    (t, target)
}

fn failed_attempts(ch: &rancheros_operator::api::ManagedOSVersionChannel) -> i64 {
    ch.status
        .as_ref()
        .map(|s| s.failed_synchronization_attempts)
        .unwrap_or_default()
}

// ---- output formats, namespaces and contexts, suspend/resume, watch, completion, check ----

/// [`cli`] with extra environment.
async fn cli_env(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut child = bin()
            .args(&args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = read_all(child.stdout.take().unwrap());
        let err = read_all(child.stderr.take().unwrap());
        let status = wait_with_limit(&mut child, limit)
            .unwrap_or_else(|| panic!("{args:?} did not exit within {limit:?}"));
        Output {
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        }
    })
    .await
    .unwrap()
}

/// Stdout as JSON (`-o json`), or a failure that shows it.
fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// Stdout as YAML (`-o yaml`), read into JSON values.
fn yaml_out(o: &Output) -> Value {
    serde_saphyr::from_str(&stdout(o))
        .unwrap_or_else(|e| panic!("not YAML ({e}): {}\n{}", stdout(o), stderr(o)))
}
