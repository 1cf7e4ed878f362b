//! The scenarios of the goals table (scenarios.md) that sync custom channels: 1 to 5. Each
//! sets up its namespaces, runs an operator, measures, and cleans up, returning its typed
//! result for the report (oci.rs and footprint.rs hold the others).

use std::path::Path;
use std::time::Instant;

use color_eyre::eyre::Result;
use serde_json::Value;

use crate::audit;
use crate::kit::{self, Kit, MINUTES_30, Operator, kubectl, log, secs, wait, watch_until};
use crate::objects;
use crate::parse::{self, count};
use crate::results::{Big, FirstSync, Many, Requests};
use crate::{Args, objects::list};

/// Runs `body` with the operator, then stops it whether or not `body` failed.
pub async fn with_operator<T>(
    op: Operator,
    body: impl AsyncFnOnce(&Operator) -> Result<T>,
) -> Result<T> {
    let out = body(&op).await;
    op.stop();
    out
}

pub fn log_path(kit: &Kit, name: &str) -> std::path::PathBuf {
    kit.workdir.join(name)
}

/// Applies custom channel `name` listing `n` versions named `{name}-{i}` and waits for its
/// first sync: from the data in the display log to Synchronized, then until its syncer pod
/// is gone. What the operator `op` spent, and the version writes it sent (the audit log).
async fn first_sync(kit: &Kit, op: &Operator, ns: &str, name: &str, n: usize) -> Result<FirstSync> {
    let channels = kit.channels(ns);
    let spec = objects::channel(
        name,
        ns,
        &kit.runner_image,
        &objects::generator(name, n),
        true,
    );
    let writes0 = audit::writes(ns).await?;
    kit.apply_channel(ns, &spec).await?;
    log(&format!("{ns}: channel {name}, {n} versions"));
    let t_data = kit.display_running(ns, name).await?;
    let cpu0 = op.cpu_seconds();
    let t_done = watch_until("Synchronized", channels.clone(), name, |c| {
        kit::ready_reason(c) == "Synchronized"
    })
    .await?;
    let seconds = (t_done - t_data).as_secs_f64();
    let cpu = op.cpu_seconds() - cpu0;
    let message = kit::ready_message(&channels.get(name).await?);
    let pods = kit.pods(ns);
    wait("the syncer pod to go", MINUTES_30, secs(0.5), || async {
        Ok(pods.get_opt(name).await?.is_none())
    })
    .await?;
    Ok(FirstSync {
        versions: n as i64,
        seconds,
        cpu,
        rss: op.peak_rss(),
        writes: audit::writes(ns).await?.since(writes0),
        message,
    })
}

/// An operator of `binary` watching `ns` with `--write-qps 0` (no pacing); the first sync
/// of a channel of `n` versions; with `admitted` > 0, then one of that many versions under
/// an admission policy that may refuse versions (and refuses none of them).
async fn unpaced_sync(
    kit: &Kit,
    binary: &Path,
    label: &str,
    n: usize,
    admitted: usize,
) -> Result<(FirstSync, Option<FirstSync>)> {
    let ns = format!("bench-big-{label}-{}", kit::run_id());
    kit.namespace(&ns).await?;
    // Test runs of other trees may have installed their CRDs meanwhile.
    kit.crds().await?;
    let logfile = log_path(kit, &format!("operator-big-{label}.log"));
    let op = Operator::start(kit, binary, Some(&ns), logfile, &["--write-qps", "0"], &[])?;
    let out = with_operator(op, async |op: &Operator| {
        let first = first_sync(kit, op, &ns, "big", n).await?;
        if admitted == 0 {
            return Ok((first, None));
        }
        let policy = objects::admission_policy(&ns);
        let path = kit.workdir.join(format!("admission-{label}.json"));
        kit::write_json(&path, &policy)?;
        let path = path.to_string_lossy().into_owned();
        kubectl(&["apply", "-f", &path]).await?;
        let under = first_sync(kit, op, &ns, "adm", admitted).await;
        let _ = kubectl(&["delete", "--ignore-not-found", "-f", &path]).await;
        Ok((first, Some(under?)))
    })
    .await;
    kit.drop_namespaces(&[&ns]).await;
    out
}

