//! The thin I/O layer: a `kube::runtime::Controller` over channels (and the syncer pods
//! they own) whose `reconcile` observes, asks `syncer::decide`, and performs the decision.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{AsyncReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::api::{
    CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionChannel, NO_LONGER_IN_SYNC_ANNOTATION,
};
use crate::display::FRAME_OVERHEAD;
use crate::metrics::Metrics;
use crate::syncer::{self, Action, Decision, FetchRequest, Fetched, Observation, Settings, pod};

/// The field manager of every write, as shown in `managedFields`.
pub const MANAGER: &str = "rancheros-operator";
/// Retry delay after an API error.
const ERROR_RETRY: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
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
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Shared state of all reconciliations.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub http: reqwest::Client,
}

impl Context {
    pub fn new(client: Client, settings: Settings, metrics: Arc<Metrics>) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let http = reqwest::Client::builder()
            .user_agent(concat!("rancheros-operator/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the HTTP client's configuration is static");
        Self {
            client,
            settings,
            recorder,
            metrics,
            http,
        }
    }
}

/// Runs one controller per watched namespace (one for all when `namespaces` is empty)
/// until `shutdown` fires.
pub async fn run(
    ctx: Arc<Context>,
    namespaces: &[String],
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|n| Some(n.as_str())).collect()
    };
    let controllers = scopes.into_iter().map(|ns| {
        let (channels, pods): (Api<ManagedOSVersionChannel>, Api<Pod>) = match ns {
            None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
            Some(ns) => (
                Api::namespaced(ctx.client.clone(), ns),
                Api::namespaced(ctx.client.clone(), ns),
            ),
        };
        let mut stop = shutdown.clone();
        Controller::<ManagedOSVersionChannel>::new(channels, watcher::Config::default())
            // Only the syncer pods: the label every one of them carries.
            .owns(pods, watcher::Config::default().labels(CHANNEL_LABEL))
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
    });
    futures::future::join_all(controllers).await;
}

fn error_policy(
    channel: Arc<ManagedOSVersionChannel>,
    error: &Error,
    ctx: Arc<Context>,
) -> Requeue {
    ctx.metrics.reconcile_errors.inc();
    warn!(
        channel = %channel.name_any(),
        namespace = %channel.namespace().unwrap_or_default(),
        "reconcile failed, retrying in {}s: {error}",
        ERROR_RETRY.as_secs()
    );
    Requeue::requeue(ERROR_RETRY)
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
    result
}

/// What was read for one reconciliation; the decision core borrows it.
#[derive(Default)]
struct Observed {
    display_log: Option<Vec<u8>>,
    runner_log: Option<String>,
    fetched: Option<Fetched>,
    versions: Option<Vec<ManagedOSVersion>>,
    pod_create_error: Option<String>,
    write_error: Option<String>,
}

