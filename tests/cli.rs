//! The binary's command line: exit codes (0 success, 1 failed work, 2 usage) and one-line
//! errors, for `display` and `operator` (`validate` is covered by tests/corpus.rs), and the
//! user commands `sync` and `status` against the local cluster (an operator process per
//! test, see tests/common).

mod common;

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
        // No cluster is reached: the usage is checked first.
        let o = bin()
            .args(args)
            .env("KUBECONFIG", "/no/such/kubeconfig")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
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
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("error:"))
        .map(String::from)
        .collect()
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

fn failed_attempts(ch: &rancheros_operator::api::ManagedOSVersionChannel) -> i64 {
    ch.status
        .as_ref()
        .map(|s| s.failed_synchronization_attempts)
        .unwrap_or_default()
}

#[tokio::test]
async fn sync_wait_prints_what_the_requested_sync_changed_by_name() {
    let mut t = TestNs::new("cli-sync-changes").await;
    t.start_operator(&[]);
    set_data(&t, "v", &[("a", "v1"), ("b", "v1"), ("c", "v1")]).await;
    t.create_channel("ch", configmap_spec("v")).await;
    t.wait_ready("ch", "Synchronized", SYNC).await;
    // New channel data, seen only by a sync that starts from now on.
    set_data(&t, "v", &[("a", "v2"), ("c", "v1"), ("d", "v1")]).await;

    let target = format!("{}/ch", t.ns);
    let o = cli(&["sync", &target, "--wait", "--timeout", "4m"], CLI_LIMIT).await;
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        stderr(&o),
        t.operator_log()
    );
    assert_eq!(
        stdout(&o),
        format!(
            "{target}: Synchronized: synchronized 3 versions (1 created, 1 updated, 1 flagged as no longer in sync)\n  \
             created: d\n  updated: a\n  flagged as no longer in sync: b\n"
        )
    );
    assert!(error_lines(&o).is_empty(), "{}", stderr(&o));
    // Not a screen animation: stderr is a pipe here, so progress comes as plain lines.
    assert!(!stderr(&o).contains('\r'), "{}", stderr(&o));
    assert_eq!(t.version_names().await, ["a", "b", "c", "d"]);
    // The request was served: it is recorded.
    let ch = t.channel("ch").await;
    let asked = ch.metadata.annotations.as_ref().unwrap()[SYNC_REQUESTED_AT_ANNOTATION].clone();
    assert_eq!(ch.status.unwrap().sync_requested_at, Some(asked));

    // Again, with nothing new: said so.
    let o = cli(&["sync", &target, "--wait"], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).ends_with(
            ": Synchronized: synchronized 3 versions (no changes)\n  no version was changed\n"
        ),
        "{}",
        stdout(&o)
    );
    t.cleanup().await;
}

