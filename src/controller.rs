//! The thin I/O layer: a `kube::runtime::Controller` over channels (and the syncer pods
//! they own) whose `reconcile` observes, asks `syncer::decide`, and performs the decision.
//!
//! Failure model: whatever fails in an attempt (an API error while observing, a write the
//! API server refuses, channel data that breaks a rule) is decided like any failed sync:
//! counted in `failedSynchronizationAttempts`, backed off, published as an Event and
//! written to the status. Only when even the status cannot be written does the error reach
//! `error_policy`, which backs off per channel in memory.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{AsyncReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::api::{
    CHANNEL_LABEL, FIELD_MANAGER, ManagedOSVersion, ManagedOSVersionChannel,
    NO_LONGER_IN_SYNC_ANNOTATION,
};
use crate::config::{self, JsonOptions};
use crate::display::FRAME_OVERHEAD;
use crate::fetch::{self, Validators};
use crate::metrics::Metrics;
use crate::syncer::{self, Action, Decision, Fetched, Observation, Outcome, Settings, pod};

/// How an error is handled. One place decides it for every API error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Throttling, a 5xx, a webhook that timed out, a lost connection: may pass.
    Retryable,
    /// The API server refused the request for good (forbidden, invalid, quota, admission).
    Refused,
    /// The channel's own spec or data is at fault (decided by `syncer`, counted here).
    Input,
}

impl ErrorClass {
    pub fn label(self) -> &'static str {
        match self {
            ErrorClass::Retryable => "retryable",
            ErrorClass::Refused => "refused",
            ErrorClass::Input => "input",
        }
    }
}

/// Classifies an API error.
pub fn classify(e: &kube::Error) -> ErrorClass {
    match e {
        kube::Error::Api(s) if matches!(s.code, 400 | 403 | 404 | 405 | 409 | 410 | 413 | 422) => {
            ErrorClass::Refused
        }
        _ => ErrorClass::Retryable,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {}", api_message(source))]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading the {container} container's log of pod {pod}: {source}")]
    Log {
        container: &'static str,
        pod: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the API server refuses to {what} (found by a dry run; nothing was changed): {}",
        api_message(source)
    )]
    DryRun {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what}: {}; {undo}", api_message(source))]
    Write {
        what: String,
        undo: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Kube { source, .. }
            | Error::DryRun { source, .. }
            | Error::Write { source, .. } => classify(source),
            Error::Log { .. } => ErrorClass::Retryable,
        }
    }
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

/// The last good body of a json channel, for conditional requests: a `304 Not Modified`
/// is answered from it, so the versions are still compared and repaired.
struct CachedBody {
    uid: String,
    uri: String,
    validators: Validators,
    data: Arc<[u8]>,
}

/// The watch caches of one watched scope (a namespace, or all of them), shared by every
/// channel in it: versions (kept lean: only the operator's own `managedFields` entry) and
/// syncer pods.
struct Scope {
    namespace: Option<String>,
    versions: Store<ManagedOSVersion>,
    pods: Store<Pod>,
}

/// Shared state of all reconciliations.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub http: reqwest::Client,
    scopes: Vec<Scope>,
    /// json channels' last good bodies, by `namespace/name`.
    bodies: Mutex<HashMap<String, CachedBody>>,
    /// Consecutive reconciliations that ended in `error_policy`, by `namespace/name`.
    errors: Mutex<HashMap<String, u32>>,
    /// Who holds a sync slot, and who waits for one (in order), by `namespace/name`.
    slots: Mutex<Slots>,
    /// Version writes in flight, all syncs together ([`WRITES_IN_FLIGHT`]).
    writes: tokio::sync::Semaphore,
}

#[derive(Default)]
struct Slots {
    held: HashSet<String>,
    waiting: VecDeque<String>,
}

impl Slots {
    /// Takes a slot for `key`, or queues it; `running`: channels whose syncer pod runs.
    fn take(&mut self, key: &str, running: &HashSet<String>, max: usize) -> bool {
        if self.held.contains(key) || running.contains(key) {
            self.held.insert(key.to_string());
            self.waiting.retain(|k| k != key);
            return true;
        }
        let busy = self.held.union(running).count();
        let position = match self.waiting.iter().position(|k| k == key) {
            Some(p) => p,
            None => {
                self.waiting.push_back(key.to_string());
                self.waiting.len() - 1
            }
        };
        if busy + position < max {
            self.waiting.retain(|k| k != key);
            self.held.insert(key.to_string());
            true
        } else {
            false
        }
    }
}

impl Context {
    fn scope(&self, namespace: &str) -> Option<&Scope> {
        self.scopes
            .iter()
            .find(|s| s.namespace.as_deref().is_none_or(|n| n == namespace))
    }

