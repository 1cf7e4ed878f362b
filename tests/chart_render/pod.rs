//! The operator's pod as the values shape it: flags, pull secrets, policies, limits, probes, shards and metadata.

use super::*;

#[test]
fn every_operator_flag_with_an_env_var_has_a_value() {
    // The flags' env vars, from the operator's argument definitions.
    let source = std::fs::read_to_string(root().join("src/commands/operator/flags.rs")).unwrap();
    // The old names' env vars (hidden aliases) are not rendered: the chart sets the new ones.
    let flags: BTreeSet<String> = source
        .split("#[arg(")
        .filter(|arg| !arg.contains("hide = true"))
        .flat_map(|arg| arg.split("env = \"").skip(1))
        .map(|rest| rest.split('"').next().unwrap().to_string())
        .collect();
    assert!(flags.len() > 10, "{flags:?}");
    // The CI values set every value; allowPrivilegedRunners, egressDenyPrivateRanges and
    // metrics.insecure are off there on purpose (the CI's json sources are on the node's private address).
    let values = chart_dir().join("ci/namespaced-values.yaml");
    let docs = render(&[
        "--values",
        values.to_str().unwrap(),
        "--set",
        "operator.allowPrivilegedRunners=true",
        // With shards, the Deployment for the rest has a selector (WATCH_LABEL_SELECTOR).
        "--set",
        "shards.values={x}",
        "--set",
        "operator.egressDenyPrivateRanges=true",
        "--set",
        "metrics.insecure=true",
    ]);
    let c = check_common(&docs, "ros-operator");
    let rendered: BTreeSet<String> = env_of(&c).into_iter().map(|(n, _)| n).collect();
    let missing: Vec<&String> = flags.difference(&rendered).collect();
    assert!(
        missing.is_empty(),
        "operator flags without a chart value (env not rendered): {missing:?}"
    );
    assert_eq!(
        env_value(&c, "ALLOW_PRIVILEGED_RUNNERS"),
        Some(json!("true"))
    );
}

#[test]
fn syncer_pull_secrets_default_to_the_operators_and_can_be_set_or_emptied() {
    let secrets = |args: &[&str]| {
        let docs = render(args);
        env_value(
            &check_common(&docs, "rel-rancheros-operator"),
            "SYNCER_IMAGE_PULL_SECRETS",
        )
    };
    assert_eq!(
        secrets(&[
            "--set",
            "imagePullSecrets[0].name=a,imagePullSecrets[1].name=b"
        ]),
        Some(json!("a,b"))
    );
    assert_eq!(
        secrets(&[
            "--set",
            "imagePullSecrets[0].name=a",
            "--set",
            "operator.syncerImagePullSecrets={c,d}",
        ]),
        Some(json!("c,d"))
    );
    assert_eq!(
        secrets(&[
            "--set",
            "imagePullSecrets[0].name=a",
            "--set-json",
            "operator.syncerImagePullSecrets=[]",
        ]),
        None
    );
}

#[test]
fn network_policy_needs_the_api_server_addresses() {
    let stderr = run_failing(&mut helm_template(&["--set", "networkPolicy.enabled=true"]));
    assert!(
        stderr.contains("networkPolicy.enabled needs networkPolicy.apiServer.cidrs"),
        "{stderr}"
    );
    for key in ["egressDenyCidrs", "jsonDenyCidrs"] {
        let set = format!("operator.{key}={{not-a-cidr}}");
        let stderr = run_failing(&mut helm_template(&["--set", &set]));
        assert!(stderr.contains("does not match pattern"), "{key}: {stderr}");
    }
}

/// jsonDenyCidrs, jsonAllowCidrs and jsonDenyPrivateRanges, the egress values' old names,
/// are still honoured: alone, and added to the new ones.
#[test]
fn old_egress_value_names_are_honoured_as_aliases() {
    let env = |args: &[&str]| {
        let docs = render(args);
        let c = check_common(&docs, "rel-rancheros-operator");
        [
            "EGRESS_DENY_CIDRS",
            "EGRESS_ALLOW_CIDRS",
            "EGRESS_DENY_PRIVATE_RANGES",
        ]
        .map(|var| env_value(&c, var))
    };
    let old = [
        "--set",
        "operator.jsonDenyCidrs={10.0.0.0/8}",
        "--set",
        "operator.jsonAllowCidrs={10.1.0.0/16}",
        "--set",
        "operator.jsonDenyPrivateRanges=true",
    ];
    assert_eq!(
        env(&old),
        [
            Some(json!("10.0.0.0/8")),
            Some(json!("10.1.0.0/16")),
            Some(json!("true"))
        ]
    );
    let both = [
        &old[..],
        &[
            "--set",
            "operator.egressDenyCidrs={127.0.0.0/8}",
            "--set",
            "operator.egressAllowCidrs={10.2.0.0/16}",
        ],
    ]
    .concat();
    assert_eq!(
        env(&both),
        [
            Some(json!("127.0.0.0/8,10.0.0.0/8")),
            Some(json!("10.2.0.0/16,10.1.0.0/16")),
            Some(json!("true"))
        ]
    );
}

