//! `sync`: asks the operator for a sync of one channel (or of every channel in a
//! namespace) by writing a fresh value to the sync-request annotation, and with `--wait`
//! watches the channel until a sync that started after the request has finished
//! (`outcome`), then prints what it changed (`changes`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::changes::{self, Changes, Snapshot};
use super::outcome::{self, Request, State};
use super::progress::Progress;
use super::{ChannelArg, CliError, ClusterArgs, Target};
use crate::api::{
    CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionChannel, SYNC_REQUESTED_AT_ANNOTATION,
};
use crate::duration;
use crate::syncer::versions::controlled_by;

/// The field manager of the annotation `sync` writes, as shown in `managedFields`.
const FIELD_MANAGER: &str = "rancheros-operator-sync";
/// How often the spinner turns.
const TICK: Duration = Duration::from_millis(120);
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
/// What the progress line says until the operator shows it saw the request.
const NOT_PICKED_UP: &str = "waiting for the operator to pick up the request";

#[derive(clap::Args, Debug, Clone)]
pub struct SyncArgs {
    /// The channel: NAMESPACE/CHANNEL, or CHANNEL with --namespace (default: the
    /// kubeconfig context's namespace).
    #[arg(
        value_name = "NAMESPACE/CHANNEL",
        value_parser = super::parse_channel,
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub channel: Option<ChannelArg>,
    /// Sync every channel in the namespace given with --namespace.
    #[arg(long, requires = "namespace")]
    pub all: bool,
    /// The namespace of the channel(s).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
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
    // A usage error before any look at the cluster.
    let namespace = super::namespace_of(args.channel.as_ref(), args.namespace.as_deref())
        .map_err(CliError::Usage)?;
    let client = super::client(args.cluster.kubeconfig.as_deref()).await?;
    let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_string());
    let channels: Api<ManagedOSVersionChannel> = Api::namespaced(client.clone(), &namespace);
    let single = args.channel.as_ref().map(|c| Target {
        namespace: namespace.clone(),
        name: c.name.clone(),
    });
    let found: Vec<ManagedOSVersionChannel> =
        match &single {
            Some(target) => vec![channels.get(&target.name).await.map_err(|e| {
                CliError::api(format!("reading channel {target}"), Some(target), e)
            })?],
            None => {
                let list = channels
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| {
                        CliError::api(
                            format!("listing channels in namespace {namespace}"),
                            None,
                            e,
                        )
                    })?
                    .items;
                if list.is_empty() {
                    return Err(CliError::NoChannels(namespace));
                }
                list
            }
        };
    let versions: Api<ManagedOSVersion> = Api::namespaced(client.clone(), &namespace);
    let before = if args.wait {
        version_snapshots(&versions, &namespace, &found, single.as_ref()).await?
    } else {
        BTreeMap::new()
    };

    // A fresh value each time: the operator acts on any value it has not served yet.
    let value = Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {SYNC_REQUESTED_AT_ANNOTATION: value}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut requested = Vec::new();
    for ch in &found {
        let target = target_of(ch);
        let written = channels
            .patch(&target.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                CliError::api(format!("requesting a sync of {target}"), Some(&target), e)
            })?;
        requested.push(written);
    }
    let mut progress = Progress::new();
    if !args.wait {
        for ch in &requested {
            let target = target_of(ch);
            progress
                .out(&format!("{target}: sync requested"))
                .map_err(CliError::Output)?;
            // Requested all the same, but said: no sync will come of it for now.
            if let State::Failed { reason, message } = Request::new(&value, ch.uid()).observe(ch) {
                progress.err(&format!("warning: {target}: {reason}: {message}"));
            }
        }
        return Ok(true);
    }
    let waits = Waits {
        namespace,
        channels,
        versions,
        before,
        single,
        timeout: args.timeout,
    };
    let ok = waits.wait(&requested, &value, &mut progress).await;
    progress.finish();
    ok
}

fn target_of(ch: &ManagedOSVersionChannel) -> Target {
    Target {
        namespace: ch.namespace().unwrap_or_default(),
        name: ch.name_any(),
    }
}

