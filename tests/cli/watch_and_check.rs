//! `status --watch`, and `check` on a ready cluster and on each failure.

use super::*;

/// The lines a child prints on stdout, as they come.
fn line_reader(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[tokio::test]
async fn status_watch_prints_again_when_a_channel_changes_and_only_then() {
    let (t, target) = unwatched_channel("cli-watch", configmap_spec("v")).await;
    let mut child = bin()
        .args(["status", &target, "--watch", "-o", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = line_reader(child.stdout.take().unwrap());
    let next = || {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("status --watch printed nothing within 60s");
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let first = next();
    assert_eq!(first["channels"][0]["ready"], "Unknown", "{first}");
    // A change that shows nowhere in the table (an annotation) prints nothing...
    t.request_sync("ch", "x").await;
    // ...a status change does (as an operator writes it).
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "Synchronized",
                        "message": "synchronized 0 versions", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
        "syncedVersions": 0}});
    t.channels()
        .patch_status("ch", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let second = next();
    let c = &second["channels"][0];
    assert_eq!(
        (&c["ready"], &c["reason"], &c["versions"]),
        (&json!("True"), &json!("Synchronized"), &json!(0)),
        "{second}"
    );
    // Deleted: printed again, without it.
    t.channels()
        .delete("ch", &Default::default())
        .await
        .unwrap();
    let third = next();
    assert_eq!(third["channels"], json!([]), "{third}");
    assert!(child.try_wait().unwrap().is_none(), "status --watch exited");
    let _ = child.kill();
    let _ = child.wait();
    t.cleanup().await;
}

/// Cluster-scoped objects a test made; deleted when dropped, even when the test fails.
struct ClusterObjects(Vec<(&'static str, String)>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = Command::new("kubectl")
                .args(["delete", kind, name, "--ignore-not-found", "--wait=false"])
                .output();
        }
    }
}

/// Grants the ServiceAccount `sa` of the test's namespace what the chart grants the
/// operator, read from the chart's files/rbac.yaml: its namespace rules and Lease rules in
/// the test's namespace, its CRD and admission rules cluster-wide.
async fn grant_chart_rbac(t: &TestNs, sa: &str, lease: &str) -> ClusterObjects {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::PostParams;
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/rancheros-operator/files/rbac.yaml"
    );
    let text = std::fs::read_to_string(file)
        .unwrap()
        .replace("LEASE_NAME", lease);
    let rbac: Value = serde_saphyr::from_str(&text).unwrap();
    let mut rules = rbac["rules"].as_array().unwrap().clone();
    rules.extend(rbac["leaseRules"].as_array().unwrap().iter().cloned());
    t.grant_role(sa, rules).await;
    let subjects = json!([{"kind": "ServiceAccount", "name": sa, "namespace": t.ns}]);
    let name = format!("{}-crds", t.ns);
    let objects = ClusterObjects(vec![
        ("clusterrolebinding", name.clone()),
        ("clusterrole", name.clone()),
    ]);
    let mut cluster_rules = rbac["crdRules"].as_array().unwrap().clone();
    cluster_rules.extend(rbac["admissionRules"].as_array().unwrap().iter().cloned());
    let role: ClusterRole =
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": cluster_rules}))
            .unwrap();
    Api::<ClusterRole>::all(t.client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name}, "subjects": subjects,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(t.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    objects
}

/// An operator process that a failing test must not leave running.
/// The `FAIL` lines of `check`'s output.
fn failed_checks(o: &Output) -> Vec<String> {
    lines_starting(&stdout(o), "FAIL")
}

#[tokio::test]
async fn check_passes_on_a_ready_cluster_and_names_each_failure() {
    use rancheros_operator::crds::{CHECK_GROUP_ENV, schema_hash};
    let mut t = TestNs::new("cli-check").await;
    let lease = "check-lease";
    let _rbac = grant_chart_rbac(&t, "op", lease).await;
    // This build's CRDs under a group of the test's own (see tests/common/test_crds.rs),
    // and under another group the channel CRD of another schema.
    let mut good = common::test_crds::TestCrds::group("check-good");
    good.create(&t.client, |spec| Some(schema_hash(spec))).await;
    let mut other = common::test_crds::TestCrds::group("check-other");
    other
        .create(&t.client, |spec| {
            Some(if spec.names.plural == "managedosversionchannels" {
                "0".repeat(64)
            } else {
                schema_hash(spec)
            })
        })
        .await;
    let lease_ns = t.ns.clone();
    let mut op = t.spawn_operator(
        &[
            "--leader-election=true",
            "--leader-election-namespace",
            &lease_ns,
            "--leader-election-lease",
            lease,
        ],
        &[],
    );
    t.eventually("the operator to hold the Lease", SYNC, || async {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(t.client.clone(), &t.ns);
        let l = leases.get_opt(lease).await.unwrap()?;
        l.spec?
            .holder_identity
            .filter(|h| !h.is_empty())
            .map(|_| ())
    })
    .await;
    let args = [
        "check",
        "-n",
        &t.ns,
        "--service-account",
        "op",
        "--operator-namespace",
        &t.ns,
        "--leader-election-lease",
        lease,
    ];
    let o = cli_env(&args, &[(CHECK_GROUP_ENV, &good.group)], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(String::from).collect();
    assert_eq!(lines.len(), 7, "{lines:#?}");
    assert!(lines.iter().all(|l| l.starts_with("ok  ")), "{lines:#?}");
    assert!(
        lines[0].starts_with(&format!(
            "ok    CRD managedosversionchannels.{}",
            good.group
        )),
        "{lines:#?}"
    );
    assert!(
        lines[6].contains(&format!("holds the Lease {}/{lease}", t.ns)),
        "{lines:#?}"
    );
    assert_eq!(stderr(&o), "");
    // As a document: the same checks.
    let o = cli_env(
        &[&args[..], &["-o", "json"]].concat(),
        &[(CHECK_GROUP_ENV, &good.group)],
        CLI_LIMIT,
    )
    .await;
    let doc = json_out(&o);
    assert_eq!(doc["ok"], true, "{doc}");
    assert_eq!(doc["checks"].as_array().unwrap().len(), 7, "{doc}");

    // A CRD of another schema: one line names it, exit 1.
    let o = cli_env(&args, &[(CHECK_GROUP_ENV, &other.group)], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let failed = failed_checks(&o);
    assert_eq!(failed.len(), 1, "{}", stdout(&o));
    assert!(
        failed[0].starts_with(&format!(
            "FAIL  CRD managedosversionchannels.{}: the installed CRD",
            other.group
        )) && failed[0].contains(&"0".repeat(64)),
        "{}",
        failed[0]
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: the cluster is not ready"),
        "{}",
        stderr(&o)
    );

    // Another ServiceAccount has none of the rights: the four RBAC lines fail.
    let mut nobody = args.to_vec();
    nobody[4] = "nobody";
    let o = cli_env(&nobody, &[(CHECK_GROUP_ENV, &good.group)], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1));
    let failed = failed_checks(&o);
    assert_eq!(failed.len(), 4, "{}", stdout(&o));
    assert!(
        failed
            .iter()
            .all(|l| l.starts_with("FAIL  RBAC") && l.contains(":nobody may not ")),
        "{failed:#?}"
    );

    // The operator stops and hands the Lease back: no leader.
    let _ = Command::new("kill")
        .args(["-TERM", &op.0.id().to_string()])
        .status();
    let _ = op.0.wait();
    let o = cli_env(&args, &[(CHECK_GROUP_ENV, &good.group)], CLI_LIMIT).await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_eq!(
        failed_checks(&o),
        [format!(
            "FAIL  leader: no leader holds the Lease {}/{lease} (it names no holder: the last leader released it); is the operator running?",
            t.ns
        )]
    );
    drop((good, other));
    t.cleanup().await;
}
