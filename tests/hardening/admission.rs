//! Admission: quotas' and webhooks' refusals, and policies that rewrite what the operator writes.

use super::*;

#[tokio::test]
async fn a_write_refused_by_admission_is_found_by_the_dry_run_and_changes_nothing() {
    let t = TestNs::started("admission-refuses", &[]).await;
    let ch = t
        .synced_custom("ch", &channel_data(&[("keep", "v1")]), SYNC)
        .await;
    let before = t.versions().await;

    // From now on an admission policy refuses versions whose version is "v-bad".
    let policy = Policy::validating(&t, "object.spec.version != 'v-bad'").await;
    // ...and the operator sees it: the sync dry-runs where it could refuse.
    let name = format!("refuse-{}", t.ns);
    t.wait_admission_watched(Some(&format!("validatingadmissionpolicies {name}")))
        .await;
    t.wait_admission_watched(Some(&format!("validatingadmissionpolicybindings {name}")))
        .await;
    let data = channel_data(&[("keep", "v2"), ("new", "v1"), ("bad", "v-bad")]);
    refused_by_the_dry_run(&t, &ch, &data, "bad").await;
    // Not even the writes that would have passed were made.
    let after = t.versions().await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].spec, before[0].spec);
    assert_eq!(after[0].resource_version(), before[0].resource_version());
    policy.delete(&t).await;
    t.cleanup().await;
}

#[tokio::test]
async fn an_unreachable_webhook_is_a_failed_sync_that_backs_off_then_recovers() {
    let t = TestNs::started("webhook-down", &["--retry-delay=2s"]).await;
    // Every write to versions in this namespace goes to a webhook with no endpoints: the
    // API server answers 500 (failed calling webhook), a retryable API error.
    let name = format!("down-{}", t.ns);
    let hooks = unreachable_webhook(
        &t,
        &name,
        json!({"apiGroups": ["rancheros.cattle.io"], "apiVersions": ["*"],
               "operations": ["CREATE", "UPDATE"], "resources": ["managedosversions"]}),
        json!({}),
    )
    .await;
    t.create_custom("ch", &channel_data(&[("a", "v1")])).await;
    let ch = t.wait_ready("ch", "FailedToSync", SYNC).await;
    assert_message_contains(&ch, "failed calling webhook");
    // It backs off (2s, 4s, 8s, then the 1h interval): by the 4th failure it waits.
    let ch = t
        .eventually("4 failed attempts", SYNC, || async {
            let ch = t.channel("ch").await;
            (ch.status.as_ref()?.failed_synchronization_attempts >= 4).then_some(ch)
        })
        .await;
    assert_eq!(
        ch.status.as_ref().unwrap().failed_synchronization_attempts,
        4
    );
    assert_message_contains(&ch, "4 failures in a row; next try in 1h");
    assert_eq!(t.version_names().await, Vec::<String>::new());
    wait_for_event(&t, "ch", |(ty, reason, _)| {
        ty == "Warning" && reason == "FailedToSync"
    })
    .await;

    // The webhook goes away; an on-demand sync succeeds and resets the count.
    hooks.delete(&name, &DeleteParams::default()).await.unwrap();
    let ch = t.sync_again("ch", "after-webhook", &ch, SYNC).await;
    assert_reason(&ch, "Synchronized");
    assert_eq!(
        ch.status.as_ref().unwrap().failed_synchronization_attempts,
        0
    );
    assert_eq!(t.version_names().await, ["a"]);
    t.cleanup().await;
}