    /// Takes a sync slot for the channel, or queues it (first come, first served). A slot
    /// is held from the start of a sync until its outcome; syncer pods found running (an
    /// earlier operator's) count too.
    fn take_slot(&self, key: &str) -> bool {
        let running_pods: HashSet<String> = self
            .scopes
            .iter()
            .flat_map(|s| s.pods.state())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
            .collect();
        match self.slots.lock() {
            Ok(mut slots) => slots.take(key, &running_pods, self.settings.max_concurrent_syncs),
            Err(_) => true,
        }
    }

    fn release_slot(&self, key: &str) {
        if let Ok(mut slots) = self.slots.lock() {
            slots.held.remove(key);
            slots.waiting.retain(|k| k != key);
        }
    }

    fn cached_body(&self, key: &str, uid: &str, uri: &str) -> Option<(Validators, Arc<[u8]>)> {
        let bodies = self.bodies.lock().ok()?;
        bodies
            .get(key)
            .filter(|c| c.uid == uid && c.uri == uri)
            .map(|c| (c.validators.clone(), c.data.clone()))
    }
}

fn key_of(channel: &ManagedOSVersionChannel) -> String {
    format!(
        "{}/{}",
        channel.namespace().unwrap_or_default(),
        channel.name_any()
    )
}

fn lean_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
}

