use super::*;

fn text(data: &str) -> String {
    let mut out = Vec::new();
    write(
        &mut out,
        &[report("c.json", data.as_bytes().to_vec())],
        Format::Text,
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn text_reports_read_like_compiler_diagnostics() {
    let out = text("[\n  {\"metadata\": {\"name\": \"a\"}, \"spec\": {\"type\": \"rpm\"}}\n]\n");
    assert_eq!(
        out,
        "error: [0].spec.type: must be \"container\" or \"iso\", found \"rpm\"\n  --> c.json:2:48\n  |\n2 |   {\"metadata\": {\"name\": \"a\"}, \"spec\": {\"type\": \"rpm\"}}\n  |                                                ^\nc.json: invalid (1 error, 0 warnings)\n"
    );
}

#[test]
fn valid_files_say_how_many_versions() {
    assert_eq!(text("[]"), "c.json: valid, 0 versions\n");
}

#[test]
fn long_lines_are_cut_around_the_column() {
    let (ex, caret) = excerpt_at(&[b'x'; 1000], 499);
    assert_eq!(ex.len(), 86);
    assert_eq!(caret, 43);
    // Near the end of the line the window still holds 80 characters.
    let (ex, caret) = excerpt_at(&[b'x'; 1000], 990);
    assert_eq!((ex.len(), caret), (83, 73));
    // Short lines are shown whole.
    let (ex, caret) = excerpt_at(b"  [1]", 3);
    assert_eq!((ex.as_str(), caret), ("  [1]", 3));
}

#[test]
fn carets_count_characters_not_bytes() {
    let data = r#"[{"metadata":{"name":"a"},"spec":{"x":"é","type":"rpm"}}]"#;
    let out = text(data);
    let column = data[..data.find("\"rpm").unwrap()].chars().count() + 1;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], format!("  --> c.json:1:{column}"), "{out}");
    let caret = lines[4].chars().position(|c| c == '^').unwrap() - 4;
    assert_eq!(lines[3].chars().nth(caret + 4), Some('"'), "{out}");
    assert_eq!(lines[3].chars().nth(caret + 5), Some('r'), "{out}");
}

#[test]
fn errors_come_before_warnings_each_in_document_order() {
    let data = r#"[{"x":1,"metadata":{"name":"a","uid":"u"},"spec":{"type":"iso"}},{"metadata":{"name":"B"},"spec":{"type":"iso","metadata":{"uri":"u"}}}]"#;
    let r = report("c.json", data.as_bytes().to_vec());
    let order: Vec<_> = r
        .diagnostics
        .iter()
        .map(|d| (d.severity, d.path.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            (Severity::Error, "[0].spec.metadata"),
            (Severity::Error, "[1].metadata.name"),
            (Severity::Warning, "[0].x"),
            (Severity::Warning, "[0].metadata.uid"),
        ]
    );
}

#[test]
fn many_diagnostics_on_one_long_line_are_all_reported() {
    let item =
        r#"{"metadata":{"name":"n","namespace":"x"},"spec":{"type":"iso","metadata":{"uri":"u"}}}"#;
    let items: Vec<String> = (0..20_000)
        .map(|i| item.replace("\"n\"", &format!("\"n{i}\"")))
        .collect();
    let data = format!("[{}]", items.join(","));
    // Every diagnostic of one long line reported; what it costs is measured by
    // `scripts/bench-validate --with-warnings` (one line against pretty-printed), not
    // timed here: a timed assertion fails on a busy machine, not on slow code.
    let out = text(&data);
    assert!(out.ends_with("c.json: valid, 20000 versions (0 errors, 20000 warnings)\n"));
    assert_eq!(
        out.matches("warning").count(),
        20_000 + 1,
        "{}",
        &out[..400]
    );
}

