//! The scenarios (scenarios.md): each sets up its namespaces, runs an operator, measures,
//! and cleans up, returning its typed result for the report.

use std::path::Path;
use std::time::Instant;

use color_eyre::eyre::{Result, WrapErr};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

use crate::kit::{self, Kit, MINUTES_30, Operator, kubectl, log, secs, wait, watch_until};
use crate::objects;
use crate::parse::{self, WRITES, count};
use crate::report::{Big, Many, MIB, Oci, OciSide, Requests, Restart, RssVersions, Scale};
use crate::{Args, objects::list};

/// Runs `body` with the operator, then stops it whether or not `body` failed.
async fn with_operator<T>(op: Operator, body: impl AsyncFnOnce(&Operator) -> Result<T>) -> Result<T> {
    let out = body(&op).await;
    op.stop();
    out
}

fn log_path(kit: &Kit, name: &str) -> std::path::PathBuf {
    kit.workdir.join(name)
}

/// 1 and 2: one custom channel of `--versions` versions, against kubectl creating the same
/// objects (one process, then 16), and an unchanged resync of it.
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
    let items: Vec<Value> = (1..=n).map(|i| objects::version("big", &raw16, i)).collect();
    log(&format!("baseline: 16 kubectl writers creating the same {n} versions"));
    let writers16 = kit::create_parallel(&items, &kit.workdir, 16).await?;

    let op = Operator::start(kit, binary, Some(&ns), log_path(kit, "operator-big.log"), &[], &[])?;
    let out = with_operator(op, async |op: &Operator| {
        let channels = kit.channels(&ns);
        let spec = objects::channel("big", &ns, &kit.runner_image, &objects::generator("big", n), true);
        kit.apply_channel(&ns, &spec).await?;
        log(&format!("big channel: {n} versions"));
        let t_data = watch_until("the display container", kit.pods(&ns), "big", kit::display_started).await?;
        let cpu0 = op.cpu_seconds();
        let t_done = watch_until("Synchronized", channels.clone(), "big", |c| {
            kit::ready_reason(c) == "Synchronized"
        })
        .await?;
        let first = (t_done - t_data).as_secs_f64();
        let first_cpu = op.cpu_seconds() - cpu0;
        let message = kit::ready_message(&channels.get("big").await?);
        let pods = kit.pods(&ns);
        wait("the syncer pod to go", MINUTES_30, secs(0.5), || async {
            Ok(pods.get_opt("big").await?.is_none())
        })
        .await?;

        log("unchanged resync, on demand");
        let (before, _) = kit.api_metrics().await?;
        kit.request_sync(&ns, "big", "bench-resync").await?;
        let t_data = watch_until("the display container", kit.pods(&ns), "big", kit::display_started).await?;
        let t_done = watch_until("the resync", channels.clone(), "big", |c| {
            let at = c.status.as_ref().and_then(|s| s.sync_requested_at.as_deref());
            at == Some("bench-resync") && kit::ready_reason(c) == "Synchronized"
        })
        .await?;
        let resync = (t_done - t_data).as_secs_f64();
        let (after, _) = kit.api_metrics().await?;
        Ok(Big {
            versions: n as i64,
            first,
            first_cpu,
            kubectl: kubectl_seconds,
            kubectl16: writers16,
            message,
            resync,
            resync_writes: count(&after.since(&before), Some("managedosversions"), Some(WRITES)),
            resync_message: kit::ready_message(&channels.get("big").await?),
            rss: op.peak_rss(),
        })
    })
    .await;
    kit.drop_namespaces(&[&ns, &raw, &raw16]).await;
    out
}