/// Runs one controller per watched namespace (one for all when `namespaces` is empty),
/// with the watch caches they share, until `shutdown` fires; in-flight reconciliations
/// finish first.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    http: reqwest::Client,
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
    let mut scopes = Vec::new();
    let mut feeds = Vec::new();
    let mut pod_streams = Vec::new();
    for ns in &names {
        let (versions, writer) = reflector::store();
        let feed = reflector(
            writer,
            watcher(
                api::<ManagedOSVersion>(&client, ns),
                watcher::Config::default(),
            )
            // Lean: of managedFields only what change detection reads.
            .modify(crate::syncer::versions::compact_owned_fields)
            .default_backoff(),
        )
        .for_each(|_| async {});
        feeds.push(feed);
        let (pods, writer) = reflector::store();
        let stream = reflector(
            writer,
            watcher(
                api::<Pod>(&client, ns),
                // Only the syncer pods: the label every one of them carries.
                watcher::Config::default().labels(CHANNEL_LABEL),
            )
            .modify(lean_pod)
            .default_backoff(),
        )
        .touched_objects();
        pod_streams.push(stream);
        scopes.push(Scope {
            namespace: ns.clone(),
            versions,
            pods,
        });
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let ctx = Arc::new(Context {
        client: client.clone(),
        settings,
        recorder,
        metrics,
        http,
        scopes,
        bodies: Mutex::default(),
        errors: Mutex::default(),
        slots: Mutex::default(),
        writes: tokio::sync::Semaphore::new(WRITES_IN_FLIGHT),
    });
    let controllers = names
        .iter()
        .zip(pod_streams)
        .map(|(ns, pods)| {
            let mut stop = shutdown.clone();
            Controller::<ManagedOSVersionChannel>::new(api(&client, ns), watcher::Config::default())
                .owns_stream(pods)
                .graceful_shutdown_on(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .run(reconcile, error_policy, ctx.clone())
                .for_each(|result| async move {
                    match result {
                        Ok((obj, _)) => debug!(channel = %obj, "reconciled"),
                        Err(e) => debug!("controller: {e}"),
                    }
                })
        })
        .collect::<Vec<_>>();
    // The caches' feeds never end by themselves: they stop with the controllers.
    tokio::select! {
        _ = futures::future::join_all(controllers) => {}
        _ = futures::future::join_all(feeds) => {}
    }
}

/// Reached only when an attempt's failure could not even be written to the status (the API
/// server is unreachable or refuses status writes): backs off per channel, doubling from the
/// retry delay up to the channel's sync interval.
fn error_policy(
    channel: Arc<ManagedOSVersionChannel>,
    error: &Error,
    ctx: Arc<Context>,
) -> Requeue {
    let key = key_of(&channel);
    let failures = match ctx.errors.lock() {
        Ok(mut errors) => {
            let n = errors.entry(key).or_insert(0);
            *n = n.saturating_add(1);
            *n
        }
        Err(_) => 1,
    };
    let interval =
        config::resolve(&channel.spec).map_or(config::DEFAULT_SYNC_INTERVAL, |c| c.sync_interval);
    let wait = ctx
        .settings
        .retry_delay
        .saturating_mul(1 << (failures.saturating_sub(1)).min(16))
        .min(interval);
    warn!(
        channel = %channel.name_any(),
        namespace = %channel.namespace().unwrap_or_default(),
        "reconcile failed ({failures} in a row), retrying in {}: {error}",
        crate::duration::format(wait)
    );
    Requeue::requeue(wait)
}

async fn reconcile(
    channel: Arc<ManagedOSVersionChannel>,
    ctx: Arc<Context>,
) -> Result<Requeue, Error> {
    let started = Instant::now();
    ctx.metrics.reconciliations.inc();
    let result = reconcile_inner(&channel, &ctx).await;
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    match &result {
        Ok(_) => {
            if let Ok(mut errors) = ctx.errors.lock() {
                errors.remove(&key_of(&channel));
            }
        }
        Err(e) => ctx.metrics.reconcile_error(e.class()),
    }
    result
}

/// What was read for one reconciliation; the decision core borrows it.
#[derive(Default)]
struct Observed {
    pod: Option<Pod>,
    display_log: Option<Vec<u8>>,
    runner_log: Option<String>,
    fetched: Option<Fetched>,
    versions: Option<Vec<Arc<ManagedOSVersion>>>,
    pod_create_error: Option<String>,
    error: Option<String>,
    queued: bool,
    /// Creating the pod found one of that name already there.
    pod_exists: bool,
}

impl Observed {
    fn decide(&self, channel: &ManagedOSVersionChannel, settings: &Settings) -> Decision {
        syncer::decide(
            &Observation {
                channel,
                pod: self.pod.as_ref(),
                display_log: self.display_log.as_deref(),
                runner_log: self.runner_log.as_deref(),
                fetched: self.fetched.as_ref(),
                versions: self.versions.as_deref(),
                pod_create_error: self.pod_create_error.as_deref(),
                error: self.error.as_deref(),
                queued: self.queued,
                now: Timestamp::now(),
            },
            settings,
        )
    }
}

/// The APIs of one channel's namespace.
struct Apis {
    channels: Api<ManagedOSVersionChannel>,
    pods: Api<Pod>,
    versions: Api<ManagedOSVersion>,
}

async fn reconcile_inner(
    cached: &ManagedOSVersionChannel,
    ctx: &Context,
) -> Result<Requeue, Error> {
    let name = cached.name_any();
    let ns = cached.namespace().unwrap_or_default();
    let apis = Apis {
        channels: Api::namespaced(ctx.client.clone(), &ns),
        pods: Api::namespaced(ctx.client.clone(), &ns),
        versions: Api::namespaced(ctx.client.clone(), &ns),
    };
    // Read fresh: the controller's cache may not hold our last status write yet, and a
    // decision on a stale status could start a second sync.
    let Some(channel) = apis
        .channels
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading channel {ns}/{name}")))?
    else {
        if let Ok(mut bodies) = ctx.bodies.lock() {
            bodies.remove(&format!("{ns}/{name}"));
        }
        return Ok(Requeue::await_change());
    };

    let mut seen = Observed::default();
    let decision = match attempt(&channel, &apis, ctx, &mut seen).await {
        Ok(decision) => {
            if decision.outcome == Some(Outcome::Failed) {
                // The channel's runner, data or source failed, or its pod was refused.
                let class = if seen.pod_create_error.is_some() {
                    ErrorClass::Refused
                } else {
                    ErrorClass::Input
                };
                ctx.metrics.reconcile_error(class);
            }
            decision
        }
        Err(e) => {
            // The attempt failed on the API: it is a failed sync like any other.
            let class = e.class();
            ctx.metrics.reconcile_error(class);
            warn!(channel = %name, namespace = %ns, class = class.label(), "sync attempt failed: {e}");
            seen.error = Some(e.to_string());
            let decision = seen.decide(&channel, &ctx.settings);
            // Only the pod is left to clean up; a failure here is retried with the next attempt.
            if let Err(e) = perform_pod_actions(&decision.actions, &apis, &mut seen, ctx).await {
                warn!(channel = %name, namespace = %ns, "cleaning up after a failed attempt: {e}");
            }
            decision
        }
    };
    if decision.outcome.is_some() {
        ctx.release_slot(&key_of(&channel));
    }
    finish(&channel, &apis.channels, decision, ctx).await
}

/// Observes what the decision core asks for, decides, and performs the decision.
async fn attempt(
    channel: &ManagedOSVersionChannel,
    apis: &Apis,
    ctx: &Context,
    seen: &mut Observed,
) -> Result<Decision, Error> {
    let name = channel.name_any();
    let ns = channel.namespace().unwrap_or_default();
    let key = key_of(channel);
    let scope = ctx.scope(&ns);
    let cached_pod = scope.and_then(|s| s.pods.get(&ObjectRef::new(&name).within(&ns)));
    // The cache answers "no pod" while no sync is under way. During a sync the pod is read
    // fresh: the cache may not show yet the pod just created, or its deletion.
    let syncing = channel
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == crate::api::READY))
        .is_some_and(|c| c.reason == syncer::reason::SYNCHRONIZING);
    seen.pod = if cached_pod.is_none() && !syncing {
        None
    } else {
        apis.pods
            .get_opt(&name)
            .await
            .map_err(kube_err(format!("reading pod {ns}/{name}")))?
    };
    let mut decision = seen.decide(channel, &ctx.settings);
    if starts_sync(&decision) && !ctx.take_slot(&key) {
        seen.queued = true;
        decision = seen.decide(channel, &ctx.settings);
    }
    // Each round observes something new, so this ends; the bound guards against a bug.
    for _ in 0..4 {
        if !decision.needs.any() {
            break;
        }
        let needs = std::mem::take(&mut decision.needs);
        if needs.display_log && seen.display_log.is_none() {
            seen.display_log =
                Some(read_display_log(&apis.pods, &name, ctx.settings.max_output_bytes).await?);
        }
        if needs.runner_log && seen.runner_log.is_none() {
            seen.runner_log = Some(read_runner_tail(&apis.pods, &name).await);
        }
        if needs.versions && seen.versions.is_none() {
            seen.versions = Some(versions_in(ctx, &apis.versions, &ns).await?);
        }
        if let Some(options) = &needs.fetch
            && seen.fetched.is_none()
        {
            if !ctx.take_slot(&key) {
                seen.queued = true;
                decision = seen.decide(channel, &ctx.settings);
                break;
            }
            seen.fetched = Some(fetch_json(channel, options, ctx).await);
        }
        decision = seen.decide(channel, &ctx.settings);
    }

    let existing = seen.versions.as_deref().unwrap_or_default();
    write_versions(&decision.actions, existing, &apis.versions, scope, ctx).await?;
    if let Err(e) = perform_pod_actions(&decision.actions, apis, seen, ctx).await {
        if decision.outcome != Some(Outcome::Synchronized) {
            return Err(e);
        }
        // The versions are written: the sync succeeded. The pod goes at the next look.
        warn!(channel = %name, namespace = %ns, "after a successful sync: {e}");
    }
    if seen.pod_create_error.is_some() {
        if seen.pod_exists {
            // A pod of that name exists (outside the cache: not labelled as ours): decide
            // with it, so the status says whose it is.
            seen.pod = apis
                .pods
                .get_opt(&name)
                .await
                .map_err(kube_err(format!("reading pod {ns}/{name}")))?;
            if seen.pod.is_some() {
                seen.pod_create_error = None;
            }
        }
        // The API server refused the pod: decide again, knowing why.
        decision = seen.decide(channel, &ctx.settings);
        perform_pod_actions(&decision.actions, apis, seen, ctx).await?;
    }
    if seen.pod.is_none() && !starts_sync(&decision) && !seen.queued {
        ctx.release_slot(&key);
    }
    if decision.outcome == Some(Outcome::Synchronized)
        && let Some(Fetched::Body {
            data,
            etag,
            last_modified,
            not_modified: false,
        }) = &seen.fetched
    {
        remember_body(channel, etag, last_modified, data, ctx);
    }
    Ok(decision)
}

