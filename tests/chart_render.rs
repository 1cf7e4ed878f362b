//! The Helm chart (`charts/rancheros-operator`) without a cluster: its CRDs are `crds/`, it
//! lints and renders with default and non-default values, the rendered manifests pass the
//! Kubernetes schemas and yamllint, its RBAC is `files/rbac.yaml` and docs/install.md's
//! tables say the same, its alert rules parse and its dashboard asks only for metrics the
//! operator exports. `tests/chart_install.rs` installs it on the local cluster.
//!
//! `UPDATE_CRDS=1 cargo test --test chart_render` copies `crds/` into the chart.

mod chart_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chart_support::*;
use serde_json::{Value, json};

/// The Kubernetes versions the rendered manifests are validated against: the oldest the
/// operator supports (its client's floor) and the local cluster's.
const SCHEMA_VERSIONS: &[&str] = &["1.33.0", "1.37.0"];

/// The checks every rendering must pass: the operator container's image is its
/// OPERATOR_IMAGE, the downward API gives POD_NAME/POD_NAMESPACE, the security context
/// is locked down, and the ServiceAccount is bound to nothing but the expected rules,
/// among them (in every mode) the ClusterRole `<deployment>-crds` that reads the CRDs.
fn check_common(docs: &[Value], deployment: &str) -> Value {
    let dep = find(docs, "Deployment", deployment);
    let pod = &dep["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container: {pod:#}");
    let c = &containers[0];
    assert_eq!(
        c["args"][0], "operator",
        "the subcommand first, extraArgs after it"
    );
    assert_eq!(
        env_value(c, "OPERATOR_IMAGE"),
        Some(c["image"].clone()),
        "OPERATOR_IMAGE must be the deployed image"
    );
    for (var, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        assert_eq!(
            env_value(c, var),
            Some(json!({"fieldRef": {"fieldPath": field}})),
            "{var} from the downward API"
        );
    }
    let names: Vec<String> = env_of(c).into_iter().map(|(n, _)| n).collect();
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "duplicate env vars: {names:?}");

    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    let psc = &pod["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true);
    assert_eq!(psc["runAsUser"], 65532);
    assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");

    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
    let port = c["ports"][0]["containerPort"].as_i64().unwrap();
    assert_eq!(
        env_value(c, "METRICS_ADDRESS"),
        Some(json!(format!("0.0.0.0:{port}")))
    );

    // Every binding names the chart's ServiceAccount, and only it (but the one that grants
    // metrics.readerSubjects the right to read /metrics).
    let sa = pod["serviceAccountName"].as_str().unwrap();
    find(docs, "ServiceAccount", sa);
    let reader = format!("{deployment}-metrics-reader");
    for binding in of_kind(docs, "RoleBinding")
        .into_iter()
        .chain(of_kind(docs, "ClusterRoleBinding"))
        .filter(|b| b["metadata"]["name"] != reader.as_str())
    {
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": "ops"}]),
            "{binding:#}"
        );
    }
    // In every mode the operator may read its two CRDs (its startup schema check), through
    // a ClusterRole of its own.
    let crds = format!("{deployment}-crds");
    assert_eq!(
        find(docs, "ClusterRole", &crds)["rules"],
        expected_crd_rules()
    );
    assert_eq!(
        find(docs, "ClusterRoleBinding", &crds)["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": crds})
    );
    // Unless metrics.insecure, /metrics asks the API server about each caller (a
    // ClusterRole of its own), and a ClusterRole grants scrapers get /metrics.
    let auth = format!("{deployment}-metrics-auth");
    if env_value(c, "METRICS_INSECURE") == Some(json!("true")) {
        for name in [&auth, &reader] {
            assert!(
                !names_of(docs, "ClusterRole").contains(name),
                "{name} rendered with metrics.insecure"
            );
        }
    } else {
        assert_eq!(env_value(c, "METRICS_INSECURE"), None);
        assert_eq!(
            find(docs, "ClusterRole", &auth)["rules"],
            expected_review_rules()
        );
        assert_eq!(
            find(docs, "ClusterRoleBinding", &auth)["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": auth})
        );
        assert_eq!(
            find(docs, "ClusterRole", &reader)["rules"],
            metrics_reader_rules()
        );
    }
    // The CRDs are the chart's crds/.
    for crd in [
        "managedosversionchannels.rancheros.cattle.io",
        "managedosversions.rancheros.cattle.io",
    ] {
        find(docs, "CustomResourceDefinition", crd);
    }
    c.clone()
}

