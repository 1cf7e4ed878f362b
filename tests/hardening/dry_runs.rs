//! Where a sync dry-runs its version writes: only in a namespace where something could
//! refuse them (a webhook, an admission policy, a quota counting versions), as the
//! operator's read-only watches of those see it; elsewhere one request per write. Requests
//! are counted by the API server's audit log.

use super::*;

const QUOTA_KEY: &str = "count/managedosversions.rancheros.cattle.io";

/// Versions `(name, version)`, those named in `refused` labelled `refuse: "yes"`.
fn labelled_data(versions: &[(&str, &str)], refused: &[&str]) -> Value {
    let mut data = channel_data(versions);
    for item in data.as_array_mut().unwrap() {
        if refused.contains(&item["metadata"]["name"].as_str().unwrap()) {
            item["metadata"]["labels"] = json!({"refuse": "yes"});
        }
    }
    data
}

/// The requests in `after` that `before` did not have, by key.
fn added(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, n)| (k.clone(), n - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Asserts what the operator sent for the versions of `ns`: `(request, count)`, a dry run's
/// request marked `(dry run)`.
async fn assert_version_requests(ns: &str, want: &[(&str, u64)]) {
    let requests = version_requests(ns).await;
    let want: std::collections::BTreeMap<String, u64> =
        want.iter().map(|&(k, n)| (k.to_string(), n)).collect();
    assert_eq!(requests, want, "{requests:?}");
}

#[tokio::test]
async fn a_webhook_registered_while_the_operator_runs_makes_the_next_sync_dry_run_and_change_nothing()
 {
    let t = TestNs::started("hook-added", &[]).await;
    t.wait_admission_watched(None).await;
    let ch = t
        .synced_custom("ch", &channel_data(&[("a", "v1"), ("b", "v1")]), SYNC)
        .await;
    // Nothing could refuse: the first sync wrote each version once, no dry run.
    assert_version_requests(&t.ns, &[("create", 2)]).await;

    // A webhook (unreachable, failurePolicy Fail) for the versions of this namespace
    // labelled refuse=yes, its rule a wildcard as policy engines register theirs: it
    // refuses exactly those.
    let name = format!("refuse-{}", t.ns);
    let hooks = super::admission::unreachable_webhook(
        &t,
        &name,
        json!({"apiGroups": ["*"], "apiVersions": ["*"],
               "operations": ["CREATE", "UPDATE"], "resources": ["*/*"]}),
        json!({"matchLabels": {"refuse": "yes"}}),
    )
    .await;
    // In force at the API server (a labelled dry-run create is refused), and seen by the
    // operator's watch.
    let probe = json!({
        "metadata": {"name": "probe", "labels": {"refuse": "yes"}},
        "spec": {"version": "v1", "type": "container"}
    });
    super::admission::wait_refused(&t, probe, "the webhook to take effect").await;
    t.wait_admission_watched(Some(&format!("validatingwebhookconfigurations {name}")))
        .await;

    // The next sync creates c, then updates a and b; the webhook refuses b. Written
    // directly, c and a would be written and then undone (a's resourceVersion moved); the
    // dry run finds the refusal first.
    let before = t.versions().await;
    let audited = version_requests(&t.ns).await;
    let data = labelled_data(&[("a", "v2"), ("b", "v2"), ("c", "v1")], &["b"]);
    super::admission::refused_by_the_dry_run(&t, &ch, &data, "b").await;
    let after = t.versions().await;
    assert_eq!(
        serde_json::to_value(&after).unwrap(),
        serde_json::to_value(&before).unwrap(),
        "every version is as it was, byte for byte"
    );
    let sent = added(&audited, &version_requests(&t.ns).await);
    assert!(
        sent.keys().all(|k| k.ends_with("(dry run)")),
        "only dry runs were sent: {sent:?}"
    );
    let _ = hooks.delete(&name, &DeleteParams::default()).await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_quota_counting_versions_makes_its_namespace_dry_run_and_no_other() {
    let mut quota_ns = TestNs::new("dry-run-quota").await;
    let free = TestNs::new("dry-run-free").await;
    create_quota(&quota_ns, "versions", json!({QUOTA_KEY: "100"})).await;
    // One operator for both namespaces.
    quota_ns.start_operator(&["--namespace", &free.ns]);
    quota_ns
        .wait_admission_watched(Some(&format!("resourcequotas {}/versions", quota_ns.ns)))
        .await;
    let versions: Vec<(String, String)> = (1..=20)
        .map(|i| (format!("v-{i:02}"), format!("{i}")))
        .collect();
    let data = channel_data(&versions);
    quota_ns.create_custom("ch", &data).await;
    free.create_custom("ch", &data).await;
    quota_ns.wait_ready("ch", "Synchronized", SYNC).await;
    free.wait_ready("ch", "Synchronized", SYNC).await;

    // The quota's namespace: each version dry-run (a create), then written (an apply).
    assert_version_requests(&quota_ns.ns, &[("create (dry run)", 20), ("create", 20)]).await;
    // The other namespace: one request per version.
    assert_version_requests(&free.ns, &[("create", 20)]).await;
    free.cleanup().await;
    quota_ns.cleanup().await;
}

#[tokio::test]
async fn an_operator_that_may_not_watch_admission_dry_runs_every_sync() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let mut t = TestNs::new("no-admission-rbac").await;
    // The chart's rules on the operator's own resources in this namespace, without those
    // of the admission watches (RBAC left out): no ClusterRole, no ResourceQuota watch.
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/rancheros-operator/files/rbac.yaml"
    );
    let rbac: Value = serde_saphyr::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let rules: Vec<Value> = rbac["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"] != json!(["resourcequotas"]))
        .cloned()
        .collect();
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "op"}})).unwrap();
    Api::<ServiceAccount>::namespaced(t.client.clone(), &t.ns)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    t.grant_role("op", rules).await;
    // The operator as that ServiceAccount (kube-rs's impersonation of the test's admin).
    let user = format!("system:serviceaccount:{}:op", t.ns);
    let groups = format!(
        "system:serviceaccounts,system:serviceaccounts:{},system:authenticated",
        t.ns
    );
    let _op = t.spawn_operator(
        &[],
        &[
            ("KUBE_RS_DEBUG_IMPERSONATE_USER", &user),
            ("KUBE_RS_DEBUG_IMPERSONATE_GROUP", &groups),
        ],
    );
    t.eventually(
        "the operator to find it may not watch admission",
        SYNC,
        || async {
            let log = t.operator_log();
            let forbidden = log.contains("admission: cannot watch validatingwebhookconfigurations")
                && log.contains("admission: cannot watch resourcequotas");
            forbidden.then_some(())
        },
    )
    .await;

    // Nothing in the namespace could refuse, but the operator cannot know: it dry-runs.
    t.create_custom(
        "ch",
        &channel_data(&[("a", "v1"), ("b", "v1"), ("c", "v1")]),
    )
    .await;
    t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_version_requests(&t.ns, &[("create (dry run)", 3), ("create", 3)]).await;
    assert!(
        t.operator_log()
            .contains("dry-running the version writes first: not watched"),
        "{}",
        t.operator_log()
    );
    t.cleanup().await;
}
