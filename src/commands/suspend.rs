//! `suspend` and `resume`: set a channel's `spec.suspend` (a merge patch of that one
//! field, written only when it differs), for one channel or, with `--all`, for every
//! channel in the namespace (or in all namespaces).

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Serialize;
use serde_json::json;

use crate::api::ManagedOSVersionChannel;
use crate::commands::cluster::{CliError, ClusterArgs, target_of};
use crate::commands::output::{self, Format};

/// The field manager of `spec.suspend` as these commands write it.
const SUSPEND_FIELD_MANAGER: &str = "rancheros-operator-cli";

#[derive(clap::Args, Debug, Clone)]
pub struct SuspendArgs {
    #[command(flatten)]
    pub channels: crate::commands::cluster::Channels,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// One channel's result (also the items of `-o json|yaml`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suspended {
    pub namespace: String,
    pub name: String,
    /// `spec.suspend` now.
    pub suspend: bool,
    /// Whether this run changed it.
    pub changed: bool,
}

impl Suspended {
    /// The line for people: `NS/CH: suspended` or `NS/CH: already suspended`.
    pub fn line(&self) -> String {
        let state = if self.suspend { "suspended" } else { "resumed" };
        let already = if self.changed { "" } else { "already " };
        format!("{}/{}: {already}{state}", self.namespace, self.name)
    }
}

#[derive(Serialize)]
struct Document<'a> {
    channels: &'a [Suspended],
}

/// Sets `spec.suspend` to `suspend` and prints what it did.
pub async fn run(
    args: SuspendArgs,
    suspend: bool,
    out: &mut impl std::io::Write,
) -> Result<(), CliError> {
    let (client, _, found) = args.channels.find(&args.cluster).await?;
    let params = PatchParams {
        field_manager: Some(SUSPEND_FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch = json!({"spec": {"suspend": suspend}});
    let mut results = Vec::new();
    for ch in &found {
        let target = target_of(ch);
        let now = ch.spec.suspend.unwrap_or(false);
        if now != suspend {
            let api: Api<ManagedOSVersionChannel> =
                Api::namespaced(client.clone(), &target.namespace);
            let verb = if suspend { "suspending" } else { "resuming" };
            api.patch(&target.name, &params, &Patch::Merge(&patch))
                .await
                .map_err(|e| CliError::api(format!("{verb} {target}"), Some(&target), e))?;
        }
        let result = Suspended {
            namespace: target.namespace,
            name: target.name,
            suspend,
            changed: now != suspend,
        };
        if args.cluster.output == Format::Text {
            crate::commands::cluster::write_out(out, &format!("{}\n", result.line()))?;
        }
        results.push(result);
    }
    if args.cluster.output.is_document() {
        results.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let doc = Document { channels: &results };
        crate::commands::cluster::write_out(
            out,
            &output::document(args.cluster.output, &doc, false),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_what_changed() {
        let r = |suspend, changed| Suspended {
            namespace: "n".into(),
            name: "c".into(),
            suspend,
            changed,
        };
        assert_eq!(r(true, true).line(), "n/c: suspended");
        assert_eq!(r(true, false).line(), "n/c: already suspended");
        assert_eq!(r(false, true).line(), "n/c: resumed");
        assert_eq!(r(false, false).line(), "n/c: already resumed");
        assert_eq!(
            serde_json::to_value(r(true, false)).unwrap(),
            serde_json::json!({"namespace": "n", "name": "c", "suspend": true, "changed": false})
        );
    }
}