/// Whether every channel of `ns` reports Ready with `reason` (any reason when None), and
/// there are `n` of them.
async fn all_ready(kit: &Kit, ns: &str, n: usize, reason: Option<&str>) -> Result<bool> {
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
    let env = Operator::request_log();
    let op = Operator::start(kit, binary, Some(ns), log_path(kit, "operator-many.log"), &[], &env)?;
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
        log(&format!("many channels: {} x {} versions", args.channels, args.per_channel));
        let t = Instant::now();
        kubectl(&["create", "-f", &path.to_string_lossy(), "-o", "name"]).await?;
        wait("every channel to be Synchronized", MINUTES_30, secs(1.0), || {
            all_ready(kit, ns, args.channels, Some("Synchronized"))
        })
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
            lists: count(&after.since(&before), Some("managedosversions"), Some(&["LIST"])),
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
    let op = Operator::start(kit, binary, Some(ns), logfile, &[], &Operator::request_log())?;
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
                objects::channel(&format!("ch-{c}"), ns, &kit.runner_image, &script, label != "baseline")
            })
            .collect();
        let path = kit.workdir.join(format!("requests-{label}.json"));
        kit::write_json(&path, &list(&items))?;

        let before = parse::overhead_requests(&kit.metrics().await?);
        let own_before = parse::own_requests(&op.log_text());
        kubectl(&["create", "-f", &path.to_string_lossy(), "-o", "name"]).await?;
        wait("every channel to be Synchronized", MINUTES_30, secs(2.0), || synced(None)).await?;
        kit.wait_no_pods(ns, 2.0).await?;
        let first = parse::overhead_requests(&kit.metrics().await?);
        let own_first = parse::own_requests(&op.log_text());
        let value = format!("bench-{}", kit::now_secs());
        for c in 0..CHANNELS {
            kit.request_sync(ns, &format!("ch-{c}"), &value).await?;
        }
        wait("every channel to sync again", MINUTES_30, secs(2.0), || synced(Some(&value))).await?;
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

/// Polls one channel every 50 ms until `done` holds for it: a watch would end when another
/// tree's tests re-install the CRDs (they do on this shared cluster).
async fn poll(kit: &Kit, ns: &str, name: &str, done: impl Fn(&rancheros_operator::api::ManagedOSVersionChannel) -> bool) -> Result<()> {
    let api = kit.channels(ns);
    wait(&format!("{name} to sync"), secs(300.0), secs(0.05), || async {
        Ok(api.get_opt(name).await?.is_some_and(|c| done(&c)))
    })
    .await
}

/// Pushes the layout of the channel image holding `data` to the test registry with skopeo.
fn push_elemental_image(kit: &Kit, repo: &str, data: &Value) -> Result<String> {
    let layout = kit.workdir.join("oci-layout");
    let busybox = std::fs::read("/bin/busybox").wrap_err("reading /bin/busybox")?;
    crate::oci_image::write_layout(&layout, &busybox, data)?;
    let var = |n: &str| std::env::var(n).unwrap_or_default();
    let reference = format!("{}/{repo}:v1", var("RANCHEROS_TEST_REGISTRY"));
    let creds = format!(
        "{}:{}",
        var("RANCHEROS_TEST_REGISTRY_USER"),
        var("RANCHEROS_TEST_REGISTRY_PASSWORD")
    );
    let source = format!("oci:{}:v1", layout.display());
    let dest = format!("docker://{reference}");
    let args = ["copy", "--preserve-digests", "--dest-tls-verify=false", "--dest-creds", &creds, &source, &dest];
    kit::run("skopeo", &args, None)?;
    Ok(reference)
}

