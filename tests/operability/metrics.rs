//! Per-channel metrics, reported and gone with the channel.

use super::*;

// ---------------------------------------------------------------------------------------
// 3. Per-channel metrics

/// The samples of a scrape: `(metric, labels) -> value`.
fn samples(text: &str) -> BTreeMap<(String, BTreeMap<String, String>), f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_string(), v.trim_matches('"').to_string())
            })
            .collect();
        out.insert((name.to_string(), labels), value.parse().unwrap());
    }
    out
}

/// A channel's gauges in a scrape, by metric name.
fn channel_series(text: &str, ns: &str, name: &str) -> BTreeMap<String, f64> {
    samples(text)
        .into_iter()
        .filter(|((_, labels), _)| {
            labels.get("namespace").map(String::as_str) == Some(ns)
                && labels.get("name").map(String::as_str) == Some(name)
        })
        .map(|((metric, _), v)| (metric, v))
        .collect()
}

#[tokio::test]
async fn per_channel_metrics_report_and_disappear_with_the_channel() {
    let mut t = TestNs::new("metrics").await;
    let port = free_port();
    // Open metrics: who may read them is tests/hardening.rs's question.
    t.start_operator(&[
        &format!("--metrics-address=127.0.0.1:{port}"),
        "--metrics-insecure",
    ]);
    let data = channel_data(&[("a", "v1"), ("b", "v2")]);
    t.create_custom("good", &data).await;
    t.create_channel("bad", custom_spec("exit 3")).await;
    let good = t.wait_ready("good", "Synchronized", SYNC).await;
    t.wait_ready("bad", "FailedToSync", SYNC).await;
    let synced_at = good
        .status
        .as_ref()
        .unwrap()
        .last_synced_time
        .as_ref()
        .unwrap()
        .0
        .as_second() as f64;

    let prefix = "rancheros_operator_channel_";
    let ns = t.ns.clone();
    let text = t
        .eventually("both channels' gauges", SYNC, || async {
            let text = scrape(port).await?;
            let good = channel_series(&text, &ns, "good");
            let bad = channel_series(&text, &ns, "bad");
            (good.get(&format!("{prefix}ready")) == Some(&1.0)
                && bad
                    .get(&format!("{prefix}consecutive_failures"))
                    .is_some_and(|n| *n >= 1.0))
            .then_some(text)
        })
        .await;
    let good = channel_series(&text, &ns, "good");
    let bad = channel_series(&text, &ns, "bad");
    assert_eq!(good[&format!("{prefix}ready")], 1.0, "{text}");
    assert_eq!(good[&format!("{prefix}versions")], 2.0, "{text}");
    assert_eq!(
        good[&format!("{prefix}consecutive_failures")],
        0.0,
        "{text}"
    );
    assert_eq!(
        good[&format!("{prefix}last_success_timestamp_seconds")],
        synced_at,
        "{text}"
    );
    // 1h stretched by the channel's share of the 10% interval jitter.
    let interval = good[&format!("{prefix}sync_interval_seconds")];
    assert!((3600.0..=3960.0).contains(&interval), "{text}");
    assert_eq!(good[&format!("{prefix}suspended")], 0.0, "{text}");
    assert_eq!(bad[&format!("{prefix}ready")], 0.0, "{text}");
    assert_eq!(bad[&format!("{prefix}versions")], 0.0, "{text}");
    assert!(
        !bad.contains_key(&format!("{prefix}last_success_timestamp_seconds")),
        "{text}"
    );
    let all = samples(&text);
    assert!(
        all.keys().any(|(m, l)| m == "rancheros_operator_build_info"
            && l.get("version").map(String::as_str) == Some(env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(
        all.keys()
            .any(|(m, _)| m == "rancheros_operator_sync_queue_length"),
        "{text}"
    );

    // Deleted: its series go; the other channel's stay.
    t.channels()
        .delete("good", &DeleteParams::default())
        .await
        .unwrap();
    let text = t
        .eventually("the deleted channel's series to go", SYNC, || async {
            let text = scrape(port).await?;
            channel_series(&text, &ns, "good")
                .is_empty()
                .then_some(text)
        })
        .await;
    assert_eq!(
        channel_series(&text, &ns, "bad").len(),
        // ready, versions, consecutive failures, interval, suspended (no success yet)
        5,
        "the other channel keeps its series: {text}"
    );
    t.cleanup().await;
}
