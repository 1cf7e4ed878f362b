//! The command blocks of README.md and docs/ run as written.
//!
//! Every fenced block a reader may paste into a shell (info string empty, `sh`, `bash`,
//! `shell` or `console`) carries a marker on the line before its fence:
//!
//! - `<!-- doc: run -->`: the test runs it, in one bash process, on the local cluster.
//!   Lines starting with `$ ` are commands (a trailing `\` continues one) and the lines
//!   after each, up to the next `$ `, are the output it must print (stdout and stderr);
//!   a block with no `$ ` line is a script whose output is not compared.
//! - `<!-- doc: skip: REASON -->`: not run, and why (it installs the chart, pulls from the
//!   internet, takes minutes, ...).
//! - `<!-- doc: output -->`: the printed output of the `run` block just before it.
//! - `<!-- doc: file: NAME -->` (before a block of any language): written to `NAME` in the
//!   document's scratch directory, for the blocks after it to read.
//! - `<!-- doc: apply -->` (before a `yaml` block of whole resources): sent to the API server
//!   as a server-side dry run, which must accept it (the CRDs' schema and rules).
//!
//! Blocks of other languages (`yaml`, `json`, `text`) need no marker. Commands run with the
//! built binary first on `PATH` as `rancheros-operator`, in a scratch namespace that stands
//! for the docs' `fleet-default`, where an operator serves the sample channel `testchannel`
//! (docs/examples/sample-channel.yaml, its image swapped for the local runner image).
//! Output is compared with ages, times, digests and column padding normalised.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TestNs, runner_image};
use serde_json::Value;

/// The namespace the docs' examples use; the scratch namespace stands in for it.
const DOC_NAMESPACE: &str = "fleet-default";

#[derive(Debug, Clone, PartialEq)]
enum Marker {
    Run,
    Skip(String),
    Output,
    File(String),
    Apply,
}

#[derive(Debug, Clone, PartialEq)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    marker: Option<Marker>,
    body: String,
}

/// One command of a `run` block and the output the doc shows for it.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    command: String,
    output: String,
}

/// Whether a block of this info string is one a reader may paste into a shell.
fn is_shell(lang: &str) -> bool {
    matches!(lang, "" | "sh" | "bash" | "shell" | "console")
}

/// The marker of a comment line, if it is one (an unknown `doc:` comment is an error).
fn marker(line: &str) -> Result<Option<Marker>, String> {
    let Some(inner) = line
        .trim()
        .strip_prefix("<!--")
        .and_then(|l| l.strip_suffix("-->"))
    else {
        return Ok(None);
    };
    let Some(what) = inner.trim().strip_prefix("doc:") else {
        return Ok(None);
    };
    let what = what.trim();
    match what.split_once(':') {
        None if what == "run" => Ok(Some(Marker::Run)),
        None if what == "output" => Ok(Some(Marker::Output)),
        None if what == "apply" => Ok(Some(Marker::Apply)),
        Some(("skip", reason)) if !reason.trim().is_empty() => {
            Ok(Some(Marker::Skip(reason.trim().to_string())))
        }
        Some(("file", name)) if !name.trim().is_empty() && !name.contains('/') => {
            Ok(Some(Marker::File(name.trim().to_string())))
        }
        _ => Err(format!(
            "unknown marker {line:?}: use run, output, apply, skip: REASON or file: NAME"
        )),
    }
}

/// The fenced blocks of `md`, each with the marker on the last non-blank line before it.
fn blocks(md: &str) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut open: Option<(Block, String)> = None;
    let mut last_marker: Option<Marker> = None;
    for (i, line) in md.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some((block, indent)) = open.as_mut() {
            if trimmed.starts_with("```") {
                out.push(open.take().unwrap().0);
            } else {
                let line = line.strip_prefix(indent.as_str()).unwrap_or(trimmed);
                block.body.push_str(line);
                block.body.push('\n');
            }
            continue;
        }
        if let Some(lang) = trimmed.strip_prefix("```") {
            let indent = line[..line.len() - trimmed.len()].to_string();
            let block = Block {
                line: i + 1,
                lang: lang.trim().to_string(),
                marker: last_marker.take(),
                body: String::new(),
            };
            open = Some((block, indent));
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        last_marker = marker(line).map_err(|e| format!("line {}: {e}", i + 1))?;
    }
    if let Some((block, _)) = open {
        return Err(format!("line {}: the block is never closed", block.line));
    }
    Ok(out)
}

