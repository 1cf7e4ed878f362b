//! One reconciliation of a channel, as a named sequence of steps:
//!
//! 1. `refresh`: the channel's record (a namesake's is forgotten); a channel whose cached
//!    copy may be stale is read fresh; then `finalize` (the Orphan policy's finalizer,
//!    which ends the reconciliation of a channel that is going);
//! 2. `observe_pod`: its pod, from the cache (fresh when stale);
//! 3. `take_slot`: when the phase says a sync starts, a sync slot or a place in line;
//! 4. `decide`, then `perform`: `gather` what the decision asks for (logs, versions, the
//!    fetch), `taken_names` (the versions it would create that exist), `write` (the version
//!    writes, all or nothing) and `pods` (the pod created or deleted). Whatever one of them
//!    observes that is new (a body, a taken name, a refused pod, a failure) is decided on
//!    again, by the one call of `syncer::decide` in `sync`'s loop;
//! 5. `settle`: the slot given back when the sync ended, the json body kept;
//! 6. `finish`: the status, metrics, Events, and when to look again.
//!
//! Whatever fails in steps 2-4 is an observation too: the attempt is decided as a failed
//! sync, and only its pod is cleaned up. A step that acts before or instead of a sync (a
//! finalizer, say) goes between 1 and 2 and returns its own `Action`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::warn;

use super::{Context, pods};
use crate::api::{ManagedOSVersion, ManagedOSVersionChannel};
use crate::controller::Key;
use crate::controller::io::ChannelIo;
use crate::controller::io::errors::{Error, kube_err};
use crate::controller::pipeline::remote::Remote;
use crate::failure::SyncFailure;
use crate::syncer::{self, Decision, Effect, Fetched, Needs, Observation, Outcome, Resolved};

mod finish;
mod refresh;
pub(super) mod remote;
pub(super) mod run;
mod serving;
mod taken;
mod versions;

use refresh::refresh;

/// What was gathered for one reconciliation; the decision core borrows it.
#[derive(Default)]
struct Gathered {
    pod: Option<Arc<Pod>>,
    display_log: Option<Vec<u8>>,
    runner_log: Option<String>,
    /// The fetch (or pull), and the key of the data kept for it (see `remote`).
    fetched: Option<(String, Fetched)>,
    versions: Option<Vec<Arc<ManagedOSVersion>>>,
    pod_create_error: Option<SyncFailure>,
    error: Option<SyncFailure>,
    queued: bool,
    /// The changelogs were not stored for a reason the next sync may not meet (the name
    /// held by someone else, the ConfigMap replaced meanwhile): the data is not kept, so
    /// the next sync reads the image again and tries again.
    changelogs_unstored: bool,
}

/// One reconciliation in progress.
pub struct Attempt<'a, I: ChannelIo> {
    ctx: &'a Context<I>,
    key: &'a Key,
    uid: String,
    namespace: String,
    channel: Arc<ManagedOSVersionChannel>,
    /// The channel's spec under the operator's settings, resolved once.
    resolved: Resolved,
    seen: Gathered,
    counts: Counts,
}

/// The most decisions one attempt makes: each follows something new observed, so an attempt
/// ends well before; the bound guards against a bug.
const MAX_DECISIONS: u32 = 8;

/// After a decision was performed: done, or something new was observed to decide on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    Done,
    Again,
}

/// Decisions made, and observations gathered (the first look counts as one): a decision is
/// made once for each observation, never twice for the same one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub decisions: u32,
    pub observations: u32,
}

impl Counts {
    fn observed(&mut self) {
        self.observations = self.observations.saturating_add(1);
    }
}

impl<'a, I: ChannelIo> Attempt<'a, I> {
    /// Steps 1-8, and how many decisions and observations they took.
    pub async fn run(
        ctx: &'a Context<I>,
        key: &'a Key,
        cached: Arc<ManagedOSVersionChannel>,
    ) -> Result<(Action, Counts), Error> {
        let uid = cached.uid().unwrap_or_default();
        let Some((channel, stale)) = refresh(ctx, key, &uid, cached).await? else {
            return Ok((Action::await_change(), Counts::default()));
        };
        // versionPolicy.onChannelDelete: Orphan (its finalizer), before or instead of a sync.
        if let Some(done) = ctx.finalize(&channel, key).await? {
            ctx.unserve(key);
            return Ok((done, Counts::default()));
        }
        ctx.keep_served(key, &channel).await;
        // Read fresh, it may be a namesake created since: its record is its own.
        let uid = channel.uid().unwrap_or(uid);
        let channel = ctx.with_recorded_pod(key, &uid, channel);
        let mut attempt = Attempt::new(ctx, key, uid, channel);
        let decision = attempt.sync(stale).await;
        let action = attempt.finish(decision).await?;
        Ok((action, attempt.counts))
    }

