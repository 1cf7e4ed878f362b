//! `sync`: asks the operator for a sync of one channel (or of every channel in a
//! namespace, or in all) by writing a fresh value to the sync-request annotation, and with
//! `--wait` watches the channels until a sync that started after the request has finished
//! (`wait`, `outcome`), then reports what it changed (`changes`, `report`).

pub mod changes;
pub mod outcome;
pub(super) mod progress;
pub mod report;
pub(super) mod wait;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::api::{
    CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionChannel, SYNC_REQUESTED_AT_ANNOTATION,
};
use crate::commands::cluster::{CliError, ClusterArgs, Scope, Target, target_of};
use crate::commands::sync::outcome::{Request, State};
use crate::commands::sync::progress::Progress;
use crate::commands::sync::report::{Outcome, Reporter, SyncResult};
use crate::commands::sync::wait::Waits;
use crate::duration;
use crate::syncer::versions::controlled_by;
use changes::Snapshot;

/// The field manager of the annotation `sync` writes, as shown in `managedFields`.
const SYNC_FIELD_MANAGER: &str = "rancheros-operator-sync";

#[derive(clap::Args, Debug, Clone)]
pub struct SyncArgs {
    #[command(flatten)]
    pub channels: crate::commands::cluster::Channels,
    /// Wait for the outcome and print what changed; exit 1 if the sync failed.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits for the outcome (all channels together).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration::parse, requires = "wait")]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Runs `sync`; `Ok(false)` when a sync failed or its outcome did not come in time (each
/// already reported on stderr).
pub async fn run(args: SyncArgs) -> Result<bool, CliError> {
    let (client, scope, found) = args.channels.find(&args.cluster).await?;
    let before = if args.wait {
        version_snapshots(&client, &scope, &found).await?
    } else {
        BTreeMap::new()
    };

    // A fresh value each time: the operator acts on any value it has not served yet.
    let value = Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {SYNC_REQUESTED_AT_ANNOTATION: value}}});
    let params = PatchParams {
        field_manager: Some(SYNC_FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut requested = Vec::new();
    for ch in &found {
        let target = target_of(ch);
        let api: Api<ManagedOSVersionChannel> = Api::namespaced(client.clone(), &target.namespace);
        let written = api
            .patch(&target.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                CliError::api(format!("requesting a sync of {target}"), Some(&target), e)
            })?;
        requested.push(written);
    }
    let mut progress = Progress::new();
    let mut reporter = Reporter::new(args.cluster.output);
    if !args.wait {
        for ch in &requested {
            let mut result = SyncResult::new(&target_of(ch), Outcome::Requested);
            // Requested all the same, but said: no sync will come of it for now.
            if let State::Failed { reason, message } = Request::new(&value, ch.uid()).observe(ch) {
                result = result.because(&reason, &message);
            }
            reporter.report(&mut progress, result)?;
        }
        return reporter.finish(&mut progress);
    }
    let waits = Waits {
        client,
        scope,
        before,
        timeout: args.timeout,
    };
    waits
        .wait(&requested, &value, &mut progress, &mut reporter)
        .await?;
    progress.finish();
    reporter.finish(&mut progress)
}

/// The versions each channel controls now, by channel.
async fn version_snapshots(
    client: &Client,
    scope: &Scope,
    channels: &[ManagedOSVersionChannel],
) -> Result<BTreeMap<Target, Snapshot>, CliError> {
    let (versions, selector): (Api<ManagedOSVersion>, String) = match scope {
        Scope::Channel(t) => (
            Api::namespaced(client.clone(), &t.namespace),
            format!("{CHANNEL_LABEL}={}", t.name),
        ),
        Scope::Namespace(ns) => (Api::namespaced(client.clone(), ns), CHANNEL_LABEL.into()),
        Scope::All => (Api::all(client.clone()), CHANNEL_LABEL.into()),
    };
    let all = versions
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| CliError::api(format!("listing versions in {}", scope.describe()), None, e))?
        .items;
    Ok(channels
        .iter()
        .map(|ch| {
            let own = all.iter().filter(|v| controlled_by(&v.metadata, ch));
            (target_of(ch), changes::snapshot(own))
        })
        .collect())
}