#[test]
fn chart_crds_are_the_crds_directory() {
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    let ours = root().join("crds");
    let chart = chart_dir().join("crds");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    for name in names(&ours) {
        let want = std::fs::read(ours.join(&name)).unwrap();
        let path = chart.join(&name);
        if update {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        assert!(
            std::fs::read(&path).ok().as_ref() == Some(&want),
            "{} differs from crds/{name}; run `UPDATE_CRDS=1 cargo test --test crds --test chart_render`",
            path.display()
        );
    }
    if update {
        for stale in names(&chart).difference(&names(&ours)) {
            std::fs::remove_file(chart.join(stale)).unwrap();
        }
    }
    assert_eq!(
        names(&chart),
        names(&ours),
        "{CHART}/crds must hold exactly the files of crds/"
    );
}

#[test]
fn helm_lint_strict_passes_with_default_and_ci_values() {
    run(command("helm").args(["lint", "--strict"]).arg(chart_dir()));
    for values in ci_values() {
        run(command("helm")
            .args(["lint", "--strict"])
            .arg(chart_dir())
            .arg("--values")
            .arg(&values));
    }
}

#[test]
fn default_values_watch_all_namespaces_with_a_cluster_role() {
    let docs = render(&[]);
    let c = check_common(&docs, "rel-rancheros-operator");
    assert_eq!(
        c["image"], "rancheros-operator:0.4.0",
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
    // Four ClusterRoles: the operator's resources everywhere, reading its CRDs, asking who
    // may read /metrics, and reading /metrics (checked by check_common); the last bound to
    // nobody until metrics.readerSubjects names someone.
    assert_eq!(
        names_of(&docs, "ClusterRole"),
        [
            "rel-rancheros-operator",
            "rel-rancheros-operator-crds",
            "rel-rancheros-operator-metrics-auth",
            "rel-rancheros-operator-metrics-reader"
        ]
    );
    assert_eq!(
        names_of(&docs, "ClusterRoleBinding"),
        [
            "rel-rancheros-operator",
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

    // Nothing cluster-wide but reading the two CRDs (check_common checks its rules): the
    // operator's resources only through the Roles below.
    assert_eq!(
        names_of(&docs, "ClusterRole"),
        [
            "ros-operator-crds",
            "ros-operator-metrics-auth",
            "ros-operator-metrics-reader"
        ]
    );
    assert_eq!(
        names_of(&docs, "ClusterRoleBinding"),
        [
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
        ["rel-rancheros-operator", "rel-rancheros-operator-crds"]
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

/// The names of the rendered objects of `kind`, sorted.
fn names_of(docs: &[Value], kind: &str) -> Vec<String> {
    let mut names: Vec<String> = of_kind(docs, kind)
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
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

/// `helm template --output-dir` with the given values: the rendered files.
fn render_to_dir(name: &str, args: &[&str]) -> (PathBuf, Vec<PathBuf>) {
    let dir = temp_dir(name);
    run(helm_template(args).arg("--output-dir").arg(&dir));
    let files = files_under(vec![dir.clone()]);
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("templates/deployment.yaml"))
            && files
                .iter()
                .any(|f| f.ends_with("crds/managedosversions.yaml")),
        "unexpected rendering: {files:?}"
    );
    (dir, files)
}

#[test]
fn rendered_manifests_pass_kubernetes_schemas_and_yamllint() {
    let config = root().join("charts/.yamllint.yaml");
    let mut cases: Vec<(String, Vec<String>)> = vec![("default".into(), vec![])];
    for values in ci_values() {
        let name = values.file_stem().unwrap().to_string_lossy().into_owned();
        cases.push((name, vec!["--values".into(), values.display().to_string()]));
    }
    for (name, args) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (dir, files) = render_to_dir(name, &args);
        for version in SCHEMA_VERSIONS {
            let out = run(command("kubernetes-validate")
                .args(["--strict", "--kubernetes-version", version])
                .args(&files));
            // Only the Prometheus Operator's kinds have no schema here; every other object
            // must have been checked.
            for line in out.lines().filter(|l| !l.starts_with("INFO")) {
                assert!(
                    line.contains("Couldn't find schema for kind ServiceMonitor")
                        || line.contains("Couldn't find schema for kind PrometheusRule"),
                    "{name}, Kubernetes {version}: {line}\n{out}"
                );
            }
            assert!(out.contains("passed for resource deployment/"), "{out}");
        }
        // The templates' output; the CRDs are linted as the chart's files below (helm's
        // --output-dir adds a blank line at their end).
        run(command("yamllint")
            .args(["--strict", "--config-file"])
            .arg(&config)
            .arg(dir.join("rancheros-operator/templates")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // The chart's own YAML files too.
    let chart = chart_dir();
    run(command("yamllint")
        .args(["--strict", "--config-file"])
        .arg(&config)
        .arg(chart.join("Chart.yaml"))
        .arg(chart.join("values.yaml"))
        .arg(chart.join("ci"))
        .arg(chart.join("crds"))
        .arg(chart.join("files")));
}

#[test]
fn packaged_chart_carries_the_crds_and_not_the_ci_values() {
    let dir = temp_dir("package");
    run(command("helm")
        .arg("package")
        .arg(chart_dir())
        .arg("--destination")
        .arg(&dir));
    let tgz = dir.join(format!("rancheros-operator-{}.tgz", chart_version()));
    let listing = run(Command::new("tar").arg("-tzf").arg(&tgz));
    for file in [
        "rancheros-operator/Chart.yaml",
        "rancheros-operator/values.yaml",
        "rancheros-operator/values.schema.json",
        "rancheros-operator/templates/NOTES.txt",
        "rancheros-operator/files/rbac.yaml",
        "rancheros-operator/files/dashboard.json",
        "rancheros-operator/crds/managedosversionchannels.yaml",
        "rancheros-operator/crds/managedosversions.yaml",
    ] {
        assert!(
            listing.lines().any(|l| l == file),
            "{file} not in {listing}"
        );
    }
    assert!(!listing.contains("/ci/"), "{listing}");
    // The packaged chart renders like the directory.
    let from_tgz = run(command("helm").args(["template", "rel"]).arg(&tgz).args([
        "--namespace",
        "ops",
        "--include-crds",
        "--kube-version",
        "1.33.0",
    ]));
    assert_eq!(from_tgz, run(&mut helm_template(&[])));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The rows of the first Markdown table after `heading` in `doc`, cells trimmed, the
/// header and separator rows left out.
fn markdown_table(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the document"));
    let rows: Vec<Vec<String>> = doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    assert!(rows.len() > 2, "no table after {heading:?}");
    rows.into_iter().skip(2).collect()
}

/// `` `a` `` -> `a`; the docs write the core group as `` `""` ``.
fn unquote(cell: &str) -> String {
    let s = cell.trim_matches('`');
    if s == "\"\"" { String::new() } else { s.into() }
}

/// "get, list, watch" -> ["get", "list", "watch"]
fn verbs(cell: &str) -> Value {
    json!(cell.split(',').map(str::trim).collect::<Vec<_>>())
}

/// The rules of a docs table with the columns API group | resource | verbs | why.
fn rules_table(doc: &str, heading: &str) -> Vec<Value> {
    markdown_table(doc, heading)
        .iter()
        .map(|row| {
            assert_eq!(row.len(), 4, "{row:?}");
            json!({
                "apiGroups": [unquote(&row[0])],
                "resources": [unquote(&row[1])],
                "verbs": verbs(&row[2]),
            })
        })
        .collect()
}

#[test]
fn docs_rbac_tables_are_the_charts_rbac_file() {
    let doc = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    let documented = rules_table(&doc, "In every watched namespace (a Role there)");
    assert_eq!(
        Value::Array(documented),
        expected_rules(),
        "docs/install.md's RBAC table differs from {RBAC_FILE}"
    );
    // Columns: API group | resource | names | verbs; "the Lease" is the Lease's name.
    let documented: Vec<Value> = markdown_table(
        &doc,
        "In the release namespace only (a Role), when leader election",
    )
    .iter()
    .map(|row| {
        assert_eq!(row.len(), 4, "{row:?}");
        let mut rule = json!({
            "apiGroups": [unquote(&row[0])],
            "resources": [unquote(&row[1])],
            "verbs": verbs(&row[3]),
        });
        if row[2] == "the Lease" {
            rule["resourceNames"] = json!(["LEASE_NAME"]);
        } else {
            assert!(row[2].starts_with("any"), "{row:?}");
        }
        rule
    })
    .collect();
    assert_eq!(
        Value::Array(documented),
        expected_lease_rules("LEASE_NAME"),
        "docs/install.md's Lease table differs from {RBAC_FILE}"
    );
    // Columns: API group | resource | names | verbs | why; the names comma separated.
    let documented: Vec<Value> = markdown_table(&doc, "Cluster-wide, in every mode (a ClusterRole")
        .iter()
        .map(|row| {
            assert_eq!(row.len(), 5, "{row:?}");
            json!({
                "apiGroups": [unquote(&row[0])],
                "resources": [unquote(&row[1])],
                "resourceNames": row[2].split(',').map(|n| unquote(n.trim())).collect::<Vec<_>>(),
                "verbs": verbs(&row[3]),
            })
        })
        .collect();
    assert_eq!(
        Value::Array(documented),
        expected_crd_rules(),
        "docs/install.md's cluster-wide CRD table differs from {RBAC_FILE}"
    );
    let documented = rules_table(&doc, "Cluster-wide unless `metrics.insecure`");
    assert_eq!(
        Value::Array(documented),
        expected_review_rules(),
        "docs/install.md's metrics review table differs from {RBAC_FILE}"
    );
}

#[test]
fn every_operator_flag_with_an_env_var_has_a_value() {
    // The flags' env vars, from the operator's argument definitions.
    let source = std::fs::read_to_string(root().join("src/operator/flags.rs")).unwrap();
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

/// The metric names a scrape of the operator shows: its registry encoded after one event
/// of each kind (a family shows only once it has a series), with each type's suffixes.
fn exported_metrics() -> BTreeSet<String> {
    use rancheros_operator::api::{ChannelKey, ManagedOSVersionChannelStatus};
    use rancheros_operator::failure::{ErrorClass, SyncFailure};
    use rancheros_operator::syncer::Outcome;
    let m = rancheros_operator::metrics::Metrics::default();
    m.observe_channel(
        &ChannelKey::new("channel").within("ns"),
        &ManagedOSVersionChannelStatus {
            last_synced_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            )),
            ..Default::default()
        },
        Duration::from_secs(3600),
    );
    m.sync_finished(&Outcome::Synchronized);
    m.sync_failed(&SyncFailure::OutputIncomplete);
    m.reconcile_error(ErrorClass::Retryable);
    m.status_written();
    m.queue_length(0);
    m.reconciliations.inc();
    m.reconcile_duration.observe(0.1);
    let text = m.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "gauge" => &[""],
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "info" => &["_info"],
            other => panic!("metric {name} of type {other}"),
        };
        for suffix in suffixes {
            names.insert(format!("{name}{suffix}"));
        }
    }
    assert!(names.contains("rancheros_operator_leader"), "{text}");
    names
}

/// The metric names `promcheck` reports, each of which the operator must export.
fn check_names(what: &str, promcheck_stdout: &str) -> BTreeSet<String> {
    let used: BTreeSet<String> = promcheck_stdout.lines().map(String::from).collect();
    let exported = exported_metrics();
    let unknown: Vec<&String> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "{what} ask for metrics the operator does not export: {unknown:?}\nexported: {exported:?}"
    );
    used
}

#[test]
fn alert_rules_parse_and_ask_only_for_exported_metrics() {
    let dir = temp_dir("rules");
    for (leader, alerts) in [
        (
            true,
            [
                "RancherosOperatorChannelFailing",
                "RancherosOperatorChannelNotSynced",
                "RancherosOperatorNotLeading",
            ],
        ),
        (
            false,
            [
                "RancherosOperatorChannelFailing",
                "RancherosOperatorChannelNotSynced",
                "RancherosOperatorDown",
            ],
        ),
    ] {
        let docs = render(&[
            "--set",
            &format!("metrics.prometheusRule.enabled=true,leaderElection.enabled={leader}"),
        ]);
        let rule = find(&docs, "PrometheusRule", "rel-rancheros-operator");
        let rules: Vec<&Value> = rule["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .collect();
        let names: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
        assert_eq!(names, alerts, "leader election {leader}");
        for r in &rules {
            let expr = r["expr"].as_str().unwrap();
            assert!(
                expr.contains("{job=\"rel-rancheros-operator-metrics\"}"),
                "every selector names this release's job: {expr}"
            );
            assert_eq!(r["labels"]["severity"], "warning");
        }
        // Stale-channel alerts leave paused channels out.
        assert!(
            rules[1]["expr"]
                .as_str()
                .unwrap()
                .contains("rancheros_operator_channel_suspended")
        );
        // The rule file a PrometheusRule stands for is its spec.
        let file = dir.join(format!("rules-{leader}.json"));
        std::fs::write(&file, serde_json::to_string(&rule["spec"]).unwrap()).unwrap();
        let used = check_names(
            "the alert rules",
            &run(command("promcheck").arg("rules").arg(&file)),
        );
        assert!(
            used.contains("rancheros_operator_channel_consecutive_failures")
                && used.contains("rancheros_operator_channel_sync_interval_seconds")
                && used.contains("rancheros_operator_channel_last_success_timestamp_seconds"),
            "{used:?}"
        );
    }
    // The check can fail: a rule that does not parse, and a bad template, are refused.
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "groups:\n- name: a\n  rules:\n  - alert: A\n    expr: rate(x_total[5m]\n  - alert: B\n    expr: up\n    annotations:\n      summary: \"{{ $labels.x \"\n",
    )
    .unwrap();
    let stderr = run_failing(command("promcheck").arg("rules").arg(&bad));
    assert!(
        stderr.contains("unclosed left parenthesis") && stderr.contains("annotation \"summary\""),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every `expr` in a Grafana dashboard, and the selectors of its `label_values(...)`
/// variables.
fn dashboard_queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    ("query", Value::String(q)) if q.starts_with("label_values(") => {
                        let inner = &q["label_values(".len()..q.rfind(',').unwrap()];
                        out.push(inner.to_string());
                    }
                    _ => dashboard_queries(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_queries(v, out)),
        _ => {}
    }
}

#[test]
fn grafana_dashboard_queries_parse_and_ask_only_for_exported_metrics() {
    let docs = render(&["--set", "metrics.grafanaDashboard.enabled=true"]);
    let cm = find(&docs, "ConfigMap", "rel-rancheros-operator-dashboard");
    assert_eq!(cm["metadata"]["namespace"], "ops");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped = cm["data"]["rancheros-operator.json"].as_str().unwrap();
    let dashboard: Value = serde_json::from_str(shipped).expect("the dashboard is JSON");
    let file = std::fs::read_to_string(chart_dir().join("files/dashboard.json")).unwrap();
    assert_eq!(dashboard, serde_json::from_str::<Value>(&file).unwrap());
    assert_eq!(dashboard["uid"], "rancheros-operator");

    let panels = dashboard["panels"].as_array().unwrap();
    let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for p in panels {
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "{}: the data source variable",
            p["title"]
        );
        assert!(p["gridPos"]["w"].as_i64().unwrap() <= 24, "{}", p["title"]);
        assert!(
            !p["targets"].as_array().unwrap().is_empty(),
            "{}",
            p["title"]
        );
    }
    let mut queries = Vec::new();
    dashboard_queries(&dashboard, &mut queries);
    assert!(queries.len() >= panels.len(), "{queries:?}");
    let mut cmd = command("promcheck");
    cmd.arg("exprs");
    let out = run_with_stdin(cmd, &serde_json::to_string(&queries).unwrap());
    assert!(
        out.status.success(),
        "the dashboard's queries do not parse:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let used = check_names(
        "the dashboard's queries",
        &String::from_utf8_lossy(&out.stdout),
    );
    // Every per-channel gauge is on the dashboard.
    for name in [
        "rancheros_operator_channel_ready",
        "rancheros_operator_channel_versions",
        "rancheros_operator_channel_last_success_timestamp_seconds",
        "rancheros_operator_channel_consecutive_failures",
        "rancheros_operator_channel_suspended",
        "rancheros_operator_sync_queue_length",
        "rancheros_operator_leader",
    ] {
        assert!(used.contains(name), "{name} is not on the dashboard");
    }
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

/// The documented paths of a values-table cell: "`a.b`, `.c`" is a.b and a.c.
fn documented_paths(cell: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in cell.split(", ").map(|n| n.trim_matches('`')) {
        match (name.strip_prefix('.'), out.last()) {
            (Some(sibling), Some(prev)) => {
                let parent = prev.rsplit_once('.').map_or("", |(p, _)| p);
                out.push(format!("{parent}.{sibling}"));
            }
            _ => out.push(name.to_string()),
        }
    }
    out
}

/// Every value of values.yaml is in docs/install.md's values table (it, or the map that
/// holds it).
#[test]
fn docs_values_table_lists_every_value() {
    let doc = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    let documented: BTreeSet<String> = markdown_table(&doc, "## Values")
        .iter()
        .flat_map(|row| documented_paths(&row[0]))
        .collect();
    let values = &yaml_docs(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap())[0];
    fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v.as_object() {
            Some(map) if !map.is_empty() => {
                for (k, v) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&path, v, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }
    let mut all = Vec::new();
    leaves("", values, &mut all);
    let missing: Vec<&String> = all
        .iter()
        .filter(|path| {
            let mut p = path.as_str();
            loop {
                if documented.contains(p) {
                    return false;
                }
                match p.rsplit_once('.') {
                    Some((parent, _)) => p = parent,
                    None => return true,
                }
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "values.yaml values missing from docs/install.md's values table: {missing:?}"
    );
    assert!(documented.contains("tests.timeout"), "{documented:?}");
}

/// Files that show users kubectl commands or run them: the README, docs, scripts and the
/// chart's templates (NOTES, alert annotations).
fn files_with_kubectl_commands() -> Vec<(PathBuf, bool)> {
    let dirs = vec![
        root().join("docs"),
        root().join("scripts"),
        chart_dir().join("templates"),
    ];
    let mut files = vec![(root().join("README.md"), true)];
    for p in files_under(dirs) {
        // (not promcheck's Go sources)
        if !p
            .extension()
            .is_some_and(|e| e == "go" || e == "sum" || e == "mod")
        {
            let md = p.extension().is_some_and(|e| e == "md");
            files.push((p, md));
        }
    }
    files
}

/// Every file under `dirs`, recursively, sorted.
fn files_under(mut dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Beside Elemental's CRDs of the same plural names, a bare `managedosversionchannels` may
/// mean Elemental's: every kubectl command the project shows or runs names ours by a short
/// name or the group-qualified name (tests/chart_install.rs runs the README's on a cluster
/// with Elemental-shaped CRDs).
#[test]
fn kubectl_commands_name_our_resources_unambiguously() {
    // The check itself: a bare name is found, in Markdown and in a script.
    let sample = "```\n$ kubectl get managedosversionchannels -n x   # comment\n```\n\
                  and `kubectl get managedosversion/foo` but `kubectl get mosvc`;\n\
                  `kubectl explain\nmanagedosversionchannel.spec` runs over a line break\n\n\
                  and a lone ` here\n\nleaves the next paragraph's `kubectl get mosv` alone";
    let cmds = kubectl_commands(sample, true);
    assert_eq!(cmds.len(), 5, "{cmds:?}");
    assert_eq!(
        cmds.iter()
            .flat_map(|c| ambiguous_resource_names(c))
            .collect::<Vec<_>>(),
        [
            "managedosversionchannels",
            "managedosversion",
            "managedosversionchannel"
        ]
    );
    assert_eq!(cmds[3], "kubectl explain managedosversionchannel.spec");
    let script = "x=$(kubectl -n a get managedosversionchannel c \\\n\t-o name 2>/dev/null || true)\n\
                  kubectl wait crd/managedosversions.rancheros.cattle.io >/dev/null\n\
                  echo \"\\$ kubectl get mosv\"\nkubectl annotate mosvc c a=\"$(date)\" >/dev/null\n";
    let cmds = kubectl_commands(script, false);
    assert_eq!(
        cmds,
        [
            "kubectl -n a get managedosversionchannel c -o name",
            "kubectl wait crd/managedosversions.rancheros.cattle.io",
            "kubectl get mosv",
            "kubectl annotate mosvc c a=\"$(date)\"",
        ]
    );
    assert_eq!(
        ambiguous_resource_names(&cmds[0]),
        ["managedosversionchannel"]
    );
    assert!(ambiguous_resource_names(&cmds[1]).is_empty());

    let mut found = Vec::new();
    let mut total = 0;
    for (path, markdown) in files_with_kubectl_commands() {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for cmd in kubectl_commands(&text, markdown) {
            total += 1;
            if !ambiguous_resource_names(&cmd).is_empty() {
                found.push(format!(
                    "{}: {cmd}",
                    path.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        total > 30,
        "only {total} kubectl commands found: the extraction broke"
    );
    assert!(
        found.is_empty(),
        "kubectl commands with an ambiguous resource name (use mosvc/mosv or \
         managedosversionchannels.rancheros.cattle.io):\n{}",
        found.join("\n")
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
