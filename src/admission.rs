//! Whether anything in the cluster could refuse a version write in a namespace, decided
//! from the objects that can (pure: the watches that observe them are
//! [`watch`]). A sync dry-runs its writes only where something can refuse them
//! (`controller::writes`); elsewhere the operator's own schema check is the API server's,
//! and a refusal that still comes undoes the sync's earlier writes.
//!
//! What can refuse a write of a `managedosversions.rancheros.cattle.io/v1` object (create,
//! update, delete): a validating or mutating webhook whose rules match it (wildcards
//! included, as policy engines register them), a ValidatingAdmissionPolicy matching it with
//! a binding that denies, and a ResourceQuota of its namespace that counts versions. The
//! decision errs on the side of "may refuse": object selectors, match conditions, resource
//! names, exclusions and parameters are taken as matching; a namespace selector is decided
//! only by the label `kubernetes.io/metadata.name`, which the API server sets on every
//! namespace to its name (the operator reads no namespaces), and any other requirement
//! counts as met. A webhook's `failurePolicy: Ignore` changes nothing: it refuses when it
//! answers "no".

pub mod watch;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, MutatingWebhookConfiguration, NamedRuleWithOperations, RuleWithOperations,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use std::sync::Arc;

/// The API group, version and resource of the writes in question.
const GROUP: &str = "rancheros.cattle.io";
const VERSION: &str = "v1";
const RESOURCE: &str = "managedosversions";
/// The operations a sync's writes are (server-side apply, merge patch, replace: CREATE or
/// UPDATE; delete).
const OPERATIONS: [&str; 3] = ["CREATE", "UPDATE", "DELETE"];
/// The quota key that counts versions.
pub const QUOTA_KEY: &str = "count/managedosversions.rancheros.cattle.io";
/// The label every namespace carries, its value the namespace's name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// What the watches hold (of every namespace; quotas are filtered here).
#[derive(Default)]
pub struct Observed {
    pub validating_webhooks: Vec<Arc<ValidatingWebhookConfiguration>>,
    pub mutating_webhooks: Vec<Arc<MutatingWebhookConfiguration>>,
    pub policies: Vec<Arc<ValidatingAdmissionPolicy>>,
    pub bindings: Vec<Arc<ValidatingAdmissionPolicyBinding>>,
    pub quotas: Vec<Arc<ResourceQuota>>,
}

/// What could refuse a version write in `namespace`, each named for a log line
/// (`validating webhook CONFIG/WEBHOOK`, `admission policy P (binding B)`,
/// `ResourceQuota NAME`); empty: nothing can.
pub fn refusers(observed: &Observed, namespace: &str) -> Vec<String> {
    // Each webhook as (kind, configuration, what decides whether it applies); the two
    // configuration types have the same fields, but no trait in common.
    macro_rules! hooks {
        ($configs:expr, $kind:literal) => {
            $configs.iter().flat_map(|c| {
                c.webhooks.iter().flatten().map(move |h| {
                    let hook = Hook {
                        name: &h.name,
                        rules: h.rules.as_deref(),
                        match_policy: h.match_policy.as_deref(),
                        namespace_selector: h.namespace_selector.as_ref(),
                    };
                    ($kind, c.name_any(), hook)
                })
            })
        };
    }
    let mut out: Vec<String> = hooks!(observed.validating_webhooks, "validating")
        .chain(hooks!(observed.mutating_webhooks, "mutating"))
        .filter(|(_, _, hook)| hook.applies(namespace))
        .map(|(kind, config, hook)| format!("{kind} webhook {config}/{}", hook.name))
        .collect();
    for policy in &observed.policies {
        let name = policy.name_any();
        let constraints = policy
            .spec
            .as_ref()
            .and_then(|s| s.match_constraints.as_ref());
        // A policy without constraints matches nothing.
        if !constraints.is_some_and(|c| resources_match(c, false, namespace)) {
            continue;
        }
        for binding in &observed.bindings {
            let Some(spec) = &binding.spec else { continue };
            let denies = spec
                .validation_actions
                .iter()
                .flatten()
                .any(|a| a == "Deny");
            if spec.policy_name.as_deref() == Some(name.as_str())
                && denies
                && spec
                    .match_resources
                    .as_ref()
                    .is_none_or(|m| resources_match(m, true, namespace))
            {
                out.push(format!(
                    "admission policy {name} (binding {})",
                    binding.name_any()
                ));
            }
        }
    }
    for quota in &observed.quotas {
        let counts = quota
            .spec
            .as_ref()
            .and_then(|s| s.hard.as_ref())
            .is_some_and(|h| h.contains_key(QUOTA_KEY));
        if counts && quota.namespace().as_deref() == Some(namespace) {
            out.push(format!("ResourceQuota {}", quota.name_any()));
        }
    }
    out
}