/// 6: the same Elemental-shaped channel as custom and as oci, side by side.
pub async fn oci_vs_custom(kit: &Kit, binary: &Path, args: &Args) -> Result<Oci> {
    let ns = "bench-oci";
    kit.namespace(ns).await?;
    let n = args.oci_versions;
    let var = |n: &str| std::env::var(n).unwrap_or_default();
    let registry = var("RANCHEROS_TEST_REGISTRY");
    let image = format!("{registry}/{ns}/elemental-channel:v1");
    let secret = objects::pull_secret(
        ns,
        &registry,
        &var("RANCHEROS_TEST_REGISTRY_USER"),
        &var("RANCHEROS_TEST_REGISTRY_PASSWORD"),
    );
    let secrets: Api<Secret> = Api::namespaced(kit.client.clone(), ns);
    secrets
        .patch("pull", &PatchParams::apply("bench-operator").force(), &Patch::Apply(&secret))
        .await?;
    let logfile = log_path(kit, "operator-oci.log");
    kit.crds().await?;
    let rust_log = format!("{},rancheros_operator::registry=debug", parse::REQUEST_LOG);
    let env = [("RUST_LOG", rust_log.as_str()), ("NO_COLOR", "1")];
    let extra = ["--json-allow-cidr=127.0.0.1/32", "--allow-insecure-registries"];
    let op = Operator::start(kit, binary, Some(ns), logfile, &extra, &env)?;
    let out = with_operator(op, async |op: &Operator| {
        tokio::time::sleep(secs(2.0)).await; // the operator's watches are up
        let mut out = Oci {
            versions: n as i64,
            ..Oci::default()
        };
        for name in ["custom", "oci"] {
            // Each channel's versions apart: the second would conflict with the first's.
            let data = objects::elemental("sl-micro-6-0", &format!("--{name}"), n);
            let spec = if name == "custom" {
                let script = format!("printf '%s' {} > /data/output", objects::shell_quote(&data.to_string()));
                let mut custom = objects::channel("custom", ns, &kit.runner_image, &script, true);
                custom["spec"]["deleteNoLongerInSyncVersions"] = true.into();
                custom
            } else {
                push_elemental_image(kit, &format!("{ns}/elemental-channel"), &data)?;
                objects::oci_channel(ns, &image)
            };
            let log0 = op.log_text();
            let (own0, pods0) = (parse::own_requests(&log0), parse::pods_created(&log0));
            // Test runs of other trees may have installed their CRDs meanwhile.
            kit.crds().await?;
            let t = Instant::now();
            kit.apply_channel(ns, &spec).await?;
            poll(kit, ns, name, |c| kit::ready_reason(c) == "Synchronized").await?;
            let first = t.elapsed().as_secs_f64();
            if name == "custom" {
                kit.wait_no_pods(ns, 0.5).await?;
            }
            let log1 = op.log_text();
            let (own1, pods1) = (parse::own_requests(&log1), parse::pods_created(&log1));
            let (before, _) = kit.api_metrics().await?;
            let value = format!("bench-{}", kit::now_secs());
            let t = Instant::now();
            kit.request_sync(ns, name, &value).await?;
            // Ready keeps the last outcome while a routine resync runs: its end is
            // Reconciling no longer True.
            poll(kit, ns, name, |c| {
                let status = c.status.as_ref();
                status.and_then(|s| s.sync_requested_at.as_deref()) == Some(value.as_str())
                    && kit::ready_reason(c) == "Synchronized"
                    && status
                        .and_then(|s| s.condition("Reconciling"))
                        .is_none_or(|r| r.status != "True")
            })
            .await?;
            let resync = t.elapsed().as_secs_f64();
            if name == "custom" {
                kit.wait_no_pods(ns, 0.5).await?;
            }
            let (after, _) = kit.api_metrics().await?;
            let log2 = op.log_text();
            let (own2, pods2) = (parse::own_requests(&log2), parse::pods_created(&log2));
            let side = OciSide {
                first,
                resync,
                first_requests: own1.since(&own0).total(),
                resync_requests: own2.since(&own1).total(),
                first_pods: pods1 - pods0,
                resync_pods: pods2 - pods1,
                resync_writes: count(&after.since(&before), Some("managedosversions"), Some(WRITES)),
                registry: match name {
                    "oci" => parse::registry_requests(&log2),
                    _ => Vec::new(),
                },
                message: kit::ready_message(&kit.channels(ns).get(name).await?),
            };
            match name {
                "custom" => out.custom = side,
                _ => out.oci = side,
            }
        }
        out.rss = op.peak_rss();
        Ok(out)
    })
    .await;
    kit.delete_namespaces(&[ns]).await;
    out
}

/// 7, per channel: a fresh operator's settled RSS watching `--rss-channels` suspended
/// channels (no pods, no versions), and watching an empty namespace. `(n, none, some)`.
pub async fn rss_per_channel(kit: &Kit, binary: &Path, args: &Args) -> Result<(i64, u64, u64)> {
    let run_id = kit::run_id();
    let (full, empty) = (format!("bench-chs-{run_id}"), format!("bench-chs-empty-{run_id}"));
    kit.namespace(&full).await?;
    kit.namespace(&empty).await?;
    let n = args.rss_channels;
    let items: Vec<Value> = (0..n)
        .map(|c| objects::suspended(&format!("idle-{c}"), &full, &kit.runner_image))
        .collect();
    log(&format!("rss: {n} suspended channels, 16 writers"));
    let measured = async {
        kit::create_parallel(&items, &kit.workdir, 16).await?;
        let mut rss = [0u64; 2];
        for (i, ns) in [&empty, &full].into_iter().enumerate() {
            let logfile = log_path(kit, &format!("operator-chs-{ns}.log"));
            let op = Operator::start(kit, binary, Some(ns), logfile, &[], &[])?;
            rss[i] = with_operator(op, async |op: &Operator| {
                if ns == &full {
                    wait("every channel to have a Ready condition", secs(600.0), secs(2.0), || {
                        all_ready(kit, &full, n, None)
                    })
                    .await?;
                }
                Ok(op.settled_rss(10.0, 5, 180.0).await)
            })
            .await?;
            log(&format!("rss: watching {ns}: {:.1} MiB", rss[i] as f64 / MIB));
        }
        Ok::<_, color_eyre::Report>(rss)
    }
    .await;
    kit.drop_namespaces(&[&full, &empty]).await;
    let [none, some] = measured?;
    Ok((n as i64, none, some))
}

