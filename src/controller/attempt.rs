//! One attempt at a channel: observe what the decision core asks for, decide, perform.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use tracing::warn;

use super::caches::{self, Scope};
use super::errors::{Error, kube_err};
use super::slots::Key;
use super::writes::Writer;
use super::{Context, json_source, pods};
use crate::api::{ManagedOSVersion, ManagedOSVersionChannel};
use crate::config::JsonOptions;
use crate::failure::SyncFailure;
use crate::syncer::{self, Decision, Effect, Fetched, Observation, Outcome};

/// The APIs of one channel's namespace.
pub struct Apis {
    pub channels: Api<ManagedOSVersionChannel>,
    pub pods: Api<Pod>,
    pub versions: Api<ManagedOSVersion>,
}

impl Apis {
    pub fn new(client: &Client, namespace: &str) -> Self {
        Apis {
            channels: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            versions: Api::namespaced(client.clone(), namespace),
        }
    }
}

/// What was read for one reconciliation; the decision core borrows it.
#[derive(Default)]
pub struct Observed {
    pub pod: Option<Arc<Pod>>,
    display_log: Option<Vec<u8>>,
    runner_log: Option<String>,
    fetched: Option<Fetched>,
    versions: Option<Vec<Arc<ManagedOSVersion>>>,
    pod_create_error: Option<SyncFailure>,
    pub error: Option<SyncFailure>,
    queued: bool,
}

impl Observed {
    pub fn decide(&self, channel: &ManagedOSVersionChannel, ctx: &Context) -> Decision {
        syncer::decide(
            &Observation {
                channel,
                pod: self.pod.as_deref(),
                display_log: self.display_log.as_deref(),
                runner_log: self.runner_log.as_deref(),
                fetched: self.fetched.as_ref(),
                versions: self.versions.as_deref(),
                pod_create_error: self.pod_create_error.as_ref(),
                error: self.error.as_ref(),
                queued: self.queued,
                now: Timestamp::now(),
            },
            &ctx.settings,
        )
    }
}

/// Observes what the decision core asks for, decides, and performs the decision.
pub async fn attempt(
    channel: &ManagedOSVersionChannel,
    key: &Key,
    apis: &Apis,
    ctx: &Context,
    seen: &mut Observed,
) -> Result<Decision, Error> {
    let name = channel.name_any();
    let ns = channel.namespace().unwrap_or_default();
    let scope = ctx.scope(&ns);
    // The pod cache shows the operator's own pod writes (each one waits for it); after a
    // wait that gave up, the pod is read fresh.
    seen.pod = match scope {
        Some(scope) if !ctx.is_stale(key) => scope.pod(&ns, &name),
        _ => get_pod(apis, &name, &ns).await?,
    };
    let mut decision = seen.decide(channel, ctx);
    if starts_sync(&decision) && !ctx.take_slot(key) {
        seen.queued = true;
        decision = seen.decide(channel, ctx);
    }
    // Channel data held by this attempt (read, parsed, written), within the shared budget.
    let mut data = None;
    // Each round observes something new, so this ends; the bound guards against a bug.
    for _ in 0..4 {
        if !decision.needs.any() {
            break;
        }
        let needs = std::mem::take(&mut decision.needs);
        if needs.display_log && seen.display_log.is_none() {
            let reserved = ctx.reserve_data().await;
            let log = pods::display_log(&apis.pods, &name, ctx.settings.max_output_bytes).await?;
            data = Context::keep_data(reserved, log.len());
            seen.display_log = Some(log);
        }
        if needs.runner_log && seen.runner_log.is_none() {
            seen.runner_log = Some(pods::runner_tail(&apis.pods, &name).await);
        }
        if needs.versions && seen.versions.is_none() {
            seen.versions = Some(versions_in(scope, &apis.versions, &ns).await?);
        }
        if let Some(options) = &needs.fetch
            && seen.fetched.is_none()
        {
            if !ctx.take_slot(key) {
                seen.queued = true;
                decision = seen.decide(channel, ctx);
                break;
            }
            let reserved = ctx.reserve_data().await;
            let fetched = json_source::fetch(channel, key, options, ctx).await;
            let bytes = match &fetched {
                Fetched::Body { data, .. } => data.len(),
                Fetched::Failed(_) => 0,
            };
            data = Context::keep_data(reserved, bytes);
            seen.fetched = Some(fetched);
        }
        decision = seen.decide(channel, ctx);
    }

    let existing = seen.versions.as_deref().unwrap_or_default();
    let written = Writer {
        api: &apis.versions,
        in_flight: &ctx.writes,
        metrics: &ctx.metrics,
    }
    .write_all(&decision.effects, existing)
    .await?;
    if let Some(scope) = scope
        && !written.is_empty()
    {
        wait_for_versions(scope, &written, &ns).await;
    }
    perform_pod_effects(channel, key, apis, ctx, seen, &mut decision).await?;
    if seen.pod.is_none() && !starts_sync(&decision) && !seen.queued {
        ctx.release_slot(key);
    }
    if decision.outcome == Some(Outcome::Synchronized)
        && let (Some(fetched), Some(options)) =
            (&seen.fetched, json_options(channel, &ctx.settings))
    {
        json_source::remember(channel, key, &options, fetched, ctx);
    }
    // Done with the data: it leaves memory before its room in the budget is given back.
    seen.display_log = None;
    seen.fetched = None;
    decision.effects.clear();
    drop(data);
    Ok(decision)
}