#[test]
fn unreadable_inputs_are_invalid_with_a_reason() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let ok = run(
        Vec::new(),
        &["/nonexistent/c.json"],
        None,
        Format::Text,
        &mut out,
        &mut err,
    )
    .unwrap();
    assert!(!ok);
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "error: cannot read /nonexistent/c.json: no such file or directory\n"
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run(
        Vec::new(),
        &["/nonexistent/c.json"],
        None,
        Format::Json,
        &mut out,
        &mut err,
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["files"][0]["read_error"],
        "cannot read /nonexistent/c.json: no such file or directory"
    );
    assert!(err.is_empty());
}

#[test]
fn json_reports_are_stable_for_tools() {
    let mut out = Vec::new();
    let ok = write(&mut out, &[report("c.json", b"[1]".to_vec())], Format::Json).unwrap();
    assert!(!ok);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["schema"], JSON_SCHEMA);
    assert_eq!(v["valid"], false);
    assert_eq!(v["files"][0]["read_error"], serde_json::Value::Null);
    assert_eq!(v["files"][0]["diagnostics"][0]["path"], "[0]");
    assert_eq!(v["files"][0]["diagnostics"][0]["severity"], "error");
    assert_eq!(v["files"][0]["diagnostics"][0]["line"], 1);
    assert_eq!(v["files"][0]["diagnostics"][0]["column"], 2);
}

#[test]
fn a_policy_reports_what_it_would_publish_and_hold_back() {
    let dir = std::env::temp_dir().join(format!("validate-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("c.json");
    std::fs::write(
        &data,
        r#"[{"metadata":{"name":"a"},"spec":{"version":"v1.0.0","type":"container","metadata":{"upgradeImage":"r/a","platforms":["linux/x86_64"]}}},
            {"metadata":{"name":"b"},"spec":{"version":"v1.1.0","type":"container","metadata":{"upgradeImage":"r/b","platforms":["linux/aarch64"]}}}]"#,
    )
    .unwrap();
    // A whole channel manifest, in YAML: its spec.versions.
    let file = dir.join("policy.yaml");
    std::fs::write(
        &file,
        "apiVersion: rancheros.cattle.io/v1\nkind: ManagedOSVersionChannel\nspec:\n  versions:\n    platforms: [linux/arm64]\n",
    )
    .unwrap();
    let policy = policy::load(&file).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert!(
        run(
            Vec::new(),
            &[&data],
            Some(&policy),
            Format::Text,
            &mut out,
            &mut err
        )
        .unwrap()
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(
            "policy: 1 published, 1 held back (platforms 1); newest: b\n  held back: a (platforms)"
        ),
        "{text}"
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run(
        Vec::new(),
        &[&data],
        Some(&policy),
        Format::Json,
        &mut out,
        &mut err,
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["files"][0]["policy"]["held"][0]["rule"], "platforms");
    // A bare spec.versions in JSON; a bad one names its field.
    std::fs::write(&file, r#"{"include": [">=x"]}"#).unwrap();
    let e = policy::load(&file).unwrap_err();
    assert!(e.contains("spec.versions.include[0]"), "{e}");
    std::fs::write(&file, "kind: Deployment\n").unwrap();
    assert!(
        policy::load(&file)
            .unwrap_err()
            .contains("without spec.versions")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_policy_names_the_versions_too_long_for_its_patterns() {
    let long = format!("1.0.0-{}", "a".repeat(300));
    let data = format!(
        r#"[{{"metadata":{{"name":"a"}},"spec":{{"version":"1.0.0","type":"container","metadata":{{"upgradeImage":"r/a"}}}}}},
            {{"metadata":{{"name":"b"}},"spec":{{"version":"{long}","type":"container","metadata":{{"upgradeImage":"r/b"}}}}}}]"#
    );
    let spec = serde_json::from_value(serde_json::json!({"include": ["1.0.0*"]})).unwrap();
    let p = crate::policy::Policy::compile(&spec).unwrap();
    let r = policy::report(&p, data.as_bytes()).unwrap();
    assert_eq!(r.unmatched, ["b"]);
    let mut out = Vec::new();
    policy::write_text(&mut out, "c.json", &r).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(
            "  held back: b (include)\n  not matched: b (its name or version is over 253 characters"
        ),
        "{text}"
    );
}
