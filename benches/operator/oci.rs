//! 6: the same Elemental-shaped channel as a custom and as an oci channel.

use std::path::Path;
use std::time::Instant;

use color_eyre::eyre::{Result, WrapErr};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

use crate::Args;
use crate::kit::{self, Kit, Operator, secs, wait};
use crate::objects;
use crate::parse::{self, WRITES, count};
use crate::results::{Oci, OciSide};
use crate::scenarios::{log_path, with_operator};

/// Polls one channel every 50 ms until `done` holds for it: a watch would end when another
/// tree's tests re-install the CRDs (they do on this shared cluster).
async fn poll(
    kit: &Kit,
    ns: &str,
    name: &str,
    done: impl Fn(&rancheros_operator::api::ManagedOSVersionChannel) -> bool,
) -> Result<()> {
    let api = kit.channels(ns);
    wait(
        &format!("{name} to sync"),
        secs(300.0),
        secs(0.05),
        || async { Ok(api.get_opt(name).await?.is_some_and(|c| done(&c))) },
    )
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
    let args = [
        "copy",
        "--preserve-digests",
        "--dest-tls-verify=false",
        "--dest-creds",
        &creds,
        &source,
        &dest,
    ];
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
        .patch(
            "pull",
            &PatchParams::apply("bench-operator").force(),
            &Patch::Apply(&secret),
        )
        .await?;
    let logfile = log_path(kit, "operator-oci.log");
    kit.crds().await?;
    let rust_log = format!("{},rancheros_operator::registry=debug", parse::REQUEST_LOG);
    let env = [("RUST_LOG", rust_log.as_str()), ("NO_COLOR", "1")];
    let extra = [
        "--json-allow-cidr=127.0.0.1/32",
        "--allow-insecure-registries",
    ];
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
                let script = format!(
                    "printf '%s' {} > /data/output",
                    objects::shell_quote(&data.to_string())
                );
                let mut custom = objects::channel("custom", ns, &kit.runner_image, &script, true);
                custom["spec"]["deleteNoLongerInSyncVersions"] = true.into();
                custom
            } else {
                push_elemental_image(kit, &format!("{ns}/elemental-channel"), &data)?;
                objects::oci_channel("oci", ns, &image)
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
            poll(kit, ns, name, |c| kit::synced_after(c, &value)).await?;
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
                resync_writes: count(
                    &after.since(&before),
                    Some("managedosversions"),
                    Some(WRITES),
                ),
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
