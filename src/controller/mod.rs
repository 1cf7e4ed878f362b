//! The thin I/O layer: a `kube::runtime::Controller` over channels (and the syncer pods
//! they own) whose `reconcile` runs one `pipeline::Attempt`: observe, ask
//! `syncer::decide`, perform the decision.
//!
//! Rooms: `io` (the I/O boundary, one trait) and `kube_io` (its implementation over the API
//! server and the watch caches), `pipeline` (the steps of one reconciliation), `record`
//! (what is kept per channel, and the sync queue), `queue` (the pure sync queue), `slots`
//! (taking and giving back slots, waking who is next), `caches` (the shared watch caches
//! and what triggers a reconciliation), `remote` (json fetches, oci pulls and their kept data),
//! `events` (Events and their series), `writes` (the all-or-nothing version writes), `pacing` (their turns per namespace), `pods`
//! (the syncer pod), `errors` (API errors and their classes).
//!
//! Failure model: whatever fails in an attempt (an API error while observing, a write the
//! API server refuses, channel data that breaks a rule) is decided like any failed sync:
//! counted in `failedSynchronizationAttempts`, backed off, published as an Event and
//! written to the status. Only when even the status cannot be written does the error reach
//! `error_policy`, which backs off per channel in memory, by the same policy.

mod caches;
mod decoding;
pub mod errors;
mod events;
mod finalize;
pub mod io;
mod kube_io;
mod pacing;
mod pipeline;
mod pods;
pub mod queue;
mod record;
mod remote;
mod slots;
pub mod version_index;
pub mod version_meta;
mod writes;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::api::{CHANNEL_LABEL, FIELD_MANAGER, ManagedOSVersionChannel};
use crate::metrics::Metrics;
use crate::syncer::Settings;
use caches::Scope;
pub use decoding::Lenient;
pub use errors::Error;
use events::Reporter;
use io::ChannelIo;
use kube_io::KubeIo;
use queue::Key;
use record::Memory;

/// Shared state of all reconciliations.
pub struct Context<I: ChannelIo> {
    pub io: I,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    reporter: Reporter,
    /// Every channel's record, and the sync queue.
    memory: Mutex<Memory>,
    /// Channel data in memory, all syncs together: one output's worth
    /// (`--max-output-bytes`), taken as bytes arrive (docs/security.md).
    budget: crate::budget::Budget,
}

impl<I: ChannelIo> Context<I> {
    pub fn new(io: I, settings: Settings, metrics: Arc<Metrics>, reporter: Reporter) -> Self {
        Context {
            io,
            metrics,
            reporter,
            memory: Mutex::new(Memory::new(
                settings.max_concurrent_syncs,
                settings.json_cache_bytes,
            )),
            budget: crate::budget::Budget::new(settings.max_output_bytes, settings.read_idle),
            settings,
        }
    }
}