    fn new(
        ctx: &'a Context<I>,
        key: &'a Key,
        uid: String,
        channel: Arc<ManagedOSVersionChannel>,
    ) -> Self {
        Attempt {
            ctx,
            key,
            uid,
            namespace: key.namespace.clone().unwrap_or_default(),
            resolved: ctx.settings.resolve_channel(&channel),
            channel,
            seen: Gathered::default(),
            counts: Counts {
                decisions: 0,
                observations: 1,
            },
        }
    }

    fn name(&self) -> &str {
        &self.key.name
    }

    /// Steps 2-5: decide on what is observed, perform it, and decide again on whatever new
    /// it observed, until nothing new is; a failure is observed like anything else.
    async fn sync(&mut self, stale: bool) -> Decision {
        // Channel data held by this attempt (read, parsed, written), within the shared budget.
        let mut data = None;
        match self.observe_pod(stale).await {
            Ok(()) => self.take_slot(),
            Err(e) => self.failed(e),
        }
        let mut decision = loop {
            let mut decision =
                syncer::decide(&self.observation(), &self.ctx.settings, &self.resolved);
            self.counts.decisions = self.counts.decisions.saturating_add(1);
            if self.seen.error.is_some() {
                // Only the pod is left to clean up; a failure here is retried next attempt.
                if let Err(e) = self.perform_pods(&decision.effects).await {
                    warn!("cleaning up after a failed attempt: {e}");
                }
                break decision;
            }
            if self.counts.decisions >= MAX_DECISIONS {
                warn!("{MAX_DECISIONS} decisions in one attempt: performing none of the last");
                decision.effects.clear();
                break decision;
            }
            match self.perform(&mut decision, &mut data).await {
                Ok(Next::Done) => break decision,
                Ok(Next::Again) => {}
                Err(e) => self.failed(e),
            }
        };
        self.settle(&decision);
        if decision.outcome == Some(Outcome::Synchronized)
            && let Some(published) = decision.published.take()
        {
            self.ctx.serve_published(self.key, &published);
        }
        // Done with the data: it leaves memory before its room in the budget is given back.
        self.seen.display_log = None;
        self.seen.fetched = None;
        decision.effects.clear();
        drop(data);
        decision
    }

    /// Performs the decision, up to the first step that observes something new.
    async fn perform(
        &mut self,
        decision: &mut Decision,
        data: &mut Option<crate::budget::Hold>,
    ) -> Result<Next, Error> {
        if decision.needs.any() && self.gather(&decision.needs, data).await? {
            return Ok(Next::Again);
        }
        if self.taken_names(decision).await? {
            return Ok(Next::Again);
        }
        self.write(decision).await?;
        self.pods(decision).await
    }

    async fn observe_pod(&mut self, fresh: bool) -> Result<(), Error> {
        let name = self.name().to_string();
        let ns = self.namespace.clone();
        self.seen.pod = self
            .ctx
            .io
            .pod(self.key, fresh)
            .await
            .map_err(kube_err(format!("reading pod {ns}/{name}")))?;
        Ok(())
    }

    /// Takes a sync slot when a sync starts; without one, the sync waits its turn.
    fn take_slot(&mut self) {
        let phase = syncer::phase(&self.observation(), &self.ctx.settings, &self.resolved);
        if phase.starts_sync() && !self.ctx.take_slot(self.key) {
            self.seen.queued = true;
        }
    }

