//! The thin I/O layer: a `kube::runtime::Controller` over channels (and the syncer pods
//! they own) whose `reconcile` observes, asks `syncer::decide`, and performs the decision.
//!
//! Rooms: `attempt` (observe, decide, perform), `caches` (the shared watch caches and what
//! triggers a reconciliation), `slots` (the sync queue), `json_source` (json fetches and
//! their kept bodies), `writes` (the all-or-nothing version writes), `pods` (the syncer
//! pod), `errors` (API errors and their classes).
//!
//! Failure model: whatever fails in an attempt (an API error while observing, a write the
//! API server refuses, channel data that breaks a rule) is decided like any failed sync:
//! counted in `failedSynchronizationAttempts`, backed off, published as an Event and
//! written to the status. Only when even the status cannot be written does the error reach
//! `error_policy`, which backs off per channel in memory.

mod attempt;
mod caches;
pub mod errors;
mod events;
mod finalize;
mod json_source;
mod pods;
mod queue;
pub mod slots;
mod writes;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::api::{CHANNEL_LABEL, FIELD_MANAGER, ManagedOSVersion, ManagedOSVersionChannel};
use crate::metrics::Metrics;
use crate::syncer::{Decision, Outcome, Settings};
use attempt::{Apis, Observed};
use caches::Scope;
pub use errors::Error;
use slots::{Key, Slots};

/// The longest wait the operator asks of the controller's scheduler: a year (the
/// longest sync interval), far from where `Instant` arithmetic could overflow.
const MAX_REQUEUE: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);

/// Shared state of all reconciliations.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    events: events::Events,
    pub metrics: Arc<Metrics>,
    pub http: crate::fetch::Client,
    scopes: Vec<Scope>,
    /// Wakes a channel's reconciliation (one sender per scope, same order).
    wake: Vec<mpsc::UnboundedSender<Key>>,
    /// json channels' last good bodies.
    bodies: Mutex<json_source::Bodies>,
    /// Consecutive reconciliations that ended in `error_policy`.
    errors: Mutex<HashMap<Key, u32>>,
    slots: Mutex<Slots>,
    /// Channels whose cached copy (or pod) may be older than the operator's last write to
    /// it, because a wait for the cache gave up: read fresh once.
    stale: Mutex<HashSet<Key>>,
    /// Version writes in flight, all syncs together.
    writes: tokio::sync::Semaphore,
    /// Channel data in memory, all syncs together, in KiB: one output's worth
    /// (`--max-output-bytes`), so that memory does not grow with concurrent syncs
    /// (docs/security.md).
    data_budget: tokio::sync::Semaphore,
}

/// Bytes in whole KiB, at least one.
fn kib(bytes: u64) -> usize {
    usize::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(usize::MAX >> 4)
}

impl Context {
    /// Room for the largest channel data a sync may read; waits while others hold it.
    async fn reserve_data(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let all = u32::try_from(kib(self.settings.max_output_bytes)).unwrap_or(u32::MAX);
        self.data_budget.acquire_many(all).await.ok()
    }

    /// Keeps of a reservation what `bytes` of read data take; the rest is free for others.
    fn keep_data<'a>(
        permit: Option<tokio::sync::SemaphorePermit<'a>>,
        bytes: usize,
    ) -> Option<tokio::sync::SemaphorePermit<'a>> {
        let mut permit = permit?;
        let keep = kib(u64::try_from(bytes).unwrap_or(u64::MAX));
        let surplus = permit.num_permits().saturating_sub(keep);
        drop(permit.split(surplus));
        Some(permit)
    }

    fn scope(&self, namespace: &str) -> Option<&Scope> {
        self.scopes.iter().find(|s| s.covers(namespace))
    }

    /// A channel is gone: its slot, queue place, kept body and metrics go with it.
    fn forget(&self, key: &Key) {
        self.release_slot(key);
        if let Ok(mut bodies) = self.bodies.lock() {
            bodies.remove(key);
        }
        for map in [&self.errors] {
            if let Ok(mut m) = map.lock() {
                m.remove(key);
            }
        }
        if let Ok(mut stale) = self.stale.lock() {
            stale.remove(key);
        }
        self.events.forget(key);
        self.metrics.forget_channel(key);
    }

    fn is_stale(&self, key: &Key) -> bool {
        self.stale.lock().is_ok_and(|s| s.contains(key))
    }

    fn set_stale(&self, key: &Key, stale: bool) {
        if let Ok(mut s) = self.stale.lock() {
            if stale {
                s.insert(key.clone());
            } else {
                s.remove(key);
            }
        }
    }

    /// Waits until the pod cache shows the pod writes just made; if it does not in time,
    /// the next attempt reads the pod fresh.
    async fn wait_for_pod(&self, key: &Key, changes: &pods::PodChanges) {
        let ns = key.namespace.clone().unwrap_or_default();
        let Some(scope) = self.scope(&ns) else { return };
        let created = changes.created.as_ref().and_then(|p| p.uid());
        let caught_up = caches::wait_until(|| {
            let cached = scope.pod(&ns, &key.name);
            let shows_created = created
                .as_ref()
                .is_none_or(|uid| cached.as_ref().and_then(|p| p.uid()).as_ref() == Some(uid));
            let shows_deleted = changes.deleted.iter().all(|uid| {
                cached.as_ref().is_none_or(|p| {
                    p.uid().as_ref() != Some(uid) || p.metadata.deletion_timestamp.is_some()
                })
            });
            shows_created && shows_deleted
        })
        .await;
        if !caught_up {
            self.set_stale(key, true);
        }
    }
}