/// Runs one controller per watched namespace (one for all when `namespaces` is empty),
/// with the watch caches they share, until `shutdown` fires; in-flight reconciliations
/// finish first.
// The parts the operator builds once and every controller shares; a struct of them would
// only be unpacked here.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    http: crate::fetch::Client,
    registry: crate::registry::Client,
    namespaces: &[String],
    shard: Option<&str>,
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
        let versions = Arc::new(version_index::VersionIndex::default());
        let version_writer = Arc::clone(&versions);
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
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: std::env::var("POD_NAME").unwrap_or_else(|_| FIELD_MANAGER.into()),
    };
    // Ready (`/readyz`) only once every watch cache holds its first list: until then a
    // sync could not tell what exists. A new leader is unready until its caches fill.
    metrics
        .ready
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let filling: Vec<_> = scopes
        .iter()
        .map(|s| (s.channels.clone(), s.pods.clone(), s.versions.clone()))
        .collect();
    let ready_flag = metrics.clone();
    let ready = async move {
        for (channels, pods, versions) in filling {
            let _ = channels.wait_until_ready().await;
            let _ = pods.wait_until_ready().await;
            versions.wait_until_ready().await;
        }
        ready_flag
            .ready
            .store(true, std::sync::atomic::Ordering::Relaxed);
        info!("watch caches filled: ready");
        futures::future::pending::<()>().await;
    };
    let io = KubeIo::new(
        client.clone(),
        scopes,
        wake,
        http,
        registry,
        metrics.clone(),
        kube_io::WriteBounds {
            rates: settings.write_rates,
            max_undo_bytes: settings.max_sync_write_bytes,
        },
    );
    let ctx = Arc::new(Context::new(io, settings, metrics, reporter));
    let streaming = caches::streaming_lists_served(&client, names[0].as_deref()).await;
    info!(
        "watch caches fill by {}",
        if streaming {
            "streaming lists"
        } else {
            "paginated lists (the API server serves no streaming lists)"
        }
    );

    let mut feeds = Vec::new();
    let mut controllers = Vec::new();
    for (((ns, (channel_writer, version_writer, pod_writer)), wakeup), scope) in
        names.iter().zip(writers).zip(wakeups).zip(&ctx.io.scopes)
    {
        let scope_name = ns.clone().unwrap_or_else(|| "(every namespace)".into());
        // Metadata only: no spec, and of managedFields who wrote when (version_meta).
        let versions = watcher(
            api::<version_meta::VersionMeta>(&client, ns),
            caches::watch_config(streaming),
        )
        .map(version_meta::versions)
        .default_backoff()
        .for_each(move |event| {
            if let Ok(event) = event {
                let filled = matches!(event, watcher::Event::InitDone);
                version_writer.apply(event);
                // When a (re-)list is in: what a restart's cost is measured to.
                if filled {
                    info!(
                        scope = scope_name,
                        versions = version_writer.len(),
                        "version cache filled"
                    );
                }
            }
            futures::future::ready(())
        });
        feeds.push(versions);
        let pods = caches::changes(
            watcher(
                api::<Pod>(&client, ns),
                // Only the syncer pods: the label every one of them carries.
                caches::watch_config(streaming).labels(CHANNEL_LABEL),
            )
            .modify(caches::lean_pod)
            .default_backoff()
            .reflect(pod_writer),
            caches::pod_fingerprint,
            |_| {},
        );
        let forget = ctx.clone();
        let channels = caches::changes(
            decoding::skip_undecodable(
                watcher(
                    api::<decoding::Lenient<ManagedOSVersionChannel>>(&client, ns),
                    // A shard's channels only. A channel relabelled out of it is reported
                    // gone (forgotten here), and the shard it joins picks it up as a
                    // restarted operator would: its status says when it is due.
                    shard.map_or_else(
                        || caches::watch_config(streaming),
                        |s| caches::watch_config(streaming).labels(s),
                    ),
                ),
                "channel",
                ctx.metrics.clone(),
            )
            .default_backoff()
            .reflect(channel_writer),
            caches::channel_fingerprint,
            move |gone: Key| forget.forget(&gone, gone.extra.uid.as_deref()),
        );
        let mut stop = shutdown.clone();
        let controller = Controller::for_stream(channels, scope.channels.clone())
            .owns_stream(pods)
            .reconcile_on(wakeup)
            .graceful_shutdown_on(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .run(reconcile::<KubeIo>, error_policy::<KubeIo>, ctx.clone())
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
        () = ready => {}
    }
}

/// Reached only when an attempt's failure could not even be written to the status (the API
/// server is unreachable or refuses status writes): backs off per channel in memory, by the
/// policy of failed syncs (`syncer::backoff`).
fn error_policy<I: ChannelIo>(
    channel: Arc<ManagedOSVersionChannel>,
    error: &Error,
    ctx: Arc<Context<I>>,
) -> Action {
    let key = ObjectRef::from_obj(channel.as_ref());
    let uid = channel.uid().unwrap_or_default();
    let failures = ctx
        .with_record(&key, &uid, |r| {
            r.errors = r.errors.saturating_add(1);
            r.errors
        })
        .unwrap_or(1);
    let interval = ctx.settings.sync_interval(&channel);
    let wait = crate::syncer::backoff(ctx.settings.retry_delay, i64::from(failures), interval);
    warn!(
        channel = %channel.name_any(),
        namespace = %channel.namespace().unwrap_or_default(),
        "reconcile failed ({failures} in a row), retrying in {}: {error}",
        crate::duration::format(wait)
    );
    Action::requeue(wait.min(crate::config::MAX_DURATION))
}

/// One reconciliation: the pipeline's steps, in one span that names the channel.
#[tracing::instrument(skip_all, fields(
    namespace = %channel.namespace().unwrap_or_default(),
    channel = %channel.name_any(),
))]
async fn reconcile<I: ChannelIo>(
    channel: Arc<ManagedOSVersionChannel>,
    ctx: Arc<Context<I>>,
) -> Result<Action, Error> {
    reconcile_counted(channel, &ctx)
        .await
        .map(|(action, _)| action)
}

/// `reconcile`, saying how many decisions and observations it took.
async fn reconcile_counted<I: ChannelIo>(
    channel: Arc<ManagedOSVersionChannel>,
    ctx: &Context<I>,
) -> Result<(Action, pipeline::Counts), Error> {
    let started = Instant::now();
    ctx.metrics.reconciliations.inc();
    let key = ObjectRef::from_obj(channel.as_ref());
    let uid = channel.uid().unwrap_or_default();
    let result = pipeline::Attempt::run(ctx, &key, channel).await;
    ctx.wake_waiting();
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    match &result {
        Ok((_, counts)) => {
            debug!(
                decisions = counts.decisions,
                observations = counts.observations,
                "decided"
            );
            if let Ok(mut memory) = ctx.memory.lock()
                && let Some(record) = memory.get(&key, &uid)
            {
                record.errors = 0;
            }
        }
        Err(e) => ctx.metrics.reconcile_error(e.class()),
    }
    result
}
