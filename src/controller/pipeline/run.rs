//! The wiring: per watched scope the watch caches (channels, versions, syncer pods), the
//! streams that fill them and the controller they feed; all of them run until shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::channel::mpsc;
use futures::{Future, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tracing::{debug, info};

use crate::api::{CHANNEL_LABEL, FIELD_MANAGER, ManagedOSVersionChannel};
use crate::controller::caches::decoding;
use crate::controller::caches::{self, Scope};
use crate::controller::cluster::{self as kube_io, KubeIo};
use crate::controller::context::Reporter;
use crate::controller::versions::index::VersionIndex;
use crate::controller::versions::meta as version_meta;
use crate::controller::{Context, Key, error_policy, reconcile};
use crate::metrics::Metrics;
use crate::syncer::Settings;

/// The clients the operator makes once and every controller shares.
pub struct Clients {
    pub kube: Client,
    /// json channels' fetches.
    pub http: crate::fetch::Client,
    /// oci channels' pulls.
    pub registry: crate::registry::Client,
}

/// What the controllers watch.
#[derive(Clone, Copy)]
pub struct Watched<'a> {
    /// One controller per namespace; none: one for all of them.
    pub namespaces: &'a [String],
    /// Only the channels with this label (`--shard`).
    pub shard: Option<&'a str>,
}

/// The stores' writers of one scope; the streams in [`feed`] fill them.
struct Writers {
    channels: Writer<ManagedOSVersionChannel>,
    versions: Arc<VersionIndex>,
    pods: Writer<Pod>,
    wakeup: mpsc::UnboundedReceiver<Key>,
}

/// Runs one controller per watched namespace (one for all when there are none), with the
/// watch caches they share, until `shutdown` fires; in-flight reconciliations finish first.
/// `served`: the channel server's store, kept in step with the channels that opt in.
pub async fn run(
    clients: Clients,
    settings: Settings,
    metrics: Arc<Metrics>,
    watched: Watched<'_>,
    served: Option<Arc<crate::channel_server::Store>>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let names: Vec<Option<String>> = if watched.namespaces.is_empty() {
        vec![None]
    } else {
        watched.namespaces.iter().cloned().map(Some).collect()
    };
    // The stores first: the context holds their readers, the streams below fill them.
    let (mut scopes, mut writers, mut wake) = (Vec::new(), Vec::new(), Vec::new());
    for (scope, writer, tx) in names.iter().map(stores) {
        scopes.push(scope);
        writers.push(writer);
        wake.push(tx);
    }
    let ready = ready_when_filled(&scopes, metrics.clone());
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: std::env::var("POD_NAME").unwrap_or_else(|_| FIELD_MANAGER.into()),
    };
    let client = clients.kube.clone();
    let (admission, admission_watches) = crate::admission::watch::Admission::watch(
        &client,
        &names,
        settings.dry_run_versions_always,
    );
    let bounds = kube_io::WriteBounds {
        rates: settings.write_rates,
        max_undo_bytes: settings.max_sync_write_bytes,
        admission,
    };
    let io = KubeIo::new(
        clients.kube,
        scopes,
        wake,
        clients.http,
        clients.registry,
        metrics.clone(),
        bounds,
    );
    // The channel server answers while the controllers run (and keep its data current).
    let _serving = served.as_ref().map(crate::channel_server::Store::activate);
    let ctx = Arc::new(Context::new(io, settings, metrics, reporter).serving(served));
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
    for ((ns, writers), scope) in names.iter().zip(writers).zip(&ctx.io.scopes) {
        let source = Source {
            client: &client,
            namespace: ns,
            streaming,
            shard: watched.shard,
        };
        feeds.push(source.versions(writers.versions));
        let channels = source.channels(writers.channels, &ctx);
        let pods = source.pods(writers.pods);
        let mut stop = shutdown.clone();
        let controller = Controller::for_stream(channels, scope.channels.clone())
            .owns_stream(pods)
            .reconcile_on(writers.wakeup)
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
        () = admission_watches => {}
    }
}

