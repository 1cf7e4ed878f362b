use super::*;
use indoc::indoc;

const SAMPLE: &str = r#"[{"metadata":{"name":"foo"},"spec":{"version":"v1","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v1"}}},{"metadata":{"name":"bar"},"spec":{"version":"v2","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v2"}}}]"#;

fn errors(data: &str) -> Vec<String> {
    check(data.as_bytes())
        .errors()
        .map(|d| format!("{}@{}:{} {}", d.path, d.line, d.column, d.message))
        .collect()
}

#[test]
fn the_sample_parses_to_two_versions() {
    let versions = parse(SAMPLE.as_bytes()).unwrap().versions;
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0].name, "foo");
    assert_eq!(versions[0].spec.version.as_deref(), Some("v1"));
    assert_eq!(versions[0].spec.type_, "container");
    assert_eq!(
        versions[1].spec.metadata.as_ref().unwrap()["upgradeImage"],
        "registry.com/repository/image:v2"
    );
}

#[test]
fn an_empty_array_is_valid() {
    assert_eq!(parse(b"[]").unwrap(), Parsed::default());
}

#[test]
fn syntax_errors_carry_their_position() {
    let e = parse(b"[\n  {\"metadata\": }\n]").unwrap_err();
    assert_eq!((e.first.line, e.first.column), (2, 16));
    assert!(
        e.first.message.starts_with("not valid JSON"),
        "{}",
        e.first.message
    );
    let e = parse(b"[{\"metadata\":").unwrap_err();
    assert!(e.first.message.contains("truncated"), "{}", e.first.message);
    assert!(!e.to_string().contains(" at line "), "{e}");
}