/// 7: a fresh operator's settled RSS watching `--rss-versions` versions of 4 suspended
/// channels, minus watching an empty namespace, for each binary.
pub async fn rss_per_version(kit: &Kit, binaries: &[(String, std::path::PathBuf)], args: &Args) -> Result<RssVersions> {
    let run_id = kit::run_id();
    let (full, empty) = (format!("bench-rss-{run_id}"), format!("bench-rss-empty-{run_id}"));
    kit.namespace(&full).await?;
    kit.namespace(&empty).await?;
    let n = args.rss_versions;
    let measured = async {
        let mut owners = Vec::new();
        for c in 0..4 {
            let name = format!("rss-{c}");
            kit.apply_channel(&full, &objects::suspended(&name, &full, &kit.runner_image)).await?;
            let uid = kit.channels(&full).get(&name).await?.metadata.uid.unwrap_or_default();
            owners.push((name, uid));
        }
        let items: Vec<Value> = (0..n)
            .map(|i| {
                let (name, uid) = &owners[i % owners.len()];
                objects::owned_version(&full, name, uid, i)
            })
            .collect();
        log(&format!("rss: {n} versions, 16 writers"));
        let create_seconds = kit::create_parallel(&items, &kit.workdir, 16).await?;
        let mut out = RssVersions {
            versions: n as i64,
            create_seconds,
            ..RssVersions::default()
        };
        for (label, binary) in binaries {
            let mut rss = [0u64; 2];
            for (i, ns) in [&empty, &full].into_iter().enumerate() {
                let logfile = log_path(kit, &format!("operator-rss-{label}-{ns}.log"));
                let op = Operator::start(kit, binary, Some(ns), logfile, &[], &Operator::request_log())?;
                let (filled, settled, peak, lists) = with_operator(op, async |op: &Operator| {
                    let (before, _) = kit.api_metrics().await?;
                    let filled = op.wait_filled(900.0).await?;
                    let settled = op.settled_rss(10.0, 5, 180.0).await;
                    let (after, _) = kit.api_metrics().await?;
                    let lists = count(&after.since(&before), Some("managedosversions"), Some(&["LIST"]));
                    Ok((filled, settled, op.peak_rss(), lists))
                })
                .await?;
                rss[i] = settled;
                log(&format!(
                    "rss: {label} watching {ns}: {:.1} MiB (peak {:.1}), filled in {filled:.1} s, \
                     {lists:.0} LISTs of versions (all clients)",
                    settled as f64 / MIB,
                    peak as f64 / MIB
                ));
                if ns == &full {
                    out.fill.push((label.clone(), (filled, peak, lists)));
                }
            }
            let per = (rss[1] as f64 - rss[0] as f64) / n as f64;
            out.per_binary.push((label.clone(), (rss[0], rss[1], per)));
        }
        Ok::<_, color_eyre::Report>(out)
    }
    .await;
    kit.drop_namespaces(&[&full, &empty]).await;
    measured
}

/// The scale scenario's channel data: `per_channel` versions of the channel the path
/// names (`/c/ch-3.json`: `ch-3-v0` ...).
fn scale_body(path: &str, per_channel: usize) -> String {
    let name = path.rsplit('/').next().unwrap_or("").trim_end_matches(".json");
    let mut data = objects::elemental(name, "", per_channel);
    for (j, v) in data.as_array_mut().into_iter().flatten().enumerate() {
        v["metadata"]["name"] = format!("{name}-v{j}").into();
    }
    data.to_string()
}

