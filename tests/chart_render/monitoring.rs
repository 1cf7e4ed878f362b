//! The alert rules and the dashboard ask only for metrics the operator exports.

use super::*;

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