/// Creates a ValidatingWebhookConfiguration `name` of one webhook for the test's namespace
/// that calls a Service with no endpoints and fails closed (the API server answers 500,
/// failed calling webhook): `rule` says which requests, `object_selector` on which objects.
/// Returns the API of such configurations, to delete it.
pub(crate) async fn unreachable_webhook(
    t: &TestNs,
    name: &str,
    rule: Value,
    object_selector: Value,
) -> Api<DynamicObject> {
    let hooks: Api<DynamicObject> = Api::all_with(
        t.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        ),
    );
    let hook: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "down.rancheros.test",
            "clientConfig": {"service": {"namespace": t.ns, "name": "nobody", "port": 443}},
            "rules": [rule],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.ns}},
            "objectSelector": object_selector,
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 1
        }]
    }))
    .unwrap();
    hooks.create(&PostParams::default(), &hook).await.unwrap();
    hooks
}

/// Gives channel `ch` (custom, synced as `before`) the data `data`, and checks that the sync
/// that follows fails at the dry run of version `refused`.
pub(crate) async fn refused_by_the_dry_run(
    t: &TestNs,
    before: &rancheros_operator::api::ManagedOSVersionChannel,
    data: &Value,
    refused: &str,
) {
    t.patch_spec("ch", json!({"options": {"args": [write_script(data)]}}))
        .await;
    let ch = t.wait_next_attempt("ch", before, SYNC).await;
    assert_eq!(ready_reason(&ch).as_deref(), Some("FailedToSync"));
    let message = ready_message(&ch);
    let expected = format!(
        "the API server refuses to apply version {refused} (found by a dry run; nothing was changed)"
    );
    assert!(message.starts_with(&expected), "{message}");
}

/// Waits until the API server refuses a dry-run create of `probe` (a version) in the
/// test's namespace: admission registered a moment ago is in force.
pub(crate) async fn wait_refused(t: &TestNs, probe: Value, what: &str) {
    let probe: rancheros_operator::api::ManagedOSVersion = serde_json::from_value(probe).unwrap();
    t.eventually(what, SYNC, || async {
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        t.versions_api()
            .create(&params, &probe)
            .await
            .is_err()
            .then_some(())
    })
    .await;
}

/// A cluster-wide admission policy bound to the test's namespace; deleted by `delete`.
pub(crate) struct Policy {
    policies: Api<DynamicObject>,
    bindings: Api<DynamicObject>,
    name: String,
}

impl Policy {
    fn api(t: &TestNs, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::all_with(
            t.client.clone(),
            &ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", version, kind),
                plural,
            ),
        )
    }

    /// A ValidatingAdmissionPolicy, bound to the test's namespace, that refuses the
    /// requests `rule` (a `resourceRules` entry) matches when `expression` is false.
    async fn deny(t: &TestNs, name: String, rule: Value, expression: &str) -> Self {
        let policies = Self::api(
            t,
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
        );
        let bindings = Self::api(
            t,
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        );
        let policy = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule]},
                "validations": [{"expression": expression, "message": "refused by the test's admission policy"}]
            }
        });
        let binding = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name, "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.ns}}}
            }
        });
        Self::create(policies, bindings, name, policy, binding).await
    }

    /// A ValidatingAdmissionPolicy that refuses versions for which `rule` is false.
    async fn validating(t: &TestNs, rule: &str) -> Self {
        let p = Self::deny(
            t,
            format!("refuse-{}", t.ns),
            json!({"apiGroups": ["rancheros.cattle.io"], "apiVersions": ["*"],
                   "operations": ["CREATE", "UPDATE"], "resources": ["managedosversions"]}),
            rule,
        )
        .await;
        // Policies take effect a moment after they are created: wait until a dry-run
        // create of a refused version is refused.
        let probe = json!({
            "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersion",
            "metadata": {"name": "probe"}, "spec": {"version": "v-bad", "type": "container"}
        });
        wait_refused(t, probe, "the admission policy to take effect").await;
        p
    }

    /// A ValidatingAdmissionPolicy that refuses every update of one Lease in the test's
    /// namespace: its holder can no longer renew it.
    pub(crate) async fn refusing_lease_renewals(t: &TestNs, lease: &str) -> Self {
        Self::deny(
            t,
            format!("no-renewal-{}", t.ns),
            json!({"apiGroups": ["coordination.k8s.io"], "apiVersions": ["*"],
                   "operations": ["UPDATE"], "resources": ["leases"], "resourceNames": [lease]}),
            "false",
        )
        .await
    }

    async fn create(
        policies: Api<DynamicObject>,
        bindings: Api<DynamicObject>,
        name: String,
        policy: Value,
        binding: Value,
    ) -> Self {
        create_json(&policies, policy, &format!("admission policy {name}")).await;
        create_json(
            &bindings,
            binding,
            &format!("admission policy binding {name}"),
        )
        .await;
        Self {
            policies,
            bindings,
            name,
        }
    }

    pub(crate) async fn delete(self, _t: &TestNs) {
        let _ = self
            .bindings
            .delete(&self.name, &DeleteParams::default())
            .await;
        let _ = self
            .policies
            .delete(&self.name, &DeleteParams::default())
            .await;
    }
}

