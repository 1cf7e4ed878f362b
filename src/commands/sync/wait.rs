//! `sync --wait`: watches the requested channels until each has an outcome (`outcome`), or
//! the time is up, and hands each result to the reporter as it comes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use crate::api::{CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionChannel};
use crate::commands::cluster::{CliError, Scope, Target, target_of};
use crate::commands::sync::changes::{self, Changes, Snapshot};
use crate::commands::sync::outcome::{self, Request, State};
use crate::commands::sync::progress::Progress;
use crate::commands::sync::report::{Outcome, Reporter, SyncResult};
use crate::duration;
use crate::syncer::versions::controlled_by;

/// How often the spinner turns.
const TICK: Duration = Duration::from_millis(120);
/// What the progress line says until the operator shows it saw the request.
const NOT_PICKED_UP: &str = "waiting for the operator to pick up the request";

pub(super) struct Waits {
    pub client: Client,
    pub scope: Scope,
    /// The versions of each channel before the request.
    pub before: BTreeMap<Target, Snapshot>,
    pub timeout: Duration,
}

type Pending = BTreeMap<Target, (Request, String)>;

impl Waits {
    /// Watches the channels until each has an outcome, or the time is up.
    pub async fn wait(
        &self,
        requested: &[ManagedOSVersionChannel],
        value: &str,
        progress: &mut Progress,
        reporter: &mut Reporter,
    ) -> Result<(), CliError> {
        let mut pending: Pending = requested
            .iter()
            .map(|ch| {
                let request = Request::new(value, ch.uid());
                (target_of(ch), (request, NOT_PICKED_UP.to_string()))
            })
            .collect();
        // The state each patch returned counts too (a request already served is rare, a
        // suspended channel is not).
        for ch in requested {
            self.look(ch, &mut pending, progress, reporter).await?;
        }
        let (api, config): (Api<ManagedOSVersionChannel>, _) = match &self.scope {
            Scope::Channel(t) => (
                Api::namespaced(self.client.clone(), &t.namespace),
                watcher::Config::default().fields(&format!("metadata.name={}", t.name)),
            ),
            Scope::Namespace(ns) => (
                Api::namespaced(self.client.clone(), ns),
                watcher::Config::default(),
            ),
            Scope::All => (Api::all(self.client.clone()), watcher::Config::default()),
        };
        let mut events = watcher(api, config).default_backoff().boxed();
        // A --timeout past the clock's range is as good as none: wait a year at most.
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(self.timeout.min(crate::config::MAX_DURATION))
            .unwrap_or(now);
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // Channels listed in the current (re)list: one not listed is gone.
        let mut listed: BTreeSet<Target> = BTreeSet::new();
        while !pending.is_empty() {
            tokio::select! {
                event = events.next() => {
                    let Some(event) = event else { break };
                    match event {
                        Ok(watcher::Event::Apply(ch)) => {
                            self.look(&ch, &mut pending, progress, reporter).await?;
                        }
                        Ok(watcher::Event::InitApply(ch)) => {
                            listed.insert(target_of(&ch));
                            self.look(&ch, &mut pending, progress, reporter).await?;
                        }
                        Ok(watcher::Event::Delete(ch)) => {
                            gone(&target_of(&ch), &mut pending, progress, reporter)?;
                        }
                        Ok(watcher::Event::Init) => listed.clear(),
                        Ok(watcher::Event::InitDone) => {
                            let missing: Vec<Target> = pending
                                .keys()
                                .filter(|t| !listed.contains(*t))
                                .cloned()
                                .collect();
                            for target in missing {
                                gone(&target, &mut pending, progress, reporter)?;
                            }
                        }
                        Err(e) => {
                            if let Some(fatal) = fatal(&e) {
                                return Err(CliError::Watch {
                                    what: format!("watching channels in {}", self.scope.describe()),
                                    message: fatal,
                                });
                            }
                            // Anything else is retried (with a backoff) until the timeout.
                        }
                    }
                }
                _ = ticker.tick(), if progress.animated() => progress.tick(),
                _ = tokio::time::sleep_until(deadline) => {
                    for (target, (_, last)) in std::mem::take(&mut pending) {
                        progress.done(&target.to_string());
                        let message = format!(
                            "no outcome within {}: {}",
                            duration::format(self.timeout),
                            timed_out_because(&last, &target.namespace),
                        );
                        let result = SyncResult::new(&target, Outcome::TimedOut);
                        reporter.report(progress, result.because("TimedOut", &message))?;
                    }
                    return Ok(());
                }
            }
        }
        // The watch never ends by itself; should it, what is left has no outcome.
        for target in std::mem::take(&mut pending).into_keys() {
            let message = "the watch of the channel ended before its outcome";
            let result = SyncResult::new(&target, Outcome::TimedOut);
            reporter.report(progress, result.because("TimedOut", message))?;
        }
        Ok(())
    }

    /// Looks at one state of a channel; reports its outcome when it has one.
    async fn look(
        &self,
        ch: &ManagedOSVersionChannel,
        pending: &mut Pending,
        progress: &mut Progress,
        reporter: &mut Reporter,
    ) -> Result<(), CliError> {
        let target = target_of(ch);
        let Some((request, last)) = pending.get_mut(&target) else {
            return Ok(());
        };
        match request.observe(ch) {
            State::Waiting(text) => {
                progress.update(&target.to_string(), &text);
                *last = text;
                Ok(())
            }
            State::Succeeded(message) => {
                let earlier = request.earlier_sync;
                pending.remove(&target);
                progress.done(&target.to_string());
                let mut result = SyncResult::new(&target, Outcome::Synchronized)
                    .because(crate::api::reason::SYNCHRONIZED, &message);
                result.changes = Some(self.changes_of(ch).await?);
                result.includes_earlier_sync = earlier;
                if let Some(status) = &ch.status {
                    result.latest_version = status.latest_version.clone();
                    result.held_back = status.held_back.clone();
                }
                reporter.report(progress, result)
            }
            State::Failed { reason, message } => {
                pending.remove(&target);
                progress.done(&target.to_string());
                let result = SyncResult::new(&target, Outcome::Failed).because(&reason, &message);
                reporter.report(progress, result)
            }
        }
    }

    /// What the versions of the channel show now, against before the request.
    async fn changes_of(&self, ch: &ManagedOSVersionChannel) -> Result<Changes, CliError> {
        let target = target_of(ch);
        let versions: Api<ManagedOSVersion> =
            Api::namespaced(self.client.clone(), &target.namespace);
        let now = versions
            .list(&ListParams::default().labels(&format!("{CHANNEL_LABEL}={}", target.name)))
            .await
            .map_err(|e| {
                CliError::api(format!("listing the versions of channel {target}"), None, e)
            })?
            .items;
        let after = changes::snapshot(now.iter().filter(|v| controlled_by(&v.metadata, ch)));
        let before = self.before.get(&target).cloned().unwrap_or_default();
        Ok(Changes::between(&before, &after))
    }
}

/// A channel waited for was deleted: its outcome.
fn gone(
    target: &Target,
    pending: &mut Pending,
    progress: &mut Progress,
    reporter: &mut Reporter,
) -> Result<(), CliError> {
    if pending.remove(target).is_none() {
        return Ok(());
    }
    progress.done(&target.to_string());
    match outcome::gone() {
        State::Failed { reason, message } => {
            let result = SyncResult::new(target, Outcome::Failed).because(&reason, &message);
            reporter.report(progress, result)
        }
        _ => Ok(()),
    }
}

/// Watch errors no retry mends: not allowed, or the resource is not served.
pub(crate) fn fatal(e: &watcher::Error) -> Option<String> {
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
