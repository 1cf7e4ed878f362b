//! 9: Flux's published scale as a row: many `oci` channels created at once, each its own
//! channel artifact in the local registry; from the last create to every channel
//! Synchronized, the operator's peak RSS, CPU seconds and requests.

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use color_eyre::eyre::{Result, eyre};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use rancheros_operator::api::ManagedOSVersionChannel;

use crate::audit;
use crate::kit::{self, Kit, MINUTES_30, Operator, log};
use crate::objects;
use crate::parse;
use crate::push::Registry;
use crate::results::OciScale;
use crate::scenarios::{log_path, with_operator};

/// Pushes and creates at most this many at once.
const AT_ONCE: usize = 32;

/// The channel data of channel `i`: `per_channel` versions named `ch-{i}-{j}`.
fn data(i: usize, per_channel: usize) -> Vec<u8> {
    objects::elemental(&format!("ch-{i}"), "", per_channel)
        .to_string()
        .into_bytes()
}

/// The instant every one of the `n` channels of `api` is seen Synchronized, by one watch.
async fn all_synced(api: Api<ManagedOSVersionChannel>, n: usize) -> Result<Instant> {
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut synced = HashSet::new();
    let seen = async {
        while let Some(event) = events.next().await {
            let channel = match event {
                Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => c,
                _ => continue,
            };
            if kit::ready_reason(&channel) == "Synchronized" {
                synced.insert(channel.name_any());
                if synced.len() >= n {
                    return Ok(Instant::now());
                }
            }
        }
        Err(eyre!("bench-operator: the watch of the channels ended"))
    };
    tokio::time::timeout(MINUTES_30, seen)
        .await
        .map_err(|_| eyre!("bench-operator: timed out waiting for every channel"))?
}

/// `channels` oci channels of `per_channel` versions each, in a namespace of their own,
/// synced by an operator of their own.
pub async fn oci_scale(
    kit: &Kit,
    binary: &Path,
    channels: usize,
    per_channel: usize,
) -> Result<OciScale> {
    let ns = format!("bench-ociscale-{per_channel}-{}", kit::run_id());
    kit.namespace(&ns).await?;
    let var = |n: &str| std::env::var(n).unwrap_or_default();
    let registry = var("RANCHEROS_TEST_REGISTRY");
    let secret = objects::pull_secret(
        &ns,
        &registry,
        &var("RANCHEROS_TEST_REGISTRY_USER"),
        &var("RANCHEROS_TEST_REGISTRY_PASSWORD"),
    );
    let secrets: Api<Secret> = Api::namespaced(kit.client.clone(), &ns);
    let apply = PatchParams::apply("bench-operator").force();
    secrets
        .patch("pull", &apply, &Patch::Apply(&secret))
        .await?;

    log(&format!(
        "oci scale: pushing {channels} channel artifacts of {per_channel} versions"
    ));
    let repo = format!("{ns}/channels");
    let push = Registry::from_env()?;
    let t = Instant::now();
    push.put_empty_config(&repo).await?;
    futures::stream::iter(0..channels)
        .map(|i| {
            let (push, repo) = (&push, &repo);
            async move {
                push.push_artifact(repo, &format!("ch-{i}"), &data(i, per_channel))
                    .await
            }
        })
        .buffer_unordered(AT_ONCE)
        .try_collect::<Vec<()>>()
        .await?;
    let push_seconds = t.elapsed().as_secs_f64();

    let specs: Vec<_> = (0..channels)
        .map(|i| {
            let image = format!("{registry}/{repo}:ch-{i}");
            objects::oci_channel(&format!("ch-{i}"), &ns, &image)
        })
        .collect();
    let env = [
        ("RUST_LOG", "info,rancheros_operator::registry=debug"),
        ("NO_COLOR", "1"),
    ];
    let extra = [
        "--json-allow-cidr=127.0.0.1/32",
        "--allow-insecure-registries",
    ];
    // Test runs of other trees may have installed their CRDs meanwhile.
    kit.crds().await?;
    let logfile = log_path(kit, &format!("operator-ociscale-{per_channel}.log"));
    let op = Operator::start(kit, binary, Some(&ns), logfile, &extra, &env)?;
    let out = with_operator(op, async |op: &Operator| {
        op.wait_filled(900.0).await?;
        let watch = tokio::spawn(all_synced(kit.channels(&ns), channels));
        log(&format!(
            "oci scale: {channels} oci channels x {per_channel} versions, created at once"
        ));
        let writes0 = audit::writes(&ns).await?;
        let cpu0 = op.cpu_seconds();
        let first = Instant::now();
        futures::stream::iter(&specs)
            .map(|spec| kit.apply_channel(&ns, spec))
            .buffer_unordered(AT_ONCE)
            .try_collect::<Vec<()>>()
            .await?;
        let last = Instant::now();
        let done = watch.await??;
        let cpu = op.cpu_seconds() - cpu0;
        let text = op.log_text();
        Ok(OciScale {
            channels: channels as i64,
            per_channel: per_channel as i64,
            push_seconds,
            create_seconds: (last - first).as_secs_f64(),
            after_last: done.saturating_duration_since(last).as_secs_f64(),
            after_first: (done - first).as_secs_f64(),
            versions: (channels * per_channel) as i64,
            rss: op.peak_rss(),
            cpu,
            writes: audit::writes(&ns).await?.since(writes0),
            registry_requests: parse::registry_requests(&text).iter().sum(),
        })
    })
    .await;
    kit.drop_namespaces(&[&ns]).await;
    out
}