/// What decides whether a validating or mutating webhook applies.
struct Hook<'a> {
    name: &'a str,
    rules: Option<&'a [RuleWithOperations]>,
    match_policy: Option<&'a str>,
    namespace_selector: Option<&'a LabelSelector>,
}

impl Hook<'_> {
    /// One of its rules matches and its namespace selector may select the namespace (its
    /// object selector and match conditions are taken as matching).
    fn applies(&self, namespace: &str) -> bool {
        webhook_applies(
            self.rules,
            self.match_policy,
            self.namespace_selector,
            namespace,
        )
    }
}

fn webhook_applies(
    rules: Option<&[RuleWithOperations]>,
    match_policy: Option<&str>,
    namespace_selector: Option<&LabelSelector>,
    namespace: &str,
) -> bool {
    let exact = match_policy == Some("Exact");
    let matched = rules
        .into_iter()
        .flatten()
        .any(|r| rule_matches(&rule!(r), exact));
    matched && may_select(namespace_selector, namespace)
}

/// A policy's match constraints, or a binding's match resources: a resource rule matches
/// (a binding without rules narrows nothing: `empty_rules_match`) and the namespace
/// selector may select the namespace.
fn resources_match(m: &MatchResources, empty_rules_match: bool, namespace: &str) -> bool {
    let exact = m.match_policy.as_deref() == Some("Exact");
    let rules: &[NamedRuleWithOperations] = m.resource_rules.as_deref().unwrap_or_default();
    let matched = if rules.is_empty() {
        empty_rules_match
    } else {
        rules.iter().any(|r| rule_matches(&rule!(r), exact))
    };
    matched && may_select(m.namespace_selector.as_ref(), namespace)
}

/// The [`Rule`] of a webhook's or a policy's rule (two types with the same fields).
macro_rules! rule {
    ($r:expr) => {
        Rule {
            groups: $r.api_groups.as_deref(),
            versions: $r.api_versions.as_deref(),
            resources: $r.resources.as_deref(),
            operations: $r.operations.as_deref(),
            scope: $r.scope.as_deref(),
        }
    };
}
use rule;

/// The fields of an admission rule, whichever type carries them.
struct Rule<'a> {
    groups: Option<&'a [String]>,
    versions: Option<&'a [String]>,
    resources: Option<&'a [String]>,
    operations: Option<&'a [String]>,
    scope: Option<&'a str>,
}

/// Whether a rule matches a version write, as the API server matches it: `*` in any list,
/// `resource/subresource` forms (`*/*`, `managedosversions/*` match the resource itself
/// too), the scope. With `matchPolicy: Equivalent` (the default) a rule on any version of
/// the group's resource matches; only `Exact` holds to `v1`. An empty list matches nothing.
fn rule_matches(rule: &Rule<'_>, exact: bool) -> bool {
    let has = |list: Option<&[String]>, value: &str| {
        list.into_iter().flatten().any(|v| v == "*" || v == value)
    };
    let resource = rule.resources.into_iter().flatten().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == RESOURCE) && (sub == "*" || sub.is_empty())
    });
    let operation = OPERATIONS.iter().any(|op| has(rule.operations, op));
    let version = if exact {
        has(rule.versions, VERSION)
    } else {
        rule.versions.is_some_and(|v| !v.is_empty())
    };
    let scope = matches!(rule.scope, None | Some("*" | "Namespaced"));
    has(rule.groups, GROUP) && version && resource && operation && scope
}

/// Whether a namespace selector may select `namespace`: its requirements on
/// `kubernetes.io/metadata.name` decide; those on other labels count as met (the operator
/// does not read namespaces' labels). No selector, or an empty one, selects every namespace.
fn may_select(selector: Option<&LabelSelector>, namespace: &str) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| k != NAME_LABEL || v == namespace);
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        if e.key != NAME_LABEL {
            return true;
        }
        let listed = e.values.iter().flatten().any(|v| v == namespace);
        match e.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            "DoesNotExist" => false,
            // Exists, or an operator this build does not know: may select.
            _ => true,
        }
    });
    labels_ok && expressions_ok
}

#[cfg(test)]
mod tests;