async fn reconcile_inner(
    cached: &ManagedOSVersionChannel,
    ctx: &Context,
) -> Result<Requeue, Error> {
    let name = cached.name_any();
    let ns = cached.namespace().unwrap_or_default();
    let channels: Api<ManagedOSVersionChannel> = Api::namespaced(ctx.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let versions: Api<ManagedOSVersion> = Api::namespaced(ctx.client.clone(), &ns);

    // Read fresh: the controller's cache may not hold our last status write yet, and a
    // decision on a stale status could start a second sync.
    let Some(channel) = channels
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading channel {ns}/{name}")))?
    else {
        return Ok(Requeue::await_change());
    };
    let pod = pods
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading pod {ns}/{name}")))?;

    let mut seen = Observed::default();
    let decide = |seen: &Observed| {
        syncer::decide(
            &Observation {
                channel: &channel,
                pod: pod.as_ref(),
                display_log: seen.display_log.as_deref(),
                runner_log: seen.runner_log.as_deref(),
                fetched: seen.fetched.as_ref(),
                versions: seen.versions.as_deref(),
                pod_create_error: seen.pod_create_error.as_deref(),
                write_error: seen.write_error.as_deref(),
                now: Timestamp::now(),
            },
            &ctx.settings,
        )
    };
    let mut decision = decide(&seen);
    // Each round observes something new, so this ends; the bound guards against a bug.
    for _ in 0..4 {
        if !decision.needs.any() {
            break;
        }
        let needs = std::mem::take(&mut decision.needs);
        if needs.display_log && seen.display_log.is_none() {
            seen.display_log =
                Some(read_display_log(&pods, &name, ctx.settings.max_output_bytes).await?);
        }
        if needs.runner_log && seen.runner_log.is_none() {
            seen.runner_log = Some(read_runner_tail(&pods, &name).await);
        }
        if needs.versions && seen.versions.is_none() {
            let list = versions
                .list(&ListParams::default())
                .await
                .map_err(kube_err(format!("listing ManagedOSVersions in {ns}")))?;
            seen.versions = Some(list.items);
        }
        if let Some(request) = &needs.fetch
            && seen.fetched.is_none()
        {
            seen.fetched = Some(fetch(&ctx.http, request, ctx.settings.max_output_bytes).await);
        }
        decision = decide(&seen);
    }

    match perform(&decision.actions, &pods, &versions, ctx).await? {
        Ok(()) => {}
        Err(refused) => {
            // The API server refused a write for good: decide again, knowing why.
            match refused {
                Refused::CreatePod(e) => seen.pod_create_error = Some(e),
                Refused::WriteVersion(e) => seen.write_error = Some(e),
            }
            decision = decide(&seen);
            perform(&decision.actions, &pods, &versions, ctx)
                .await?
                .ok();
        }
    }
    finish(&channel, &channels, decision, ctx).await
}

/// A write the API server refused in a way retrying will not fix (forbidden, invalid).
enum Refused {
    CreatePod(String),
    WriteVersion(String),
}

fn refused_for_good(e: &kube::Error) -> bool {
    [400, 403, 404, 422].iter().any(|code| is_status(e, *code))
}

/// Performs the actions in order. A refused pod creation or version write ends the
/// actions with `Ok(Err(..))`; other errors are retried by the controller.
async fn perform(
    actions: &[Action],
    pods: &Api<Pod>,
    versions: &Api<ManagedOSVersion>,
    ctx: &Context,
) -> Result<Result<(), Refused>, Error> {
    for action in actions {
        debug!("{}", action.describe());
        ctx.metrics.wrote(action);
        let version_write = match action {
            Action::CreatePod(pod) => match pods.create(&PostParams::default(), pod).await {
                Ok(created) => {
                    info!(pod = %created.name_any(), "started the syncer pod");
                    continue;
                }
                Err(e) => {
                    let message = format!(
                        "creating syncer pod {}: {}",
                        pod.name_any(),
                        api_message(&e)
                    );
                    return Ok(Err(Refused::CreatePod(message)));
                }
            },
            Action::DeletePod { name, uid } => {
                delete(pods, name, uid, &format!("deleting pod {name}")).await?;
                continue;
            }
            Action::ApplyVersion(version) => versions
                .patch(
                    &version.name_any(),
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(version.as_ref()),
                )
                .await
                .map(drop),
            Action::MarkVersion {
                name,
                no_longer_in_sync,
            } => {
                let value = no_longer_in_sync.then_some("true");
                let patch =
                    json!({"metadata": {"annotations": {NO_LONGER_IN_SYNC_ANNOTATION: value}}});
                versions
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(drop)
            }
            Action::DeleteVersion { name, uid } => {
                delete(versions, name, uid, &format!("deleting version {name}")).await?;
                continue;
            }
        };
        if let Err(e) = version_write {
            let what = action.describe();
            if refused_for_good(&e) {
                return Ok(Err(Refused::WriteVersion(format!(
                    "{what}: {}",
                    api_message(&e)
                ))));
            }
            return Err(kube_err(what)(e));
        }
    }
    Ok(Ok(()))
}

/// Deletes the object with this uid; already gone is fine.
async fn delete<K>(api: &Api<K>, name: &str, uid: &str, what: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(e) => Err(kube_err(what)(e)),
    }
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
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

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max - 3;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The display container's log, capped at the output limit plus the frame.
async fn read_display_log(pods: &Api<Pod>, name: &str, max_bytes: u64) -> Result<Vec<u8>, Error> {
    let cap = max_bytes + FRAME_OVERHEAD;
    let params = LogParams {
        container: Some(pod::DISPLAY.into()),
        limit_bytes: Some(cap as i64),
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

/// Fetches a json channel's data, conditionally when the request carries validators,
/// capped at `max_bytes`.
async fn fetch(http: &reqwest::Client, request: &FetchRequest, max_bytes: u64) -> Fetched {
    use reqwest::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
    let options = &request.options;
    let uri = &options.uri;
    let failed = |what: String| Fetched::Failed(format!("fetching {uri}: {what}"));
    let mut get = http.get(uri).timeout(options.timeout);
    if let Some(etag) = &request.if_none_match {
        get = get.header(IF_NONE_MATCH, etag);
    }
    if let Some(date) = &request.if_modified_since {
        get = get.header(IF_MODIFIED_SINCE, date);
    }
    let response = match get.send().await {
        Ok(r) => r,
        Err(e) => return failed(describe_http_error(&e, options.timeout)),
    };
    let status = response.status();
    if status == reqwest::StatusCode::NOT_MODIFIED {
        return Fetched::NotModified;
    }
    if !status.is_success() {
        return failed(format!("the server answered HTTP {status}"));
    }
    if let Some(len) = response.content_length()
        && len > max_bytes
    {
        return failed(format!(
            "the body is {len} bytes, more than the operator's limit of {max_bytes} bytes (--max-output-bytes)"
        ));
    }
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    let (etag, last_modified) = (header(ETAG), header(LAST_MODIFIED));
    let mut data = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => {
                if (data.len() + bytes.len()) as u64 > max_bytes {
                    return failed(format!(
                        "the body is more than the operator's limit of {max_bytes} bytes (--max-output-bytes)"
                    ));
                }
                data.extend_from_slice(&bytes);
            }
            Err(e) => return failed(describe_http_error(&e, options.timeout)),
        }
    }
    Fetched::Body {
        data,
        etag,
        last_modified,
    }
}

fn describe_http_error(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("timed out after {}", crate::duration::format(timeout));
    }
    // reqwest's own message is generic; the innermost cause says what went wrong.
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_connect() {
        format!("cannot connect: {cause}")
    } else {
        format!("{e}: {cause}")
    }
}