#[tokio::test]
async fn sync_wait_of_a_failing_runner_exits_1_with_the_reason_of_a_new_attempt() {
    let mut t = TestNs::new("cli-sync-fails").await;
    t.start_operator(&[]);
    t.create_channel("bad", custom_spec("echo 'no channel data here'; exit 3"))
        .await;
    let first = t.wait_ready("bad", "FailedToSync", SYNC).await;
    assert_eq!(failed_attempts(&first), 1);

    let target = format!("{}/bad", t.ns);
    let o = cli(&["sync", &target, "--wait", "--timeout", "4m"], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let errors = error_lines(&o);
    assert_eq!(errors.len(), 1, "{}", stderr(&o));
    assert!(
        errors[0].starts_with(&format!("error: {target}: FailedToSync: the runner")),
        "{}",
        errors[0]
    );
    assert!(errors[0].contains("no channel data here"), "{}", errors[0]);
    assert_eq!(stdout(&o), "");
    // The outcome reported is a sync run for the request (the operator's retry was a
    // minute away), not the failure that was there before it.
    let after = t.channel("bad").await;
    assert_eq!(failed_attempts(&after), 2, "{}", t.operator_log());
    assert!(errors[0].contains("attempt 2;"), "{}", errors[0]);
    t.cleanup().await;
}

#[tokio::test]
async fn sync_wait_without_an_operator_times_out_with_a_clear_message() {
    let t = TestNs::new("cli-sync-timeout").await;
    // No operator watches this namespace.
    t.create_channel("ch", configmap_spec("v")).await;
    let target = format!("{}/ch", t.ns);
    let started = Instant::now();
    let o = cli(&["sync", &target, "--wait", "--timeout", "5s"], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(started.elapsed() >= Duration::from_secs(5));
    assert_eq!(
        error_lines(&o),
        [format!(
            "error: {target}: no outcome within 5s: the operator did not pick up the request; is it running, and does it watch namespace {}?",
            t.ns
        )]
    );
    // The request is there for an operator to pick up later.
    let ch = t.channel("ch").await;
    assert!(ch.annotations().contains_key(SYNC_REQUESTED_AT_ANNOTATION));
    t.cleanup().await;
}

#[tokio::test]
async fn sync_without_wait_only_requests() {
    let t = TestNs::new("cli-sync-nowait").await;
    t.create_channel("ch", configmap_spec("v")).await;
    let target = format!("{}/ch", t.ns);
    let o = cli(&["sync", &target], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{target}: sync requested\n"));
    let first = t.channel("ch").await.annotations()[SYNC_REQUESTED_AT_ANNOTATION].clone();
    // Each run writes a fresh value: each is a new request.
    let o = cli(&["sync", "ch", "-n", &t.ns], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let second = t.channel("ch").await.annotations()[SYNC_REQUESTED_AT_ANNOTATION].clone();
    assert_ne!(first, second);
    t.cleanup().await;
}

#[tokio::test]
async fn a_missing_channel_is_one_line_and_exit_1() {
    let t = TestNs::new("cli-missing").await;
    let target = format!("{}/nope", t.ns);
    for args in [
        vec!["sync", &target, "--wait"],
        vec!["sync", &target],
        vec!["status", &target],
    ] {
        let o = cli(&args, CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert_eq!(
            stderr(&o),
            format!("error: channel {target} not found\n"),
            "{args:?}"
        );
    }
    let o = cli(&["sync", "--all", "-n", &t.ns], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("error: no channels in namespace {}\n", t.ns)
    );
    t.cleanup().await;
}

#[tokio::test]
async fn sync_all_waits_for_every_channel_of_the_namespace() {
    let mut t = TestNs::new("cli-sync-all").await;
    t.start_operator(&[]);
    set_data(&t, "one", &[("one-a", "v1"), ("one-b", "v1")]).await;
    set_data(&t, "two", &[("two-a", "v1"), ("two-b", "v1")]).await;
    t.create_channel("one", configmap_spec("one")).await;
    let mut two = configmap_spec("two");
    two["deleteNoLongerInSyncVersions"] = json!(true);
    t.create_channel("two", two).await;
    t.create_channel("bad", custom_spec("exit 4")).await;
    t.wait_ready("one", "Synchronized", SYNC).await;
    t.wait_ready("two", "Synchronized", SYNC).await;
    t.wait_ready("bad", "FailedToSync", SYNC).await;
    set_data(&t, "one", &[("one-a", "v1"), ("one-c", "v1")]).await;
    set_data(&t, "two", &[("two-a", "v1")]).await;

    let o = cli(
        &["sync", "--all", "-n", &t.ns, "--wait", "--timeout", "4m"],
        CLI_LIMIT,
    )
    .await;
    // One channel failed: exit 1, and the others' outcomes are all there.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let ns = &t.ns;
    assert!(
        out.contains(&format!(
            "{ns}/one: Synchronized: synchronized 2 versions (1 created, 1 flagged as no longer in sync)\n  \
             created: one-c\n  flagged as no longer in sync: one-b\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{ns}/two: Synchronized: synchronized 1 versions (1 deleted)\n  deleted: two-b\n"
        )),
        "{out}"
    );
    let errors = error_lines(&o);
    assert_eq!(errors.len(), 1, "{}", stderr(&o));
    assert!(
        errors[0].starts_with(&format!("error: {ns}/bad: FailedToSync: the runner")),
        "{}",
        errors[0]
    );
    assert_eq!(failed_attempts(&t.channel("bad").await), 2);
    t.cleanup().await;
}

#[tokio::test]
async fn status_shows_the_channels_as_a_table() {
    let mut t = TestNs::new("cli-status").await;
    t.start_operator(&[]);
    set_data(&t, "v", &[("a", "v1"), ("b", "v1")]).await;
    t.create_channel("ch", configmap_spec("v")).await;
    let synced = t.wait_ready("ch", "Synchronized", SYNC).await;
    let digest = synced
        .status
        .as_ref()
        .unwrap()
        .source_revision
        .clone()
        .unwrap();
    let short = &digest[digest.find("sha256:").unwrap()..][..19];

    for args in [
        vec!["status", "-n", &t.ns],
        vec!["status", &format!("{}/ch", t.ns)],
        vec!["status", "-A"],
    ] {
        let o = cli(&args, CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        let mut lines = out.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap()
            .split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            header,
            [
                "NAMESPACE",
                "NAME",
                "READY",
                "REASON",
                "VERSIONS",
                "REVISION",
                "LAST SYNC",
                "NEXT SYNC",
                "MESSAGE"
            ]
        );
        let row = lines
            .find(|l| l.starts_with(&format!("{} ", t.ns)))
            .unwrap_or_else(|| panic!("{args:?}: no row for the channel:\n{out}"));
        let cells: Vec<&str> = row
            .split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            &cells[..6],
            [t.ns.as_str(), "ch", "True", "Synchronized", "2", short],
            "{row}"
        );
        assert!(cells[6].ends_with(" ago"), "{row}");
        // 1h stretched by the channel's share of the 10% interval jitter.
        assert!(
            cells[7] == "in 59m" || cells[7].starts_with("in 1h"),
            "{row}"
        );
        assert_eq!(cells[8], "synchronized 2 versions (2 created)", "{row}");
    }
    t.cleanup().await;
}

#[tokio::test]
async fn sync_wait_of_a_suspended_channel_fails_at_once() {
    let t = TestNs::new("cli-sync-suspended").await;
    let mut spec = configmap_spec("v");
    spec["suspend"] = json!(true);
    t.create_channel("ch", spec).await;
    let target = format!("{}/ch", t.ns);
    // No operator runs, and none would sync it: the answer does not wait for the timeout.
    let o = cli(&["sync", &target, "--wait", "--timeout", "4m"], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        error_lines(&o),
        [format!(
            "error: {target}: Suspended: the channel is suspended (spec.suspend is true): no sync runs until it is false"
        )]
    );
    // Without --wait: requested, and warned.
    let o = cli(&["sync", &target], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{target}: sync requested\n"));
    assert_eq!(
        stderr(&o),
        format!(
            "warning: {target}: Suspended: the channel is suspended (spec.suspend is true): no sync runs until it is false\n"
        )
    );
    t.cleanup().await;
}

#[tokio::test]
async fn sync_wait_during_a_running_sync_reports_the_next_one() {
    let mut t = TestNs::new("cli-sync-during").await;
    t.start_operator(&[]);
    set_data(&t, "v", &[("a", "v1")]).await;
    // The runner reads its data when it starts, then takes a while.
    let mut spec = configmap_spec("v");
    spec["options"]["args"] = json!([r#"printf '%s' "$DATA" > /output/data; sleep 15"#]);
    t.create_channel("ch", spec).await;
    // The first sync's runner is running: it has read the old data.
    t.eventually("the first runner to run", SYNC, || async {
        let pod = t.pods().get_opt("ch").await.unwrap()?;
        let running =
            pod.status?.init_container_statuses?.iter().any(|c| {
                c.name == "runner" && c.state.as_ref().is_some_and(|s| s.running.is_some())
            });
        running.then_some(())
    })
    .await;
    set_data(&t, "v", &[("a", "v1"), ("late", "v1")]).await;

    let target = format!("{}/ch", t.ns);
    let o = cli(&["sync", &target, "--wait", "--timeout", "4m"], CLI_LIMIT).await;
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        stderr(&o),
        t.operator_log()
    );
    // Not the outcome of the sync under way (1 version): the one after it.
    assert_eq!(
        stdout(&o),
        format!(
            "{target}: Synchronized: synchronized 2 versions (1 created)\n  created: a, late\n  \
             (with the changes of a sync that was under way when the request came)\n"
        )
    );
    assert!(
        stderr(&o).contains("a sync that started before the request is finishing"),
        "{}",
        stderr(&o)
    );
    assert_eq!(t.version_names().await, ["a", "late"]);
    t.cleanup().await;
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

#[test]
fn completion_prints_a_script_for_each_shell() {
    let dir = std::env::temp_dir().join(format!("completion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (shell, marker) in [
        ("bash", "complete -F _rancheros__operator"),
        ("zsh", "#compdef rancheros-operator"),
        ("fish", "complete -c rancheros-operator"),
    ] {
        let o = run(&["completion", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let script = String::from_utf8(o.stdout).unwrap();
        assert!(
            script.contains(marker),
            "{shell}: no {marker:?} in\n{script}"
        );
        // Every user command is offered, with its flags; the internal one is not.
        for word in [
            "sync",
            "status",
            "suspend",
            "resume",
            "check",
            "--all-namespaces",
        ] {
            assert!(script.contains(word), "{shell}: no {word:?}");
        }
        // The internal subcommand is not offered (its name still shows in a flag's help).
        let offers_display = match shell {
            "bash" => script.contains(" display ") || script.contains("__display"),
            "zsh" => script.contains("'display:") || script.contains("(display)"),
            _ => script.contains("-a \"display\"") || script.contains("subcommand display"),
        };
        assert!(!offers_display, "{shell} offers display:\n{script}");
        if shell == "bash" {
            let file = dir.join("completion.bash");
            std::fs::write(&file, &script).unwrap();
            let syntax = Command::new("bash").arg("-n").arg(&file).output().unwrap();
            assert!(syntax.status.success(), "bash -n: {}", stderr(&syntax));
        }
    }
    assert_eq!(run(&["completion", "powershell-9"]).status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn display_is_hidden_from_help_and_still_runs() {
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for shown in [
        "operator",
        "validate",
        "sync",
        "status",
        "suspend",
        "resume",
        "check",
        "completion",
    ] {
        assert!(
            help.contains(&format!("  {shown} ")),
            "{shown} missing:\n{help}"
        );
    }
    assert!(!help.contains("display"), "{help}");
    let o = run(&["display", "--help"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("--file"), "{}", stdout(&o));
}

#[test]
fn new_usage_errors_exit_2_before_any_cluster() {
    for (args, says) in [
        (
            &["status", "a/b", "-A"][..],
            "cannot be used with --all-namespaces",
        ),
        (&["status", "-o", "xml"], "invalid value 'xml'"),
        (&["sync", "--all", "-A", "a/b"], "cannot be used with"),
        (&["suspend"], "<NAMESPACE/CHANNEL>"),
        (&["resume", "a/b/c"], "write NAMESPACE/CHANNEL"),
        (&["suspend", "--all"], "--namespace"),
        (&["suspend", "a/b", "-n", "c"], "not in --namespace c"),
        (&["check", "-A", "-n", "x"], "cannot be used with"),
        (
            &["check", "--leader-election", "maybe"],
            "invalid value 'maybe'",
        ),
    ] {
        let o = bin()
            .args(args)
            .env("KUBECONFIG", "/no/such/kubeconfig")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[tokio::test]
async fn status_and_sync_as_json_and_yaml_carry_the_fields_and_the_changed_names() {
    let mut t = TestNs::new("cli-output").await;
    t.start_operator(&[]);
    set_data(&t, "v", &[("a", "v1"), ("b", "v1")]).await;
    t.create_channel("ch", configmap_spec("v")).await;
    let synced = t.wait_ready("ch", "Synchronized", SYNC).await;
    let status = synced.status.clone().unwrap();
    let target = format!("{}/ch", t.ns);

    for format in ["json", "yaml"] {
        let o = cli(&["status", &target, "-o", format], CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(0), "{format}: {}", stderr(&o));
        let doc = if format == "json" {
            json_out(&o)
        } else {
            yaml_out(&o)
        };
        let channels = doc["channels"].as_array().unwrap();
        assert_eq!(channels.len(), 1, "{doc}");
        let c = &channels[0];
        let keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys.iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>(),
            [
                "namespace",
                "name",
                "ready",
                "reason",
                "versions",
                "revision",
                "lastSyncTime",
                "nextSyncTime",
                "syncing",
                "message"
            ]
            .into_iter()
            .collect(),
            "{format}: {c}"
        );
        assert_eq!(c["namespace"], json!(t.ns), "{c}");
        assert_eq!(c["name"], "ch");
        assert_eq!(c["ready"], "True");
        assert_eq!(c["reason"], "Synchronized");
        assert_eq!(c["versions"], 2);
        assert_eq!(c["revision"], json!(status.source_revision), "{c}");
        assert_eq!(
            c["lastSyncTime"],
            json!(status.last_synced_time.as_ref().unwrap().0.to_string())
        );
        assert!(c["nextSyncTime"].is_string(), "{c}");
        assert_eq!(c["syncing"], false);
        assert_eq!(c["message"], "synchronized 2 versions (2 created)");
    }

    // What changed, by name, as a document (progress still on stderr, not in it).
    set_data(&t, "v", &[("a", "v2"), ("c", "v1")]).await;
    let o = cli(&["sync", &target, "--wait", "-o", "json"], CLI_LIMIT).await;
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        stderr(&o),
        t.operator_log()
    );
    assert_eq!(
        json_out(&o),
        json!({"channels": [{
            "namespace": t.ns, "name": "ch", "outcome": "synchronized",
            "reason": "Synchronized",
            "message": "synchronized 2 versions (1 created, 1 updated, 1 flagged as no longer in sync)",
            "changes": {"created": ["c"], "updated": ["a"], "flagged": ["b"],
                        "unflagged": [], "deleted": []},
            "includesEarlierSync": false,
        }]})
    );
    // Without --wait, as YAML: requested.
    let o = cli(&["sync", &target, "-o", "yaml"], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc = yaml_out(&o);
    assert_eq!(doc["channels"][0]["outcome"], "requested", "{doc}");
    assert_eq!(doc["channels"][0]["changes"], Value::Null, "{doc}");
    t.cleanup().await;
}

#[tokio::test]
async fn a_failed_sync_as_json_exits_1_with_its_reason_in_the_document_and_on_stderr() {
    let t = TestNs::new("cli-output-fail").await;
    let mut spec = configmap_spec("v");
    spec["suspend"] = json!(true);
    t.create_channel("ch", spec).await;
    let o = cli(
        &["sync", "--all", "-n", &t.ns, "--wait", "-o", "json"],
        CLI_LIMIT,
    )
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let doc = json_out(&o);
    assert_eq!(doc["channels"][0]["outcome"], "failed", "{doc}");
    assert_eq!(doc["channels"][0]["reason"], "Suspended", "{doc}");
    assert_eq!(error_lines(&o).len(), 1, "{}", stderr(&o));
    t.cleanup().await;
}

/// A copy of the test's kubeconfig with two more contexts on the same cluster and user:
/// `here` (namespace `ns`, the current context) and `elsewhere` (namespace `other`).
fn kubeconfig_with_contexts(dir: &std::path::Path, ns: &str, other: &str) -> std::path::PathBuf {
    // The file as it is (YAML, read as JSON values): every credential kept verbatim.
    let path = std::env::var("KUBECONFIG").unwrap();
    let mut config: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let current = config["current-context"].as_str().unwrap().to_string();
    let base = config["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == current.as_str())
        .map(|c| c["context"].clone())
        .unwrap();
    let contexts = config["contexts"].as_array_mut().unwrap();
    for (name, namespace) in [("here", ns), ("elsewhere", other)] {
        let mut context = base.clone();
        context["namespace"] = json!(namespace);
        contexts.push(json!({"name": name, "context": context}));
    }
    config["current-context"] = json!("here");
    let path = dir.join("kubeconfig");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

fn channel_names(doc: &Value) -> Vec<String> {
    doc["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                c["namespace"].as_str().unwrap(),
                c["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn namespaces_come_from_n_a_or_the_context_and_context_picks_one() {
    let t = TestNs::new("cli-contexts").await;
    let other = TestNs::new("cli-contexts-other").await;
    t.create_channel("mine", configmap_spec("v")).await;
    other.create_channel("theirs", configmap_spec("v")).await;
    let dir = std::env::temp_dir().join(format!("cli-contexts-{}", t.ns));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = kubeconfig_with_contexts(&dir, &t.ns, &other.ns);
    let kc = kc.to_str().unwrap();
    let (mine, theirs) = (format!("{}/mine", t.ns), format!("{}/theirs", other.ns));

    let listed = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = cli(&args, CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        channel_names(&json_out(&o))
    };
    let base = |extra: &[&str]| {
        let mut a: Vec<String> = ["status", "-o", "json", "--kubeconfig", kc]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    // The current context's namespace, another context's, -n over the context's.
    assert_eq!(listed(base(&[])).await, vec![mine.to_string()]);
    assert_eq!(
        listed(base(&["--context", "elsewhere"])).await,
        vec![theirs.to_string()]
    );
    assert_eq!(
        listed(base(&["--context", "elsewhere", "-n", &t.ns])).await,
        vec![mine.to_string()]
    );
    // A bare channel name is looked up in the context's namespace.
    assert_eq!(
        listed(base(&["--context", "elsewhere", "theirs"])).await,
        vec![theirs.to_string()]
    );
    // -A: both (and maybe other tests' channels).
    let all = listed(base(&["-A"])).await;
    assert!(all.contains(&mine) && all.contains(&theirs), "{all:?}");
    // suspend follows the same rules.
    let o = cli(
        &[
            "suspend",
            "theirs",
            "--kubeconfig",
            kc,
            "--context",
            "elsewhere",
        ],
        CLI_LIMIT,
    )
    .await;
    assert_eq!(
        stdout(&o),
        format!("{theirs}: suspended\n"),
        "{}",
        stderr(&o)
    );
    assert_eq!(other.channel("theirs").await.spec.suspend, Some(true));

    let o = cli(
        &["status", "--kubeconfig", kc, "--context", "nowhere"],
        CLI_LIMIT,
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: cannot load the Kubernetes client configuration")
            && stderr(&o).contains("the kubeconfig has no context nowhere (it has: ")
            && stderr(&o).contains("elsewhere"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
    other.cleanup().await;
    t.cleanup().await;
}

#[tokio::test]
async fn suspend_and_resume_set_spec_suspend() {
    let t = TestNs::new("cli-suspend").await;
    t.create_channel("ch", configmap_spec("v")).await;
    t.create_channel("other", configmap_spec("v")).await;
    let target = format!("{}/ch", t.ns);
    let suspend = |ch: rancheros_operator::api::ManagedOSVersionChannel| ch.spec.suspend;

    let o = cli(&["suspend", &target], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{target}: suspended\n"));
    assert_eq!(suspend(t.channel("ch").await), Some(true));
    assert_eq!(suspend(t.channel("other").await), None);
    let o = cli(&["suspend", &target], CLI_LIMIT).await;
    assert_eq!(stdout(&o), format!("{target}: already suspended\n"));

    let o = cli(&["resume", &target, "-o", "json"], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        json_out(&o),
        json!({"channels": [{"namespace": t.ns, "name": "ch", "suspend": false, "changed": true}]})
    );
    assert_eq!(suspend(t.channel("ch").await), Some(false));

    // Every channel of the namespace.
    let o = cli(&["suspend", "--all", "-n", &t.ns, "-o", "yaml"], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc = yaml_out(&o);
    assert_eq!(
        channel_names(&doc),
        [target.clone(), format!("{}/other", t.ns)]
    );
    assert!(
        doc["channels"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["changed"] == true),
        "{doc}"
    );
    assert_eq!(suspend(t.channel("other").await), Some(true));

    let missing = format!("{}/nope", t.ns);
    for verb in ["suspend", "resume"] {
        let o = cli(&[verb, &missing], CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(1), "{verb}: {}", stderr(&o));
        assert_eq!(
            stderr(&o),
            format!("error: channel {missing} not found\n"),
            "{verb}"
        );
    }
    t.cleanup().await;
}

/// The lines a child prints on stdout, as they come.
fn line_reader(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[tokio::test]
async fn status_watch_prints_again_when_a_channel_changes_and_only_then() {
    let t = TestNs::new("cli-watch").await;
    t.create_channel("ch", configmap_spec("v")).await;
    let target = format!("{}/ch", t.ns);
    let mut child = bin()
        .args(["status", &target, "--watch", "-o", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = line_reader(child.stdout.take().unwrap());
    let next = || {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("status --watch printed nothing within 60s");
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let first = next();
    assert_eq!(first["channels"][0]["ready"], "Unknown", "{first}");
    // A change that shows nowhere in the table (an annotation) prints nothing...
    t.request_sync("ch", "x").await;
    // ...a status change does (as an operator writes it).
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "Synchronized",
                        "message": "synchronized 0 versions", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
        "syncedVersions": 0}});
    t.channels()
        .patch_status("ch", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let second = next();
    let c = &second["channels"][0];
    assert_eq!(
        (&c["ready"], &c["reason"], &c["versions"]),
        (&json!("True"), &json!("Synchronized"), &json!(0)),
        "{second}"
    );
    // Deleted: printed again, without it.
    t.channels()
        .delete("ch", &Default::default())
        .await
        .unwrap();
    let third = next();
    assert_eq!(third["channels"], json!([]), "{third}");
    assert!(child.try_wait().unwrap().is_none(), "status --watch exited");
    let _ = child.kill();
    let _ = child.wait();
    t.cleanup().await;
}

/// Cluster-scoped objects a test made; deleted when dropped, even when the test fails.
struct ClusterObjects(Vec<(&'static str, String)>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = Command::new("kubectl")
                .args(["delete", kind, name, "--ignore-not-found", "--wait=false"])
                .output();
        }
    }
}

/// Grants the ServiceAccount `sa` of the test's namespace what the chart grants the
/// operator, read from the chart's files/rbac.yaml: its namespace rules and Lease rules in
/// the test's namespace, its CRD rules cluster-wide.
async fn grant_chart_rbac(t: &TestNs, sa: &str, lease: &str) -> ClusterObjects {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use kube::api::PostParams;
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/rancheros-operator/files/rbac.yaml"
    );
    let text = std::fs::read_to_string(file)
        .unwrap()
        .replace("LEASE_NAME", lease);
    let rbac: Value = serde_saphyr::from_str(&text).unwrap();
    let mut rules = rbac["rules"].as_array().unwrap().clone();
    rules.extend(rbac["leaseRules"].as_array().unwrap().iter().cloned());
    let subjects = json!([{"kind": "ServiceAccount", "name": sa, "namespace": t.ns}]);
    let role: Role =
        serde_json::from_value(json!({"metadata": {"name": "op"}, "rules": rules})).unwrap();
    Api::<Role>::namespaced(t.client.clone(), &t.ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "op"}, "subjects": subjects,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "op"}
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(t.client.clone(), &t.ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let name = format!("{}-crds", t.ns);
    let objects = ClusterObjects(vec![
        ("clusterrolebinding", name.clone()),
        ("clusterrole", name.clone()),
    ]);
    let role: ClusterRole =
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": rbac["crdRules"]}))
            .unwrap();
    Api::<ClusterRole>::all(t.client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name}, "subjects": subjects,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(t.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    objects
}

/// An operator process that a failing test must not leave running.
/// The `FAIL` lines of `check`'s output.
fn failed_checks(o: &Output) -> Vec<String> {
    stdout(o)
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn check_passes_on_a_ready_cluster_and_names_each_failure() {
    use rancheros_operator::crds::{CHECK_GROUP_ENV, schema_hash};
    let mut t = TestNs::new("cli-check").await;
    let lease = "check-lease";
    let _rbac = grant_chart_rbac(&t, "op", lease).await;
    // This build's CRDs under a group of the test's own (see tests/common/test_crds.rs),
    // and under another group the channel CRD of another schema.
    let mut good = common::test_crds::TestCrds::group("check-good");
    good.create(&t.client, |spec| Some(schema_hash(spec))).await;
    let mut other = common::test_crds::TestCrds::group("check-other");
    other
        .create(&t.client, |spec| {
            Some(if spec.names.plural == "managedosversionchannels" {
                "0".repeat(64)
            } else {
                schema_hash(spec)
            })
        })
        .await;
    let lease_ns = t.ns.clone();
    let mut op = t.spawn_operator(
        &[
            "--leader-election=true",
            "--leader-election-namespace",
            &lease_ns,
            "--leader-election-lease",
            lease,
        ],
        &[],
    );
    t.eventually("the operator to hold the Lease", SYNC, || async {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(t.client.clone(), &t.ns);
        let l = leases.get_opt(lease).await.unwrap()?;
        l.spec?
            .holder_identity
            .filter(|h| !h.is_empty())
            .map(|_| ())
    })
    .await;
    let args = [
        "check",
        "-n",
        &t.ns,
        "--service-account",
        "op",
        "--operator-namespace",
        &t.ns,
        "--leader-election-lease",
        lease,
    ];
    let o = cli_env(&args, &[(CHECK_GROUP_ENV, &good.group)], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(String::from).collect();
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert!(lines.iter().all(|l| l.starts_with("ok  ")), "{lines:#?}");
    assert!(
        lines[0].starts_with(&format!(
            "ok    CRD managedosversionchannels.{}",
            good.group
        )),
        "{lines:#?}"
    );
    assert!(
        lines[5].contains(&format!("holds the Lease {}/{lease}", t.ns)),
        "{lines:#?}"
    );
    assert_eq!(stderr(&o), "");
    // As a document: the same checks.
    let o = cli_env(
        &[&args[..], &["-o", "json"]].concat(),
        &[(CHECK_GROUP_ENV, &good.group)],
        CLI_LIMIT,
    )
    .await;
    let doc = json_out(&o);
    assert_eq!(doc["ok"], true, "{doc}");
    assert_eq!(doc["checks"].as_array().unwrap().len(), 6, "{doc}");

    // A CRD of another schema: one line names it, exit 1.
    let o = cli_env(&args, &[(CHECK_GROUP_ENV, &other.group)], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let failed = failed_checks(&o);
    assert_eq!(failed.len(), 1, "{}", stdout(&o));
    assert!(
        failed[0].starts_with(&format!(
            "FAIL  CRD managedosversionchannels.{}: the installed CRD",
            other.group
        )) && failed[0].contains(&"0".repeat(64)),
        "{}",
        failed[0]
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: the cluster is not ready"),
        "{}",
        stderr(&o)
    );

    // Another ServiceAccount has none of the rights: the three RBAC lines fail.
    let mut nobody = args.to_vec();
    nobody[4] = "nobody";
    let o = cli_env(&nobody, &[(CHECK_GROUP_ENV, &good.group)], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1));
    let failed = failed_checks(&o);
    assert_eq!(failed.len(), 3, "{}", stdout(&o));
    assert!(
        failed
            .iter()
            .all(|l| l.starts_with("FAIL  RBAC") && l.contains(":nobody may not ")),
        "{failed:#?}"
    );

    // The operator stops and hands the Lease back: no leader.
    let _ = Command::new("kill")
        .args(["-TERM", &op.0.id().to_string()])
        .status();
    let _ = op.0.wait();
    let o = cli_env(&args, &[(CHECK_GROUP_ENV, &good.group)], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_eq!(
        failed_checks(&o),
        [format!(
            "FAIL  leader: no leader holds the Lease {}/{lease} (it names no holder: the last leader released it); is the operator running?",
            t.ns
        )]
    );
    drop((good, other));
    t.cleanup().await;
}
