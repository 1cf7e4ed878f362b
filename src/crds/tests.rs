use super::*;
use serde_json::{Map, json};

fn channel_crd() -> CustomResourceDefinition {
    crds().remove(0)
}

/// Every `format` keyword below `v` (a schema as JSON), with the `type` beside it. A
/// property named `format` is a schema (an object), never a string, so it is not taken
/// for the keyword.
fn formats<'a>(v: &'a Value, out: &mut Vec<(Option<&'a str>, &'a str)>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(f)) = m.get("format") {
                out.push((m.get("type").and_then(Value::as_str), f));
            }
            m.values().for_each(|sub| formats(sub, out));
        }
        Value::Array(items) => items.iter().for_each(|sub| formats(sub, out)),
        _ => {}
    }
}

#[test]
fn no_generated_crd_has_a_format_kubernetes_does_not_know() {
    let mut seen = 0;
    for crd in crds() {
        let mut found = Vec::new();
        let spec = serde_json::to_value(&crd.spec).unwrap();
        formats(&spec, &mut found);
        for (type_, format) in &found {
            assert!(
                known_format(*type_, format),
                "{}: format {format:?} on type {type_:?}",
                crd.spec.names.plural
            );
        }
        seen += found.len();
    }
    // The formats Kubernetes knows stay (`int64`, `date-time` of the status).
    assert!(seen > 10, "{seen}");
}

#[test]
fn the_known_formats_are_those_the_api_server_knows() {
    // Per type: formats the API server knows, and formats it does not.
    let cases: [(Option<&str>, &[&str], &[&str]); 6] = [
        (
            Some("integer"),
            &["int32", "int64"],
            &["uint32", "uint64", "uint", "uint8"],
        ),
        (Some("number"), &["double", "float"], &["int64"]),
        (Some("string"), &["date-time", "byte"], &["int64", "semver"]),
        (None, &["uri"], &[]),
        (Some("boolean"), &[], &["date"]),
        (Some("object"), &[], &["uri"]),
    ];
    for (type_, known, unknown) in cases {
        for format in known {
            assert!(known_format(type_, format), "{type_:?} {format}");
        }
        for format in unknown {
            assert!(!known_format(type_, format), "{type_:?} {format}");
        }
    }
}

#[test]
fn unknown_formats_are_dropped_at_every_level_and_known_ones_kept() {
    let mut schema: JSONSchemaProps = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "keep": {"type": "integer", "format": "uint32", "minimum": 1.0},
            "list": {"type": "array", "items": {"type": "integer", "format": "uint64"}},
            "map": {"type": "object", "additionalProperties": {"type": "number", "format": "uint"}},
            "any": {"anyOf": [{"type": "integer", "format": "uint16"}, {"type": "string", "format": "date-time"}]},
            "format": {"type": "integer", "format": "int64"}
        }
    }))
    .unwrap();
    strip_unknown_formats(&mut schema);
    let v = serde_json::to_value(&schema).unwrap();
    let p = &v["properties"];
    assert_eq!(p["keep"], json!({"type": "integer", "minimum": 1.0}));
    assert!(p["list"]["items"].get("format").is_none(), "{v}");
    assert!(
        p["map"]["additionalProperties"].get("format").is_none(),
        "{v}"
    );
    assert!(p["any"]["anyOf"][0].get("format").is_none(), "{v}");
    assert_eq!(p["any"]["anyOf"][1]["format"], "date-time");
    assert_eq!(p["format"]["format"], "int64");
}

#[test]
fn canonical_json_sorts_keys_at_every_level_and_has_no_whitespace() {
    let v = json!({"b": [ {"z": 1, "a": "x y"} ], "a": {"d": null, "c": true}, "é": 1.5});
    assert_eq!(
        canonical_json(&v),
        r#"{"a":{"c":true,"d":null},"b":[{"a":"x y","z":1}],"é":1.5}"#
    );
}

