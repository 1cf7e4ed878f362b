//! The channel-data corpus (`tests/corpus/`), run through both sides of the one rule set:
//! the built binary (`rancheros-operator validate`, text and json output, file and stdin)
//! and the operator's parser (`rancheros_operator::channel::parse`), which must agree with
//! each other and with each case's `.expect` file. Large cases are generated here.
//! Also: usage errors and exit codes, and random mutations of valid data (no panics, and
//! `check` and `parse` agree on every one). No cluster needed.
//!
//! `BLESS=1 cargo test --test integration corpus::` rewrites the `.expect` files from what the binary
//! reports: review the diff before committing it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rancheros_operator::channel::{self, MAX_ANNOTATIONS_BYTES, MAX_DIAGNOSTICS, MAX_ITEM_BYTES};
use rancheros_operator::commands::validate;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rancheros-operator");

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn bless() -> bool {
    std::env::var_os("BLESS").is_some_and(|v| v != "0")
}

struct Case {
    name: String,
    data: PathBuf,
    expect: PathBuf,
}

fn committed_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|data| {
            let name = data.file_stem().unwrap().to_string_lossy().into_owned();
            Case {
                expect: data.with_extension("expect"),
                data,
                name,
            }
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(cases.len() >= 30, "corpus not found in {:?}", corpus_dir());
    cases
}

fn item(name: &str, spec_metadata: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":{name}}},"spec":{{"type":"iso","metadata":{{"uri":"u"{spec_metadata}}}}}}}"#
    )
}

