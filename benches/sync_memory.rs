//! Peak heap of one sync's decision on the largest channel data the operator accepts
//! (`--max-output-bytes`, 16 MiB by default), measured with a counting allocator: the
//! display log, its decoding, the parse and the versions to write, all at once. The
//! figure, times `--max-concurrent-syncs`, is the outputs' part of the operator's
//! worst-case memory (docs/security.md has the arithmetic and the chart's limit).
//!
//!     cargo bench --bench sync_memory
//!
//! Three shapes of data fill the bound: versions like published ones (about 1.6 KiB each,
//! up to `--max-versions-per-channel`), a few huge versions, and as many tiny versions as
//! fit (refused for their number, after being read). A fourth is the operator benchmark's
//! big channel (5,000 small versions, 1.5 MiB). A report, not a test: it prints the peak
//! per shape, its ratio to the data's size (the baseline, measured in the same run), and
//! what the decision keeps for the writes (the planned versions).

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::counting::{LIVE, PEAK};
use common::published_spec;
use k8s_openapi::jiff::Timestamp;
use rancheros_operator::api::{ManagedOSVersionChannel, ManagedOSVersionChannelStatus};
use rancheros_operator::syncer::frame as display;
use rancheros_operator::syncer::{self, Effect, Observation, Settings};
use serde_json::{Value, json};

const MAX_OUTPUT: usize = 16 << 20;

fn version(i: usize, metadata_bytes: usize) -> Value {
    let mut spec = published_spec(i);
    spec["metadata"]["notes"] = json!("x".repeat(metadata_bytes));
    json!({
        "metadata": {"name": format!("v1-{i}"), "labels": {"os": "sle-micro"}},
        "spec": spec
    })
}

/// Channel data of about `MAX_OUTPUT` bytes: as many versions of this size as fit.
fn data(metadata_bytes: usize, most: usize) -> Vec<u8> {
    let mut items = Vec::new();
    let mut size = 2;
    for i in 0..most {
        let item = version(i, metadata_bytes).to_string();
        if size + item.len() + 1 > MAX_OUTPUT {
            break;
        }
        size += item.len() + 1;
        items.push(item);
    }
    format!("[{}]", items.join(",")).into_bytes()
}

/// The peak heap of one decision on this data, above what was live before it; what the
/// decision keeps for the writes (live after it, the data still held); the number of
/// versions it would write.
fn peak_of(
    channel: &ManagedOSVersionChannel,
    settings: &Settings,
    data: &[u8],
) -> (usize, usize, usize) {
    let mut log = Vec::new();
    display::write_framed(&mut log, data).expect("framing into memory");
    let pod = pod_for(channel, settings);
    // The operator recorded creating the pod (its status names the pod's uid): a pod it
    // did not record is never read.
    let mut channel = channel.clone();
    channel.status = Some(ManagedOSVersionChannelStatus {
        syncer_pod_uid: pod.metadata.uid.clone(),
        ..Default::default()
    });
    let channel = &channel;
    let resolved = settings.resolve_channel(channel);
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let decision = syncer::decide(
        &Observation {
            pod: Some(&pod),
            display_log: Some(&log),
            versions: Some(&[]),
            ..Observation::new(channel, Timestamp::now())
        },
        settings,
        &resolved,
    );
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let kept = LIVE.load(Ordering::Relaxed) - before;
    let writes = decision
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::ApplyVersion { .. }))
        .count();
    (peak, kept, writes)
}

/// The channel's syncer pod, its output ready in the display log.
fn pod_for(
    channel: &ManagedOSVersionChannel,
    settings: &Settings,
) -> k8s_openapi::api::core::v1::Pod {
    let first = syncer::decide(
        &Observation::new(channel, Timestamp::now()),
        settings,
        &settings.resolve_channel(channel),
    );
    let mut pod = first
        .pod_to_create()
        .cloned()
        .expect("a new channel starts a pod");
    pod.metadata.uid = Some("pod".into());
    pod.status = serde_json::from_value(json!({
        "phase": "Running",
        "initContainerStatuses": [{"name": "runner", "ready": true, "restartCount": 0, "image": "",
            "imageID": "", "state": {"terminated": {"exitCode": 0}}}],
        "containerStatuses": [{"name": "display", "ready": true, "restartCount": 0, "image": "",
            "imageID": "", "state": {"running": {}}}]
    }))
    .expect("a pod status");
    pod
}

fn main() {
    let mut channel: ManagedOSVersionChannel = serde_json::from_value(json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
        "metadata": {"name": "sle-micro", "namespace": "fleet-default", "uid": "u", "generation": 1},
        "spec": {"type": "custom", "options": {"image": "channel:1"}}
    }))
    .expect("a channel");
    channel.status = None;
    let settings = Settings {
        operator_image: "rancheros-operator:dev".into(),
        sync_timeout: Duration::from_secs(300),
        max_output_bytes: MAX_OUTPUT as u64,
        retry_delay: Duration::from_secs(10),
        max_concurrent_syncs: 10,
        json_cache_bytes: 64 << 20,
        max_versions_per_channel: 10_000,
        syncer_image_pull_secrets: Vec::new(),
        ..Settings::default()
    };
    println!(
        "peak heap of one sync's decision, data up to {} MiB:",
        MAX_OUTPUT >> 20
    );
    let mut worst = 0.0_f64;
    for (shape, metadata_bytes, most) in [
        ("published-like versions (10,000)", 1_400, 10_000),
        ("huge versions (1 MiB each)", 1_000_000, 100),
        ("tiny versions, as many as fit", 0, usize::MAX),
        ("small versions (5,000: the big channel)", 0, 5_000),
    ] {
        let data = data(metadata_bytes, most);
        let (peak, kept, writes) = peak_of(&channel, &settings, &data);
        let ratio = peak as f64 / data.len() as f64;
        if data.len() > MAX_OUTPUT / 2 {
            // The bound's worst case is of data that fills it.
            worst = worst.max(ratio);
        }
        println!(
            "  {shape:<40} data {:>5.1} MiB  peak {:>6.1} MiB  ratio {ratio:>4.1}  kept for the writes {:>5.1} MiB ({writes} writes)",
            data.len() as f64 / 1_048_576.0,
            peak as f64 / 1_048_576.0,
            kept as f64 / 1_048_576.0,
        );
    }
    println!(
        "  worst ratio peak / data: {worst:.1} (x {} MiB x 10 syncs = {:.0} MiB)",
        MAX_OUTPUT >> 20,
        worst * (MAX_OUTPUT >> 20) as f64 * 10.0
    );
}
