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

use chart_support::*;
use serde_json::{Value, json};

/// The Kubernetes versions the rendered manifests are validated against: the oldest the
/// operator supports (its client's floor) and the local cluster's.
const SCHEMA_VERSIONS: &[&str] = &["1.33.0", "1.37.0"];

/// The checks every rendering must pass: the operator container's image is its
/// OPERATOR_IMAGE, the downward API gives POD_NAME/POD_NAMESPACE, the security context
/// is locked down, and the ServiceAccount is bound to nothing but the expected rules.
fn check_common(docs: &[Value], deployment: &str) -> Value {
    let dep = find(docs, "Deployment", deployment);
    let pod = &dep["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container: {pod:#}");
    let c = &containers[0];
    assert_eq!(c["args"], json!(["operator"]));
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

    // Every binding names the chart's ServiceAccount, and only it.
    let sa = pod["serviceAccountName"].as_str().unwrap();
    find(docs, "ServiceAccount", sa);
    for binding in of_kind(docs, "RoleBinding")
        .into_iter()
        .chain(of_kind(docs, "ClusterRoleBinding"))
    {
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": "ops"}]),
            "{binding:#}"
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
        c["image"], "rancheros-operator:0.1.0",
        "default tag: appVersion"
    );
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(env_value(&c, "SYNC_NAMESPACES"), None, "all namespaces");
    assert_eq!(env_value(&c, "LOG_FORMAT"), Some(json!("text")));
    assert_eq!(env_value(&c, "SYNC_TIMEOUT"), Some(json!("5m")));
    assert_eq!(env_value(&c, "MAX_CONCURRENT_SYNCS"), Some(json!("10")));
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
    let dep = find(&docs, "Deployment", "rel-rancheros-operator");
    assert_eq!(dep["spec"]["replicas"], 1);

    let role = find(&docs, "ClusterRole", "rel-rancheros-operator");
    assert_eq!(role["rules"], expected_rules());
    let binding = find(&docs, "ClusterRoleBinding", "rel-rancheros-operator");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], "rel-rancheros-operator");
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
    assert!(of_kind(&docs, "ServiceMonitor").is_empty());
    for doc in &docs {
        if doc["kind"] != "CustomResourceDefinition"
            && doc["kind"] != "ClusterRole"
            && doc["kind"] != "ClusterRoleBinding"
        {
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
    assert_eq!(
        env_value(&c, "RUST_LOG"),
        Some(json!("info,rancheros_operator=debug"))
    );
    assert_eq!(
        env_value(&c, "HTTPS_PROXY"),
        Some(json!("http://proxy.example.com:3128"))
    );
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

    assert!(of_kind(&docs, "ClusterRole").is_empty());
    assert!(of_kind(&docs, "ClusterRoleBinding").is_empty());
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
        sm["spec"]["namespaceSelector"]["matchNames"],
        json!(["ops"])
    );
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
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
    ] {
        let stderr = run_failing(&mut helm_template(&["--set", set]));
        assert!(
            stderr.contains(reason),
            "--set {set}: expected {reason:?} in:\n{stderr}"
        );
    }
}

/// `helm template --output-dir` with the given values: the rendered files.
fn render_to_dir(name: &str, args: &[&str]) -> (PathBuf, Vec<PathBuf>) {
    let dir = temp_dir(name);
    run(helm_template(args).arg("--output-dir").arg(&dir));
    let mut files = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
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
            // Only the Prometheus Operator's ServiceMonitor has no schema here; every
            // other object must have been checked.
            for line in out.lines().filter(|l| !l.starts_with("INFO")) {
                assert!(
                    line.contains("Couldn't find schema for kind ServiceMonitor"),
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
    let tgz = dir.join("rancheros-operator-0.1.0.tgz");
    let listing = run(Command::new("tar").arg("-tzf").arg(&tgz));
    for file in [
        "rancheros-operator/Chart.yaml",
        "rancheros-operator/values.yaml",
        "rancheros-operator/values.schema.json",
        "rancheros-operator/templates/NOTES.txt",
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

#[test]
fn docs_rbac_tables_are_the_charts_rbac_file() {
    let doc = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    // Columns: API group | resource | verbs | why
    let documented: Vec<Value> = markdown_table(&doc, "In every watched namespace (a Role there)")
        .iter()
        .map(|row| {
            assert_eq!(row.len(), 4, "{row:?}");
            json!({
                "apiGroups": [unquote(&row[0])],
                "resources": [unquote(&row[1])],
                "verbs": verbs(&row[2]),
            })
        })
        .collect();
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
}
