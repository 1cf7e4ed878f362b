//! The Helm chart (`charts/rancheros-operator`) without a cluster: its CRDs are `crds/`, it
//! lints and renders with default and non-default values, the rendered manifests pass the
//! Kubernetes schemas and yamllint, its RBAC is `files/rbac.yaml`, docs/install.md's RBAC
//! tables are what it renders and no rendering grants what the docs say it does not, its
//! alert rules parse and its dashboard asks only for metrics the operator exports. `tests/chart_install.rs` installs it on the local cluster.
//!
//! `UPDATE_CRDS=1 cargo test --test integration chart_render::` copies `crds/` into the chart.

use crate::chart_support;
#[path = "chart_render/monitoring.rs"]
mod monitoring;
#[path = "chart_render/packaging.rs"]
mod packaging;
#[path = "chart_render/pod.rs"]
mod pod;
#[path = "chart_render/values.rs"]
mod values;

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
    bound_cluster_role(docs, &format!("{deployment}-crds"), expected_crd_rules());
    // In every mode it watches what could refuse a version write, through a ClusterRole of
    // its own.
    bound_cluster_role(
        docs,
        &format!("{deployment}-admission"),
        expected_admission_rules(),
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
        bound_cluster_role(docs, &auth, expected_review_rules());
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

/// Asserts that the ClusterRole `name` grants `rules` and its ClusterRoleBinding of the
/// same name binds it.
fn bound_cluster_role(docs: &[Value], name: &str, rules: Value) {
    assert_eq!(find(docs, "ClusterRole", name)["rules"], rules);
    assert_eq!(
        find(docs, "ClusterRoleBinding", name)["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name})
    );
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

/// The RBAC rule of a docs table's cells: API group, resource, verbs.
fn rule(group: &str, resource: &str, verbs_cell: &str) -> Value {
    json!({
        "apiGroups": [unquote(group)],
        "resources": [unquote(resource)],
        "verbs": verbs(verbs_cell),
    })
}

/// The rules of a docs table with the columns API group | resource | verbs | why.
fn rules_table(doc: &str, heading: &str) -> Vec<Value> {
    markdown_table(doc, heading)
        .iter()
        .map(|row| {
            assert_eq!(row.len(), 4, "{row:?}");
            rule(&row[0], &row[1], &row[2])
        })
        .collect()
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

/// The release's full name in [`render`]'s default rendering (release `rel`).
const FULL_NAME: &str = "rel-rancheros-operator";

/// docs/install.md's RBAC tables are the rules the chart renders (default values), each
/// table against the role that grants it: no page can claim a right the chart does not
/// grant, or leave out one it does.
#[test]
fn docs_rbac_tables_are_the_rendered_charts_rules() {
    let doc = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    let docs = render(&[]);
    // The table (`what` in the failure) is the rules of the rendered `kind` `name`.
    let is_rendered = |documented: Vec<Value>, kind: &str, name: &str, what: &str| {
        assert_eq!(
            Value::Array(documented),
            find(&docs, kind, name)["rules"],
            "docs/install.md's {what} differs from the rendered chart's {kind}"
        );
    };
    let documented = rules_table(&doc, "In every watched namespace (a Role there)");
    is_rendered(documented, "ClusterRole", FULL_NAME, "RBAC table");
    // Columns: API group | resource | names | verbs; "the Lease" is the Lease's name (by
    // default the release's full name).
    let documented: Vec<Value> = markdown_table(
        &doc,
        "In the release namespace only (a Role), when leader election",
    )
    .iter()
    .map(|row| {
        assert_eq!(row.len(), 4, "{row:?}");
        let mut rule = rule(&row[0], &row[1], &row[3]);
        if row[2] == "the Lease" {
            rule["resourceNames"] = json!([FULL_NAME]);
        } else {
            assert!(row[2].starts_with("any"), "{row:?}");
        }
        rule
    })
    .collect();
    is_rendered(
        documented,
        "Role",
        &format!("{FULL_NAME}-leader-election"),
        "Lease table",
    );
    // Columns: API group | resource | names | verbs | why; the names comma separated.
    let documented: Vec<Value> = markdown_table(&doc, "Cluster-wide, in every mode (a ClusterRole")
        .iter()
        .map(|row| {
            assert_eq!(row.len(), 5, "{row:?}");
            let mut rule = rule(&row[0], &row[1], &row[3]);
            rule["resourceNames"] = json!(
                row[2]
                    .split(',')
                    .map(|n| unquote(n.trim()))
                    .collect::<Vec<_>>()
            );
            rule
        })
        .collect();
    is_rendered(
        documented,
        "ClusterRole",
        &format!("{FULL_NAME}-crds"),
        "cluster-wide CRD table",
    );
    let documented = rules_table(&doc, "Cluster-wide and read only, in every mode");
    is_rendered(
        documented,
        "ClusterRole",
        &format!("{FULL_NAME}-admission"),
        "admission watch table",
    );
    let documented = rules_table(&doc, "Cluster-wide unless `metrics.insecure`");
    is_rendered(
        documented,
        "ClusterRole",
        &format!("{FULL_NAME}-metrics-auth"),
        "metrics review table",
    );
}

/// The rules of every Role and ClusterRole a rendering grants the operator (the
/// `-metrics-reader` ClusterRole is for scrapers).
fn operator_rules(docs: &[Value]) -> Vec<(String, Value)> {
    of_kind(docs, "Role")
        .into_iter()
        .chain(of_kind(docs, "ClusterRole"))
        .filter(|r| {
            !r["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-metrics-reader")
        })
        .flat_map(|r| {
            let name = format!("{} {}", r["kind"], r["metadata"]["name"]);
            r["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |rule| (name.clone(), rule.clone()))
        })
        .collect()
}

/// Whether `rule` grants `verb` (`*`: any verb) on `group`/`resource`.
fn grants(rule: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |field: &str, want: &str| {
        rule[field]
            .as_array()
            .is_some_and(|v| v.iter().any(|x| x == want || x == "*"))
    };
    let verb_granted = if verb == "*" {
        rule["verbs"].as_array().is_some_and(|v| !v.is_empty())
    } else {
        has("verbs", verb)
    };
    has("apiGroups", group) && has("resources", resource) && verb_granted
}

/// docs/install.md's table of what the operator is not granted: no rendering (the default
/// values, and every values file of the chart's `ci/`) grants any of it, through any Role
/// or ClusterRole bound to the operator.
#[test]
fn docs_rbac_denials_are_granted_by_no_rendering() {
    let doc = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    // Columns: API group | resource | verbs not granted ("any": none at all).
    let denied: Vec<(String, String, Vec<String>)> =
        markdown_table(&doc, "What the operator is not granted")
            .iter()
            .map(|row| {
                assert_eq!(row.len(), 3, "{row:?}");
                let verbs = if row[2] == "any" {
                    vec!["*".to_string()]
                } else {
                    row[2].split(',').map(|v| v.trim().to_string()).collect()
                };
                (unquote(&row[0]), unquote(&row[1]), verbs)
            })
            .collect();
    assert!(
        denied.iter().any(|(_, r, _)| r == "configmaps"),
        "the table names ConfigMaps: {denied:?}"
    );
    let mut renderings = vec![("default values".to_string(), render(&[]))];
    for values in ci_values() {
        let docs = render(&["--values", values.to_str().unwrap()]);
        renderings.push((values.display().to_string(), docs));
    }
    for (what, docs) in &renderings {
        let rules = operator_rules(docs);
        assert!(!rules.is_empty(), "{what}: no rules rendered");
        for (group, resource, verbs) in &denied {
            for verb in verbs {
                for (role, rule) in &rules {
                    assert!(
                        !grants(rule, group, resource, verb),
                        "docs/install.md says the operator is not granted {verb} on {resource:?} (group {group:?}), but with {what} {role} grants it: {rule}"
                    );
                }
            }
        }
    }
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