/// Runs one controller per watched namespace (one for all when `namespaces` is empty),
/// with the watch caches they share, until `shutdown` fires; in-flight reconciliations
/// finish first.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    http: crate::fetch::Client,
    namespaces: &[String],
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let names: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().cloned().map(Some).collect()
    };
    fn api<K>(client: &Client, ns: &Option<String>) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match ns {
            None => Api::all(client.clone()),
            Some(ns) => Api::namespaced(client.clone(), ns),
        }
    }
    // The stores first: the context holds their readers, the streams below fill them.
    let mut scopes = Vec::new();
    let mut writers = Vec::new();
    let mut wake = Vec::new();
    let mut wakeups = Vec::new();
    for ns in &names {
        let (channels, channel_writer) = reflector::store();
        let (versions, version_writer) = reflector::store();
        let (pods, pod_writer) = reflector::store();
        scopes.push(Scope {
            namespace: ns.clone(),
            channels,
            versions,
            pods,
        });
        writers.push((channel_writer, version_writer, pod_writer));
        let (tx, rx) = mpsc::unbounded();
        wake.push(tx);
        wakeups.push(rx);
    }
    let instance = std::env::var("POD_NAME").unwrap_or_else(|_| FIELD_MANAGER.into());
    let events = events::Events::new(client.clone(), FIELD_MANAGER, instance);
    let ctx = Arc::new(Context {
        client: client.clone(),
        metrics,
        http,
        events,
        wake,
        bodies: Mutex::new(json_source::Bodies::new(settings.json_cache_bytes)),
        errors: Mutex::default(),
        slots: Mutex::new(Slots::new(settings.max_concurrent_syncs)),
        stale: Mutex::default(),
        writes: tokio::sync::Semaphore::new(writes::WRITES_IN_FLIGHT),
        data_budget: tokio::sync::Semaphore::new(kib(settings.max_output_bytes)),
        settings,
        scopes,
    });

    let mut feeds = Vec::new();
    let mut controllers = Vec::new();
    for (((ns, (channel_writer, version_writer, pod_writer)), wakeup), scope) in
        names.iter().zip(writers).zip(wakeups).zip(&ctx.scopes)
    {
        let versions = watcher(
            api::<ManagedOSVersion>(&client, ns),
            watcher::Config::default(),
        )
        // Lean: of managedFields only what change detection reads.
        .modify(crate::syncer::versions::compact_owned_fields)
        .default_backoff()
        .reflect(version_writer)
        .for_each(|_| async {});
        feeds.push(versions);
        let pods = caches::changes(
            watcher(
                api::<Pod>(&client, ns),
                // Only the syncer pods: the label every one of them carries.
                watcher::Config::default().labels(CHANNEL_LABEL),
            )
            .modify(caches::lean_pod)
            .default_backoff()
            .reflect(pod_writer),
            caches::pod_fingerprint,
            |_| {},
        );
        let forget = ctx.clone();
        let channels = caches::changes(
            watcher(
                api::<ManagedOSVersionChannel>(&client, ns),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect(channel_writer),
            caches::channel_fingerprint,
            move |gone: Key| forget.forget(&gone),
        );
        let mut stop = shutdown.clone();
        let controller = Controller::for_stream(channels, scope.channels.clone())
            .owns_stream(pods)
            .reconcile_on(wakeup)
            .graceful_shutdown_on(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|result| async move {
                match result {
                    Ok((obj, _)) => debug!(channel = %obj, "reconciled"),
                    Err(e) => debug!("controller: {e}"),
                }
            });
        controllers.push(controller);
    }
    // The version caches' feeds never end by themselves: they stop with the controllers.
    tokio::select! {
        _ = futures::future::join_all(controllers) => {}
        _ = futures::future::join_all(feeds) => {}
    }
}

