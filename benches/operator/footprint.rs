//! 7 and 8: what the operator's memory holds per version and per channel, and at scale.

use std::path::{Path, PathBuf};
use std::time::Instant;

use color_eyre::eyre::Result;
use kube::api::Api;
use serde_json::Value;

use crate::Args;
use crate::kit::{self, Kit, Operator, log, secs, wait};
use crate::objects;
use crate::only::{Restart, RssVersions, Scale};
use crate::parse::{WRITES, count};
use crate::scenarios::{all_ready, log_path, with_operator};
use crate::value::MIB;

/// A measure's two new namespaces, `bench-WHAT-RUN` and `bench-WHAT-empty-RUN` (the
/// baseline): `(full, empty)`.
async fn namespaces(kit: &Kit, what: &str) -> Result<(String, String)> {
    let run_id = kit::run_id();
    let full = format!("bench-{what}-{run_id}");
    let empty = format!("bench-{what}-empty-{run_id}");
    kit.namespace(&full).await?;
    kit.namespace(&empty).await?;
    Ok((full, empty))
}

/// 7, per channel: a fresh operator's settled RSS watching `--rss-channels` suspended
/// channels (no pods, no versions), and watching an empty namespace. `(n, none, some)`.
pub async fn rss_per_channel(kit: &Kit, binary: &Path, args: &Args) -> Result<(i64, u64, u64)> {
    let (full, empty) = namespaces(kit, "chs").await?;
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
                    wait(
                        "every channel to have a Ready condition",
                        secs(600.0),
                        secs(2.0),
                        || all_ready(kit, &full, n, None),
                    )
                    .await?;
                }
                Ok(op.settled_rss(10.0, 5, 180.0).await)
            })
            .await?;
            log(&format!(
                "rss: watching {ns}: {:.1} MiB",
                rss[i] as f64 / MIB
            ));
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
pub async fn rss_per_version(
    kit: &Kit,
    binaries: &[(String, PathBuf)],
    args: &Args,
) -> Result<RssVersions> {
    let (full, empty) = namespaces(kit, "rss").await?;
    let n = args.rss_versions;
    let measured = async {
        let mut owners = Vec::new();
        for c in 0..4 {
            let name = format!("rss-{c}");
            kit.apply_channel(&full, &objects::suspended(&name, &full, &kit.runner_image))
                .await?;
            let uid = kit
                .channels(&full)
                .get(&name)
                .await?
                .metadata
                .uid
                .unwrap_or_default();
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
                let op = Operator::start_logged(kit, binary, ns, logfile)?;
                let (filled, settled, peak, lists) = with_operator(op, async |op: &Operator| {
                    let (before, _) = kit.api_metrics().await?;
                    let filled = op.wait_filled(900.0).await?;
                    let settled = op.settled_rss(10.0, 5, 180.0).await;
                    let (after, _) = kit.api_metrics().await?;
                    let lists = count(
                        &after.since(&before),
                        Some("managedosversions"),
                        Some(&["LIST"]),
                    );
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
    let name = path
        .rsplit('/')
        .next()
        .unwrap_or("")
        .trim_end_matches(".json");
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
    let (c, v, k) = (
        args.scale_channels,
        args.scale_per_channel,
        args.scale_namespaces,
    );
    let names: Vec<String> = (0..k)
        .map(|i| format!("bench-scale-{run_id}-{i}"))
        .collect();
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
    let items: Vec<Value> = (0..c)
        .map(|i| objects::scale_channel(i, &names, &run_id, port))
        .collect();
    let extra = [
        "--watch-label-selector",
        selector.as_str(),
        "--json-allow-cidr=127.0.0.1/32",
    ];
    let mut out = Scale {
        channels: c as i64,
        per_channel: v as i64,
        namespaces: k as i64,
        ..Scale::default()
    };
    let progress = async || -> Result<(usize, i64)> {
        let api: Api<rancheros_operator::api::ManagedOSVersionChannel> =
            Api::all(kit.client.clone());
        let chs = api
            .list(&kube::api::ListParams::default().labels(&selector))
            .await?
            .items;
        let synced: Vec<_> = chs
            .iter()
            .filter(|c| kit::ready_reason(c) == "Synchronized")
            .collect();
        let versions = synced
            .iter()
            .filter_map(|c| c.status.as_ref()?.synced_versions)
            .sum();
        Ok((synced.len(), versions))
    };
    let measured = async {
        let (before, _) = kit.api_metrics().await?;
        let op = Operator::start(
            kit,
            binary,
            None,
            log_path(kit, "operator-scale.log"),
            &extra,
            &[],
        )?;
        with_operator(op, async |op: &Operator| {
            op.wait_filled(900.0).await?;
            log(&format!(
                "scale: {c} json channels x {v} versions in {k} namespaces"
            ));
            let t = Instant::now();
            kit::create_parallel(&items, &kit.workdir, 16).await?;
            let samples = std::cell::Cell::new(0);
            let last_versions = std::cell::Cell::new(0);
            wait(
                "every channel to be Synchronized",
                secs(3600.0),
                secs(10.0),
                || async {
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
                },
            )
            .await?;
            out.seconds = t.elapsed().as_secs_f64();
            out.versions = last_versions.get();
            out.cpu = op.cpu_seconds();
            let (after, _) = kit.api_metrics().await?;
            let grown = after.since(&before);
            out.lists = count(&grown, Some("managedosversions"), Some(&["LIST"]));
            out.writes = ["POST", "PATCH", "APPLY", "PUT"]
                .iter()
                .map(|verb| {
                    (
                        verb.to_string(),
                        count(&grown, Some("managedosversions"), Some(&[verb])),
                    )
                })
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