/// Whether the decision starts a sync (creates the syncer pod, or fetches).
fn starts_sync(decision: &Decision) -> bool {
    decision.needs.fetch.is_some()
        || decision
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod(_)))
}

/// The versions of a namespace, from the watch cache (listed only if the cache is not
/// filled yet, which happens once, at start).
async fn versions_in(
    ctx: &Context,
    api: &Api<ManagedOSVersion>,
    ns: &str,
) -> Result<Vec<Arc<ManagedOSVersion>>, Error> {
    if let Some(scope) = ctx.scope(ns) {
        let ready = tokio::time::timeout(CACHE_WAIT, scope.versions.wait_until_ready()).await;
        if matches!(ready, Ok(Ok(()))) {
            // Shared with the cache, not copied: many syncs at once cost no more memory.
            return Ok(scope
                .versions
                .state_filter(|v| v.namespace().as_deref() == Some(ns)));
        }
    }
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(kube_err(format!("listing ManagedOSVersions in {ns}")))?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}

/// How long to wait for the watch cache (filled, or caught up with the sync's writes).
const CACHE_WAIT: Duration = Duration::from_secs(10);

/// Waits until the versions cache shows every write of a sync (each version at the
/// resourceVersion the write returned, or gone), so that no decision acts on a cache that
/// has not seen them. Gives up after [`CACHE_WAIT`]: a later decision then still sees
/// them, just possibly a moment late.
async fn wait_for_cache(scope: Option<&Scope>, expected: &[(String, Option<String>)], ns: &str) {
    let Some(scope) = scope else { return };
    let deadline = tokio::time::Instant::now() + CACHE_WAIT;
    loop {
        let behind = expected.iter().any(|(name, rv)| {
            let cached = scope.versions.get(&ObjectRef::new(name).within(ns));
            match rv {
                Some(rv) => cached.and_then(|v| v.resource_version()).as_ref() != Some(rv),
                None => cached.is_some(),
            }
        });
        if !behind || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Fetches a json channel's data; a 304 is answered from the last good body.
async fn fetch_json(
    channel: &ManagedOSVersionChannel,
    options: &JsonOptions,
    ctx: &Context,
) -> Fetched {
    let cached = ctx.cached_body(
        &key_of(channel),
        &channel.uid().unwrap_or_default(),
        &options.uri,
    );
    let validators = cached.as_ref().map(|(v, _)| v.clone()).unwrap_or_default();
    match fetch::get(
        &ctx.http,
        options,
        &validators,
        ctx.settings.max_output_bytes,
    )
    .await
    {
        fetch::Response::Body { data, validators } => Fetched::Body {
            data: data.into(),
            etag: validators.etag,
            last_modified: validators.last_modified,
            not_modified: false,
        },
        fetch::Response::NotModified => match cached {
            Some((validators, data)) => Fetched::Body {
                data,
                etag: validators.etag,
                last_modified: validators.last_modified,
                not_modified: true,
            },
            None => Fetched::Failed(format!(
                "fetching {}: the server answered 304 Not Modified to a request without validators",
                options.uri
            )),
        },
        fetch::Response::Failed(why) => Fetched::Failed(why),
    }
}

fn remember_body(
    channel: &ManagedOSVersionChannel,
    etag: &Option<String>,
    last_modified: &Option<String>,
    data: &Arc<[u8]>,
    ctx: &Context,
) {
    let Some(syncer_options) = config::resolve(&channel.spec)
        .ok()
        .and_then(|c| match c.source {
            config::Source::Json(o) => Some(o),
            config::Source::Custom(_) => None,
        })
    else {
        return;
    };
    let validators = Validators {
        etag: etag.clone(),
        last_modified: last_modified.clone(),
    };
    if let Ok(mut bodies) = ctx.bodies.lock() {
        if validators.is_empty() {
            bodies.remove(&key_of(channel));
        } else {
            bodies.insert(
                key_of(channel),
                CachedBody {
                    uid: channel.uid().unwrap_or_default(),
                    uri: syncer_options.uri,
                    validators,
                    data: data.clone(),
                },
            );
        }
    }
}

fn is_version_write(action: &Action) -> bool {
    matches!(
        action,
        Action::ApplyVersion(_) | Action::MarkVersion { .. } | Action::DeleteVersion { .. }
    )
}

/// How to take back one version write.
enum Undo {
    /// It created the version: delete it.
    Delete { name: String, uid: String },
    /// It changed the version: put back what was there (`resource_version`: of the write).
    Restore {
        previous: Box<ManagedOSVersion>,
        resource_version: Option<String>,
    },
    /// It flagged or unflagged the version: the opposite.
    Mark {
        name: String,
        uid: String,
        no_longer_in_sync: bool,
    },
    /// It deleted the version: create it again (with a new uid).
    Recreate(Box<ManagedOSVersion>),
}

/// Writes the versions of a sync all or nothing: every write first as a dry run, then for
/// real; a real write that fails (a quota only the writes together exceed) undoes the
/// writes before it, so the versions end as they were. Writes go out [`PARALLEL_WRITES`]
/// at a time (deletes last, after every other write succeeded).
async fn write_versions(
    actions: &[Action],
    existing: &[Arc<ManagedOSVersion>],
    versions: &Api<ManagedOSVersion>,
    scope: Option<&Scope>,
    ctx: &Context,
) -> Result<(), Error> {
    let writes: Vec<&Action> = actions.iter().filter(|a| is_version_write(a)).collect();
    if writes.is_empty() {
        return Ok(());
    }
    // What each version was before the sync, for its undo (the namespace may hold many).
    let before: Before = existing
        .iter()
        .filter_map(|v| Some((v.metadata.name.as_deref()?, v.as_ref())))
        .collect();
    // The first refusal in the sync's order, so the message does not depend on timing.
    let refused = write_batch(writes.clone(), &before, versions, true, ctx)
        .await
        .into_iter()
        .find_map(|(action, result)| result.err().map(|e| (action, e)));
    if let Some((action, source)) = refused {
        return Err(Error::DryRun {
            what: action.describe(),
            source,
        });
    }
    let (deletes, others): (Vec<&Action>, Vec<&Action>) = writes
        .iter()
        .partition(|a| matches!(a, Action::DeleteVersion { .. }));
    let mut done: Vec<Done> = Vec::with_capacity(writes.len());
    for batch in [others, deletes] {
        let results = write_batch(batch, &before, versions, false, ctx).await;
        let mut failed = None;
        for (action, result) in results {
            match result {
                Ok(d) => {
                    ctx.metrics.wrote(action);
                    done.push(d);
                }
                Err(source) if failed.is_none() => failed = Some((action, source)),
                Err(_) => {}
            }
        }
        if let Some((action, source)) = failed {
            let undo = undo_all(done.into_iter().filter_map(|d| d.undo).collect(), versions).await;
            return Err(Error::Write {
                what: action.describe(),
                undo,
                source,
            });
        }
    }
    let ns = versions_namespace(existing, actions);
    let expected: Vec<(String, Option<String>)> = done
        .into_iter()
        .map(|d| (d.name, d.resource_version))
        .collect();
    wait_for_cache(scope, &expected, &ns).await;
    Ok(())
}

/// Sends the writes [`PARALLEL_WRITES`] at a time; the results come in the writes' order.
async fn write_batch<'a>(
    batch: Vec<&'a Action>,
    before: &Before<'_>,
    versions: &Api<ManagedOSVersion>,
    dry_run: bool,
    ctx: &Context,
) -> Vec<(&'a Action, Result<Done, kube::Error>)> {
    let writes: Vec<_> = batch
        .into_iter()
        .map(|action| write_tagged(action, before, versions, dry_run, ctx))
        .collect();
    futures::stream::iter(writes)
        .buffered(PARALLEL_WRITES)
        .collect()
        .await
}

/// A write and its action.
async fn write_tagged<'a>(
    action: &'a Action,
    before: &Before<'_>,
    versions: &Api<ManagedOSVersion>,
    dry_run: bool,
    ctx: &Context,
) -> (&'a Action, Result<Done, kube::Error>) {
    // Never closed, so a permit always comes.
    let _permit = ctx.writes.acquire().await.ok();
    if !dry_run {
        debug!("{}", action.describe());
    }
    (
        action,
        write_version(action, before, versions, dry_run).await,
    )
}