/// Reached only when an attempt's failure could not even be written to the status (the API
/// server is unreachable or refuses status writes): backs off per channel, doubling from the
/// retry delay up to the channel's sync interval.
fn error_policy(channel: Arc<ManagedOSVersionChannel>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(channel.as_ref());
    let failures = match ctx.errors.lock() {
        Ok(mut errors) => {
            let n = errors.entry(key).or_insert(0);
            *n = n.saturating_add(1);
            *n
        }
        Err(_) => 1,
    };
    let interval = ctx.settings.sync_interval(&channel.spec);
    let wait = ctx
        .settings
        .retry_delay
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(interval);
    warn!(
        channel = %channel.name_any(),
        namespace = %channel.namespace().unwrap_or_default(),
        "reconcile failed ({failures} in a row), retrying in {}: {error}",
        crate::duration::format(wait)
    );
    Action::requeue(wait.min(MAX_REQUEUE))
}

async fn reconcile(
    channel: Arc<ManagedOSVersionChannel>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciliations.inc();
    let key = ObjectRef::from_obj(channel.as_ref());
    let result = reconcile_inner(channel, &key, &ctx).await;
    ctx.wake_waiting();
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    match &result {
        Ok(_) => {
            if let Ok(mut errors) = ctx.errors.lock() {
                errors.remove(&key);
            }
        }
        Err(e) => ctx.metrics.reconcile_error(e.class()),
    }
    result
}

async fn reconcile_inner(
    cached: Arc<ManagedOSVersionChannel>,
    key: &Key,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = cached.name_any();
    let ns = cached.namespace().unwrap_or_default();
    let apis = Apis::new(&ctx.client, &ns);
    // The cache shows the operator's own status writes (each one waits for it), so the
    // decision may read it; only after a wait that gave up is the channel read fresh.
    let channel = if ctx.is_stale(key) {
        let fresh = apis
            .channels
            .get_opt(&name)
            .await
            .map_err(errors::kube_err(format!("reading channel {ns}/{name}")))?;
        let Some(fresh) = fresh else {
            return Ok(Action::await_change());
        };
        Arc::new(fresh)
    } else {
        cached
    };

    // versionPolicy.onChannelDelete: Orphan (its finalizer) before anything else.
    if let Some(done) = finalize::reconcile(&channel, key, &apis, ctx).await? {
        return Ok(done);
    }
    let mut seen = Observed::default();
    let decision = match attempt::attempt(&channel, key, &apis, ctx, &mut seen).await {
        Ok(decision) => decision,
        Err(e) => {
            // The attempt failed on the API: it is a failed sync like any other.
            warn!(channel = %name, namespace = %ns, class = e.class().label(), "sync attempt failed: {e}");
            seen.error = Some(e.to_failure());
            let decision = seen.decide(&channel, ctx);
            // Only the pod is left to clean up; a failure here is retried with the next attempt.
            if let Err(e) = pods::perform(&decision.effects, &apis.pods, &ctx.metrics).await {
                warn!(channel = %name, namespace = %ns, "cleaning up after a failed attempt: {e}");
            }
            decision
        }
    };
    ctx.set_stale(key, false);
    if let Some(outcome) = &decision.outcome {
        if let Outcome::Failed(failure) = outcome {
            ctx.metrics.sync_failed(failure);
        }
        ctx.release_slot(key);
    }
    finish(&channel, key, &apis.channels, decision, ctx).await
}

/// Writes the status and events, counts the outcome, and says when to look again.
async fn finish(
    channel: &ManagedOSVersionChannel,
    key: &Key,
    channels: &Api<ManagedOSVersionChannel>,
    decision: Decision,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = channel.name_any();
    let ns = channel.namespace().unwrap_or_default();
    if let Some(status) = &decision.status {
        let written = channels
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .map_err(errors::kube_err(format!(
                "writing the status of channel {name}"
            )))?;
        ctx.metrics.status_written();
        if let (Some(scope), Some(rv)) = (ctx.scope(&ns), written.resource_version()) {
            let shown = caches::wait_until(|| {
                let cached = scope.channels.get(key);
                caches::shows(cached.and_then(|c| c.resource_version()).as_deref(), &rv)
            })
            .await;
            if !shown {
                ctx.set_stale(key, true);
            }
        }
    }
    if let Some(outcome) = &decision.outcome {
        ctx.metrics.sync_finished(outcome);
    }
    let status = decision.status.as_ref().or(channel.status.as_ref());
    if let Some(status) = status {
        let interval = ctx.settings.sync_interval(&channel.spec);
        ctx.metrics.observe_channel(key, status, interval);
    }
    // Events name the channel, not one version of it.
    let mut reference = channel.object_ref(&());
    reference.resource_version = None;
    for note in &decision.events {
        if note.warning {
            warn!(channel = %name, namespace = %ns, reason = note.reason, "{}", note.message);
        } else {
            info!(channel = %name, namespace = %ns, reason = note.reason, "{}", note.message);
        }
        // An event that cannot be published is not worth failing the sync for.
        if let Err(e) = ctx.events.publish(key, reference.clone(), note).await {
            warn!(channel = %name, "could not publish an event: {e}");
        }
    }
    Ok(match decision.requeue {
        Some(after) => Action::requeue(after.min(MAX_REQUEUE)),
        None => Action::await_change(),
    })
}
