use super::*;
use crate::crds::crds;

fn channel_spec_schema() -> Value {
    let crd = serde_json::to_value(&crds()[0]).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// Every leaf below `v`: a path, and the schema there.
fn walk<'a>(path: String, v: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.clone(), v));
    if let Some(props) = v["properties"].as_object() {
        for (k, sub) in props {
            walk(format!("{path}.{k}"), sub, out);
        }
    }
    if v["items"].is_object() {
        walk(format!("{path}[]"), &v["items"], out);
    }
    if v["additionalProperties"].is_object() {
        walk(format!("{path}{{}}"), &v["additionalProperties"], out);
    }
}

#[test]
fn every_option_and_upgrade_container_field_is_described_bounded_and_typed() {
    let spec = channel_spec_schema();
    for field in ["options", "upgradeContainer"] {
        let mut all = Vec::new();
        walk(field.into(), &spec["properties"][field], &mut all);
        assert!(all.len() > 50, "{field}: {}", all.len());
        for (path, s) in all {
            assert!(
                s.get("x-kubernetes-preserve-unknown-fields").is_none(),
                "{path} is free-form"
            );
            let bounded = match s["type"].as_str() {
                Some("string") => s["maxLength"].is_u64() || s["enum"].is_array(),
                Some("array") => s["maxItems"].is_u64(),
                Some("object") if s.get("additionalProperties").is_some() => {
                    s["maxProperties"].is_u64()
                }
                _ => true,
            };
            assert!(bounded, "{path} has no size bound: {s}");
            // Items of a list are described by the list itself.
            if !path.ends_with("[]") && !path.ends_with('}') {
                assert!(s["description"].is_string(), "{path} has no description");
            }
        }
    }
    assert_eq!(spec["properties"]["registry"]["maxLength"], 512);
    assert_eq!(spec["properties"]["options"]["maxProperties"], 32);
}

#[test]
fn the_options_schema_holds_every_option_of_every_type_and_no_other() {
    let spec = channel_spec_schema();
    let props: Vec<&String> = spec["properties"]["options"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    let mut want: Vec<&str> = TYPE_OPTIONS
        .iter()
        .flat_map(|(_, k)| k.iter().copied())
        .collect();
    want.sort_unstable();
    want.dedup();
    assert_eq!(props, want);
    // The operator's own list for custom and json agrees (`config` refuses the rest).
    for (type_, keys) in TYPE_OPTIONS.iter().take(2) {
        let mut options = Map::new();
        for k in *keys {
            options.insert((*k).into(), Value::Null);
        }
        options.insert("image".into(), json!("i"));
        options.insert("uri".into(), json!("https://x"));
        let err = crate::config::resolve(
            &serde_json::from_value(json!({"type": type_, "options": options})).unwrap(),
            &Default::default(),
        );
        // Only the key of the other type is refused, never one of the list.
        if let Err(e) = err {
            assert!(
                e.starts_with("spec.options.image") || e.starts_with("spec.options.uri"),
                "{type_}: {e}"
            );
        }
    }
}

#[test]
fn the_channel_crd_refuses_long_names_and_options_of_another_type() {
    let crd = serde_json::to_value(&crds()[0]).unwrap();
    let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    assert_eq!(
        root["x-kubernetes-validations"][0]["rule"],
        "self.metadata.name.size() <= 63"
    );
    let rules = root["properties"]["spec"]["x-kubernetes-validations"]
        .as_array()
        .unwrap();
    let json_rule = rules
        .iter()
        .find(|r| {
            r["message"]
                .as_str()
                .unwrap()
                .contains("a json channel takes only")
        })
        .unwrap();
    let text = json_rule["rule"].as_str().unwrap();
    assert!(text.contains("has(self.options.image)"), "{text}");
    assert!(!text.contains("has(self.options.uri)"), "{text}");
    assert!(!text.contains("has(self.options.timeout)"), "{text}");
}

#[test]
fn bound_fills_only_missing_bounds_at_every_level() {
    let mut v = json!({"type": "object", "properties": {
        "a": {"type": "string"},
        "b": {"type": "string", "maxLength": 3},
        "c": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"}}}
    }});
    bound(&mut v);
    assert_eq!(v["properties"]["a"]["maxLength"], STRING_MAX);
    assert_eq!(v["properties"]["b"]["maxLength"], 3);
    let c = &v["properties"]["c"];
    assert_eq!(c["maxItems"], ITEMS_MAX);
    assert_eq!(c["items"]["maxProperties"], PROPERTIES_MAX);
    assert_eq!(c["items"]["additionalProperties"]["maxLength"], STRING_MAX);
}

fn container(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn an_upgrade_container_is_checked_against_its_type_and_size() {
    let ok = container(json!({"image": "u", "command": ["a"], "args": ["b"],
        "envs": [{"name": "A", "value": "1"}], "envFrom": [{"secretRef": {"name": "s"}}],
        "volumes": [{"name": "host", "source": "/", "destination": "/host"}],
        "securityContext": {"privileged": true}}));
    assert_eq!(typed_upgrade_container(&ok).unwrap(), ok);
    assert_eq!(typed_upgrade_container(&Map::new()).unwrap(), Map::new());

    let unknown = typed_upgrade_container(&container(json!({"imag": "u"}))).unwrap_err();
    assert!(unknown.contains("unknown field `imag`"), "{unknown}");
    let wrong = typed_upgrade_container(&container(json!({"args": "b"}))).unwrap_err();
    assert!(wrong.contains("invalid type"), "{wrong}");

    let big = container(json!({"args": ["x".repeat(MAX_UPGRADE_CONTAINER_BYTES)]}));
    let why = typed_upgrade_container(&big).unwrap_err();
    assert!(why.contains("more than the 64 KiB"), "{why}");
    assert!(why.len() < 100, "{why}");
    let at_bound = container(json!({"args": ["x".repeat(MAX_UPGRADE_CONTAINER_BYTES - 13)]}));
    assert_eq!(
        serde_json::to_vec(&at_bound).unwrap().len(),
        MAX_UPGRADE_CONTAINER_BYTES
    );
    assert_eq!(typed_upgrade_container(&at_bound).unwrap(), at_bound);
}

#[test]
fn a_deep_upgrade_container_loses_what_its_type_lacks() {
    let mut deep = json!(1);
    for _ in 0..130 {
        deep = json!({"a": deep});
    }
    let why = typed_upgrade_container(&container(json!({"a": deep.clone()}))).unwrap_err();
    assert!(why.contains("unknown field `a`"), "{why}");
    // Below a Kubernetes type, unknown keys are dropped, as the API server prunes them.
    let typed = typed_upgrade_container(&container(
        json!({"securityContext": {"privileged": false, "a": deep}, "image": "u"}),
    ))
    .unwrap();
    assert_eq!(
        Value::Object(typed),
        json!({"securityContext": {"privileged": false}, "image": "u"})
    );
}

fn sorted<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut keys: Vec<&str> = keys.into_iter().collect();
    keys.sort_unstable();
    keys
}

#[test]
fn upgrade_container_in_both_crds_is_the_suc_container_spec_plus_the_old_env() {
    // SUC's own names, from its type; `env` is the one addition.
    let suc = super::suc::container_fields();
    assert_eq!(suc.len(), 7, "{suc:?}");
    let mut want: Vec<&str> = suc.iter().map(String::as_str).collect();
    want.push(OLD_ENV);
    let volume_fields = super::suc::volume_fields();
    for crd in crds() {
        let crd = serde_json::to_value(&crd).unwrap();
        let container = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["upgradeContainer"];
        let props = container["properties"].as_object().unwrap();
        assert_eq!(
            sorted(props.keys().map(String::as_str)),
            sorted(want.iter().copied())
        );
        let volume = props["volumes"]["items"]["properties"].as_object().unwrap();
        assert_eq!(
            sorted(volume.keys().map(String::as_str)),
            sorted(volume_fields.iter().map(String::as_str))
        );
        // Both spellings are the same list of core/v1 EnvVar, with the same bound.
        assert_eq!(props["envs"]["items"], props["env"]["items"]);
        assert_eq!(props["envs"]["maxItems"], props["env"]["maxItems"]);
        assert!(props["envs"]["items"]["properties"]["valueFrom"].is_object());
        let described = props["env"]["description"].as_str().unwrap();
        assert!(described.contains("old spelling of `envs`"), "{described}");
    }
}

#[test]
fn the_channel_crd_refuses_both_spellings_of_envs() {
    let spec = channel_spec_schema();
    let rules = spec["properties"]["upgradeContainer"]["x-kubernetes-validations"]
        .as_array()
        .unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["rule"], "!(has(self.envs) && has(self.env))");
    let message = rules[0]["message"].as_str().unwrap();
    assert!(message.contains("give only `envs`"), "{message}");
}

