//! `check`: is the cluster ready for this binary's operator? One line per check: the CRDs
//! carry this build's schema hash (`crds`), the operator's ServiceAccount has every right
//! the chart grants it (`rbac`, asked of the API server's authorizer), and a leader holds
//! the Lease (`lease`).

pub mod lease;
pub mod rbac;

use futures::future::join_all;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use serde::Serialize;

use crate::commands::cluster::{CliError, ClusterArgs};
use crate::commands::output::{self, Format};
use crate::crds;
use crate::text;
use rbac::{Access, Placement};

/// The chart's names with its default release name (`helm install rancheros-operator`).
const CHART_DEFAULT: &str = "rancheros-operator";

#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// The operator's ServiceAccount (the chart's default with the release name
    /// rancheros-operator).
    #[arg(long, value_name = "NAME", default_value = CHART_DEFAULT)]
    pub service_account: String,
    /// The namespace the operator runs in (its ServiceAccount's and its Lease's).
    #[arg(long, value_name = "NAMESPACE", default_value = CHART_DEFAULT)]
    pub operator_namespace: String,
    /// Whether the operator runs with leader election (the chart's leaderElection.enabled):
    /// without, no Lease is checked.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_election: bool,
    /// The name of the leader Lease (the chart's leaderElection.leaseName).
    #[arg(long, value_name = "NAME", default_value = CHART_DEFAULT)]
    pub leader_election_lease: String,
    /// The shard's label selector (the operator's --watch-label-selector): its Lease is
    /// named after it.
    #[arg(long, value_name = "SELECTOR")]
    pub watch_label_selector: Option<String>,
    /// -n: the namespace whose channels the operator syncs (the chart's
    /// operator.namespaces); -A: all namespaces (the chart's default).
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// One check's result (also the items of `-o json|yaml`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub message: String,
}

impl Check {
    fn new(name: impl Into<String>, result: Result<String, String>) -> Self {
        let (ok, message) = match result {
            Ok(m) => (true, m),
            Err(m) => (false, m),
        };
        Check {
            name: name.into(),
            ok,
            message,
        }
    }

    /// `ok    NAME: message` or `FAIL  NAME: message`.
    pub fn line(&self) -> String {
        let mark = if self.ok { "ok  " } else { "FAIL" };
        format!("{mark}  {}: {}", self.name, self.message)
    }
}

#[derive(Serialize)]
struct Document<'a> {
    ok: bool,
    checks: &'a [Check],
}

/// Runs every check and prints one line (or item) each; the names of those that failed.
pub async fn run(args: CheckArgs, out: &mut impl std::io::Write) -> Result<Vec<String>, CliError> {
    let wanted = args.cluster.wanted(None)?;
    let client = args.cluster.client().await?;
    let scope = wanted.resolve(client.default_namespace());
    let mut checks = crd_checks(&client).await?;
    let place = Placement {
        channels: scope.namespace(),
        lease: args.leader_election.then_some((
            args.operator_namespace.as_str(),
            args.leader_election_lease.as_str(),
        )),
    };
    let (user, groups) =
        rbac::service_account_user(&args.operator_namespace, &args.service_account);
    for part in rbac::parts(&place).map_err(CliError::Defect)? {
        let result = granted(&client, &part.accesses, &user, &groups).await;
        checks.push(Check::new(part.title, result));
    }
    if args.leader_election {
        checks.push(lease_check(&client, &args).await?);
    }
    let ok = checks.iter().all(|c| c.ok);
    match args.cluster.output {
        Format::Text => {
            let lines: String = checks.iter().map(|c| format!("{}\n", c.line())).collect();
            crate::commands::cluster::write_out(out, &lines)?;
        }
        format => {
            let doc = Document {
                ok,
                checks: &checks,
            };
            crate::commands::cluster::write_out(out, &output::document(format, &doc, false))?;
        }
    }
    Ok(checks
        .into_iter()
        .filter(|c| !c.ok)
        .map(|c| c.name)
        .collect())
}

/// One line per CRD: installed, with this build's schema hash.
async fn crd_checks(client: &Client) -> Result<Vec<Check>, CliError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    // The cluster tests point this at CRDs of their own, as they do the operator's check.
    let group = std::env::var(crds::CHECK_GROUP_ENV)
        .ok()
        .filter(|g| !g.is_empty());
    let mut checks = Vec::new();
    for (name, hash) in crds::expected(group.as_deref()) {
        let result = match api.get(&name).await {
            Ok(installed) => crds::check_crd(&installed, &hash)
                .map(|()| format!("installed with this binary's schema hash {hash}"))
                .map_err(|e| e.to_string()),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                Err(crds::CrdMismatch::NotInstalled { name: name.clone() }.to_string())
            }
            Err(kube::Error::Api(s)) if s.code == 403 => {
                Err(format!("cannot read it: {}", s.message))
            }
            Err(e) => return Err(CliError::api(format!("reading CRD {name}"), None, e)),
        };
        checks.push(Check::new(format!("CRD {name}"), result));
    }
    Ok(checks)
}

/// Whether the authorizer grants `user` every access; the denied ones named.
async fn granted(
    client: &Client,
    accesses: &[Access],
    user: &str,
    groups: &[String],
) -> Result<String, String> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answers = join_all(accesses.iter().map(|a| {
        let api = api.clone();
        async move {
            let review: SubjectAccessReview =
                serde_json::from_value(rbac::review(a, user, groups)).map_err(|e| e.to_string())?;
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| format!("cannot ask the API server whether {user} may {a}: {e}"))?;
            Ok::<bool, String>(answer.status.is_some_and(|s| s.allowed))
        }
    }))
    .await;
    let mut denied = Vec::new();
    for (access, answer) in accesses.iter().zip(answers) {
        if !answer? {
            denied.push(access.to_string());
        }
    }
    if denied.is_empty() {
        Ok(format!("{user} has all {} rights", accesses.len()))
    } else {
        Err(format!("{user} may not {}", text::list(&denied, ", ")))
    }
}

async fn lease_check(client: &Client, args: &CheckArgs) -> Result<Check, CliError> {
    let shard = args
        .watch_label_selector
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let name = crate::commands::operator::shard_lease(&args.leader_election_lease, shard);
    let what = format!("{}/{name}", args.operator_namespace);
    let api: Api<Lease> = Api::namespaced(client.clone(), &args.operator_namespace);
    let result = match api.get_opt(&name).await {
        Ok(Some(lease)) => crate::commands::check::lease::verdict(&lease, &what, Timestamp::now()),
        Ok(None) => Err(format!(
            "the Lease {what} does not exist: no operator has become the leader; is it running (with --leader-election-lease {}{})?",
            args.leader_election_lease,
            shard.map_or_else(String::new, |s| format!(" --watch-label-selector {s:?}"))
        )),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            Err(format!("cannot read the Lease {what}: {}", s.message))
        }
        Err(e) => return Err(CliError::api(format!("reading the Lease {what}"), None, e)),
    };
    Ok(Check::new("leader", result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_check() {
        let ok = Check::new("CRD x", Ok("fine".into()));
        let bad = Check::new("leader", Err("no leader holds the Lease a/b".into()));
        assert_eq!(ok.line(), "ok    CRD x: fine");
        assert_eq!(bad.line(), "FAIL  leader: no leader holds the Lease a/b");
        assert!(!bad.ok);
    }
}