/// The resourceVersion of a create-only apply (the idiom of java-operator-sdk): no object
/// the operator could meet has it, so an apply carrying it creates or fails with 409.
const CREATE_ONLY: &str = "1";

/// A create-only apply's 409 says the object "has been modified"; say what happened.
fn created_meanwhile(e: kube::Error, name: &str) -> kube::Error {
    match e {
        kube::Error::Api(mut s) if s.code == 409 => {
            s.reason = "AlreadyExists".into();
            s.message = format!("version {name} was created by someone else during the sync");
            kube::Error::Api(s)
        }
        e => e,
    }
}

/// The versions of the namespace before the sync, by name.
type Before<'a> = HashMap<&'a str, &'a ManagedOSVersion>;

/// How many version writes of one sync are in flight at once. Measured on the local cluster
/// (2 cores, its API server shared with everything else): creates went 85/s one by one,
/// 210/s with 8 in flight, 264/s with 16; a 5,000-version first sync took 37 s with 32.
const PARALLEL_WRITES: usize = 32;

/// How many version writes of all syncs together are in flight at once, so that many syncs
/// at once do not flood the API server (its priority and fairness queues them anyway).
const WRITES_IN_FLIGHT: usize = 64;

fn versions_namespace(existing: &[Arc<ManagedOSVersion>], actions: &[Action]) -> String {
    existing
        .iter()
        .find_map(|v| v.namespace())
        .or_else(|| {
            actions.iter().find_map(|a| match a {
                Action::ApplyVersion(v) => v.namespace(),
                _ => None,
            })
        })
        .unwrap_or_default()
}

