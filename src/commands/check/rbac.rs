//! What `check` asks the API server about the operator's ServiceAccount: every verb of
//! every rule the chart grants, from the chart's own `files/rbac.yaml` (embedded at build
//! time, so the rules live in one place), each as one SubjectAccessReview.

use serde::Deserialize;

const RBAC_YAML: &str = include_str!("../../../charts/rancheros-operator/files/rbac.yaml");
/// The placeholder the chart replaces with the Lease's name.
const LEASE_NAME: &str = "LEASE_NAME";

#[derive(Debug, Deserialize)]
struct Rule {
    #[serde(rename = "apiGroups")]
    api_groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    #[serde(default, rename = "resourceNames")]
    resource_names: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Rules {
    rules: Vec<Rule>,
    #[serde(rename = "leaseRules")]
    lease_rules: Vec<Rule>,
    #[serde(rename = "crdRules")]
    crd_rules: Vec<Rule>,
    #[serde(rename = "admissionRules")]
    admission_rules: Vec<Rule>,
}

/// One verb on one resource (or one named object of it), where the operator needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub name: Option<String>,
    /// `None`: cluster-wide.
    pub namespace: Option<String>,
}

impl std::fmt::Display for Access {
    /// As `kubectl auth can-i` takes it: `get pods/log -n NS`, `get crd.group/name`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut what = self.resource.clone();
        if !self.group.is_empty() {
            what = format!("{what}.{}", self.group);
        }
        if let Some(name) = &self.name {
            what = format!("{what}/{name}");
        }
        if let Some(sub) = &self.subresource {
            what = format!("{what} (subresource {sub})");
        }
        match &self.namespace {
            Some(ns) => write!(f, "{} {what} in {ns}", self.verb),
            None => write!(f, "{} {what} cluster-wide", self.verb),
        }
    }
}

/// One part of the operator's RBAC, as `check` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// What the line is about: `RBAC for channels in NS`.
    pub title: String,
    pub accesses: Vec<Access>,
}

/// Where the operator works: the channels' namespace (`None`: all), the Lease's namespace
/// and name (`None`: no leader election).
pub struct Placement<'a> {
    pub channels: Option<&'a str>,
    pub lease: Option<(&'a str, &'a str)>,
}

/// The accesses the chart grants, in parts (channels, Lease, CRDs, admission). An error is a
/// build defect (the embedded file does not parse), said in one line.
pub fn parts(place: &Placement<'_>) -> Result<Vec<Part>, String> {
    let rules: Rules = serde_saphyr::from_str(RBAC_YAML)
        .map_err(|e| format!("the embedded RBAC rules do not parse: {e}"))?;
    let channels = place.channels.map(String::from);
    let mut parts = vec![Part {
        title: match place.channels {
            Some(ns) => format!("RBAC for channels in namespace {ns}"),
            None => "RBAC for channels in all namespaces".into(),
        },
        accesses: expand(&rules.rules, channels.as_deref(), None),
    }];
    if let Some((ns, name)) = place.lease {
        parts.push(Part {
            title: format!("RBAC for the leader Lease {ns}/{name}"),
            accesses: expand(&rules.lease_rules, Some(ns), Some(name)),
        });
    }
    parts.push(Part {
        title: "RBAC for reading the CRDs".into(),
        accesses: expand(&rules.crd_rules, None, None),
    });
    parts.push(Part {
        title: "RBAC for watching what could refuse a version write".into(),
        accesses: expand(&rules.admission_rules, None, None),
    });
    Ok(parts)
}

fn expand(rules: &[Rule], namespace: Option<&str>, lease: Option<&str>) -> Vec<Access> {
    let mut out = Vec::new();
    for rule in rules {
        let names: Vec<Option<String>> = if rule.resource_names.is_empty() {
            vec![None]
        } else {
            rule.resource_names
                .iter()
                .map(|n| Some(lease.filter(|_| n == LEASE_NAME).unwrap_or(n).to_string()))
                .collect()
        };
        for group in &rule.api_groups {
            for resource in &rule.resources {
                let (resource, subresource) = match resource.split_once('/') {
                    Some((r, s)) => (r.to_string(), Some(s.to_string())),
                    None => (resource.clone(), None),
                };
                for name in &names {
                    for verb in &rule.verbs {
                        out.push(Access {
                            verb: verb.clone(),
                            group: group.clone(),
                            resource: resource.clone(),
                            subresource: subresource.clone(),
                            name: name.clone(),
                            namespace: namespace.map(String::from),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The SubjectAccessReview asking whether `user` (with `groups`) has `access`.
pub fn review(access: &Access, user: &str, groups: &[String]) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": groups,
            "resourceAttributes": {
                "verb": access.verb,
                "group": access.group,
                "resource": access.resource,
                "subresource": access.subresource,
                "name": access.name,
                "namespace": access.namespace,
            }
        }
    })
}

/// The user name and groups a ServiceAccount's token authenticates as.
pub fn service_account_user(namespace: &str, name: &str) -> (String, Vec<String>) {
    (
        format!("system:serviceaccount:{namespace}:{name}"),
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".into(),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_of_the_chart_file_where_it_is_granted() {
        let parts = parts(&Placement {
            channels: Some("fleet"),
            lease: Some(("ops", "my-lease")),
        })
        .unwrap();
        assert_eq!(parts.len(), 4);
        let all: std::collections::BTreeSet<String> = parts
            .iter()
            .flat_map(|p| p.accesses.iter().map(ToString::to_string))
            .collect();
        for expected in [
            "watch managedosversionchannels.rancheros.cattle.io in fleet",
            "patch managedosversionchannels.rancheros.cattle.io (subresource status) in fleet",
            "get pods (subresource log) in fleet",
            "create events.events.k8s.io in fleet",
            "create leases.coordination.k8s.io in ops",
            "patch leases.coordination.k8s.io/my-lease in ops",
            "get customresourcedefinitions.apiextensions.k8s.io/managedosversions.rancheros.cattle.io cluster-wide",
            "watch resourcequotas in fleet",
            "watch validatingadmissionpolicybindings.admissionregistration.k8s.io cluster-wide",
        ] {
            assert!(all.contains(expected), "{expected} not in {all:#?}");
        }
        assert!(!all.iter().any(|a| a.contains(LEASE_NAME)), "{all:#?}");
        assert_eq!(parts[0].title, "RBAC for channels in namespace fleet");
        // All namespaces, no leader election: cluster-wide, no Lease part.
        let parts = super::parts(&Placement {
            channels: None,
            lease: None,
        })
        .unwrap();
        assert_eq!(parts.len(), 3);
        assert!(parts[0].accesses.iter().all(|a| a.namespace.is_none()));
    }

    #[test]
    fn a_review_for_a_service_account() {
        let (user, groups) = service_account_user("ops", "op");
        assert_eq!(user, "system:serviceaccount:ops:op");
        let a = Access {
            verb: "get".into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: Some("log".into()),
            name: None,
            namespace: Some("fleet".into()),
        };
        let r = review(&a, &user, &groups);
        assert_eq!(r["spec"]["resourceAttributes"]["subresource"], "log");
        assert_eq!(r["spec"]["groups"][1], "system:serviceaccounts:ops");
    }
}