#[test]
fn the_old_spelling_env_is_read_and_written_as_envs() {
    let vars = json!([{"name": "FORCE", "value": "true"},
        {"name": "FROM", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]);
    let old = container(json!({"image": "u", "env": vars.clone()}));
    let typed = typed_upgrade_container(&old).unwrap();
    assert_eq!(
        Value::Object(typed),
        json!({"image": "u", "envs": vars.clone()})
    );
    // `envs` as it is; `env: null` is no value at all.
    let new = container(json!({"envs": vars.clone(), "env": null}));
    assert_eq!(
        Value::Object(typed_upgrade_container(&new).unwrap()),
        json!({"envs": vars})
    );
}

#[test]
fn both_spellings_of_envs_are_refused_with_a_clear_message() {
    for env in [json!([{"name": "A", "value": "1"}]), json!([])] {
        let both = container(json!({"envs": [{"name": "B", "value": "2"}], "env": env}));
        let why = typed_upgrade_container(&both).unwrap_err();
        assert_eq!(
            why,
            "has both `envs` and `env`, its old spelling: give only `envs`"
        );
    }
}

#[test]
fn a_field_the_suc_container_lacks_is_still_refused() {
    // `imagePullPolicy` is no field of the system-upgrade-controller's container.
    for field in ["imagePullPolicy", "resources", "name", "Envs"] {
        let mut c = Map::new();
        c.insert(field.into(), json!("x"));
        let why = typed_upgrade_container(&c).unwrap_err();
        assert!(why.contains(&format!("unknown field `{field}`")), "{why}");
        assert!(why.contains("`envs`"), "{why}");
    }
    let why = typed_upgrade_container(&container(
        json!({"volumes": [{"name": "h", "source": "/", "destination": "/host", "readOnly": true}]}),
    ))
    .unwrap_err();
    assert!(why.contains("unknown field `readOnly`"), "{why}");
}