/// The chart's default memory limit holds the worst case docs/security.md works out for
/// the chart's defaults.
#[test]
fn default_memory_limit_holds_the_documented_worst_case() {
    let doc = std::fs::read_to_string(root().join("docs/security.md")).unwrap();
    let line = doc
        .lines()
        .find(|l| l.contains("worst case, against the chart's limit"))
        .expect("docs/security.md works out the worst case");
    // "= 352 MiB  worst case, against the chart's limit of 384 MiB"
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [worst, documented_limit] = numbers[..] else {
        panic!("cannot read {line:?}")
    };
    let docs = render(&[]);
    let c = check_common(&docs, "rel-rancheros-operator");
    let limit = c["resources"]["limits"]["memory"].as_str().unwrap();
    let mib: u64 = limit
        .strip_suffix("Mi")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("limit {limit} is not in Mi"));
    assert_eq!(
        mib, documented_limit,
        "docs/security.md names another limit"
    );
    assert!(worst < mib, "worst case {worst} MiB > limit {mib} MiB");
    // The arithmetic's inputs are the chart's defaults.
    assert_eq!(env_value(&c, "MAX_OUTPUT_BYTES"), Some(json!("16Mi")));
    assert_eq!(env_value(&c, "JSON_CACHE_BYTES"), Some(json!("16Mi")));
}

/// The operator pods' shape from ci/extras-values.yaml: revision history, budget, spread,
/// priority, pod metadata, probe timing (the endpoints stay the chart's), extra args, env
/// and volumes.
#[test]
fn extras_values_shape_the_pod_as_users_expect() {
    let values = chart_dir().join("ci/extras-values.yaml");
    let docs = render(&["--values", values.to_str().unwrap()]);
    let c = check_common(&docs, "rel-rancheros-operator");
    let dep = find(&docs, "Deployment", "rel-rancheros-operator");
    let selector = &dep["spec"]["selector"]["matchLabels"];
    let pod = &dep["spec"]["template"];
    assert_eq!(dep["spec"]["revisionHistoryLimit"], 3);

    let pdb = find(&docs, "PodDisruptionBudget", "rel-rancheros-operator");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["metadata"]["namespace"], "ops");
    assert_eq!(
        pdb["spec"],
        json!({"selector": {"matchLabels": selector}, "minAvailable": 1,
               "unhealthyPodEvictionPolicy": "AlwaysAllow"})
    );

    // A constraint without a selector spreads the operator pods; one with keeps its own.
    let spread = &pod["spec"]["topologySpreadConstraints"];
    assert_eq!(spread[0]["labelSelector"], json!({"matchLabels": selector}));
    assert_eq!(spread[0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(
        spread[1]["labelSelector"],
        json!({"matchLabels": {"example.com/spread": "operators"}})
    );
    assert_eq!(spread.as_array().unwrap().len(), 2);
    assert_eq!(pod["spec"]["priorityClassName"], "high-priority");
    assert_eq!(
        pod["metadata"]["annotations"]["example.com/team"],
        "platform"
    );
    assert_eq!(pod["metadata"]["labels"]["example.com/spread"], "operators");
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(&pod["metadata"]["labels"][k], v, "selector label {k}");
    }

    assert_eq!(
        c["livenessProbe"],
        json!({"httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": 15,
               "periodSeconds": 30, "timeoutSeconds": 3, "failureThreshold": 5,
               "terminationGracePeriodSeconds": 10})
    );
    assert_eq!(
        c["readinessProbe"],
        json!({"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5,
               "timeoutSeconds": 2, "successThreshold": 1, "failureThreshold": 6})
    );
    assert_eq!(c["args"], json!(["operator", "--retry-delay=20s"]));
    // The private CA: the volume, its mount, SSL_CERT_DIR naming the mount.
    assert_eq!(
        pod["spec"]["volumes"],
        json!([{"name": "channel-ca", "configMap": {"name": "channel-ca"}}])
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "channel-ca", "mountPath": "/etc/rancheros-operator/ca", "readOnly": true}])
    );
    assert_eq!(
        env_value(&c, "SSL_CERT_DIR"),
        Some(json!("/etc/rancheros-operator/ca"))
    );
    assert_eq!(test_pod(&docs)["spec"]["containers"][0]["args"][3], "90s");
}

