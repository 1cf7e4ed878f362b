use super::*;
use serde_json::{Value, json};

const NS: &str = "tenant";

fn rule(groups: &[&str], versions: &[&str], resources: &[&str], operations: &[&str]) -> Value {
    json!({"apiGroups": groups, "apiVersions": versions, "resources": resources, "operations": operations})
}

fn versions_rule() -> Value {
    rule(
        &[GROUP],
        &["v1"],
        &["managedosversions"],
        &["CREATE", "UPDATE"],
    )
}

/// A webhook configuration of one webhook with `rules` and the extra fields of `more`.
fn hook(rules: Value, more: Value) -> Value {
    let mut webhook = json!({
        "name": "check.example.com",
        "clientConfig": {"url": "https://example.com/"},
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let (Some(w), Some(m)) = (webhook.as_object_mut(), more.as_object()) {
        w.extend(m.clone());
    }
    json!({"metadata": {"name": "engine"}, "webhooks": [webhook]})
}

fn validating(config: Value) -> Observed {
    Observed {
        validating_webhooks: vec![Arc::new(serde_json::from_value(config).unwrap())],
        ..Default::default()
    }
}

fn mutating(config: Value) -> Observed {
    Observed {
        mutating_webhooks: vec![Arc::new(serde_json::from_value(config).unwrap())],
        ..Default::default()
    }
}

fn refused(observed: &Observed) -> bool {
    !refusers(observed, NS).is_empty()
}

#[test]
fn nothing_observed_nothing_refuses() {
    assert!(refusers(&Observed::default(), NS).is_empty());
}

#[test]
fn a_webhook_on_versions_refuses_and_is_named() {
    let observed = validating(hook(json!([versions_rule()]), json!({})));
    assert_eq!(
        refusers(&observed, NS),
        ["validating webhook engine/check.example.com"]
    );
    let observed = mutating(hook(json!([versions_rule()]), json!({})));
    assert_eq!(
        refusers(&observed, NS),
        ["mutating webhook engine/check.example.com"]
    );
}

#[test]
fn wildcard_rules_as_policy_engines_register_them_match() {
    for r in [
        rule(&["*"], &["*"], &["*"], &["*"]),
        rule(
            &["*"],
            &["*"],
            &["*/*"],
            &["CREATE", "UPDATE", "DELETE", "CONNECT"],
        ),
        rule(&[GROUP], &["*"], &["managedosversions/*"], &["UPDATE"]),
        rule(&["*"], &["v1"], &["*"], &["DELETE"]),
    ] {
        assert!(
            refused(&validating(hook(json!([r]), json!({})))),
            "{r} matches"
        );
    }
}

#[test]
fn rules_on_other_things_do_not_match() {
    for r in [
        // The chart's own policy: channels, not versions.
        rule(&[GROUP], &["v1"], &["managedosversionchannels"], &["*"]),
        rule(&["apps"], &["*"], &["*"], &["*"]),
        rule(&["*"], &["*"], &["pods", "secrets"], &["*"]),
        // A subresource only: versions have none that a sync writes.
        rule(&[GROUP], &["*"], &["managedosversions/status"], &["*"]),
        rule(&["*"], &["*"], &["*/status"], &["*"]),
        // Only CONNECT.
        rule(&["*"], &["*"], &["*"], &["CONNECT"]),
        // Empty lists match nothing.
        rule(&[], &["*"], &["*"], &["*"]),
        rule(&["*"], &[], &["*"], &["*"]),
        rule(&["*"], &["*"], &[], &["*"]),
        rule(&["*"], &["*"], &["*"], &[]),
    ] {
        assert!(
            !refused(&validating(hook(json!([r]), json!({})))),
            "{r} does not match"
        );
    }
    assert!(!refused(&validating(hook(json!([]), json!({})))));
    assert!(!refused(&validating(json!({"metadata": {"name": "none"}}))));
}

#[test]
fn scope_and_match_policy_are_honoured() {
    let mut cluster = versions_rule();
    cluster["scope"] = json!("Cluster");
    assert!(!refused(&validating(hook(json!([cluster]), json!({})))));
    for scope in ["*", "Namespaced"] {
        let mut r = versions_rule();
        r["scope"] = json!(scope);
        assert!(refused(&validating(hook(json!([r]), json!({})))));
    }
    // Another version of the resource: Equivalent (the default) matches it, Exact does not.
    let other = rule(&[GROUP], &["v2"], &["managedosversions"], &["CREATE"]);
    assert!(refused(&validating(hook(json!([other]), json!({})))));
    assert!(refused(&validating(hook(
        json!([other]),
        json!({"matchPolicy": "Equivalent"})
    ))));
    assert!(!refused(&validating(hook(
        json!([other]),
        json!({"matchPolicy": "Exact"})
    ))));
}

#[test]
fn failure_policy_ignore_and_object_selectors_still_refuse() {
    for more in [
        json!({"failurePolicy": "Ignore"}),
        json!({"objectSelector": {"matchLabels": {"team": "a"}}}),
        json!({"matchConditions": [{"name": "x", "expression": "false"}]}),
    ] {
        assert!(
            refused(&validating(hook(json!([versions_rule()]), more.clone()))),
            "{more}"
        );
    }
}

#[test]
fn namespace_selectors_decide_by_the_name_label_only() {
    let selects = |selector: Value| {
        refused(&validating(hook(
            json!([versions_rule()]),
            json!({"namespaceSelector": selector}),
        )))
    };
    assert!(selects(json!({})));
    assert!(selects(json!({"matchLabels": {NAME_LABEL: NS}})));
    assert!(!selects(json!({"matchLabels": {NAME_LABEL: "other"}})));
    let expr = |op: &str, values: &[&str]| json!({"matchExpressions": [{"key": NAME_LABEL, "operator": op, "values": values}]});
    assert!(selects(expr("In", &["a", NS])));
    assert!(!selects(expr("In", &["a", "b"])));
    // As Kyverno and Gatekeeper exclude their own and the system namespaces.
    assert!(selects(expr("NotIn", &["kyverno", "kube-system"])));
    assert!(!selects(expr("NotIn", &["kube-system", NS])));
    assert!(selects(expr("Exists", &[])));
    assert!(!selects(expr("DoesNotExist", &[])));
    // Other labels are not read: they may select.
    assert!(selects(json!({"matchLabels": {"team": "a"}})));
    assert!(selects(
        json!({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]})
    ));
    // All requirements hold together: one on the name that fails decides.
    assert!(!selects(json!({
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": NAME_LABEL, "operator": "In", "values": ["other"]}]
    })));
}

fn policy(name: &str, constraints: Value) -> Arc<ValidatingAdmissionPolicy> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"matchConstraints": constraints, "validations": [{"expression": "false"}]}
        }))
        .unwrap(),
    )
}