/// 1 and 2: one custom channel of `--versions` versions, against kubectl creating the same
/// objects (one process, then 16), and an unchanged resync of it; then the same first sync
/// by an unpaced operator (and by the baseline build), and one under an admission policy.
pub async fn big_channel(kit: &Kit, binary: &Path, args: &Args) -> Result<Big> {
    let run_id = kit::run_id();
    let (ns, raw) = (format!("bench-big-{run_id}"), format!("bench-raw-{run_id}"));
    let raw16 = format!("{raw}-16");
    kit.namespace(&ns).await?;
    kit.namespace(&raw).await?;
    let n = args.versions;
    // Baseline: the same objects, created one by one by kubectl.
    let items: Vec<Value> = (1..=n).map(|i| objects::version("big", &raw, i)).collect();
    let path = kit.workdir.join("raw.json");
    kit::write_json(&path, &list(&items))?;
    log(&format!("baseline: kubectl create -f of {n} versions"));
    let t = Instant::now();
    kubectl(&["create", "-f", &path.to_string_lossy(), "-o", "name"]).await?;
    let kubectl_seconds = t.elapsed().as_secs_f64();
    kit.namespace(&raw16).await?;
    let items: Vec<Value> = (1..=n)
        .map(|i| objects::version("big", &raw16, i))
        .collect();
    log(&format!(
        "baseline: 16 kubectl writers creating the same {n} versions"
    ));
    let writers16 = kit::create_parallel(&items, &kit.workdir, 16).await?;

    kit.crds().await?;
    let op = Operator::start(
        kit,
        binary,
        Some(&ns),
        log_path(kit, "operator-big.log"),
        &[],
        &[],
    )?;
    let out = with_operator(op, async |op: &Operator| {
        let channels = kit.channels(&ns);
        let first = first_sync(kit, op, &ns, "big", n).await?;

        log("unchanged resync, on demand");
        let writes0 = audit::writes(&ns).await?;
        kit.request_sync(&ns, "big", "bench-resync").await?;
        let t_data = kit.display_running(&ns, "big").await?;
        let t_done = watch_until("the resync", channels.clone(), "big", |c| {
            kit::synced_after(c, "bench-resync")
        })
        .await?;
        let resync = (t_done - t_data).as_secs_f64();
        let resync_writes = audit::writes(&ns).await?.since(writes0);
        Ok(Big {
            versions: n as i64,
            first: first.seconds,
            first_cpu: first.cpu,
            kubectl: kubectl_seconds,
            kubectl16: writers16,
            message: first.message,
            first_writes: first.writes,
            resync,
            resync_writes: resync_writes.requests as f64,
            resync_message: kit::ready_message(&channels.get("big").await?),
            first_rss: first.rss,
            rss: op.peak_rss(),
            ..Big::skipped()
        })
    })
    .await;
    // Deleted before the next sync is timed, not while one is.
    kit.drop_namespaces(&[&ns, &raw, &raw16]).await;
    let mut big = out?;
    log("the same first sync with --write-qps 0 (no pacing)");
    let (unpaced, admitted) = unpaced_sync(kit, binary, "now", n, args.admission_versions).await?;
    big.unpaced = Some(unpaced);
    big.admitted = admitted;
    if let Some(b) = &args.baseline_binary {
        log("the same first sync with --write-qps 0 by the baseline build");
        big.baseline = Some(unpaced_sync(kit, b, "baseline", n, 0).await?.0);
    }
    Ok(big)
}

/// Whether every channel of `ns` reports Ready with `reason` (any reason when None), and
/// there are `n` of them.
pub async fn all_ready(kit: &Kit, ns: &str, n: usize, reason: Option<&str>) -> Result<bool> {
    let chs = kit.list_channels(ns).await?;
    let done = chs
        .iter()
        .filter(|c| match reason {
            Some(r) => kit::ready_reason(c) == r,
            None => !kit::ready_reason(c).is_empty(),
        })
        .count();
    Ok(done == n)
}

/// 3 and 4: `--channels` x `--per-channel` created at once, then idle.
pub async fn many_channels(kit: &Kit, binary: &Path, args: &Args) -> Result<Many> {
    let ns = "bench-many";
    kit.namespace(ns).await?;
    let (before, bytes_before) = kit.api_metrics().await?;
    let logfile = log_path(kit, "operator-many.log");
    let op = Operator::start(kit, binary, Some(ns), logfile, &[], &[])?;
    let out = with_operator(op, async |op: &Operator| {
        // Streaming lists fill the caches without a LIST: the operator's own word that they are.
        op.wait_filled(900.0).await?;
        let items: Vec<Value> = (0..args.channels)
            .map(|c| {
                let script = objects::generator(&format!("ch-{c}-v"), args.per_channel);
                objects::channel(&format!("ch-{c}"), ns, &kit.runner_image, &script, true)
            })
            .collect();
        let path = kit.workdir.join("channels.json");
        kit::write_json(&path, &list(&items))?;
        log(&format!(
            "many channels: {} x {} versions",
            args.channels, args.per_channel
        ));
        let t = Instant::now();
        kubectl(&["create", "-f", &path.to_string_lossy(), "-o", "name"]).await?;
        wait(
            "every channel to be Synchronized",
            MINUTES_30,
            secs(1.0),
            || all_ready(kit, ns, args.channels, Some("Synchronized")),
        )
        .await?;
        let seconds = t.elapsed().as_secs_f64();
        let (after, bytes_after) = kit.api_metrics().await?;
        let rss = op.peak_rss();
        kit.wait_no_pods(ns, 1.0).await?;

        log(&format!("idle for {} s", args.idle_seconds));
        let (cpu0, (req0, _)) = (op.cpu_seconds(), kit.api_metrics().await?);
        tokio::time::sleep(secs(args.idle_seconds as f64)).await;
        let (cpu1, (req1, _)) = (op.cpu_seconds(), kit.api_metrics().await?);
        let per_minute = 60.0 / args.idle_seconds as f64;
        Ok(Many {
            channels: args.channels as i64,
            per_channel: args.per_channel as i64,
            seconds,
            rss,
            lists: count(
                &after.since(&before),
                Some("managedosversions"),
                Some(&["LIST"]),
            ),
            list_bytes: bytes_after - bytes_before,
            idle_cpu: (cpu1 - cpu0) * per_minute,
            idle_requests: count(&req1.since(&req0), None, None) * per_minute,
        })
    })
    .await;
    kit.delete_namespaces(&[ns]).await;
    out
}