/// The empty stores of one scope: the readers the context holds, the writers the streams
/// fill, and the sender that wakes the scope's controller.
fn stores(ns: &Option<String>) -> (Scope, Writers, mpsc::UnboundedSender<Key>) {
    let (channels, channel_writer) = reflector::store();
    let versions = Arc::new(VersionIndex::default());
    let (pods, pod_writer) = reflector::store();
    let (tx, wakeup) = mpsc::unbounded();
    let writers = Writers {
        channels: channel_writer,
        versions: Arc::clone(&versions),
        pods: pod_writer,
        wakeup,
    };
    let scope = Scope {
        namespace: ns.clone(),
        channels,
        versions,
        pods,
    };
    (scope, writers, tx)
}

/// Ready (`/readyz`) only once every watch cache holds its first list: until then a sync
/// could not tell what exists. A new leader is unready until its caches fill. Never ends.
fn ready_when_filled(scopes: &[Scope], metrics: Arc<Metrics>) -> impl Future<Output = ()> + use<> {
    metrics.ready.store(false, Ordering::Relaxed);
    let filling: Vec<_> = scopes
        .iter()
        .map(|s| (s.channels.clone(), s.pods.clone(), s.versions.clone()))
        .collect();
    async move {
        for (channels, pods, versions) in filling {
            let _ = channels.wait_until_ready().await;
            let _ = pods.wait_until_ready().await;
            versions.wait_until_ready().await;
        }
        metrics.ready.store(true, Ordering::Relaxed);
        info!("watch caches filled: ready");
        futures::future::pending::<()>().await;
    }
}

/// Where one scope's watches read from.
struct Source<'a> {
    client: &'a Client,
    /// `None`: every namespace.
    namespace: &'a Option<String>,
    streaming: bool,
    shard: Option<&'a str>,
}

impl Source<'_> {
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match self.namespace {
            None => Api::all(self.client.clone()),
            Some(ns) => Api::namespaced(self.client.clone(), ns),
        }
    }

    /// The versions' watch, filling the version index; metadata only: no spec, and of
    /// `managedFields` who wrote when (`version_meta`).
    fn versions(&self, index: Arc<VersionIndex>) -> impl Future<Output = ()> + use<> {
        let scope = self
            .namespace
            .clone()
            .unwrap_or_else(|| "(every namespace)".into());
        watcher(
            self.api::<version_meta::VersionMeta>(),
            caches::watch_config(self.streaming),
        )
        .map(version_meta::versions)
        .default_backoff()
        .for_each(move |event| {
            if let Ok(event) = event {
                let filled = matches!(event, watcher::Event::InitDone);
                index.apply(event);
                // When a (re-)list is in: what a restart's cost is measured to.
                if filled {
                    info!(scope, versions = index.len(), "version cache filled");
                }
            }
            futures::future::ready(())
        })
    }

    /// The syncer pods' watch (only pods with the label every one of them carries), as the
    /// changes that trigger a reconciliation of their channel.
    fn pods(
        &self,
        writer: Writer<Pod>,
    ) -> impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send + use<> {
        caches::changes(
            watcher(
                self.api::<Pod>(),
                caches::watch_config(self.streaming).labels(CHANNEL_LABEL),
            )
            .modify(caches::lean_pod)
            .default_backoff()
            .reflect(writer),
            caches::pod_fingerprint,
            |_| {},
        )
    }

    /// The channels' watch, as the changes that trigger their reconciliation; a channel
    /// gone is forgotten.
    fn channels(
        &self,
        writer: Writer<ManagedOSVersionChannel>,
        ctx: &Arc<Context<KubeIo>>,
    ) -> impl futures::Stream<Item = Result<ManagedOSVersionChannel, watcher::Error>> + Send + use<>
    {
        // A shard's channels only. A channel relabelled out of it is reported gone
        // (forgotten here), and the shard it joins picks it up as a restarted operator
        // would: its status says when it is due.
        let config = match self.shard {
            None => caches::watch_config(self.streaming),
            Some(s) => caches::watch_config(self.streaming).labels(s),
        };
        let forget = ctx.clone();
        caches::changes(
            decoding::skip_undecodable(
                watcher(
                    self.api::<decoding::Lenient<ManagedOSVersionChannel>>(),
                    config,
                ),
                "channel",
                ctx.metrics.clone(),
            )
            .default_backoff()
            .reflect(writer),
            caches::channel_fingerprint,
            move |gone: Key| forget.forget(&gone, gone.extra.uid.as_deref()),
        )
    }
}