/// The `helm test` pod of a rendering.
fn test_pod(docs: &[Value]) -> &Value {
    find(docs, "Pod", "rel-rancheros-operator-test-readyz")
}

/// The test pod: a `helm test` hook on the operator image that asks /readyz through the
/// metrics Service, Pod Security `restricted` whatever the operator pod's context is, and
/// selected by neither the Service nor the NetworkPolicy.
#[test]
fn helm_test_pod_asks_readyz_through_the_service_and_is_restricted() {
    let values = chart_dir().join("ci/namespaced-values.yaml");
    let docs = render(&[
        "--values",
        values.to_str().unwrap(),
        // A looser operator pod context must not loosen the test pod's.
        "--set-json",
        r#"podSecurityContext={},securityContext={"readOnlyRootFilesystem":false}"#,
    ]);
    let dep = find(&docs, "Deployment", "ros-operator");
    let operator = &dep["spec"]["template"]["spec"]["containers"][0];
    let pod = find(&docs, "Pod", "ros-operator-test-readyz");
    assert_eq!(pod["metadata"]["namespace"], "ops");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(
        pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"],
        "before-hook-creation,hook-succeeded"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
    let c = &spec["containers"][0];
    assert_eq!(spec["containers"].as_array().unwrap().len(), 1);
    assert_eq!(c["image"], operator["image"], "the operator's own image");
    assert_eq!(c["imagePullPolicy"], "Always");
    let svc = find(&docs, "Service", "ros-operator-metrics");
    assert_eq!(
        c["args"],
        json!([
            "probe",
            "http://ros-operator-metrics.ops.svc:9443/readyz",
            "--timeout",
            "60s"
        ])
    );
    assert_eq!(svc["spec"]["ports"][0]["port"], 9443);
    // Pod Security restricted (v1.33+): non-root, seccomp, no escalation, no capabilities.
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert!(c["resources"]["limits"]["memory"].is_string());
    // Neither the Service nor the egress policy selects it.
    let labels = pod["metadata"]["labels"].as_object().unwrap();
    let selects = |selector: &Value| {
        selector
            .as_object()
            .unwrap()
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    };
    assert!(!selects(&svc["spec"]["selector"]), "{labels:?}");
    let np = find(&docs, "NetworkPolicy", "ros-operator-egress");
    assert!(!selects(&np["spec"]["podSelector"]["matchLabels"]));
    assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux"}));

    // Off with tests.enabled=false, and without the Service it would ask.
    for set in ["tests.enabled=false", "metrics.service.enabled=false"] {
        let docs = render(&["--set", set]);
        assert!(of_kind(&docs, "Pod").is_empty(), "{set}");
    }
}

#[test]
fn pod_disruption_budget_takes_one_bound() {
    let budget = |args: &[&str]| {
        let docs = render(args);
        find(&docs, "PodDisruptionBudget", "rel-rancheros-operator")["spec"].clone()
    };
    let spec = budget(&["--set", "podDisruptionBudget.enabled=true"]);
    assert_eq!(spec["maxUnavailable"], 1, "neither bound: maxUnavailable 1");
    assert!(spec.get("minAvailable").is_none());
    assert!(spec.get("unhealthyPodEvictionPolicy").is_none());
    let spec = budget(&[
        "--set",
        "podDisruptionBudget.enabled=true,podDisruptionBudget.maxUnavailable=50%",
    ]);
    assert_eq!(spec["maxUnavailable"], "50%");
    let spec = budget(&[
        "--set",
        "podDisruptionBudget.enabled=true,podDisruptionBudget.minAvailable=0",
    ]);
    assert_eq!(spec["minAvailable"], 0, "0 is a bound, not unset");
    assert!(spec.get("maxUnavailable").is_none());
    let docs = render(&["--set", "revisionHistoryLimit=0"]);
    assert_eq!(
        find(&docs, "Deployment", "rel-rancheros-operator")["spec"]["revisionHistoryLimit"],
        0
    );
}

/// Chart.yaml carries what chart repositories and Artifact Hub show, and its image list
/// (what an air-gapped install mirrors) is what the chart deploys.
#[test]
fn chart_metadata_names_home_sources_maintainers_icon_and_images() {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    let chart = &yaml_docs(&text)[0];
    let home = chart["home"].as_str().unwrap();
    assert!(home.starts_with("https://"), "{home}");
    let sources: Vec<&str> = chart["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(sources.contains(&home), "{sources:?}");
    for m in chart["maintainers"].as_array().unwrap() {
        assert!(!m["name"].as_str().unwrap().is_empty(), "{m}");
        assert!(m["email"].as_str().unwrap().contains('@'), "{m}");
    }
    // The icon is icon.svg, inline.
    let icon = chart["icon"].as_str().unwrap();
    let b64 = icon
        .strip_prefix("data:image/svg+xml;base64,")
        .unwrap_or_else(|| panic!("icon is not an inline SVG: {icon}"));
    let mut cmd = Command::new("base64");
    cmd.arg("-d");
    let decoded = run_with_stdin(cmd, b64);
    assert!(decoded.status.success());
    assert_eq!(
        decoded.stdout,
        std::fs::read(chart_dir().join("icon.svg")).unwrap(),
        "Chart.yaml's icon differs from icon.svg"
    );

    // artifacthub.io/images: every image the default rendering runs, and no other.
    let listed = yaml_docs(
        chart["annotations"]["artifacthub.io/images"]
            .as_str()
            .unwrap(),
    );
    let listed: BTreeSet<String> = listed[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["image"].as_str().unwrap().to_string())
        .collect();
    let docs = render(&[]);
    let mut rendered = BTreeSet::new();
    for doc in &docs {
        let spec = match doc["kind"].as_str() {
            Some("Deployment") => &doc["spec"]["template"]["spec"],
            Some("Pod") => &doc["spec"],
            _ => continue,
        };
        for c in spec["containers"].as_array().unwrap() {
            rendered.insert(c["image"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(
        listed, rendered,
        "artifacthub.io/images vs the rendered images"
    );
    assert_eq!(
        listed,
        BTreeSet::from([format!(
            "rancheros-operator:{}",
            chart["appVersion"].as_str().unwrap()
        )])
    );
}

/// Shards: one Deployment per shard with its selector (and so its own Lease), and one for
/// the unlabelled rest; their pods told apart by a label, the rest keeping the selector of
/// an unsharded release (a Deployment's selector cannot change on upgrade).
#[test]
fn shards_render_one_deployment_each_and_one_for_the_rest() {
    let docs = render(&["--set", "shards.values={a,b}"]);
    let deployments = of_kind(&docs, "Deployment");
    assert_eq!(deployments.len(), 3);
    for (name, shard, selector) in [
        ("rel-rancheros-operator-shard-a", Some("a"), "shard=a"),
        ("rel-rancheros-operator-shard-b", Some("b"), "shard=b"),
        ("rel-rancheros-operator", None, "!shard"),
    ] {
        let d = find(&docs, "Deployment", name);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            env_value(c, "WATCH_LABEL_SELECTOR"),
            Some(json!(selector)),
            "{name}"
        );
        let label = &d["spec"]["selector"]["matchLabels"]["rancheros.cattle.io/shard"];
        assert_eq!(label.as_str(), shard, "{name}");
        assert_eq!(
            d["spec"]["template"]["metadata"]["labels"]["rancheros.cattle.io/shard"].as_str(),
            shard
        );
    }
    let docs = render(&["--set", "shards.values={a}", "--set", "shards.rest=false"]);
    assert_eq!(of_kind(&docs, "Deployment").len(), 1);
    // No shards: one Deployment for every channel, as before.
    let docs = render(&[]);
    let d = find(&docs, "Deployment", "rel-rancheros-operator");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env_value(c, "WATCH_LABEL_SELECTOR"), None);
    assert_eq!(of_kind(&docs, "Deployment").len(), 1);
    // A shard name that is no label value is refused by the values schema.
    let refused = run_failing(&mut helm_template(&["--set", "shards.values={A_b}"]));
    assert!(refused.contains("shards"), "{refused}");
}