#[test]
fn not_an_array() {
    assert_eq!(
        errors(r#"{"a":1}"#),
        ["@1:1 channel data must be a JSON array of versions, found an object"]
    );
}

#[test]
fn rule_violations_are_all_reported_with_paths_and_positions() {
    let data = indoc! {r#"
        [
          {"metadata": {"name": "ok"}, "spec": {"type": "iso", "metadata": {"uri": "http://x"}}},
          {"metadata": {"name": "Bad_Name"}, "spec": {"type": "container", "metadata": {"upgradeImage": "i"}}},
          {"metadata": {"name": "ok"}, "spec": {"type": "rpm"}},
          {"spec": {"type": "container", "metadata": {"upgradeImage": ""}}},
          {"metadata": {"name": "x"}, "spec": {"type": "iso", "version": 3}},
          7
        ]
    "#};
    assert_eq!(
        errors(data),
        [
            r#"[1].metadata.name@3:25 "Bad_Name" is not a valid name: 'B' is not allowed: use lower-case letters, digits, '-' and '.'"#,
            r#"[2].metadata.name@4:25 duplicate name "ok", already used by [0]"#,
            r#"[2].spec.type@4:49 must be "container" or "iso", found "rpm""#,
            r#"[3].metadata@5:3 required object is missing"#,
            r#"[3].spec.metadata.upgradeImage@5:63 must not be empty for a container version"#,
            r#"[4].spec.version@6:66 must be a string, found a number"#,
            r#"[4].spec.metadata@6:39 required: an iso version needs metadata.uri"#,
            r#"[5]@7:3 each version must be a JSON object, found a number"#,
        ]
    );
}

#[test]
fn ignored_metadata_and_unknown_keys_are_warnings_and_dropped() {
    let data = r#"[{"kind":"ManagedOSVersion","status":{},"metadata":{"name":"a","namespace":"x","ownerReferences":[],"labels":{"l":"v"},"annotations":{"a/b":"c"}},"spec":{"type":"iso","extra":1,"metadata":{"uri":"u","displayName":"A"}}}]"#;
    let report = check(data.as_bytes());
    assert!(report.is_valid());
    let warnings: Vec<_> = report.diagnostics.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(
        warnings,
        [
            "[0].status",
            "[0].metadata.namespace",
            "[0].metadata.ownerReferences",
            "[0].spec.extra"
        ]
    );
    let v = &report.versions[0];
    assert_eq!(v.labels["l"], "v");
    assert_eq!(v.annotations["a/b"], "c");
    assert_eq!(v.spec.metadata.as_ref().unwrap()["displayName"], "A");
}

#[test]
fn labels_must_be_valid_kubernetes_labels() {
    let data = r#"[{"metadata":{"name":"a","labels":{"ok":"","-bad":"v","k":"white space","n":1}},"spec":{"type":"iso","metadata":{"uri":"u"}}}]"#;
    let errs = errors(data);
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(
        errs[0].starts_with("[0].metadata.labels[\"-bad\"]"),
        "{errs:?}"
    );
}

#[test]
fn oversized_versions_are_refused() {
    let big = "x".repeat(MAX_ITEM_BYTES + 1);
    let data = format!(
        r#"[{{"metadata":{{"name":"a"}},"spec":{{"type":"iso","metadata":{{"uri":"u","blob":"{big}"}}}}}}]"#
    );
    let errs = errors(&data);
    assert_eq!(errs.len(), 1);
    assert!(errs[0].contains("more than the"), "{errs:?}");
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let data = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let e = parse(data.as_bytes()).unwrap_err();
    assert!(e.first.message.contains("recursion limit"), "{e}");
}

#[test]
fn dns_names() {
    assert_eq!(dns1123_subdomain_problem("a.b-c.1"), None);
    assert!(dns1123_subdomain_problem("a..b").is_some());
    assert!(dns1123_subdomain_problem("-a").is_some());
    assert!(dns1123_subdomain_problem(&"a".repeat(254)).is_some());
}

#[test]
fn paths_quote_keys_that_are_not_identifiers() {
    let p = [Segment::Index(1), key("spec"), key("a/b")];
    assert_eq!(path_string(&p), r#"[1].spec["a/b"]"#);
}

#[test]
fn problems_before_a_syntax_error_are_kept_and_the_syntax_error_leads() {
    let data = "[{\"metadata\":{\"name\":\"A\"},\"spec\":{\"type\":\"iso\",\"metadata\":{\"uri\":\"u\"}}},\n {\"metadata\":";
    assert_eq!(
        errors(data),
        [
            r#"[0].metadata.name@1:22 "A" is not a valid name: 'A' is not allowed: use lower-case letters, digits, '-' and '.'"#,
            "@2:13 not valid JSON, the data ends too early (truncated?): EOF while parsing a value",
        ]
    );
    let e = parse(data.as_bytes()).unwrap_err();
    assert!(e.first.message.contains("truncated"), "{e}");
    assert_eq!(e.total, 2);
}

#[test]
fn encodings_and_empty_data_get_clear_messages() {
    let bom = check(b"\xEF\xBB\xBF[]");
    assert!(bom.is_valid());
    assert_eq!(bom.diagnostics[0].severity, Severity::Warning);
    assert!(bom.diagnostics[0].message.contains("byte order mark"));
    let utf16: Vec<u8> = "\u{feff}[]"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    assert_eq!(
        errors(std::str::from_utf8(&utf16).unwrap_or("\0[")),
        [
            "@1:1 the data is not UTF-8 (it looks like UTF-16 or UTF-32): channel data must be UTF-8 JSON"
        ]
    );
    assert_eq!(
        errors(" \n"),
        ["@1:1 no data: channel data must be a JSON array of versions (`[]` when there are none)"]
    );
    let e = parse(b"[{\"metadata\":{\"name\":\"a\xFF\"}}]").unwrap_err();
    assert!(e.first.message.contains("UTF-8"), "{e}");
}

#[test]
fn columns_count_characters() {
    // "é" is two bytes but one column: what follows it on the line is counted in characters.
    let data = "[{\"metadata\":{\"name\":\"é\"},\"spec\":{\"type\":1}}, é]";
    assert_eq!(
        errors(data),
        [
            r#"[0].metadata.name@1:22 "é" is not a valid name: 'é' is not allowed: use lower-case letters, digits, '-' and '.'"#,
            "[0].spec.type@1:42 must be \"container\" or \"iso\", found 1",
            "@1:47 not valid JSON: expected value",
        ]
    );
}

#[test]
fn duplicate_keys_are_warnings_at_the_value_that_is_used() {
    let data = "[{\"metadata\":{\"name\":\"a\"},\"spec\":{\"type\":\"iso\",\"metadata\":{\"uri\":\"\",\n\"uri\":\"u\"}}}]";
    let report = check(data.as_bytes());
    assert!(report.is_valid(), "{:?}", report.diagnostics);
    let d = &report.diagnostics[0];
    assert_eq!(
        (d.path.as_str(), d.line, d.column, d.severity),
        ("[0].spec.metadata.uri", 2, 7, Severity::Warning)
    );
    assert_eq!(
        report.versions[0].spec.metadata.as_ref().unwrap()["uri"],
        "u"
    );
}

#[test]
fn positions_inside_arrays_and_after_escaped_keys() {
    let data = indoc! {r#"
        [{"metadata": {"name": "a"}, "spec": {"type": "iso", "metadata": {"uri": "u"}}},
         {"metadata": {"name": "b", "x\"}": 1}, "spec": {"type": "container", "metadata": {"upgradeImage": "i"},
          "upgradeContainer": {"envs": [{"name": "A"}, {"name": "B", "value": "1", "value": "2"}]}}}]
    "#};
    let report = check(data.as_bytes());
    let found: Vec<_> = report
        .diagnostics
        .iter()
        .map(|d| format!("{}@{}:{}", d.path, d.line, d.column))
        .collect();
    assert_eq!(
        found,
        [
            "[1].spec.upgradeContainer.envs[1].value@3:85",
            r#"[1].metadata["x\"}"]@2:37"#,
        ]
    );
}

#[test]
fn long_values_are_shortened_in_messages() {
    let name = "N".repeat(1_000_000);
    let data = format!(r#"[{{"metadata":{{"name":"{name}"}},"spec":{{"type":"{name}"}}}}]"#);
    let errs = errors(&data);
    assert_eq!(errs.len(), 2);
    assert!(errs.iter().all(|e| e.len() < 300), "{errs:?}");
    assert!(errs[0].contains("(1000000 characters)"), "{errs:?}");
}

#[test]
fn a_kubernetes_list_gets_a_hint() {
    assert_eq!(
        errors(r#"{"kind":"List","items":[]}"#),
        [
            "@1:1 channel data must be a JSON array of versions, found an object (a Kubernetes List? the channel data is the array under its \"items\")"
        ]
    );
}

#[test]
fn reserved_labels_and_oversized_annotations() {
    let big = "x".repeat(MAX_ANNOTATIONS_BYTES);
    let data = format!(
        r#"[{{"metadata":{{"name":"a","labels":{{"rancheros.cattle.io/channel":"x"}},"annotations":{{"rancheros.cattle.io/channel-no-longer-in-sync":"true"}}}},"spec":{{"type":"iso","metadata":{{"uri":"u"}}}}}},
               {{"metadata":{{"name":"b","labels":null,"annotations":{{"a":"{big}"}}}},"spec":{{"type":"iso","metadata":{{"uri":"u"}}}}}}]"#
    );
    let report = check(data.as_bytes());
    let found: Vec<_> = report
        .diagnostics
        .iter()
        .map(|d| (d.severity, d.path.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                Severity::Warning,
                r#"[0].metadata.labels["rancheros.cattle.io/channel"]"#
            ),
            (
                Severity::Warning,
                r#"[0].metadata.annotations["rancheros.cattle.io/channel-no-longer-in-sync"]"#
            ),
            (Severity::Error, "[1].metadata.annotations"),
        ]
    );
}

#[test]
fn the_number_of_diagnostics_is_capped_but_all_are_counted() {
    let data = format!("[{}1]", "1,".repeat(MAX_DIAGNOSTICS + 9));
    let report = check(data.as_bytes());
    assert_eq!(report.diagnostics.len(), MAX_DIAGNOSTICS);
    let last = report.diagnostics.last().unwrap();
    assert!(
        last.message
            .starts_with("too many problems: 11 more errors"),
        "{last}"
    );
    assert_eq!(
        parse(data.as_bytes()).unwrap_err().total,
        MAX_DIAGNOSTICS + 10
    );
}

#[test]
fn error_summary_counts_the_rest() {
    let e = parse(br#"[1,2,3]"#).unwrap_err();
    assert_eq!(e.total, 3);
    assert!(e.to_string().contains("and 2 more problems"), "{e}");
}

mod redaction;

/// A version whose `spec.metadata.x` holds `levels` nested arrays.
fn nested_version(levels: usize) -> String {
    format!(
        r#"[{{"metadata":{{"name":"a"}},"spec":{{"type":"iso","metadata":{{"uri":"u","x":{}1{}}}}}}}]"#,
        "[".repeat(levels),
        "]".repeat(levels)
    )
}

#[test]
fn data_nested_deeper_than_32_levels_is_invalid_naming_the_path() {
    // Top-level array, item, spec, metadata: four levels before `x`.
    assert_eq!(errors(&nested_version(MAX_DEPTH - 4)), Vec::<String>::new());
    let errs = errors(&nested_version(MAX_DEPTH - 3));
    assert_eq!(errs.len(), 1, "{errs:?}");
    let want = format!("[0].spec.metadata.x{}@", "[0]".repeat(MAX_DEPTH - 4));
    assert!(errs[0].starts_with(&want), "{errs:?}");
    assert!(errs[0].contains("nested deeper than 32 levels"), "{errs:?}");
    // 120 levels: still this rule, not the parser's limit.
    let errs = errors(&nested_version(120));
    assert!(errs[0].contains("nested deeper than 32 levels"), "{errs:?}");
    assert!(parse(nested_version(120).as_bytes()).is_err());
}

/// One iso version with this `upgradeContainer`.
fn with_upgrade_container(c: &str) -> String {
    format!(
        r#"[{{"metadata":{{"name":"a"}},"spec":{{"type":"iso","metadata":{{"uri":"u"}},"upgradeContainer":{c}}}}}]"#
    )
}

/// The one error of a version with this `upgradeContainer`: it must be at the container.
fn the_upgrade_container_error(c: &str) -> String {
    let errs = errors(&with_upgrade_container(c));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("[0].spec.upgradeContainer@"),
        "{errs:?}"
    );
    errs[0].clone()
}

#[test]
fn an_upgrade_container_in_the_data_is_typed_and_bounded() {
    let with = with_upgrade_container;
    let err = the_upgrade_container_error(r#"{"image":"u","nested":{"a":1}}"#);
    assert!(err.contains("unknown field `nested`"), "{err}");
    let big = with(&format!(r#"{{"args":["{}"]}}"#, "x".repeat(400 * 1024)));
    let errs = errors(&big);
    assert!(errs[0].contains("more than the 64 KiB"), "{errs:?}");
    let ok =
        parse(with(r#"{"image":"u","securityContext":{"privileged":false,"zz":1}}"#).as_bytes())
            .unwrap();
    assert_eq!(
        Value::Object(ok.versions[0].spec.upgrade_container.clone().unwrap()),
        serde_json::json!({"image": "u", "securityContext": {"privileged": false}})
    );
}

#[test]
fn the_old_env_of_an_upgrade_container_is_a_warning_and_becomes_envs() {
    let with = with_upgrade_container;
    let report = check(with(r#"{"env":[{"name":"FORCE","value":"true"}]}"#).as_bytes());
    assert!(report.is_valid(), "{:?}", report.diagnostics);
    let found: Vec<_> = report
        .diagnostics
        .iter()
        .map(|d| (d.path.as_str(), d.severity, d.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [(
            "[0].spec.upgradeContainer.env",
            Severity::Warning,
            crate::schema::OLD_ENV_NOTE
        )]
    );
    assert_eq!(
        Value::Object(report.versions[0].spec.upgrade_container.clone().unwrap()),
        serde_json::json!({"envs": [{"name": "FORCE", "value": "true"}]})
    );
    // `envs` is the name itself: no warning.
    let report = check(with(r#"{"envs":[{"name":"FORCE","value":"true"}]}"#).as_bytes());
    assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
    // Both: one error, no warning.
    let err = the_upgrade_container_error(r#"{"envs":[],"env":[{"name":"A"}]}"#);
    assert!(err.contains("give only `envs`"), "{err}");
}