/// Creates or deletes the pod as decided; when the API server refuses the pod, decides
/// again knowing why.
async fn perform_pod_effects(
    channel: &ManagedOSVersionChannel,
    key: &Key,
    apis: &Apis,
    ctx: &Context,
    seen: &mut Observed,
    decision: &mut Decision,
) -> Result<(), Error> {
    let name = channel.name_any();
    let ns = channel.namespace().unwrap_or_default();
    let changes = match pods::perform(&decision.effects, &apis.pods, &ctx.metrics).await {
        Ok(changes) => changes,
        // The versions are written: the sync succeeded. The pod goes at the next look.
        Err(e) if decision.outcome == Some(Outcome::Synchronized) => {
            warn!(channel = %name, namespace = %ns, "after a successful sync: {e}");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    ctx.wait_for_pod(key, &changes).await;
    if let Some((failure, exists)) = changes.refused {
        seen.pod_create_error = Some(failure);
        if exists {
            // A pod of that name exists (outside the cache: not labelled as ours): decide
            // with it, so the status says whose it is.
            seen.pod = get_pod(apis, &name, &ns).await?;
            if seen.pod.is_some() {
                seen.pod_create_error = None;
            }
        }
        *decision = seen.decide(channel, ctx);
        pods::perform(&decision.effects, &apis.pods, &ctx.metrics).await?;
    }
    Ok(())
}

async fn get_pod(apis: &Apis, name: &str, ns: &str) -> Result<Option<Arc<Pod>>, Error> {
    apis.pods
        .get_opt(name)
        .await
        .map(|p| p.map(Arc::new))
        .map_err(kube_err(format!("reading pod {ns}/{name}")))
}

/// Whether the decision starts a sync (creates the syncer pod, or fetches).
pub fn starts_sync(decision: &Decision) -> bool {
    decision.needs.fetch.is_some()
        || decision
            .effects
            .iter()
            .any(|a| matches!(a, Effect::CreatePod(_)))
}

fn json_options(
    channel: &ManagedOSVersionChannel,
    settings: &crate::syncer::Settings,
) -> Option<JsonOptions> {
    match settings.resolve(&channel.spec).ok()?.source {
        crate::config::Source::Json(o) => Some(o),
        crate::config::Source::Custom(_) => None,
    }
}

/// The versions of a namespace, from the watch cache (listed only if the cache is not
/// filled yet, which happens once, at start).
async fn versions_in(
    scope: Option<&Scope>,
    api: &Api<ManagedOSVersion>,
    ns: &str,
) -> Result<Vec<Arc<ManagedOSVersion>>, Error> {
    if let Some(scope) = scope
        && let Some(versions) = scope.versions_in(ns).await
    {
        return Ok(versions);
    }
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(kube_err(format!("listing ManagedOSVersions in {ns}")))?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}

/// Waits until the versions cache shows every write of a sync (each version at the
/// resourceVersion the write returned, or gone), so that no decision acts on a cache that
/// has not seen them. Should it give up, a later decision still sees them, a moment late.
async fn wait_for_versions(scope: &Scope, written: &[(String, Option<String>)], ns: &str) {
    caches::wait_until(|| {
        written.iter().all(|(name, rv)| {
            let cached = scope
                .versions
                .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns));
            match rv {
                Some(rv) => caches::shows(cached.and_then(|v| v.resource_version()).as_deref(), rv),
                None => cached.is_none(),
            }
        })
    })
    .await;
}
