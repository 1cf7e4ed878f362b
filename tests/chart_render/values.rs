//! What each set of values renders: scope and RBAC, metrics, the webhook, and the values refused.

use super::*;

#[test]
fn default_values_watch_all_namespaces_with_a_cluster_role() {
    let docs = render(&[]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(
        c["image"],
        format!("rancheros-operator:{}", env!("CARGO_PKG_VERSION")).as_str(),
        "default tag: appVersion"
    );
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(env_value(&c, "SYNC_NAMESPACES"), None, "all namespaces");
    assert_eq!(env_value(&c, "LOG_FORMAT"), Some(json!("text")));
    assert_eq!(env_value(&c, "SYNC_TIMEOUT"), Some(json!("5m")));
    assert_eq!(env_value(&c, "MAX_CONCURRENT_SYNCS"), Some(json!("10")));
    assert_eq!(env_value(&c, "JSON_CACHE_BYTES"), Some(json!("16Mi")));
    assert_eq!(
        env_value(&c, "MAX_VERSIONS_PER_CHANNEL"),
        Some(json!("10000"))
    );
    // Unset: the operator's own defaults apply (an empty CIDR list would be a usage
    // error, not the default list).
    for var in [
        "MAX_SYNC_TIMEOUT",
        "MIN_SYNC_INTERVAL",
        "ALLOW_PRIVILEGED_RUNNERS",
        "EGRESS_DENY_CIDRS",
        "EGRESS_ALLOW_CIDRS",
        "EGRESS_DENY_PRIVATE_RANGES",
        "SYNCER_IMAGE_PULL_SECRETS",
    ] {
        assert_eq!(env_value(&c, var), None, "{var} rendered by default");
    }
    assert_eq!(env_value(&c, "LEADER_ELECTION"), Some(json!("true")));
    assert_eq!(
        env_value(&c, "LEADER_ELECTION_NAMESPACE"),
        Some(json!("ops"))
    );
    assert_eq!(
        env_value(&c, "LEADER_ELECTION_LEASE"),
        Some(json!("rel-rancheros-operator"))
    );
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert_eq!(c["resources"]["limits"]["memory"], "384Mi");
    let dep = find(&docs, "Deployment", "rel-rancheros-operator");
    assert_eq!(dep["spec"]["replicas"], 1);

    let role = find(&docs, "ClusterRole", "rel-rancheros-operator");
    assert_eq!(role["rules"], expected_rules());
    let binding = find(&docs, "ClusterRoleBinding", "rel-rancheros-operator");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], "rel-rancheros-operator");
    // Five ClusterRoles: the operator's resources everywhere, watching what could refuse a
    // version write, reading its CRDs, asking who may read /metrics, and reading /metrics
    // (checked by check_common); the last bound to nobody until metrics.readerSubjects
    // names someone.
    assert_eq!(
        names_of(&docs, "ClusterRole"),
        [
            "rel-rancheros-operator",
            "rel-rancheros-operator-admission",
            "rel-rancheros-operator-crds",
            "rel-rancheros-operator-metrics-auth",
            "rel-rancheros-operator-metrics-reader"
        ]
    );
    assert_eq!(
        names_of(&docs, "ClusterRoleBinding"),
        [
            "rel-rancheros-operator",
            "rel-rancheros-operator-admission",
            "rel-rancheros-operator-crds",
            "rel-rancheros-operator-metrics-auth"
        ]
    );
    // The only namespaced Role is the Lease's, in the release namespace.
    let roles = of_kind(&docs, "Role");
    assert_eq!(roles.len(), 1, "{roles:#?}");
    assert_eq!(roles[0]["metadata"]["namespace"], "ops");
    assert_eq!(
        roles[0]["rules"],
        expected_lease_rules("rel-rancheros-operator")
    );

    let svc = find(&docs, "Service", "rel-rancheros-operator-metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    assert_eq!(
        svc["spec"]["selector"],
        dep["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(c["args"], json!(["operator"]));
    assert_eq!(dep["spec"]["revisionHistoryLimit"], 10);
    for kind in [
        "ServiceMonitor",
        "PrometheusRule",
        "ConfigMap",
        "NetworkPolicy",
        "PodDisruptionBudget",
    ] {
        assert!(
            of_kind(&docs, kind).is_empty(),
            "{kind} rendered by default"
        );
    }
    for doc in &docs {
        let cluster_scoped = [
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ];
        if !cluster_scoped.contains(&doc["kind"].as_str().unwrap_or_default()) {
            assert_eq!(doc["metadata"]["namespace"], "ops", "{doc:#}");
        }
    }
}

#[test]
fn ci_values_watch_listed_namespaces_with_roles() {
    let values = chart_dir().join("ci/namespaced-values.yaml");
    let docs = render(&["--values", values.to_str().unwrap()]);
    let c = check_common(&docs, "ros-operator");
    let image = "registry.example.com/rancheros/rancheros-operator:1.2.3";
    assert_eq!(c["image"], image);
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        env_value(&c, "SYNC_NAMESPACES"),
        Some(json!("fleet-default,fleet-local"))
    );
    assert_eq!(env_value(&c, "LOG_FORMAT"), Some(json!("json")));
    assert_eq!(env_value(&c, "SYNC_TIMEOUT"), Some(json!("10m")));
    assert_eq!(env_value(&c, "MAX_OUTPUT_BYTES"), Some(json!("32Mi")));
    assert_eq!(env_value(&c, "RETRY_DELAY"), Some(json!("30s")));
    for (var, value) in [
        ("MAX_SYNC_TIMEOUT", "30m"),
        ("MIN_SYNC_INTERVAL", "5m"),
        ("MAX_CONCURRENT_SYNCS", "4"),
        ("JSON_CACHE_BYTES", "8Mi"),
        ("MAX_VERSIONS_PER_CHANNEL", "2000"),
        ("EGRESS_DENY_CIDRS", "127.0.0.0/8,169.254.0.0/16,10.0.0.0/8"),
        ("EGRESS_ALLOW_CIDRS", "10.1.2.0/24"),
        // By default the syncer pods get the operator pod's pull secrets.
        ("SYNCER_IMAGE_PULL_SECRETS", "regcred"),
    ] {
        assert_eq!(env_value(&c, var), Some(json!(value)), "{var}");
    }
    assert_eq!(env_value(&c, "ALLOW_PRIVILEGED_RUNNERS"), None);
    assert_eq!(
        env_value(&c, "RUST_LOG"),
        Some(json!("info,rancheros_operator=debug"))
    );
    assert_eq!(env_value(&c, "TZ"), Some(json!("UTC")));
    assert_eq!(
        env_value(&c, "LEADER_ELECTION_LEASE"),
        Some(json!("ros-operator-leader"))
    );
    assert_eq!(c["resources"]["limits"]["cpu"], "500m");
    let dep = find(&docs, "Deployment", "ros-operator");
    assert_eq!(dep["spec"]["replicas"], 2);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ros-operator-sa");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        dep["spec"]["template"]["metadata"]["labels"]["example.com/tier"],
        "control"
    );

    // Nothing cluster-wide but watching admission and reading the two CRDs (check_common
    // checks their rules): the operator's resources only through the Roles below.
    assert_eq!(
        names_of(&docs, "ClusterRole"),
        [
            "ros-operator-admission",
            "ros-operator-crds",
            "ros-operator-metrics-auth",
            "ros-operator-metrics-reader"
        ]
    );
    assert_eq!(
        names_of(&docs, "ClusterRoleBinding"),
        [
            "ros-operator-admission",
            "ros-operator-crds",
            "ros-operator-metrics-auth",
            "ros-operator-metrics-reader"
        ]
    );
    // metrics.readerSubjects: Prometheus's ServiceAccount may read /metrics.
    let reader = find(&docs, "ClusterRoleBinding", "ros-operator-metrics-reader");
    assert_eq!(
        reader["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ros-operator-metrics-reader"})
    );
    assert_eq!(
        reader["subjects"],
        json!([{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}])
    );
    for ns in ["fleet-default", "fleet-local"] {
        let role = of_kind(&docs, "Role")
            .into_iter()
            .find(|r| r["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no Role in {ns}"));
        assert_eq!(role["metadata"]["name"], "ros-operator");
        assert_eq!(role["rules"], expected_rules());
        let binding = of_kind(&docs, "RoleBinding")
            .into_iter()
            .find(|r| r["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no RoleBinding in {ns}"));
        assert_eq!(
            binding["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ros-operator"})
        );
    }
    let lease = find(&docs, "Role", "ros-operator-leader-election");
    assert_eq!(lease["metadata"]["namespace"], "ops");
    assert_eq!(lease["rules"], expected_lease_rules("ros-operator-leader"));
    assert_eq!(of_kind(&docs, "Role").len(), 3);

    let svc = find(&docs, "Service", "ros-operator-metrics");
    assert_eq!(svc["spec"]["ports"][0]["port"], 9443);
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    let sm = find(&docs, "ServiceMonitor", "ros-operator");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["interval"], "15s");
    assert_eq!(
        sm["spec"]["endpoints"][0]["honorLabels"], true,
        "the channel series' namespace label must win"
    );
    // /metrics wants a token: Prometheus sends its ServiceAccount's.
    assert_eq!(
        sm["spec"]["endpoints"][0]["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(sm["spec"]["endpoints"][0]["authorization"], Value::Null);
    assert_eq!(
        sm["spec"]["namespaceSelector"]["matchNames"],
        json!(["ops"])
    );
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }

    // The egress NetworkPolicy: the operator pods, egress only, the API server first.
    let np = find(&docs, "NetworkPolicy", "ros-operator-egress");
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(np["spec"]["policyTypes"], json!(["Egress"]));
    assert_eq!(
        np["spec"]["egress"][0],
        json!({"to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}], "ports": [{"port": 6443, "protocol": "TCP"}]})
    );
    assert_eq!(np["spec"]["egress"][1]["ports"][0]["port"], 53);
    assert_eq!(np["spec"]["egress"].as_array().unwrap().len(), 3);
    // Alert rules and dashboard where asked.
    let rule = find(&docs, "PrometheusRule", "ros-operator");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    for r in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        assert_eq!(
            r["labels"],
            json!({"severity": "critical", "team": "platform"})
        );
    }
    let dashboard = find(&docs, "ConfigMap", "ros-operator-dashboard");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
}

#[test]
fn other_values_render_as_documented() {
    // Pinned by digest: the same reference in the pod and in OPERATOR_IMAGE.
    let digest = format!("sha256:{}", "ab".repeat(32));
    let docs = render(&["--set", &format!("image.digest={digest}")]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(c["image"], format!("rancheros-operator@{digest}"));

    // No leader election: no Lease role, LEADER_ELECTION=false.
    let docs = render(&["--set", "leaderElection.enabled=false"]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(env_value(&c, "LEADER_ELECTION"), Some(json!("false")));
    assert_eq!(env_value(&c, "LEADER_ELECTION_NAMESPACE"), None);
    assert!(of_kind(&docs, "Role").is_empty());

    // No RBAC, an existing ServiceAccount, no metrics Service.
    let docs = render(&[
        "--set",
        "rbac.create=false,serviceAccount.create=false,serviceAccount.name=mine,metrics.service.enabled=false",
    ]);
    let dep = find(&docs, "Deployment", "rel-rancheros-operator");
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"],
        "mine"
    );
    for kind in [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
    ] {
        assert!(of_kind(&docs, kind).is_empty(), "{kind} rendered");
    }

    // A namespace listed twice gets one Role.
    let docs = render(&["--set", "operator.namespaces={a,b,a}"]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(env_value(&c, "SYNC_NAMESPACES"), Some(json!("a,b")));
    assert_eq!(
        of_kind(&docs, "RoleBinding").len(),
        3,
        "a, b and the Lease's"
    );
    assert_eq!(
        names_of(&docs, "ClusterRole"),
        [
            "rel-rancheros-operator-admission",
            "rel-rancheros-operator-crds",
            "rel-rancheros-operator-metrics-auth",
            "rel-rancheros-operator-metrics-reader"
        ]
    );
}

#[test]
fn metrics_insecure_opens_metrics_and_grants_no_reviews() {
    let docs = render(&[
        "--set",
        "metrics.insecure=true,metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.readerSubjects[0].kind=ServiceAccount,metrics.readerSubjects[0].name=prom,metrics.readerSubjects[0].namespace=mon",
    ]);
    // check_common: no -metrics-auth or -metrics-reader ClusterRole.
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(env_value(&c, "METRICS_INSECURE"), Some(json!("true")));
    assert_eq!(
        names_of(&docs, "ClusterRoleBinding"),
        [
            "rel-rancheros-operator",
            "rel-rancheros-operator-admission",
            "rel-rancheros-operator-crds"
        ]
    );
    let sm = find(&docs, "ServiceMonitor", "rel-rancheros-operator");
    assert_eq!(sm["spec"]["endpoints"][0]["bearerTokenFile"], Value::Null);

    // A Secret's token instead of Prometheus's own.
    let docs = render(&[
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.authorization.type=Bearer",
        "--set",
        "metrics.serviceMonitor.authorization.credentials.name=scraper-token,metrics.serviceMonitor.authorization.credentials.key=token",
    ]);
    check_common(&docs, "rel-rancheros-operator");
    let endpoint = &find(&docs, "ServiceMonitor", "rel-rancheros-operator")["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["authorization"],
        json!({"type": "Bearer", "credentials": {"name": "scraper-token", "key": "token"}})
    );
    assert_eq!(endpoint["bearerTokenFile"], Value::Null);
}

#[test]
fn the_webhook_is_off_by_default_and_on_renders_its_service_token_and_flags() {
    let docs = render(&[]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(env_value(&c, "WEBHOOK_ADDRESS"), None);
    assert!(!names_of(&docs, "Service").contains(&"rel-rancheros-operator-webhook".to_string()));
    assert!(of_kind(&docs, "Secret").is_empty());

    // On, with a token given: a Secret with it, mounted where the flag points.
    let docs = render(&["--set", "webhook.enabled=true,webhook.token=s3cret"]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(
        env_value(&c, "WEBHOOK_ADDRESS"),
        Some(json!("0.0.0.0:8090"))
    );
    let file = env_value(&c, "WEBHOOK_TOKEN_FILE").unwrap();
    let mount = &c["volumeMounts"][0];
    assert_eq!(mount["name"], "webhook-token");
    assert_eq!(
        format!("{}/token", mount["mountPath"].as_str().unwrap()),
        file.as_str().unwrap()
    );
    let secret = find(&docs, "Secret", "rel-rancheros-operator-webhook");
    assert_eq!(secret["data"]["token"], "czNjcmV0", "base64 of s3cret");
    let service = find(&docs, "Service", "rel-rancheros-operator-webhook");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook");
    assert!(
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "webhook" && p["containerPort"] == 8090)
    );

    // No token given: one is generated (40 characters).
    let docs = render(&["--set", "webhook.enabled=true"]);
    let secret = find(&docs, "Secret", "rel-rancheros-operator-webhook");
    let token = secret["data"]["token"].as_str().unwrap();
    assert_eq!(token.len(), 56, "base64 of 40 characters: {token}");

    // An existing Secret: none rendered, its key mounted as the token file.
    let docs = render(&[
        "--set",
        "webhook.enabled=true,webhook.existingSecret=mine,webhook.existingSecretKey=k",
    ]);
    assert!(of_kind(&docs, "Secret").is_empty());
    let dep = find(&docs, "Deployment", "rel-rancheros-operator");
    let volume = &dep["spec"]["template"]["spec"]["volumes"][0];
    assert_eq!(volume["secret"]["secretName"], "mine");
    assert_eq!(
        volume["secret"]["items"][0],
        json!({"key": "k", "path": "token"})
    );
}

#[test]
fn bad_values_are_refused_with_a_reason() {
    for (set, reason) in [
        (
            "replicaCount=2,leaderElection.enabled=false",
            "replicaCount > 1 needs leaderElection.enabled=true",
        ),
        (
            "operator.logFormat=xml",
            "value must be one of 'text', 'json'",
        ),
        (
            "operator.namespaces={Not_A_Namespace}",
            "does not match pattern",
        ),
        ("operator.syncTimeout=soon", "does not match pattern"),
        ("image.pullPolicy=Sometimes", "value must be one of"),
        (
            "metrics.service.enabled=false,metrics.serviceMonitor.enabled=true",
            "needs metrics.service.enabled",
        ),
        (
            "imagee.tag=typo",
            "additional properties 'imagee' not allowed",
        ),
        (
            "podDisruptionBudget.enabled=true,podDisruptionBudget.minAvailable=1,podDisruptionBudget.maxUnavailable=1",
            "set minAvailable or maxUnavailable, not both",
        ),
        (
            "podDisruptionBudget.minAvailable=half",
            "does not match pattern",
        ),
        (
            "podDisruptionBudget.unhealthyPodEvictionPolicy=Never",
            "value must be one of",
        ),
        (
            "livenessProbe.httpGet.path=/metrics",
            "additional properties 'httpGet' not allowed",
        ),
        (
            "readinessProbe.terminationGracePeriodSeconds=5",
            "additional properties 'terminationGracePeriodSeconds' not allowed",
        ),
        ("revisionHistoryLimit=-1", "minimum"),
        ("tests.timeout=soon", "does not match pattern"),
        (
            "extraVolumeMounts[0].name=ca",
            "missing property 'mountPath'",
        ),
        (
            "topologySpreadConstraints[0].maxSkew=1",
            "missing properties 'topologyKey', 'whenUnsatisfiable'",
        ),
    ] {
        let stderr = run_failing(&mut helm_template(&["--set", set]));
        assert!(
            stderr.contains(reason),
            "--set {set}: expected {reason:?} in:\n{stderr}"
        );
    }
    let stderr = run_failing(&mut helm_template(&[
        "--set-json",
        "operator.extraArgs=[1]",
    ]));
    assert!(stderr.contains("got number, want string"), "{stderr}");
}