/// The versions each channel controls now, by channel name.
async fn version_snapshots(
    versions: &Api<ManagedOSVersion>,
    ns: &str,
    channels: &[ManagedOSVersionChannel],
    single: Option<&Target>,
) -> Result<BTreeMap<String, Snapshot>, CliError> {
    let selector = match single {
        Some(t) => format!("{CHANNEL_LABEL}={}", t.name),
        None => CHANNEL_LABEL.to_string(),
    };
    let all = versions
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| CliError::api(format!("listing versions in namespace {ns}"), None, e))?
        .items;
    Ok(channels
        .iter()
        .map(|ch| {
            let own = all.iter().filter(|v| controlled_by(&v.metadata, ch));
            (ch.name_any(), changes::snapshot(own))
        })
        .collect())
}

struct Waits {
    namespace: String,
    channels: Api<ManagedOSVersionChannel>,
    versions: Api<ManagedOSVersion>,
    before: BTreeMap<String, Snapshot>,
    single: Option<Target>,
    timeout: Duration,
}

impl Waits {
    /// Watches the channels until each has an outcome, or the time is up.
    async fn wait(
        &self,
        requested: &[ManagedOSVersionChannel],
        value: &str,
        progress: &mut Progress,
    ) -> Result<bool, CliError> {
        let mut pending: BTreeMap<String, (Request, String)> = requested
            .iter()
            .map(|ch| {
                let request = Request::new(value, ch.uid());
                (ch.name_any(), (request, NOT_PICKED_UP.to_string()))
            })
            .collect();
        let mut all_ok = true;
        // The state each patch returned counts too (a request already served is rare, a
        // suspended channel is not).
        for ch in requested {
            all_ok &= self.look(ch, &mut pending, progress).await?;
        }
        let config = match &self.single {
            Some(t) => watcher::Config::default().fields(&format!("metadata.name={}", t.name)),
            None => watcher::Config::default(),
        };
        let mut events = watcher(self.channels.clone(), config)
            .default_backoff()
            .boxed();
        // A --timeout past the clock's range is as good as none: wait a year at most.
        let now = tokio::time::Instant::now();
        let deadline = now.checked_add(self.timeout.min(YEAR)).unwrap_or(now);
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // Channels listed in the current (re)list: one not listed is gone.
        let mut listed: BTreeSet<String> = BTreeSet::new();
        while !pending.is_empty() {
            tokio::select! {
                event = events.next() => {
                    let Some(event) = event else { break };
                    match event {
                        Ok(watcher::Event::Apply(ch)) => {
                            all_ok &= self.look(&ch, &mut pending, progress).await?;
                        }
                        Ok(watcher::Event::InitApply(ch)) => {
                            listed.insert(ch.name_any());
                            all_ok &= self.look(&ch, &mut pending, progress).await?;
                        }
                        Ok(watcher::Event::Delete(ch)) => {
                            let name = ch.name_any();
                            all_ok &= !self.report_gone(&name, &mut pending, progress);
                        }
                        Ok(watcher::Event::Init) => listed.clear(),
                        Ok(watcher::Event::InitDone) => {
                            let gone: Vec<String> = pending
                                .keys()
                                .filter(|n| !listed.contains(*n))
                                .cloned()
                                .collect();
                            for name in gone {
                                all_ok &= !self.report_gone(&name, &mut pending, progress);
                            }
                        }
                        Err(e) => {
                            if let Some(fatal) = fatal(&e) {
                                return Err(CliError::Watch {
                                    what: format!(
                                        "watching channels in namespace {}",
                                        self.namespace
                                    ),
                                    message: fatal,
                                });
                            }
                            // Anything else is retried (with a backoff) until the timeout.
                        }
                    }
                }
                _ = ticker.tick(), if progress.animated() => progress.tick(),
                _ = tokio::time::sleep_until(deadline) => {
                    for (name, (_, last)) in std::mem::take(&mut pending) {
                        let target = Target { namespace: self.namespace.clone(), name };
                        progress.done(&target.to_string());
                        progress.err(&format!(
                            "error: {target}: no outcome within {}: {}",
                            duration::format(self.timeout),
                            timed_out_because(&last, &target.namespace),
                        ));
                    }
                    return Ok(false);
                }
            }
        }
        // The watch never ends by itself; should it, what is left has no outcome.
        for name in std::mem::take(&mut pending).into_keys() {
            progress.err(&format!(
                "error: {}/{name}: the watch of the channel ended before its outcome",
                self.namespace
            ));
            all_ok = false;
        }
        Ok(all_ok)
    }