    fn observation(&self) -> Observation<'_> {
        let seen = &self.seen;
        Observation {
            channel: &self.channel,
            pod: seen.pod.as_deref(),
            display_log: seen.display_log.as_deref(),
            runner_log: seen.runner_log.as_deref(),
            fetched: seen.fetched.as_ref().map(|(_, f)| f),
            versions: seen.versions.as_deref(),
            pod_create_error: seen.pod_create_error.as_ref(),
            error: seen.error.as_ref(),
            queued: seen.queued,
            now: Timestamp::now(),
        }
    }

    /// Observes what the decision needs and has not been observed yet; whether anything was.
    async fn gather(
        &mut self,
        needs: &Needs,
        data: &mut Option<crate::budget::Hold>,
    ) -> Result<bool, Error> {
        let ctx = self.ctx;
        let before = self.counts.observations;
        if needs.display_log && self.seen.display_log.is_none() {
            let mut hold = ctx.budget.hold();
            let max = ctx.settings.max_output_bytes;
            let log = ctx.io.display_log(self.key, max, &mut hold).await?;
            hold.fit(log.len());
            *data = Some(hold);
            self.seen.display_log = Some(log);
            self.counts.observed();
        }
        if needs.runner_log && self.seen.runner_log.is_none() {
            self.seen.runner_log = Some(ctx.io.runner_tail(self.key).await);
            self.counts.observed();
        }
        if needs.versions && self.seen.versions.is_none() {
            self.observe_versions().await?;
            self.counts.observed();
        }
        let remote = match (&needs.fetch, &needs.pull) {
            (Some(options), _) => Some(Remote::Json(options)),
            (None, Some(options)) => Some(Remote::Oci(options)),
            (None, None) => None,
        };
        if let Some(remote) = remote
            && self.seen.fetched.is_none()
        {
            let mut hold = ctx.budget.hold();
            let fetched = ctx.fetch(self.key, &self.uid, &remote, &mut hold).await;
            match &fetched {
                Fetched::Body { data, .. } => hold.fit(data.len()),
                Fetched::Failed(_) | Fetched::Unverified(_) => hold.release(),
            }
            *data = Some(hold);
            self.seen.fetched = Some((remote.key(), fetched));
            self.counts.observed();
        }
        Ok(self.counts.observations > before)
    }

    /// Creates or deletes the pod as decided; a pod the API server refuses is observed (and
    /// decided on again, knowing why).
    async fn pods(&mut self, decision: &mut Decision) -> Result<Next, Error> {
        let changes = match self.perform_pods(&decision.effects).await {
            Ok(changes) => changes,
            // The versions are written: the sync succeeded. The pod goes at the next look.
            Err(e) if decision.outcome == Some(Outcome::Synchronized) => {
                warn!(
                    "after a successful sync: {}",
                    crate::text::message(&e.to_string())
                );
                return Ok(Next::Done);
            }
            Err(e) => return Err(e),
        };
        if let Some(uid) = changes.created {
            // The proof that the pod is the operator's (it holds a slot, its log is read):
            // kept in memory, and written with the status that says the sync began.
            let recorded = uid.clone();
            self.ctx
                .with_record(self.key, &self.uid, |r| r.pod_uid = Some(recorded));
            let status = decision
                .status
                .get_or_insert_with(|| self.channel.status.clone().unwrap_or_default());
            status.syncer_pod_uid = Some(uid);
        }
        let Some((failure, exists)) = changes.refused else {
            return Ok(Next::Done);
        };
        if self.seen.pod_create_error.is_some() {
            // Refused again: decided once already; the next attempt tries again.
            return Ok(Next::Done);
        }
        self.seen.pod_create_error = Some(failure);
        self.counts.observed();
        if exists {
            // A pod of that name exists (outside the cache: not labelled as ours): decide
            // with it, so the status says whose it is.
            self.observe_pod(true).await?;
            if self.seen.pod.is_some() {
                self.seen.pod_create_error = None;
            }
        }
        Ok(Next::Again)
    }

    async fn perform_pods(&self, effects: &[Effect]) -> Result<pods::PodChanges, Error> {
        let ctx = self.ctx;
        let changes = pods::perform(effects, &self.channel, &ctx.io, &ctx.metrics).await?;
        if (changes.created.is_some() || !changes.deleted.is_empty())
            && !ctx
                .io
                .pod_cache_shows(self.key, changes.created.as_deref(), &changes.deleted)
                .await
        {
            self.mark_stale();
        }
        Ok(changes)
    }

    fn mark_stale(&self) {
        self.ctx
            .with_record(self.key, &self.uid, |r| r.stale = true);
    }

    /// The attempt failed on the API: it is a failed sync like any other.
    fn failed(&mut self, e: Error) {
        warn!(
            class = e.class().label(),
            "sync attempt failed: {}",
            crate::text::message(&e.to_string())
        );
        self.seen.error = Some(e.to_failure());
        self.counts.observed();
    }

    /// The sync ended (or none runs): its slot is given back; a json body it used is kept.
    fn settle(&self, decision: &Decision) {
        let ended = decision.outcome.is_some();
        let idle = self.seen.pod.is_none() && !starts_sync(decision) && !self.seen.queued;
        if ended || idle {
            self.ctx.release_slot(self.key);
        }
        if let Some(Outcome::Failed(failure)) = &decision.outcome {
            self.ctx.metrics.sync_failed(failure);
        }
        if decision.outcome == Some(Outcome::Synchronized)
            && !self.seen.changelogs_unstored
            && let Some((source, fetched)) = &self.seen.fetched
        {
            self.ctx.remember_body(self.key, &self.uid, source, fetched);
        }
    }
}

/// Whether the decision starts a sync (creates the syncer pod, or fetches).
fn starts_sync(decision: &Decision) -> bool {
    decision.needs.fetch.is_some()
        || decision.needs.pull.is_some()
        || decision
            .effects
            .iter()
            .any(|a| matches!(a, Effect::CreatePod(_)))
}