/// 8: `--scale-channels` json channels x `--scale-per-channel` versions over
/// `--scale-namespaces` namespaces, one operator watching every namespace (a label selector
/// keeps it to this run's channels); the channel data from a local HTTP server.
pub async fn scale_out(kit: &Kit, binary: &Path, args: &Args) -> Result<Scale> {
    let run_id = kit::run_id();
    let selector = format!("bench-scale={run_id}");
    let (c, v, k) = (args.scale_channels, args.scale_per_channel, args.scale_namespaces);
    let names: Vec<String> = (0..k).map(|i| format!("bench-scale-{run_id}-{i}")).collect();
    for ns in &names {
        kit.namespace(ns).await?;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| async move {
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            scale_body(uri.path(), v),
        )
    });
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let items: Vec<Value> = (0..c).map(|i| objects::scale_channel(i, &names, &run_id, port)).collect();
    let extra = ["--watch-label-selector", selector.as_str(), "--json-allow-cidr=127.0.0.1/32"];
    let mut out = Scale {
        channels: c as i64,
        per_channel: v as i64,
        namespaces: k as i64,
        ..Scale::default()
    };
    let progress = async || -> Result<(usize, i64)> {
        let api: Api<rancheros_operator::api::ManagedOSVersionChannel> = Api::all(kit.client.clone());
        let chs = api.list(&kube::api::ListParams::default().labels(&selector)).await?.items;
        let synced: Vec<_> = chs.iter().filter(|c| kit::ready_reason(c) == "Synchronized").collect();
        let versions = synced
            .iter()
            .filter_map(|c| c.status.as_ref()?.synced_versions)
            .sum();
        Ok((synced.len(), versions))
    };
    let measured = async {
        let (before, _) = kit.api_metrics().await?;
        let op = Operator::start(kit, binary, None, log_path(kit, "operator-scale.log"), &extra, &[])?;
        with_operator(op, async |op: &Operator| {
            op.wait_filled(900.0).await?;
            log(&format!("scale: {c} json channels x {v} versions in {k} namespaces"));
            let t = Instant::now();
            kit::create_parallel(&items, &kit.workdir, 16).await?;
            let samples = std::cell::Cell::new(0);
            let last_versions = std::cell::Cell::new(0);
            wait("every channel to be Synchronized", secs(3600.0), secs(10.0), || async {
                let (done, versions) = progress().await?;
                samples.set(samples.get() + 1);
                last_versions.set(versions);
                if samples.get() % 6 == 0 {
                    log(&format!(
                        "scale: {done}/{c} channels, {versions} versions, RSS {:.0} MiB",
                        op.status("VmRSS") as f64 / MIB
                    ));
                }
                Ok(done == c)
            })
            .await?;
            out.seconds = t.elapsed().as_secs_f64();
            out.versions = last_versions.get();
            out.cpu = op.cpu_seconds();
            let (after, _) = kit.api_metrics().await?;
            let grown = after.since(&before);
            out.lists = count(&grown, Some("managedosversions"), Some(&["LIST"]));
            out.writes = ["POST", "PATCH", "APPLY", "PUT"]
                .iter()
                .map(|verb| (verb.to_string(), count(&grown, Some("managedosversions"), Some(&[verb]))))
                .collect();
            out.peak = op.peak_rss();
            out.settled = op.settled_rss(0.0, 5, 180.0).await;
            Ok(())
        })
        .await?;
        // A fresh operator over the same versions: what a restart costs (and the same for
        // the baseline build, in the same run).
        for (label, b) in args.binaries(binary) {
            let (before, _) = kit.api_metrics().await?;
            let logfile = log_path(kit, &format!("operator-scale-restart-{label}.log"));
            let op = Operator::start(kit, &b, None, logfile, &extra, &Operator::request_log())?;
            let restart = with_operator(op, async |op: &Operator| {
                let t = Instant::now();
                op.wait_filled(900.0).await?;
                let settled = op.settled_rss(0.0, 5, 180.0).await;
                let (after, _) = kit.api_metrics().await?;
                let grown = after.since(&before);
                Ok(Restart {
                    settled,
                    seconds: t.elapsed().as_secs_f64(),
                    peak: op.peak_rss(),
                    lists: count(&grown, Some("managedosversions"), Some(&["LIST"])),
                    writes: count(&grown, Some("managedosversions"), Some(WRITES)),
                })
            })
            .await?;
            out.restart.push((label, restart));
        }
        Ok::<_, color_eyre::Report>(())
    }
    .await;
    server.abort();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    kit.drop_namespaces(&names).await;
    measured?;
    Ok(out)
}
