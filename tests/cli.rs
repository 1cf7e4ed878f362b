//! The binary's command line: exit codes (0 success, 1 failed work, 2 usage) and one-line
//! errors, for `display` and `operator` (`validate` is covered by tests/corpus.rs).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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