#[test]
fn the_schema_hash_is_hex_sha256_and_stable() {
    // The FIPS 180-2 test vector, in lower-case hex.
    assert_eq!(
        sha256_hex("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let crd = channel_crd();
    let hash = schema_hash(&crd.spec);
    let canonical = canonical_json(&serde_json::to_value(&crd.spec).unwrap());
    assert_eq!(hash, sha256_hex(&canonical));
    // Same schema, same hash: across calls and whatever order the keys come in.
    assert_eq!(schema_hash(&channel_crd().spec), hash);
    let reordered: CustomResourceDefinitionSpec = serde_json::from_str(
        &serde_json::to_string(&serde_json::to_value(&crd.spec).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(schema_hash(&reordered), hash);
    // Metadata does not count.
    let mut labelled = crd.clone();
    labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    assert_eq!(schema_hash(&labelled.spec), hash);
}

#[test]
fn the_schema_hash_changes_when_the_schema_changes() {
    let crd = channel_crd();
    let hash = schema_hash(&crd.spec);
    let spec = serde_json::to_value(&crd.spec).unwrap();
    let changed = |change: &dyn Fn(&mut Map<String, Value>)| {
        let mut spec = spec.clone();
        let props =
            spec["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                .as_object_mut()
                .unwrap();
        assert!(props.contains_key("suspend"), "{props:?}");
        change(props);
        let spec: CustomResourceDefinitionSpec = serde_json::from_value(spec).unwrap();
        schema_hash(&spec)
    };
    // A field's description, a field fewer (an older schema), a rule more.
    assert_ne!(
        changed(&|p| p["suspend"]["description"] = json!("another")),
        hash
    );
    assert_ne!(
        changed(&|p| {
            p.remove("suspend");
        }),
        hash
    );
    assert_ne!(
        changed(&|p| p["suspend"]["x-kubernetes-validations"] = json!([{"rule": "true"}])),
        hash
    );
    // The two resources have different schemas, so different hashes.
    assert_ne!(schema_hash(&crds()[1].spec), hash);
}

#[test]
fn every_crd_carries_the_hash_of_its_own_spec() {
    let all = crds();
    assert_eq!(all.len(), 2);
    for crd in all {
        let annotations = crd.metadata.annotations.clone().unwrap();
        assert_eq!(annotations[SCHEMA_HASH_ANNOTATION], schema_hash(&crd.spec));
        assert_eq!(check_crd(&crd, &schema_hash(&crd.spec)), Ok(()));
    }
}

#[test]
fn the_manifests_read_back_as_the_crds() {
    let manifests = manifests().unwrap();
    let files: Vec<&str> = manifests.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        files,
        ["managedosversionchannels.yaml", "managedosversions.yaml"]
    );
    for ((_, yaml), crd) in manifests.iter().zip(crds()) {
        assert!(yaml.starts_with("---\n"), "{yaml}");
        let read: Value = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(read, serde_json::to_value(&crd).unwrap());
        // Deterministic: the same text every time.
        assert_eq!(manifests, super::manifests().unwrap());
    }
}

#[test]
fn the_manifests_keep_rules_and_descriptions_readable() {
    let (_, yaml) = &manifests().unwrap()[0];
    assert!(
        yaml.contains(&format!("{SCHEMA_HASH_ANNOTATION}: ")),
        "{yaml}"
    );
    assert!(yaml.contains("x-kubernetes-validations:"), "{yaml}");
    // Block style, two spaces a level: no flow mappings for the big objects.
    assert!(
        yaml.contains("\nspec:\n  group: rancheros.cattle.io\n"),
        "{yaml}"
    );
}

#[test]
fn the_expected_crds_are_named_after_the_types_or_the_test_group() {
    let names: Vec<String> = expected(None).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "managedosversionchannels.rancheros.cattle.io",
            "managedosversions.rancheros.cattle.io"
        ]
    );
    let test: Vec<(String, String)> = expected(Some("t.example"));
    assert_eq!(test[0].0, "managedosversionchannels.t.example");
    assert_eq!(test[0].1, expected(None)[0].1);
}

#[test]
fn check_crd_names_the_crd_both_hashes_and_the_fix() {
    let expected = schema_hash(&channel_crd().spec);
    let mut old = channel_crd();
    old.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(SCHEMA_HASH_ANNOTATION.into(), "0123abcd".into());
    let err = check_crd(&old, &expected).unwrap_err();
    assert_eq!(
        err,
        CrdMismatch::OtherSchemaHash {
            name: "managedosversionchannels.rancheros.cattle.io".into(),
            installed: "0123abcd".into(),
            expected: expected.clone(),
        }
    );
    let text = err.to_string();
    for part in [
        "managedosversionchannels.rancheros.cattle.io",
        "0123abcd",
        expected.as_str(),
        "`kubectl apply -f crds/`",
    ] {
        assert!(text.contains(part), "{text}");
    }
    assert!(!text.contains('\n'), "{text}");

    // A CRD of an operator from before the hash: no annotation at all.
    let mut older = channel_crd();
    older.metadata.annotations = None;
    let err = check_crd(&older, &expected).unwrap_err();
    assert!(matches!(err, CrdMismatch::NoSchemaHash { .. }), "{err}");
    assert!(err.to_string().contains(SCHEMA_HASH_ANNOTATION), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");

    let missing = CrdMismatch::NotInstalled {
        name: "managedosversions.rancheros.cattle.io".into(),
    }
    .to_string();
    assert!(missing.contains("`kubectl apply -f crds/`"), "{missing}");
    assert!(missing.contains("Helm chart"), "{missing}");
}