/// 5: API requests per channel sync besides the version writes and the pod's own: 20
/// channels x 50 versions, a first sync and an on-demand resync of each.
pub async fn requests_per_sync(kit: &Kit, binary: &Path, label: &str) -> Result<Requests> {
    const CHANNELS: usize = 20;
    let ns = format!("bench-requests-{label}");
    let ns = ns.as_str();
    kit.namespace(ns).await?;
    let logfile = log_path(kit, &format!("operator-requests-{label}.log"));
    let op = Operator::start_logged(kit, binary, ns, logfile)?;
    // Every channel Synchronized and no sync under way; with `value`, the sync it asked for.
    let synced = async |value: Option<&str>| -> Result<bool> {
        let chs = kit.list_channels(ns).await?;
        let done = |c: &rancheros_operator::api::ManagedOSVersionChannel| {
            let status = c.status.as_ref();
            let reconciling = status
                .and_then(|s| s.condition("Reconciling"))
                .is_some_and(|c| c.status == "True");
            let asked = status.and_then(|s| s.sync_requested_at.as_deref());
            (value.is_none() || asked == value)
                && kit::ready_reason(c) == "Synchronized"
                && !reconciling
        };
        Ok(chs.len() == CHANNELS && chs.iter().all(done))
    };
    let out = with_operator(op, async |op: &Operator| {
        tokio::time::sleep(secs(2.0)).await; // the operator's watches are up
        let items: Vec<Value> = (0..CHANNELS)
            .map(|c| {
                let script = objects::generator(&format!("ch-{c}-v"), 50);
                objects::channel(
                    &format!("ch-{c}"),
                    ns,
                    &kit.runner_image,
                    &script,
                    label != "baseline",
                )
            })
            .collect();
        let path = kit.workdir.join(format!("requests-{label}.json"));
        kit::write_json(&path, &list(&items))?;

        let before = parse::overhead_requests(&kit.metrics().await?);
        let own_before = parse::own_requests(&op.log_text());
        kubectl(&["create", "-f", &path.to_string_lossy(), "-o", "name"]).await?;
        wait(
            "every channel to be Synchronized",
            MINUTES_30,
            secs(2.0),
            || synced(None),
        )
        .await?;
        kit.wait_no_pods(ns, 2.0).await?;
        let first = parse::overhead_requests(&kit.metrics().await?);
        let own_first = parse::own_requests(&op.log_text());
        let value = format!("bench-{}", kit::now_secs());
        for c in 0..CHANNELS {
            kit.request_sync(ns, &format!("ch-{c}"), &value).await?;
        }
        wait("every channel to sync again", MINUTES_30, secs(2.0), || {
            synced(Some(&value))
        })
        .await?;
        kit.wait_no_pods(ns, 2.0).await?;
        let resync = parse::overhead_requests(&kit.metrics().await?);
        let own_resync = parse::own_requests(&op.log_text());

        let (d_first, d_resync) = (first.since(&before), resync.since(&first));
        // The bench's own polls are LISTs of channels and pods, which these counts leave out.
        let (o_first, o_resync) = (own_first.since(&own_before), own_resync.since(&own_first));
        let joined = |t: &parse::Tally<parse::Kind3, f64>| -> Vec<(String, f64)> {
            t.nonzero()
                .into_iter()
                .map(|((r, s, v), n)| (format!("{r}/{s}/{v}"), n))
                .collect()
        };
        let per = CHANNELS as f64;
        Ok(Requests {
            own_first: o_first.total() as f64 / per,
            own_resync: o_resync.total() as f64 / per,
            own_first_detail: o_first.nonzero(),
            own_resync_detail: o_resync.nonzero(),
            first: d_first.total() / per,
            resync: d_resync.total() / per,
            first_detail: joined(&d_first),
            resync_detail: joined(&d_resync),
        })
    })
    .await;
    kit.delete_namespaces(&[ns]).await;
    out
}