/// A write made: what the cache must show for it, and how to take it back.
struct Done {
    name: String,
    /// The version's resourceVersion after the write; `None` when it was deleted.
    resource_version: Option<String>,
    undo: Option<Undo>,
}

/// One version write (a dry run, or for real).
async fn write_version(
    action: &Action,
    before: &Before<'_>,
    versions: &Api<ManagedOSVersion>,
    dry_run: bool,
) -> Result<Done, kube::Error> {
    let previous = |name: &str| before.get(name).copied();
    match action {
        Action::ApplyVersion(version) => {
            let name = version.name_any();
            let prior = previous(&name);
            let mut params = PatchParams::apply(FIELD_MANAGER).force();
            params.dry_run = dry_run;
            let written = match prior {
                // A new version's dry run is a create: the same admission as the apply that
                // will create it, without the apply's read and merge (about half the API
                // server's work in a big first sync), and a version someone else created
                // meanwhile is refused (409) instead of being taken over.
                None if dry_run => {
                    let params = PostParams {
                        dry_run: true,
                        field_manager: Some(FIELD_MANAGER.into()),
                    };
                    versions.create(&params, version.as_ref()).await?
                }
                // Its real write is a create-only apply: a placeholder resourceVersion, which
                // the API server checks only against an object that exists, refuses a version
                // someone else created after the dry run (409) instead of taking it over.
                None => {
                    let mut create = version.as_ref().clone();
                    create.metadata.resource_version = Some(CREATE_ONLY.into());
                    versions
                        .patch(&name, &params, &Patch::Apply(&create))
                        .await
                        .map_err(|e| created_meanwhile(e, &name))?
                }
                Some(_) => {
                    versions
                        .patch(&name, &params, &Patch::Apply(version.as_ref()))
                        .await?
                }
            };
            let undo = match prior {
                Some(before) => Undo::Restore {
                    previous: Box::new(before.clone()),
                    resource_version: written.resource_version(),
                },
                None => Undo::Delete {
                    name: name.clone(),
                    uid: written.uid().unwrap_or_default(),
                },
            };
            Ok(Done {
                name,
                resource_version: written.resource_version(),
                undo: Some(undo),
            })
        }
        Action::MarkVersion {
            name,
            uid,
            no_longer_in_sync,
        } => {
            let written = mark(versions, name, uid, *no_longer_in_sync, dry_run).await?;
            Ok(Done {
                name: name.clone(),
                resource_version: written.resource_version(),
                undo: Some(Undo::Mark {
                    name: name.clone(),
                    uid: uid.clone(),
                    no_longer_in_sync: !*no_longer_in_sync,
                }),
            })
        }
        Action::DeleteVersion { name, uid } => {
            let params = DeleteParams {
                dry_run,
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let undo = match versions.delete(name, &params).await {
                Ok(_) => previous(name).map(|before| Undo::Recreate(Box::new(before.clone()))),
                Err(e) if is_status(&e, 404) => None,
                Err(e) => return Err(e),
            };
            Ok(Done {
                name: name.clone(),
                resource_version: None,
                undo,
            })
        }
        Action::CreatePod(_) | Action::DeletePod { .. } => Ok(Done {
            name: String::new(),
            resource_version: None,
            undo: None,
        }),
    }
}

/// Sets or removes the no-longer-in-sync annotation; the uid in the patch is a
/// precondition (the API server refuses to change it).
async fn mark(
    versions: &Api<ManagedOSVersion>,
    name: &str,
    uid: &str,
    no_longer_in_sync: bool,
    dry_run: bool,
) -> Result<ManagedOSVersion, kube::Error> {
    let value = no_longer_in_sync.then_some("true");
    let patch =
        json!({"metadata": {"uid": uid, "annotations": {NO_LONGER_IN_SYNC_ANNOTATION: value}}});
    let params = PatchParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    versions.patch(name, &params, &Patch::Merge(patch)).await
}

/// Takes back writes, newest first; says how that went, for the failure message.
async fn undo_all(done: Vec<Undo>, versions: &Api<ManagedOSVersion>) -> String {
    if done.is_empty() {
        return "nothing was changed".into();
    }
    let count = done.len();
    let mut failed = Vec::new();
    for undo in done.into_iter().rev() {
        let result = match &undo {
            Undo::Delete { name, uid } => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match versions.delete(name, &params).await {
                    Err(e) if !is_status(&e, 404) => Err((name.clone(), e)),
                    _ => Ok(()),
                }
            }
            Undo::Restore {
                previous,
                resource_version,
            } => {
                let mut restored = (**previous).clone();
                restored.metadata.resource_version = resource_version.clone();
                // Left out, the API server keeps the managedFields records as they are.
                restored.metadata.managed_fields = None;
                let name = restored.name_any();
                versions
                    .replace(&name, &PostParams::default(), &restored)
                    .await
                    .map(drop)
                    .map_err(|e| (name, e))
            }
            Undo::Mark {
                name,
                uid,
                no_longer_in_sync,
            } => mark(versions, name, uid, *no_longer_in_sync, false)
                .await
                .map(drop)
                .map_err(|e| (name.clone(), e)),
            Undo::Recreate(previous) => {
                let mut again = (**previous).clone();
                let name = again.name_any();
                again.metadata.uid = None;
                again.metadata.resource_version = None;
                again.metadata.creation_timestamp = None;
                again.metadata.managed_fields = None;
                versions
                    .create(&PostParams::default(), &again)
                    .await
                    .map(drop)
                    .map_err(|e| (name, e))
            }
        };
        if let Err((name, e)) = result {
            failed.push(format!("{name}: {}", api_message(&e)));
        }
    }
    if failed.is_empty() {
        format!("the sync's {count} earlier writes were undone, so nothing was changed")
    } else {
        format!(
            "undoing the sync's earlier writes failed for {}",
            failed.join("; ")
        )
    }
}