/// The served version of MutatingAdmissionPolicy (`v1` or `v1beta1`), if any.
async fn mutating_policy_version(t: &TestNs) -> Option<String> {
    let request = http::Request::get("/apis/admissionregistration.k8s.io")
        .body(Vec::new())
        .unwrap();
    let group: Value = t.client.request(request).await.ok()?;
    for v in group["versions"].as_array()? {
        let version = v["version"].as_str()?;
        let request = http::Request::get(format!("/apis/admissionregistration.k8s.io/{version}"))
            .body(Vec::new())
            .unwrap();
        let list: Value = t.client.request(request).await.ok()?;
        let has = list["resources"]
            .as_array()?
            .iter()
            .any(|r| r["name"] == "mutatingadmissionpolicies");
        if has {
            return Some(version.to_string());
        }
    }
    None
}

#[tokio::test]
async fn an_admission_policy_that_rewrites_the_display_image_causes_no_replace_loop() {
    let mut t = TestNs::new("image-rewrite").await;
    let version = mutating_policy_version(&t)
        .await
        .expect("the cluster serves MutatingAdmissionPolicy (scripts/cluster enables it)");
    let api = |kind: &str, plural: &str| Policy::api(&t, &version, kind, plural);
    let name = format!("rewrite-{}", t.ns);
    let api_version = format!("admissionregistration.k8s.io/{version}");
    // Like a registry-mirror or digest-pinning webhook: the display image is rewritten to
    // another reference of the same image (`docker.io/library/<name>`).
    let policy = json!({
        "apiVersion": api_version, "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "mutations": [{
                "patchType": "JSONPatch",
                "jsonPatch": {"expression": "[JSONPatch{op: \"replace\", path: \"/spec/containers/0/image\", value: \"docker.io/library/\" + object.spec.containers[0].image}]"}
            }]
        }
    });
    let binding = json!({
        "apiVersion": api_version, "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.ns}}}
        }
    });
    let p = Policy::create(
        api("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
        api(
            "MutatingAdmissionPolicyBinding",
            "mutatingadmissionpolicybindings",
        ),
        name,
        policy,
        binding,
    )
    .await;
    // Wait until the policy rewrites a dry-run pod.
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": operator_image()}]}
    }))
    .unwrap();
    t.eventually("the mutating policy to take effect", SYNC, || async {
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let pod = t.pods().create(&params, &probe).await.ok()?;
        let image = pod.spec?.containers.first()?.image.clone()?;
        image.starts_with("docker.io/library/").then_some(())
    })
    .await;

    t.start_operator(&[]);
    t.create_custom("ch", &channel_data(&[("a", "v1")])).await;
    // A loop would delete every pod as "stale" before it could print: the sync would
    // never finish. It finishes, with one pod.
    t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_eq!(t.pods_created(), 1, "{}", t.operator_log());
    assert_eq!(t.version_names().await, ["a"]);
    p.delete(&t).await;
    t.cleanup().await;
}