/// Cases too large (or too binary) to commit; their `.expect` files are committed as
/// `gen-*.expect`.
fn generated_cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("corpus");
    std::fs::create_dir_all(&dir).unwrap();
    let mb = 1_000_000;
    let nest = |levels: usize| format!(r#","deep":{}{}"#, "[".repeat(levels), "]".repeat(levels));
    let utf16 = |big_endian: bool, bom: bool| -> Vec<u8> {
        let text = format!(
            "{}[{}]",
            if bom { "\u{feff}" } else { "" },
            item("\"a\"", "")
        );
        text.encode_utf16()
            .flat_map(|u| {
                if big_endian {
                    u.to_be_bytes()
                } else {
                    u.to_le_bytes()
                }
            })
            .collect()
    };
    let versions: Vec<String> = (0..10_000)
        .map(|i| item(&format!("\"v{i}\""), r#","displayName":"x""#))
        .collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "gen-1mb-string-valid",
            format!("[{}]", item("\"a\"", &format!(r#","notes":"{}""#, "n".repeat(mb)))).into(),
        ),
        (
            "gen-1mb-name",
            format!("[{}]", item(&format!("\"{}\"", "n".repeat(mb)), "")).into(),
        ),
        (
            "gen-oversized-item",
            format!(
                "[\n{},\n{}\n]",
                item("\"small\"", ""),
                item("\"big\"", &format!(r#","notes":"{}""#, "n".repeat(MAX_ITEM_BYTES + 1)))
            )
            .into(),
        ),
        (
            "gen-annotations-too-large",
            format!(
                r#"[{{"metadata":{{"name":"a","annotations":{{"notes":"{}"}}}},"spec":{{"type":"iso","metadata":{{"uri":"u"}}}}}}]"#,
                "n".repeat(MAX_ANNOTATIONS_BYTES)
            )
            .into(),
        ),
        // The array, the item, spec and spec.metadata are 4 of the 32 levels channel data
        // may have (and of the 127 the parser reads).
        (
            "gen-deep-nesting-at-the-limit",
            format!("[{}]", item("\"a\"", &nest(28))).into(),
        ),
        (
            "gen-deep-nesting-over-32",
            format!("[{}]", item("\"a\"", &nest(29))).into(),
        ),
        (
            "gen-deep-nesting-over-the-limit",
            format!("[{}]", item("\"a\"", &nest(124))).into(),
        ),
        (
            "gen-deep-nesting-100k",
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into(),
        ),
        ("gen-utf16le-bom", utf16(false, true)),
        ("gen-utf16be", utf16(true, false)),
        (
            "gen-invalid-utf8",
            [
                &br#"[{"metadata":{"name":"a"},"spec":{"type":"iso","metadata":{"uri":"u","displayName":"caf"#[..],
                b"\xE9",
                br#""}}}]"#,
            ]
            .concat(),
        ),
        (
            "gen-nul-byte",
            format!("[{}]", item("\"a\"", ",\"displayName\":\"a\0b\"")).into(),
        ),
        (
            "gen-10000-versions",
            format!("[\n{}\n]\n", versions.join(",\n")).into(),
        ),
    ];
    cases
        .into_iter()
        .map(|(name, bytes)| {
            let data = dir.join(format!("{name}.json"));
            std::fs::write(&data, bytes).unwrap();
            Case {
                name: name.into(),
                data,
                expect: corpus_dir().join(format!("{name}.expect")),
            }
        })
        .collect()
}

fn validate_cmd(args: &[&str], file: &Path) -> Output {
    Command::new(BIN)
        .arg("validate")
        .args(args)
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn validate_stdin(args: &[&str], data: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .arg("validate")
        .args(args)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// The outcome of one file in the json report, as `.expect` lines.
fn expect_lines(file: &Value) -> Vec<String> {
    let mut lines = vec![if file["valid"] == true {
        format!(
            "valid versions={} warnings={}",
            file["versions"], file["warnings"]
        )
    } else {
        format!(
            "invalid errors={} warnings={}",
            file["errors"], file["warnings"]
        )
    }];
    for d in file["diagnostics"].as_array().unwrap() {
        let mut line = format!("{} {}:{} ", str(&d["severity"]), d["line"], d["column"]);
        if !str(&d["path"]).is_empty() {
            let _ = write!(line, "{}: ", str(&d["path"]));
        }
        line.push_str(str(&d["message"]));
        lines.push(line);
    }
    lines
}

fn str(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// Runs one case through everything; returns what is wrong with it.
fn run_case(case: &Case) -> Vec<String> {
    let mut problems = Vec::new();
    let mut fail = |what: String| problems.push(format!("{}: {what}", case.name));
    let data = std::fs::read(&case.data).unwrap();
    let file_name = case.data.display().to_string();

    // 1. The binary, json output.
    let out = validate_cmd(&["--format", "json"], &case.data);
    let doc: Value = match serde_json::from_slice(&out.stdout) {
        Ok(doc) => doc,
        Err(e) => {
            fail(format!(
                "json output does not parse ({e}); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
            return problems;
        }
    };
    let file = &doc["files"][0];
    let valid = file["valid"] == true;
    let code = if valid { 0 } else { 1 };
    if out.status.code() != Some(code) {
        fail(format!("json: exit code {:?}, want {code}", out.status));
    }
    if !out.stderr.is_empty() {
        fail(format!(
            "json: stderr {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if doc["schema"] != validate::JSON_SCHEMA
        || doc["valid"] != valid
        || file["file"] != file_name.as_str()
    {
        fail(format!("json: unexpected envelope {}", doc["schema"]));
    }
    let actual = expect_lines(file);

    // 2. Against the .expect file.
    if bless() {
        std::fs::write(&case.expect, actual.join("\n") + "\n").unwrap();
    } else {
        match std::fs::read_to_string(&case.expect) {
            Ok(text) => {
                let want: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
                if want != actual {
                    fail(format!(
                        "does not match {}:\n  want: {want:#?}\n  got:  {actual:#?}",
                        case.expect.display()
                    ));
                }
            }
            Err(_) => fail(format!("no {} (BLESS=1 writes it)", case.expect.display())),
        }
    }

    // 3. The binary, text output: same exit code, every diagnostic in the same order.
    let out = validate_cmd(&[], &case.data);
    if out.status.code() != Some(code) || !out.stderr.is_empty() {
        fail(format!(
            "text: exit code {:?}, stderr {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rest = &text[..];
    for d in file["diagnostics"].as_array().unwrap() {
        let path = match str(&d["path"]) {
            "" => String::new(),
            p => format!("{p}: "),
        };
        let block = format!(
            "{}: {path}{}\n  --> {file_name}:{}:{}\n",
            str(&d["severity"]),
            str(&d["message"]),
            d["line"],
            d["column"]
        );
        match rest.find(&block) {
            Some(at) => rest = &rest[at + block.len()..],
            None => fail(format!(
                "text: missing or out of order:\n{block}\nin\n{text}"
            )),
        }
    }
    let summary = text.lines().last().unwrap_or_default();
    let want_summary = if valid {
        format!("{file_name}: valid, ")
    } else {
        format!("{file_name}: invalid")
    };
    if !summary.starts_with(&want_summary) {
        fail(format!("text: summary {summary:?}"));
    }

    // 4. The binary reading stdin: the same report.
    let out = validate_stdin(&["--format", "json"], &data);
    match serde_json::from_slice::<Value>(&out.stdout) {
        Ok(stdin_doc) => {
            let f = &stdin_doc["files"][0];
            if f["file"] != "<stdin>"
                || expect_lines(f) != actual
                || out.status.code() != Some(code)
            {
                fail(format!("stdin: differs: {:?}", expect_lines(f)));
            }
        }
        Err(e) => fail(format!("stdin: json output does not parse: {e}")),
    }

    // 5. The operator's side: check and parse agree with the binary.
    let report = channel::check(&data);
    let mut diagnostics = report.diagnostics.clone();
    diagnostics.sort_by_key(|d| (d.severity, d.line, d.column));
    let lib: Vec<Value> = diagnostics
        .iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect();
    if file["diagnostics"].as_array().unwrap() != &lib {
        fail(format!("channel::check differs from the binary: {lib:#?}"));
    }
    // The one rule a sync relaxes: duplicate names (the last entry wins).
    let duplicates = report
        .errors()
        .filter(|d| d.message.starts_with("duplicate name "))
        .count();
    let sync_valid = file["errors"].as_u64() == Some(duplicates as u64);
    match channel::parse(&data) {
        Ok(parsed) => {
            let versions = parsed.versions;
            if !sync_valid {
                fail("channel::parse accepted data the binary refused".into());
            }
            if duplicates > 0 {
                if parsed.duplicates.is_empty() {
                    fail("channel::parse did not name the duplicates".into());
                }
            } else if file["versions"] != versions.len() || report.versions.len() != versions.len()
            {
                fail(format!(
                    "channel::parse found {} versions, the binary {}",
                    versions.len(),
                    file["versions"]
                ));
            }
        }
        Err(e) => {
            if valid || sync_valid {
                fail(format!(
                    "channel::parse refused data the binary accepted: {e}"
                ));
            }
            if file["errors"].as_u64() != Some((e.total + duplicates) as u64) {
                fail(format!("channel::parse counted {} errors", e.total));
            }
            let first = serde_json::to_value(&e.first).unwrap();
            if !lib.contains(&first) {
                fail(format!("channel::parse's first error is not reported: {e}"));
            }
            if !e.to_string().starts_with("invalid channel data: line ") {
                fail(format!("channel::parse's message: {e}"));
            }
        }
    }
    problems
}

fn run_all(cases: &[Case]) {
    let problems: Vec<String> = cases.iter().flat_map(run_case).collect();
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}

#[test]
fn committed_corpus() {
    let cases = committed_cases();
    for prefix in ["valid-", "warn-", "not-json-", "not-an-array-"] {
        assert!(cases.iter().any(|c| c.name.starts_with(prefix)), "{prefix}");
    }
    run_all(&cases);
}

#[test]
fn generated_corpus() {
    run_all(&generated_cases());
}

#[test]
fn every_expect_file_has_a_case() {
    let mut names: Vec<String> = committed_cases().into_iter().map(|c| c.name).collect();
    names.extend(generated_cases().into_iter().map(|c| c.name));
    for entry in std::fs::read_dir(corpus_dir()).unwrap() {
        let path = entry.unwrap().path();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        match ext {
            "json" => {}
            "expect" => assert!(names.contains(&stem), "{} has no case", path.display()),
            _ => assert!(stem == "README", "unexpected file {}", path.display()),
        }
    }
}

#[test]
fn many_inputs_in_one_run() {
    let cases = committed_cases();
    let files: Vec<&Path> = cases.iter().map(|c| c.data.as_path()).collect();
    let out = Command::new(BIN)
        .arg("validate")
        .arg("--format=json")
        .args(&files)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["valid"], false);
    let reported = doc["files"].as_array().unwrap();
    assert_eq!(reported.len(), cases.len());
    for (case, file) in cases.iter().zip(reported) {
        assert_eq!(file["file"], case.data.display().to_string());
        assert_eq!(
            file["valid"],
            case.name.starts_with("valid-") || case.name.starts_with("warn-"),
            "{}",
            case.name
        );
    }
    let valid: Vec<&Path> = cases
        .iter()
        .filter(|c| c.name.starts_with("valid-"))
        .map(|c| c.data.as_path())
        .collect();
    let out = Command::new(BIN)
        .arg("validate")
        .args(&valid)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.ends_with(&format!(
            "{} inputs: {} valid, 0 invalid\n",
            valid.len(),
            valid.len()
        )),
        "{text}"
    );
}

#[test]
fn too_many_problems_are_capped_and_counted() {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("too-many-problems.json");
    std::fs::write(&path, format!("[{}1]", "1,".repeat(MAX_DIAGNOSTICS + 99))).unwrap();
    let out = validate_cmd(&["--format", "json"], &path);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = &doc["files"][0];
    assert_eq!(file["errors"], MAX_DIAGNOSTICS);
    let diagnostics = file["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), MAX_DIAGNOSTICS);
    let last = str(&diagnostics[MAX_DIAGNOSTICS - 1]["message"]);
    assert!(
        last.starts_with("too many problems: 101 more errors"),
        "{last}"
    );
    assert_eq!(
        channel::parse(&std::fs::read(&path).unwrap())
            .unwrap_err()
            .total,
        MAX_DIAGNOSTICS + 100
    );
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn usage_errors_exit_2_and_read_errors_exit_1() {
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for args in [
        &["validate"][..],
        &["validate", "--format", "xml", "x.json"],
        &["validate", "--no-such-flag", "x.json"],
        &["validate", "-", "-"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).starts_with("error: "),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }

    let out = run(&["validate", "/nonexistent/channel.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: cannot read /nonexistent/channel.json: no such file or directory\n"
    );
    assert!(out.stdout.is_empty());

    let dir = env!("CARGO_TARGET_TMPDIR");
    let out = run(&["validate", "--format", "json", dir]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["files"][0]["read_error"],
        format!("cannot read {dir}: is a directory")
    );
    assert!(out.stderr.is_empty());

    // An unreadable input does not stop the others from being checked.
    let good = corpus_dir().join("valid-spec-sample.json");
    let out = run(&["validate", "/nonexistent", good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("valid-spec-sample.json: valid, 2 versions\n"),
        "{text}"
    );
    assert!(text.ends_with("2 inputs: 1 valid, 1 invalid\n"), "{text}");
}

/// A small, seeded generator: the test must be reproducible and needs no crate for this.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    const INTERESTING: &[u8] = b"{}[]\",:\\ \n0-9.eE+tfnul\x00\xff\xc3\xa9aZ/";
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = data.len();
        let at = rng.below(len + 1);
        match rng.below(7) {
            0 if len > 0 => data[at.min(len - 1)] = INTERESTING[rng.below(INTERESTING.len())],
            1 if len > 0 => data[at.min(len - 1)] = rng.next() as u8,
            2 => {
                let end = (at + 1 + rng.below(16)).min(len);
                data.drain(at..end);
            }
            3 => {
                let end = (at + 1 + rng.below(64)).min(len);
                let chunk = data[at..end].to_vec();
                let to = rng.below(len + 1);
                data.splice(to..to, chunk);
            }
            4 => data.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            5 => data.truncate(at),
            _ => {
                // Swap a value for another kind.
                let replacement: &[&[u8]] =
                    &[b"null", b"1", b"\"\"", b"[]", b"{}", b"\"x\"", b"true"];
                let end = (at + rng.below(8)).min(len);
                data.splice(
                    at..end,
                    replacement[rng.below(replacement.len())].iter().copied(),
                );
            }
        }
    }
    data
}

#[test]
fn random_mutations_of_valid_data_never_panic_and_both_sides_agree() {
    let seeds: Vec<Vec<u8>> = committed_cases()
        .iter()
        .filter(|c| {
            c.name.starts_with("valid-")
                || c.name.starts_with("warn-")
                || c.name.starts_with("missing-")
        })
        .map(|c| std::fs::read(&c.data).unwrap())
        .collect();
    let seed: u64 = std::env::var("CORPUS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_abcd_ef01);
    let mut rng = Rng(seed);
    let started = Instant::now();
    let mut runs = 0;
    let mut binary_inputs = Vec::new();
    while runs < 20_000 && started.elapsed() < Duration::from_secs(4) {
        let pick = rng.below(seeds.len());
        let data = mutate(&mut rng, &seeds[pick]);
        let lines = data.split(|b| *b == b'\n').count();
        let report = channel::check(&data);
        for d in &report.diagnostics {
            assert!(
                d.line >= 1 && d.column >= 1 && d.line <= lines,
                "seed {seed}, run {runs}: bad position {d} for {:?}",
                String::from_utf8_lossy(&data)
            );
        }
        let parsed = channel::parse(&data);
        let sync_errors = report
            .errors()
            .filter(|d| !d.message.starts_with("duplicate name "))
            .count();
        assert_eq!(
            parsed.is_ok(),
            sync_errors == 0,
            "seed {seed}, run {runs}: {:?}",
            String::from_utf8_lossy(&data)
        );
        if let Ok(parsed) = parsed
            && report.is_valid()
        {
            assert_eq!(parsed.versions, report.versions);
        }
        let r = validate::report("fuzz.json", data.clone());
        let mut text = Vec::new();
        validate::write(&mut text, &[r], validate::Format::Text).unwrap();
        if runs % 500 == 0 {
            binary_inputs.push(data);
        }
        runs += 1;
    }
    assert!(runs >= 100, "only {runs} runs");
    for data in binary_inputs {
        let valid = channel::check(&data).is_valid();
        let out = validate_stdin(&[], &data);
        assert_eq!(
            out.status.code(),
            Some(if valid { 0 } else { 1 }),
            "{}: {:?}",
            stderr(&out),
            String::from_utf8_lossy(&data)
        );
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
    }
    eprintln!("{runs} mutations checked (seed {seed})");
}

/// The examples in docs/validate.md are real output: the text report and the json
/// document (schema included) are what the binary prints for the example file.
#[test]
fn docs_examples_are_real_output() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validate.md"))
            .unwrap();
    let between = |from: &str, to: &str| -> String {
        let start = doc
            .find(from)
            .unwrap_or_else(|| panic!("{from:?} not in the docs"))
            + from.len();
        let end = start + doc[start..].find(to).unwrap();
        doc[start..end].to_string()
    };
    let input = between("<!-- doc: file: channel.json -->\n```json\n", "```");
    let text = between("$ rancheros-operator validate channel.json\n", "$ echo $?");
    let json = between(
        "$ rancheros-operator validate --format json channel.json\n",
        "```",
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-example");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("channel.json"), input).unwrap();
    let run = |args: &[&str]| {
        Command::new(BIN)
            .arg("validate")
            .args(args)
            .arg("channel.json")
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), text);
    let out = run(&["--format", "json"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), json);
}

/// `validate --policy` over every valid committed case, the binary against the operator's
/// own policy code (`policy::apply`, as a new channel's first sync applies it): the same
/// versions published and held back, by the same rules. A policy of every kind of rule.
#[test]
fn validate_policy_agrees_with_the_operators_policy_on_every_valid_case() {
    use rancheros_operator::policy::{self, Policy};
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("corpus-policy");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("policy.yaml");
    let spec = "platforms: [linux/arm64]\nexclude: ['*-iso', '<1.0.0']\nkeep: 2\n";
    std::fs::write(&file, spec).unwrap();
    let compiled = Policy::compile(&serde_saphyr::from_str(spec).unwrap()).unwrap();
    let mut checked = 0;
    for case in committed_cases() {
        let data = std::fs::read(&case.data).unwrap();
        let Ok(parsed) = channel::parse(&data) else {
            continue;
        };
        let out = validate_cmd(
            &["--format", "json", "--policy", file.to_str().unwrap()],
            &case.data,
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{}: {e}: {}",
                case.name,
                String::from_utf8_lossy(&out.stdout)
            )
        });
        // (data the operator reads that validate calls invalid, duplicate names: no report)
        if doc["files"][0]["valid"] != true {
            assert!(doc["files"][0].get("policy").is_none(), "{}", case.name);
            continue;
        }
        let report = &doc["files"][0]["policy"];
        let now = k8s_openapi::jiff::Timestamp::now();
        let want = policy::apply(
            &compiled,
            &parsed.versions,
            &Default::default(),
            &Default::default(),
            now,
        );
        assert_eq!(report["published"], want.published.len(), "{}", case.name);
        assert_eq!(
            report["latest"],
            serde_json::json!(want.latest),
            "{}",
            case.name
        );
        let held: Vec<(String, String)> = report["held"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (str(&h["name"]).to_string(), str(&h["rule"]).to_string()))
            .collect();
        let mut want_held: Vec<(String, String)> = want
            .held
            .iter()
            .map(|(n, r)| (n.clone(), r.key().to_string()))
            .collect();
        let mut got = held.clone();
        got.sort();
        want_held.sort();
        assert_eq!(got, want_held, "{}", case.name);
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} valid cases");
}