/// Creates or deletes the syncer pod as decided. A refused creation is noted in `seen`
/// (a `FailedToCreatePod`); other errors end the attempt.
async fn perform_pod_actions(
    actions: &[Action],
    apis: &Apis,
    seen: &mut Observed,
    ctx: &Context,
) -> Result<(), Error> {
    for action in actions {
        match action {
            Action::CreatePod(pod) => {
                ctx.metrics.wrote(action);
                match apis.pods.create(&PostParams::default(), pod).await {
                    Ok(created) => info!(pod = %created.name_any(), "started the syncer pod"),
                    Err(e) => {
                        seen.pod_exists = is_status(&e, 409);
                        seen.pod_create_error = Some(format!(
                            "creating syncer pod {}: {}",
                            pod.name_any(),
                            api_message(&e)
                        ));
                        return Ok(());
                    }
                }
            }
            Action::DeletePod { name, uid } => {
                ctx.metrics.wrote(action);
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match apis.pods.delete(name, &params).await {
                    Ok(_) => {}
                    Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
                    Err(e) => return Err(kube_err(format!("deleting pod {name}"))(e)),
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes the status and events, counts the outcome, and says when to look again.
async fn finish(
    channel: &ManagedOSVersionChannel,
    channels: &Api<ManagedOSVersionChannel>,
    decision: Decision,
    ctx: &Context,
) -> Result<Requeue, Error> {
    let name = channel.name_any();
    if let Some(status) = &decision.status {
        channels
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .map_err(kube_err(format!("writing the status of channel {name}")))?;
        ctx.metrics.status_written();
    }
    if let Some(outcome) = decision.outcome {
        ctx.metrics.sync_finished(outcome);
    }
    let reference = channel.object_ref(&());
    for note in &decision.events {
        if note.warning {
            warn!(channel = %name, namespace = %channel.namespace().unwrap_or_default(), reason = note.reason, "{}", note.message);
        } else {
            info!(channel = %name, namespace = %channel.namespace().unwrap_or_default(), reason = note.reason, "{}", note.message);
        }
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.into(),
            note: Some(truncate(&note.message, 1000)),
            action: "Sync".into(),
            secondary: None,
        };
        // An event that cannot be published is not worth failing the sync for.
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            warn!(channel = %name, "could not publish an event: {e}");
        }
    }
    Ok(match decision.requeue {
        Some(after) => Requeue::requeue(after),
        None => Requeue::await_change(),
    })
}

/// At most `max` bytes of `s`, cut at a character boundary, with `...` when cut.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", s.get(..end).unwrap_or_default())
}

/// The display container's log, capped at the output limit plus the frame.
async fn read_display_log(pods: &Api<Pod>, name: &str, max_bytes: u64) -> Result<Vec<u8>, Error> {
    let cap = max_bytes.saturating_add(FRAME_OVERHEAD);
    let params = LogParams {
        container: Some(pod::DISPLAY.into()),
        limit_bytes: Some(i64::try_from(cap).unwrap_or(i64::MAX)),
        ..Default::default()
    };
    let stream = pods
        .log_stream(name, &params)
        .await
        .map_err(kube_err(format!("reading the display log of pod {name}")))?;
    let mut out = Vec::new();
    stream
        .take(cap)
        .read_to_end(&mut out)
        .await
        .map_err(|source| Error::Log {
            container: pod::DISPLAY,
            pod: name.into(),
            source,
        })?;
    Ok(out)
}

/// The end of the runner's log, or why it could not be read (it goes into a message).
async fn read_runner_tail(pods: &Api<Pod>, name: &str) -> String {
    let params = LogParams {
        container: Some(pod::RUNNER.into()),
        tail_lines: Some(20),
        limit_bytes: Some(64 * 1024),
        ..Default::default()
    };
    match pods.logs(name, &params).await {
        Ok(log) => log,
        Err(e) => format!("(its log could not be read: {})", api_message(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("no", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn errors_are_classified_in_one_place() {
        for code in [400, 403, 404, 409, 422] {
            assert_eq!(classify(&api_error(code)), ErrorClass::Refused, "{code}");
        }
        for code in [429, 500, 503, 504] {
            assert_eq!(classify(&api_error(code)), ErrorClass::Retryable, "{code}");
        }
    }

    #[test]
    fn sync_slots_are_bounded_and_first_come_first_served() {
        let mut slots = Slots::default();
        let none = HashSet::new();
        let taken: Vec<bool> = (0..5)
            .map(|i| slots.take(&format!("ns/c{i}"), &none, 2))
            .collect();
        assert_eq!(taken, [true, true, false, false, false]);
        // c2 waits first: c4 asking again does not overtake it.
        slots.held.remove("ns/c0");
        assert!(!slots.take("ns/c4", &none, 2));
        assert!(slots.take("ns/c2", &none, 2));
        assert!(!slots.take("ns/c3", &none, 2));
        // A pod already running (an earlier operator's) counts, and keeps its own slot.
        let running: HashSet<String> = ["ns/old".to_string()].into();
        slots.held.clear();
        assert!(slots.take("ns/old", &running, 2));
        assert!(slots.take("ns/c3", &running, 2));
        assert!(!slots.take("ns/c4", &running, 2));
    }

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate("héllo wörld", 8), "héll...");
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("€€€€", 2), "...");
    }
}
