//! `without_values`: messages that quote no byte of the data.

use super::*;

/// Channel data with a secret-looking value in every kind of field, and in syntax errors:
/// `{S}` is a string secret, `{N}` a numeric one.
const HOSTILE: &[&str] = &[
    // Values the rules quote.
    r#"[{"metadata": {"name": "{S}"}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": {"name": "{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}{S}"}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": {"name": "a", "labels": {"{S}": "v"}}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": {"name": "a", "labels": {"k": "{S}"}}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": {"name": "a", "labels": {"{S}": 1}}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": {"name": "a", "annotations": {"{S}": "v"}}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": {"name": "a", "annotations": {"x/{S}": "v"}}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": {"name": "a", "annotations": {"{S}": {"{S}": "{S}"}}}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": "{S}"}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": {N}}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": -{N}.{N}e-5}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": ["{S}"]}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": "container", "version": {N}, "metadata": {"upgradeImage": "{S}"}}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": "iso", "minVersion": ["{S}"], "metadata": {"uri": "{S}"}}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": "container", "metadata": {"upgradeImage": {N}}}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": "iso", "metadata": "{S}"}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": "iso", "upgradeContainer": "{S}", "metadata": {"uri": "u"}}}]"#,
    r#"[{"metadata": "{S}", "spec": "{S}"}]"#,
    r#"[{"metadata": {"name": {N}}, "{S}": "{S}"}]"#,
    r#"[{"metadata": {"{S}": "{S}"}, "spec": {"{S}": "{S}"}}]"#,
    r#"["{S}", {N}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}, {"metadata": {"name": "a"}, "spec": {"type": "{S}"}}]"#,
    // Syntax errors around the secret.
    r#"[{"metadata": {"name": "a"}, "spec": {S}}]"#,
    r#"[{"metadata": {"name": "a"}, "spec": "{S}" "{S}"}]"#,
    r#"[{"metadata": {"name": "{S}\q"}}]"#,
    r#"[{"metadata": {"name": "{S}"#,
    r#"[{"{S}": "{S}"} {S}]"#,
    r#"[{"{S}" "{S}"}]"#,
    r#"[{{S}: 1}]"#,
    r#"[{N}e99999{N}]"#,
    r#"[{N}{S}]"#,
    r#"[1] {S}"#,
    r#"{S}: {S}"#,
    r#"- {S}"#,
    r#"{S}"#,
    r#""{S}""#,
    r#"{"{S}": "{S}"}"#,
    r#"{"items": ["{S}"]}"#,
    "[\"{S}\u{1}\"]",
];

/// Two secrets of the same shape (length, character classes): a message that does not
/// depend on the secret is the same for both.
const SECRETS: [(&str, &str); 2] = [
    ("Tok3n-Жж-9f8e7d", "1234567890"),
    ("Qxz7w-Фф-1a2b3c", "9876543210"),
];

fn hostile(template: &str, (s, n): (&str, &str)) -> Vec<u8> {
    template.replace("{S}", s).replace("{N}", n).into_bytes()
}

#[test]
fn without_values_no_byte_of_hostile_data_is_shown() {
    let mut quoted = 0;
    for template in HOSTILE {
        let rendered: Vec<(String, String)> = SECRETS
            .iter()
            .map(|secret| {
                let e = parse(&hostile(template, *secret)).unwrap_err();
                (e.to_string(), e.without_values())
            })
            .collect();
        for ((full, bare), (s, n)) in rendered.iter().zip(SECRETS) {
            let pieces = [&s[..5], &s[s.len() - 6..], &n[..5], &n[5..]];
            if pieces.iter().any(|p| full.contains(p)) {
                quoted += 1;
            }
            for piece in pieces {
                assert!(
                    !bare.contains(piece),
                    "{template}: {bare:?} shows {piece:?}"
                );
            }
            // The rules speak ASCII; anything else came from the data.
            assert!(bare.is_ascii(), "{template}: {bare:?}");
            // Not even one character of it.
            let first = s.chars().next().unwrap();
            assert!(
                !bare.contains(&format!("'{first}'")),
                "{template}: {bare:?}"
            );
            assert!(bare.starts_with("invalid channel data: line "), "{bare}");
        }
        // Whatever the secret, the same words: nothing in them depends on it.
        assert_eq!(rendered[0].1, rendered[1].1, "{template}");
    }
    // The full messages, for custom channels and `validate`, do quote them.
    assert!(quoted >= 10, "only {quoted} full messages quote the secret");
}

#[test]
fn without_values_keeps_the_place_and_the_rule() {
    let cases = [
        (
            r#"[{"metadata": {"name": "Tok3n"}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
            "invalid channel data: line 1, column 24: [0].metadata.name: not a valid name: a name is a DNS-1123 subdomain",
        ),
        (
            r#"[{"metadata": {"name": "a", "labels": {"Tök": "v"}}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
            "invalid channel data: line 1, column 47: [0].metadata.labels[<key>]: not a valid key: a key is [prefix/]name",
        ),
        (
            r#"[{"metadata": {"name": "a", "labels": {"k": "Tök"}}, "spec": {"type": "iso", "metadata": {"uri": "u"}}}]"#,
            "invalid channel data: line 1, column 45: [0].metadata.labels[<key>]: not a valid label value: a label value is",
        ),
        (
            r#"[{"metadata": {"name": "a"}, "spec": {"type": "rpm"}}]"#,
            r#"invalid channel data: line 1, column 47: [0].spec.type: must be "container" or "iso", found a string"#,
        ),
        (
            r#"[{"metadata": {"name": "a"}, "spec": Tok3n}]"#,
            "invalid channel data: line 1, column 38: not valid JSON: expected value",
        ),
    ];
    for (data, want) in cases {
        let e = parse(data.as_bytes()).unwrap_err();
        assert!(
            e.without_values().starts_with(want),
            "{}",
            e.without_values()
        );
    }
    // What has no value to hide reads as before.
    let e = parse(br#"[1,2,3]"#).unwrap_err();
    assert_eq!(e.without_values(), e.to_string());
    // validate's JSON output is unchanged: the value-free form is not serialized.
    let d = &check(br#"[{"metadata": {"name": "Tok3n"}}]"#).diagnostics[0];
    assert_eq!(
        serde_json::to_value(d).unwrap().as_object().unwrap().len(),
        5,
        "{d:?}"
    );
}

#[test]
fn without_values_hides_the_key_of_a_left_out_problem() {
    // Every kept error is a duplicate name (which a sync tolerates), so the first error a
    // sync reports is the note about the ones left out, placed at a label key the data chose.
    let item = r#"{"metadata":{"name":"a"},"spec":{"type":"iso","metadata":{"uri":"u"}}}"#;
    let secret = r#"{"metadata":{"name":"b","labels":{"Tok3n-Жж":"v"}},"spec":{"type":"iso","metadata":{"uri":"u"}}}"#;
    let data = format!("[{},{secret}]", vec![item; MAX_DIAGNOSTICS].join(","));
    let e = parse(data.as_bytes()).unwrap_err();
    assert!(e.first.message.starts_with("too many problems"), "{e}");
    assert!(e.to_string().contains("Tok3n"), "{e}");
    let bare = e.without_values();
    assert!(
        bare.contains("[100000].metadata.labels[<key>]: too many problems"),
        "{bare}"
    );
    assert!(!bare.contains("Tok3n") && bare.is_ascii(), "{bare}");
}