    /// Looks at one state of a channel; reports its outcome when it has one. `false`: it
    /// failed.
    async fn look(
        &self,
        ch: &ManagedOSVersionChannel,
        pending: &mut BTreeMap<String, (Request, String)>,
        progress: &mut Progress,
    ) -> Result<bool, CliError> {
        let name = ch.name_any();
        let target = target_of(ch);
        let Some((request, last)) = pending.get_mut(&name) else {
            return Ok(true);
        };
        match request.observe(ch) {
            State::Waiting(text) => {
                progress.update(&target.to_string(), &text);
                *last = text;
                Ok(true)
            }
            State::Succeeded(message) => {
                let earlier = request.earlier_sync;
                pending.remove(&name);
                progress.done(&target.to_string());
                let changes = self.changes_of(ch).await?;
                progress
                    .out(&format!("{target}: Synchronized: {message}"))
                    .map_err(CliError::Output)?;
                let lines = changes.lines();
                if lines.is_empty() {
                    progress
                        .out("  no version was changed")
                        .map_err(CliError::Output)?;
                }
                for line in &lines {
                    progress
                        .out(&format!("  {line}"))
                        .map_err(CliError::Output)?;
                }
                if earlier && !lines.is_empty() {
                    // The names are what changed since the request; the message above
                    // counts the requested sync's changes only.
                    progress
                        .out("  (with the changes of a sync that was under way when the request came)")
                        .map_err(CliError::Output)?;
                }
                Ok(true)
            }
            State::Failed { reason, message } => {
                pending.remove(&name);
                progress.done(&target.to_string());
                progress.err(&format!("error: {target}: {reason}: {message}"));
                Ok(false)
            }
        }
    }

    /// A channel waited for was deleted; `true` if it was one.
    fn report_gone(
        &self,
        name: &str,
        pending: &mut BTreeMap<String, (Request, String)>,
        progress: &mut Progress,
    ) -> bool {
        if pending.remove(name).is_none() {
            return false;
        }
        let target = format!("{}/{name}", self.namespace);
        progress.done(&target);
        if let State::Failed { reason, message } = outcome::gone() {
            progress.err(&format!("error: {target}: {reason}: {message}"));
        }
        true
    }

    /// What the versions of the channel show now, against before the request.
    async fn changes_of(&self, ch: &ManagedOSVersionChannel) -> Result<Changes, CliError> {
        let name = ch.name_any();
        let now = self
            .versions
            .list(&ListParams::default().labels(&format!("{CHANNEL_LABEL}={name}")))
            .await
            .map_err(|e| {
                CliError::api(
                    format!("listing the versions of channel {}", target_of(ch)),
                    None,
                    e,
                )
            })?
            .items;
        let after = changes::snapshot(now.iter().filter(|v| controlled_by(&v.metadata, ch)));
        let before = self.before.get(&name).cloned().unwrap_or_default();
        Ok(Changes::between(&before, &after))
    }
}

/// Watch errors no retry mends: not allowed, or the resource is not served.
fn fatal(e: &watcher::Error) -> Option<String> {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.as_ref(),
        watcher::Error::WatchError(s) => s.as_ref(),
        _ => return None,
    };
    matches!(status.code, 401 | 403 | 404).then(|| status.message.clone())
}

/// Why no outcome came, from what the channel showed last.
fn timed_out_because(last: &str, namespace: &str) -> String {
    if last == NOT_PICKED_UP {
        format!(
            "the operator did not pick up the request; is it running, and does it watch namespace {namespace}?"
        )
    } else {
        format!("the channel still shows: {last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_says_what_was_seen_last() {
        let m = timed_out_because(NOT_PICKED_UP, "fleet");
        assert!(m.contains("does it watch namespace fleet"), "{m}");
        let m = timed_out_because("syncer pod c started", "fleet");
        assert_eq!(m, "the channel still shows: syncer pod c started");
    }
}
