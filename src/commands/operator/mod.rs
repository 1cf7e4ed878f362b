//! The `operator` subcommand: connects to the cluster, takes the leader lease, serves
//! metrics and health, and runs the controllers until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::ManagedOSVersionChannel;
use crate::controller;
use crate::egress::Cidr;
use crate::fetch;
use crate::leader::{Elector, LeaseConfig};
use crate::metrics::{self, Metrics};
use crate::stop::StopSignals;
use crate::syncer::Settings;

mod flags;
pub use flags::{LogFormat, OperatorArgs, distinct_names, parse_bytes, parse_percent, shard_lease};

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("cannot load the Kubernetes client configuration: {0}")]
    Config(String),
    #[error("cannot reach the Kubernetes API server: {0}")]
    Connect(kube::Error),
    #[error(
        "--watch-label-selector {selector:?} is not a label selector the API server accepts: {message}"
    )]
    Selector { selector: String, message: String },
    #[error("cannot decode the Kubernetes API server's answer: {0}")]
    Decode(kube::Error),
    #[error(
        "the ManagedOSVersionChannel CRD is not installed in the cluster; apply crds/ (or install the Helm chart) first"
    )]
    MissingCrd,
    #[error(transparent)]
    Crd(#[from] crate::crds::CrdMismatch),
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot serve the registry webhook on {addr}: {source}")]
    Webhook {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot serve the channel server on {0}: {1}")]
    ChannelServer(SocketAddr, std::io::Error),
    #[error("cannot build the HTTP client for json channels: {0}")]
    Http(String),
    #[error("lost the leader lease; exiting so that a fresh start can compete for it again")]
    LostLease,
    #[error("cannot listen for signals: {0}")]
    Signal(std::io::Error),
}

/// What the controllers are started with (again, after a restart of leadership).
struct Parts {
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    http: fetch::Client,
    registry: crate::registry::Client,
    /// The channel server's data, when it runs.
    served: Option<Arc<crate::channel_server::Store>>,
}

/// How long in-flight reconciliations get to finish after SIGTERM before they are
/// cancelled, well inside the chart's 30 s grace period.
const DRAIN: Duration = Duration::from_secs(10);

pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// A failed request: a response that does not decode is no sign of an unreachable server.
fn request_failed(e: kube::Error) -> OperatorError {
    match e {
        kube::Error::SerdeError(_) => OperatorError::Decode(e),
        e => OperatorError::Connect(e),
    }
}

/// Refuses to start on CRDs other than the ones this binary was built with (another
/// release's schema would be used silently: fields dropped or refused, rules missing).
/// Without RBAC to read CRDs (an older chart), warns and goes on: the check is a guard,
/// not a requirement.
async fn check_installed_crds(client: &Client) -> Result<(), OperatorError> {
    use crate::crds::{self, CrdMismatch};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let group = std::env::var(crds::CHECK_GROUP_ENV)
        .ok()
        .filter(|g| !g.is_empty());
    let expected = crds::expected(group.as_deref());
    for (name, hash) in &expected {
        match api.get(name).await {
            Ok(installed) => crds::check_crd(&installed, hash)?,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(CrdMismatch::NotInstalled { name: name.clone() }.into());
            }
            Err(kube::Error::Api(s)) if s.code == 403 => {
                let names: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
                warn!(
                    "not checking the installed CRDs against this build: reading CustomResourceDefinitions is forbidden ({}); grant get on customresourcedefinitions {} to check them",
                    s.message,
                    names.join(" and ")
                );
                return Ok(());
            }
            Err(e) => return Err(request_failed(e)),
        }
    }
    Ok(())
}

/// Who may read `/metrics`, said in the log. The reviews run on a client of their own, so
/// that a scrape never waits behind the syncs' API traffic (nor they behind a flood of
/// scrapes).
async fn metrics_access(
    args: &OperatorArgs,
    source: crate::client::Source<'_>,
) -> Result<metrics::Access, OperatorError> {
    if args.metrics_insecure {
        warn!(
            "/metrics answers every caller that reaches {} (--metrics-insecure)",
            args.metrics_address
        );
        return Ok(metrics::Access::Open);
    }
    let client = crate::client::client(source)
        .await
        .map_err(|e| OperatorError::Config(e.to_string()))?;
    info!(
        "/metrics answers only callers the cluster authorises: a bearer token it authenticates, allowed get on the non-resource URL /metrics"
    );
    Ok(metrics::Access::Reviewed(Box::new(
        metrics::review::Reviewer::new(client),
    )))
}