/// What is wrong with the markers of these blocks (empty: nothing).
fn marker_problems(blocks: &[Block]) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let previous_runs = i > 0 && blocks[i - 1].marker == Some(Marker::Run);
        match &b.marker {
            None if is_shell(&b.lang) => problems.push(format!(
                "line {}: a shell block without a marker (<!-- doc: run --> or \
                 <!-- doc: skip: REASON -->; output and usage blocks are ```text)",
                b.line
            )),
            Some(Marker::Run | Marker::Skip(_)) if !is_shell(&b.lang) => problems.push(format!(
                "line {}: run and skip are for shell blocks, not ```{}",
                b.line, b.lang
            )),
            Some(Marker::Apply) if b.lang != "yaml" => problems.push(format!(
                "line {}: apply is for yaml blocks, not ```{}",
                b.line, b.lang
            )),
            Some(Marker::Output) if !previous_runs => problems.push(format!(
                "line {}: an output block must follow a run block",
                b.line
            )),
            Some(Marker::Output) if !steps(&blocks[i - 1].body).is_empty() => {
                problems.push(format!(
                    "line {}: the run block before shows its output after `$ ` lines already",
                    b.line
                ))
            }
            _ => {}
        }
    }
    problems
}

/// The `$ ` commands of a block and the output shown after each (none: a script).
fn steps(body: &str) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in body.lines() {
        if continued {
            let step = out.last_mut().unwrap();
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            out.push(Step {
                command: cmd.to_string(),
                output: String::new(),
            });
            continued = cmd.ends_with('\\');
        } else if let Some(step) = out.last_mut() {
            step.output.push_str(line);
            step.output.push('\n');
        }
    }
    for step in &mut out {
        step.output = step.output.trim_end().to_string();
    }
    out
}

/// Whether `word` is an age or a duration as tables print them: `9s`, `12m`, `3h20m`,
/// `1.5s`, `250ms`.
fn is_age(word: &str) -> bool {
    let mut rest = word;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ms", "s", "m", "h", "d"]
            .into_iter()
            .find(|u| rest.starts_with(u))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
        parts += 1;
    }
    parts > 0
}

/// Output as compared: ages, RFC 3339 times and digests replaced by placeholders, the
/// scratch namespace by the docs' one, columns by single spaces, trailing blanks dropped.
fn normalise(text: &str, namespace: &str) -> String {
    let text = if namespace.is_empty() {
        text.to_string()
    } else {
        text.replace(namespace, DOC_NAMESPACE)
    };
    let word = |w: &str| -> String {
        let bare = w.trim_matches(|c: char| "\"',()".contains(c));
        if is_age(bare) {
            return w.replace(bare, "<age>");
        }
        if bare.len() >= 20 && bare.as_bytes()[4] == b'-' && bare.contains('T') {
            return w.replace(bare, "<time>");
        }
        if let Some(at) = w.find("sha256:") {
            return format!("{}sha256:<digest>", &w[..at]);
        }
        w.to_string()
    };
    text.lines()
        .map(|l| l.split_whitespace().map(word).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

/// README.md and every docs/*.md, relative to the crate root, sorted.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    docs.sort();
    docs.insert(0, PathBuf::from("README.md"));
    for extra in ["CONTRIBUTING.md"] {
        if root.join(extra).exists() {
            docs.push(PathBuf::from(extra));
        }
    }
    docs
}

fn read_doc(doc: &Path) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc)).unwrap()
}

/// The script that runs `steps` in one shell, printing a separator line before each one
/// (and keeping `$?` across it), so that each step's output can be told apart.
fn session_script(steps: &[Step], separator: &str) -> String {
    let mut script = String::from("exec 2>&1\n__status=0\n");
    for step in steps {
        script.push_str(&format!(
            "__status=$?; echo '{separator}'; ( exit $__status )\n{}\n",
            step.command
        ));
    }
    script
}

/// Splits the output of [`session_script`] at its separators: one text per step.
fn split_session(output: &str, separator: &str) -> Vec<String> {
    output
        .split(&format!("{separator}\n"))
        .skip(1)
        .map(|s| s.trim_end().to_string())
        .collect()
}