fn binding(
    name: &str,
    policy: &str,
    actions: &[&str],
    resources: Value,
) -> Arc<ValidatingAdmissionPolicyBinding> {
    let mut spec = json!({"policyName": policy, "validationActions": actions});
    if !resources.is_null() {
        spec["matchResources"] = resources;
    }
    Arc::new(serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap())
}

#[test]
fn an_admission_policy_refuses_only_through_a_binding_that_denies() {
    let on_versions = json!({"resourceRules": [versions_rule()]});
    let with = |bindings| Observed {
        policies: vec![policy("p", on_versions.clone())],
        bindings,
        ..Default::default()
    };
    assert!(refusers(&with(vec![]), NS).is_empty(), "unbound");
    assert_eq!(
        refusers(&with(vec![binding("b", "p", &["Deny"], Value::Null)]), NS),
        ["admission policy p (binding b)"]
    );
    assert!(
        refusers(
            &with(vec![binding("b", "p", &["Warn", "Audit"], Value::Null)]),
            NS
        )
        .is_empty(),
        "warns only"
    );
    assert!(
        refusers(
            &with(vec![binding("b", "other", &["Deny"], Value::Null)]),
            NS
        )
        .is_empty(),
        "binds another policy"
    );
    // The binding's match resources narrow: to another namespace, to other resources.
    let elsewhere = json!({"namespaceSelector": {"matchLabels": {NAME_LABEL: "other"}}});
    assert!(refusers(&with(vec![binding("b", "p", &["Deny"], elsewhere)]), NS).is_empty());
    let here = json!({"namespaceSelector": {"matchLabels": {NAME_LABEL: NS}}});
    assert!(!refusers(&with(vec![binding("b", "p", &["Deny"], here)]), NS).is_empty());
    let pods = json!({"resourceRules": [rule(&[""], &["v1"], &["pods"], &["*"])]});
    assert!(refusers(&with(vec![binding("b", "p", &["Deny"], pods)]), NS).is_empty());
    // A policy on other resources, or without constraints, matches nothing.
    for constraints in [
        json!({"resourceRules": [rule(&[GROUP], &["v1"], &["managedosversionchannels"], &["*"])]}),
        json!({}),
    ] {
        let observed = Observed {
            policies: vec![policy("p", constraints)],
            bindings: vec![binding("b", "p", &["Deny"], Value::Null)],
            ..Default::default()
        };
        assert!(refusers(&observed, NS).is_empty());
    }
    // A wildcard policy, its binding with parameters: may refuse.
    let observed = Observed {
        policies: vec![policy(
            "all",
            json!({"resourceRules": [rule(&["*"], &["*"], &["*"], &["*"])]}),
        )],
        bindings: vec![Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "b"}, "spec": {
                "policyName": "all", "validationActions": ["Deny"],
                "paramRef": {"name": "limits", "parameterNotFoundAction": "Allow"}
            }}))
            .unwrap(),
        )],
        ..Default::default()
    };
    assert!(refused(&observed));
}

fn quota(namespace: &str, hard: Value) -> Arc<ResourceQuota> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "q", "namespace": namespace},
            "spec": {"hard": hard}
        }))
        .unwrap(),
    )
}

#[test]
fn a_quota_refuses_in_its_own_namespace_when_it_counts_versions() {
    let observed = Observed {
        quotas: vec![
            quota(NS, json!({QUOTA_KEY: "10"})),
            quota("other", json!({QUOTA_KEY: "10", "pods": "3"})),
        ],
        ..Default::default()
    };
    assert_eq!(refusers(&observed, NS), ["ResourceQuota q"]);
    assert_eq!(refusers(&observed, "other"), ["ResourceQuota q"]);
    assert!(refusers(&observed, "third").is_empty());
    let observed = Observed {
        quotas: vec![quota(
            NS,
            json!({"pods": "3", "count/configmaps": "5", "requests.storage": "1Gi"}),
        )],
        ..Default::default()
    };
    assert!(refusers(&observed, NS).is_empty());
}