/// Runs the operator until a stop signal.
pub async fn run(mut args: OperatorArgs) -> Result<(), OperatorError> {
    // First, so that a stop signal during start-up is kept, not lost (see `stop`).
    let signals = StopSignals::install().map_err(OperatorError::Signal)?;
    // One TLS provider for the kube client and the json-channel HTTP client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    args.namespaces = distinct_names(&args.namespaces);
    let source = crate::client::Source {
        kubeconfig: args.kubeconfig.as_deref(),
        context: None,
    };
    let client = crate::client::client(source)
        .await
        .map_err(|e| OperatorError::Config(e.to_string()))?;
    check_installed_crds(&client).await?;
    // Checked where the operator is allowed to look: RBAC may grant only the watched
    // namespaces. Leniently decoded: whether the CRD is served is the question, and a
    // channel the operator cannot decode is skipped later, not a reason not to start.
    let channels: Api<controller::Lenient<ManagedOSVersionChannel>> = match args.namespaces.first()
    {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut first = ListParams::default().limit(1);
    if let Some(selector) = args.shard() {
        first = first.labels(selector);
    }
    match channels.list(&first).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(OperatorError::MissingCrd),
        Err(kube::Error::Api(s)) if s.code == 400 && args.shard().is_some() => {
            return Err(OperatorError::Selector {
                selector: args.shard().unwrap_or_default().to_string(),
                message: s.message,
            });
        }
        Err(e) => return Err(request_failed(e)),
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        info!("{}: stopping", signals.recv().await);
        let _ = stop_tx.send(true);
    });
    let metrics = Arc::new(Metrics::default());
    metrics.set_max_channel_series(args.max_channel_series);
    let access = metrics_access(&args, source).await?;
    let server = {
        let mut stop = stop_rx.clone();
        let addr = args.metrics_address;
        let listener = metrics::serve(addr, metrics.clone(), access, async move {
            let _ = stop.wait_for(|s| *s).await;
        });
        tokio::spawn(async move {
            listener
                .await
                .map_err(|source| OperatorError::Metrics { addr, source })
        })
    };

    let webhook = match (args.webhook_address, &args.webhook_token_file) {
        (Some(addr), Some(token_file)) => {
            let hook = Arc::new(crate::webhook::Hook::new(
                client.clone(),
                args.namespaces.clone(),
                token_file.clone(),
                metrics.clone(),
            ));
            let mut stop = stop_rx.clone();
            let listener = crate::webhook::serve(addr, hook, async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            Some(tokio::spawn(async move {
                listener
                    .await
                    .map_err(|source| OperatorError::Webhook { addr, source })
            }))
        }
        _ => None,
    };

    let (served, channel_server) = match args.channel_server_address {
        Some(addr) => {
            let max = usize::try_from(args.channel_server_max_bytes).unwrap_or(usize::MAX);
            let (store, listener) = crate::channel_server::start(addr, max, stop_rx.clone());
            let task = tokio::spawn(async move {
                let ended = listener.await;
                ended.map_err(|source| OperatorError::ChannelServer(addr, source))
            });
            (Some(store), Some(task))
        }
        None => (None, None),
    };

    let settings = Settings {
        operator_image: args.operator_image.clone(),
        sync_timeout: args.sync_timeout,
        max_output_bytes: args.max_output_bytes,
        retry_delay: args.retry_delay,
        queue_poll: args.queue_poll,
        max_concurrent_syncs: usize::from(args.max_concurrent_syncs),
        json_cache_bytes: usize::try_from(args.json_cache_bytes).unwrap_or(usize::MAX),
        max_versions_per_channel: usize::try_from(args.max_versions_per_channel)
            .unwrap_or(usize::MAX),
        max_sync_write_bytes: usize::try_from(args.max_sync_write_bytes).unwrap_or(usize::MAX),
        syncer_image_pull_secrets: distinct_names(&args.syncer_image_pull_secrets),
        max_sync_timeout: args.max_sync_timeout,
        min_sync_interval: args.min_sync_interval,
        allow_privileged_runners: args.allow_privileged_runners,
        allow_insecure_registries: args.allow_insecure_registries,
        interval_jitter_percent: args.interval_jitter,
        read_idle: crate::budget::IDLE,
        min_request_interval: args.min_request_interval.min(crate::config::MAX_DURATION),
        write_rates: crate::pace::Rates {
            namespace_qps: args.namespace_write_qps,
            burst: args.namespace_write_burst,
            total_qps: args.write_qps,
        },
        dry_run_versions_always: args.dry_run_versions == "always",
    };
    let policy = args.egress_policy();
    let registry = crate::registry::Client::new(policy.clone(), args.max_layer_bytes)
        .map_err(|e| OperatorError::Http(e.to_string()))?;
    let http = fetch::Client::new(policy).map_err(|e| OperatorError::Http(e.to_string()))?;
    let parts = Parts {
        client: client.clone(),
        settings,
        metrics: metrics.clone(),
        http,
        registry,
        served,
    };
    // A replica that waits for the Lease is ready (it serves its endpoints); a leader is
    // ready once its watch caches have filled (`controller::run` says when).
    if args.leader_election {
        metrics.ready.store(true, Ordering::Relaxed);
    }
    let cidrs = |list: &[Cidr]| {
        list.iter()
            .map(Cidr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    info!(
        image = %args.operator_image,
        namespaces = ?args.namespaces,
        shard = args.shard().unwrap_or("(every channel)"),
        egress_deny_cidrs = %cidrs(&args.deny_cidrs()),
        egress_allow_cidrs = %cidrs(&args.allow_cidrs()),
        "rancheros-operator {} starting",
        env!("CARGO_PKG_VERSION")
    );

    let result = if args.leader_election {
        // The Lease is renewed on a client of its own (its own connections and request
        // queue): renewals never wait behind the syncs' API traffic, so a busy sync never
        // makes the leader step down.
        let lease_client = crate::client::client(source)
            .await
            .map_err(|e| OperatorError::Config(e.to_string()))?;
        drop(client);
        run_as_leader(&args, lease_client, &parts, stop_rx.clone()).await
    } else {
        let (_never, lost) = watch::channel(false);
        run_controllers(&parts, &args, stop_rx.clone(), lost).await;
        Ok(())
    };
    info!("stopped");
    for (task, what) in [
        (Some(server), "the metrics server"),
        (webhook, "the registry webhook"),
        (channel_server, "the channel server"),
    ] {
        let Some(task) = task else { continue };
        if task.is_finished() {
            match task.await {
                Ok(r) => r?,
                Err(e) => warn!("{what} ended abnormally: {e}"),
            }
        } else {
            task.abort();
        }
    }
    result
}

/// Runs the controllers until `stop` (in-flight work gets [`DRAIN`] to finish) or until
/// `lost` fires (in-flight work is cancelled at once: another replica may act soon).
async fn run_controllers(
    parts: &Parts,
    args: &OperatorArgs,
    stop: watch::Receiver<bool>,
    mut lost: watch::Receiver<bool>,
) {
    let mut stopping = stop.clone();
    let clients = controller::Clients {
        kube: parts.client.clone(),
        http: parts.http.clone(),
        registry: parts.registry.clone(),
    };
    let watched = controller::Watched {
        namespaces: &args.namespaces,
        shard: args.shard(),
    };
    let controllers = controller::run(
        clients,
        parts.settings.clone(),
        parts.metrics.clone(),
        watched,
        parts.served.clone(),
        stop,
    );
    tokio::pin!(controllers);
    tokio::select! {
        _ = &mut controllers => return,
        _ = lost.wait_for(|l| *l) => return,
        _ = stopping.wait_for(|s| *s) => {}
    }
    tokio::select! {
        _ = &mut controllers => {}
        _ = lost.wait_for(|l| *l) => {}
        _ = tokio::time::sleep(DRAIN) => warn!("in-flight syncs did not finish within {}s of the stop signal; cancelled", DRAIN.as_secs()),
    }
}

async fn run_as_leader(
    args: &OperatorArgs,
    client: Client,
    parts: &Parts,
    mut stop: watch::Receiver<bool>,
) -> Result<(), OperatorError> {
    let namespace = args
        .leader_election_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "operator".into()),
            std::process::id()
        )
    });
    let (leading_tx, mut leading) = watch::channel(false);
    let elector = Elector::new(
        Api::<Lease>::namespaced(client, &namespace),
        LeaseConfig::new(args.lease_name(), identity.clone()),
    );
    // The elector stops (and hands the Lease back) only once the controllers have stopped:
    // while in-flight syncs drain, this replica still acts, so it must still hold the Lease.
    let (release_tx, release_rx) = watch::channel(false);
    let election = tokio::spawn(elector.run(leading_tx, release_rx));
    info!(lease = %args.lease_name(), %namespace, %identity, "waiting for the leader lease");
    let elected = tokio::select! {
        r = leading.wait_for(|l| *l) => r.is_ok(),
        _ = stop.wait_for(|s| *s) => false,
    };
    if !elected {
        let _ = release_tx.send(true);
        let _ = election.await;
        return Ok(());
    }
    parts.metrics.leader.set(1);
    let (lost_tx, lost_rx) = watch::channel(false);
    let mut watch_leading = leading.clone();
    let lost_watch = tokio::spawn(async move {
        if watch_leading.wait_for(|l| !*l).await.is_ok() {
            let _ = lost_tx.send(true);
        }
    });
    run_controllers(parts, args, stop.clone(), lost_rx.clone()).await;
    parts.metrics.leader.set(0);
    let lost = *lost_rx.borrow() && !*stop.borrow();
    lost_watch.abort();
    if lost {
        warn!("lost the leader lease; in-flight syncs were cancelled");
        election.abort();
        return Err(OperatorError::LostLease);
    }
    // Stopped by a signal, the controllers done: the elector releases the Lease.
    let _ = release_tx.send(true);
    let _ = election.await;
    Ok(())
}

#[cfg(test)]
mod tests;