#[test]
fn every_shell_block_of_the_docs_is_marked() {
    let mut problems = Vec::new();
    let mut runs = 0;
    for doc in documents() {
        match blocks(&read_doc(&doc)) {
            Ok(blocks) => {
                runs += blocks
                    .iter()
                    .filter(|b| b.marker == Some(Marker::Run))
                    .count();
                for p in marker_problems(&blocks) {
                    problems.push(format!("{}: {p}", doc.display()));
                }
            }
            Err(e) => problems.push(format!("{}: {e}", doc.display())),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(runs >= 8, "only {runs} runnable blocks: the parsing broke");
}

#[test]
fn blocks_and_their_markers_are_read() {
    let md = "text\n<!-- doc: run -->\n```sh\n$ echo a \\\n  b\na b\n\n$ true\n```\n\n\
              <!-- doc: skip: installs the chart -->\n\n  ```\n  helm install x\n  ```\n\
              ```yaml\nk: v\n```\n```console\n$ x\n```\n\
              <!-- doc: file: c.json -->\n```json\n[]\n```\n";
    let got = blocks(md).unwrap();
    assert_eq!(got.len(), 5);
    assert_eq!(got[0].marker, Some(Marker::Run));
    assert_eq!(got[0].line, 3);
    assert_eq!(
        steps(&got[0].body),
        [
            Step {
                command: "echo a \\\n  b".into(),
                output: "a b".into()
            },
            Step {
                command: "true".into(),
                output: String::new()
            }
        ]
    );
    // The marker may stand a blank line before the fence, and an indented block loses
    // its indent.
    assert_eq!(
        got[1].marker,
        Some(Marker::Skip("installs the chart".into()))
    );
    assert_eq!(got[1].body, "helm install x\n");
    assert_eq!(got[2].marker, None);
    assert_eq!(got[4].marker, Some(Marker::File("c.json".into())));
    // An unmarked shell block is named; a yaml block needs no marker.
    assert_eq!(
        marker_problems(&got)
            .iter()
            .map(|p| p.split(':').next().unwrap().to_string())
            .collect::<Vec<_>>(),
        ["line 19"]
    );
    // A marker is for the next block only: text between them cancels it.
    let got = blocks("<!-- doc: run -->\nsome text\n```sh\nx\n```\n").unwrap();
    assert_eq!(got[0].marker, None);
}

#[test]
fn markers_in_the_wrong_place_or_malformed_are_refused() {
    assert!(marker("<!-- doc: skip: -->").is_err());
    assert!(marker("<!-- doc: skip -->").is_err());
    assert!(marker("<!-- doc: runs -->").is_err());
    assert!(marker("<!-- doc: file: ../x -->").is_err());
    assert_eq!(marker("<!-- an ordinary comment -->"), Ok(None));
    let problems = |md: &str| marker_problems(&blocks(md).unwrap());
    // (markdown, how many problems, what it is)
    for (md, count, what) in [
        (
            "<!-- doc: output -->\n```text\nx\n```\n",
            1,
            "output without a run block",
        ),
        ("<!-- doc: run -->\n```yaml\nx\n```\n", 1, "run on yaml"),
        (
            "<!-- doc: run -->\n```sh\n$ a\nb\n```\n<!-- doc: output -->\n```text\nc\n```\n",
            1,
            "output twice",
        ),
        (
            "<!-- doc: run -->\n```sh\na\n```\n<!-- doc: output -->\n```\nc\n```\n",
            0,
            "a run block and its output",
        ),
        ("<!-- doc: apply -->\n```sh\nx\n```\n", 1, "apply on sh"),
        (
            "<!-- doc: apply -->\n```yaml\nx: 1\n```\n",
            0,
            "apply on yaml",
        ),
    ] {
        assert_eq!(problems(md).len(), count, "{what}");
    }
    assert!(blocks("```sh\nnever closed\n").is_err());
}

#[test]
fn output_is_compared_without_ages_digests_and_padding() {
    let doc = "NAME          READY   LAST SYNC   AGE\ntestchannel   True    1s          9s\n\
               rev sha256:5e1a0c3f94b2 at 2026-12-03T12:00:00Z (in 47m, 3h20m ago)";
    let real = "NAME   READY   LAST SYNC   AGE\ntestchannel   True   250ms   1m5s   \n\
                rev sha256:0123456789ab at 2027-01-01T00:00:09Z (in 1h, 5s ago)\n";
    assert_eq!(normalise(doc, ""), normalise(real, ""));
    assert_ne!(
        normalise(doc, ""),
        normalise(&real.replace("True", "False"), "")
    );
    assert_eq!(normalise("ns-1a2b/x\n", "ns-1a2b"), "fleet-default/x");
    assert!(!is_age("v1") && !is_age("s") && !is_age("10") && !is_age("True"));
}

#[test]
fn a_session_keeps_exit_codes_between_steps() {
    let steps = steps("$ false\n$ echo $?\n1\n$ echo one; echo two >&2\none\ntwo\n");
    let sep = "@@step@@";
    let out = Command::new("bash")
        .arg("-c")
        .arg(session_script(&steps, sep))
        .output()
        .unwrap();
    let got = split_session(&String::from_utf8(out.stdout).unwrap(), sep);
    assert_eq!(got, ["", "1", "one\ntwo"]);
}

/// The scratch namespace with an operator, and `testchannel` synced from the sample.
async fn cluster_fixture() -> TestNs {
    let mut t = TestNs::new("docs").await;
    // The blocks ask for syncs back to back: no request waits out the default 10 s window.
    t.start_operator(&["--min-request-interval=0s"]);
    let sample = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/sample-channel.yaml"),
    )
    .unwrap();
    let sample: Value = serde_saphyr::from_str(&sample).unwrap();
    let mut spec = sample["spec"].clone();
    // The local cluster cannot pull from Docker Hub: the runner image imported into the
    // node stands in for the sample's.
    spec["options"]["image"] = runner_image().into();
    spec["options"]["imagePullPolicy"] = "IfNotPresent".into();
    t.create_channel("testchannel", spec).await;
    t.wait_ready("testchannel", "Synchronized", Duration::from_secs(60))
        .await;
    t
}

/// A scratch directory per document, where `file` blocks are written and blocks run.
fn scratch_dir(doc: &Path) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("docs-blocks")
        .join(doc.to_string_lossy().replace('/', "_"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `script` with bash in `dir`, the built binary first on PATH; returns its combined
/// output and exit code.
fn run_bash(script: &str, dir: &Path) -> (String, Option<i32>) {
    let bin = Path::new(env!("CARGO_BIN_EXE_rancheros-operator"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (text, out.status.code())
}

/// Runs every `run` block of every document, comparing the output each shows.
#[tokio::test]
async fn runnable_blocks_of_the_docs_run_as_shown() {
    let started = Instant::now();
    let t = cluster_fixture().await;
    eprintln!("the fixture took {:?}", started.elapsed());
    let ns = t.ns.clone();
    let mut failures = Vec::new();
    let mut ran = 0;
    for doc in documents() {
        let blocks = blocks(&read_doc(&doc)).unwrap();
        let dir = scratch_dir(&doc);
        for (i, b) in blocks.iter().enumerate() {
            let at = format!("{}:{}", doc.display(), b.line);
            let block_started = Instant::now();
            let body = b.body.replace(DOC_NAMESPACE, &ns);
            match &b.marker {
                Some(Marker::File(name)) => std::fs::write(dir.join(name), &b.body).unwrap(),
                Some(Marker::Apply) => {
                    ran += 1;
                    let script = format!(
                        "kubectl apply --dry-run=server -f - <<'DOC_YAML'\n{body}DOC_YAML\n"
                    );
                    let (out, code) = run_bash(&script, &dir);
                    if code != Some(0) {
                        failures.push(format!("{at}: the API server refuses it\n{out}"));
                    }
                }
                Some(Marker::Run) => {
                    ran += 1;
                    let steps = steps(&body);
                    if steps.is_empty() {
                        let (out, code) = run_bash(&format!("set -e\n{body}"), &dir);
                        if code != Some(0) {
                            failures.push(format!("{at}: exit {code:?}\n{out}"));
                            continue;
                        }
                        if let Some(next) = blocks.get(i + 1)
                            && next.marker == Some(Marker::Output)
                            && normalise(&next.body, "") != normalise(&out, &ns)
                        {
                            failures.push(format!(
                                "{at}: the output differs\n--- doc\n{}\n--- real\n{out}",
                                next.body
                            ));
                        }
                        continue;
                    }
                    let sep = "@@docs-step@@";
                    let (out, _) = run_bash(&session_script(&steps, sep), &dir);
                    let got = split_session(&out, sep);
                    for (step, real) in steps.iter().zip(&got) {
                        let want = normalise(&step.output.replace(&ns, DOC_NAMESPACE), "");
                        if want != normalise(real, &ns) {
                            failures.push(format!(
                                "{at}: `{}` printed\n{}\n--- the doc shows\n{}",
                                step.command.replace(&ns, DOC_NAMESPACE),
                                real.replace(&ns, DOC_NAMESPACE),
                                step.output.replace(&ns, DOC_NAMESPACE)
                            ));
                        }
                    }
                    if got.len() != steps.len() {
                        failures.push(format!("{at}: the session stopped early\n{out}"));
                    }
                }
                _ => {}
            }
            if block_started.elapsed() > Duration::from_secs(2) {
                eprintln!("{at} took {:?}", block_started.elapsed());
            }
        }
    }
    t.cleanup().await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran >= 8, "only {ran} blocks ran");
    eprintln!("{ran} blocks ran in {:?}", started.elapsed());
}
