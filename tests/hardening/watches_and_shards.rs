//! Objects that could stop a watch, and shards that split the channels between operators.

use super::*;

/// JSON objects nested `depth` deep: past serde_json's limit of 128 when kube decodes a
/// LIST page or a watch event that holds it.
fn nested(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

/// Creates an object from raw JSON text (a typed client could not read the answer back).
async fn create_raw(t: &TestNs, plural: &str, body: String) -> Result<(), String> {
    let request = http::Request::post(format!(
        "/apis/rancheros.cattle.io/v1/namespaces/{}/{plural}",
        t.ns
    ))
    .header("Content-Type", "application/json")
    .body(body.into_bytes())
    .unwrap();
    t.client
        .request_text(request)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_deep_object_in_one_namespace_stops_no_watch_before_or_after_a_restart() {
    let mut a = TestNs::new("deep-object-a").await;
    let b = TestNs::new("deep-object-b").await;
    // A version a tenant creates itself, nested under its free-form spec.metadata.
    let deep_version = format!(
        r#"{{"apiVersion":"rancheros.cattle.io/v1","kind":"ManagedOSVersion","metadata":{{"name":"deep"}},"spec":{{"version":"v1","type":"container","metadata":{}}}}}"#,
        nested(130)
    );
    create_raw(&a, "managedosversions", deep_version)
        .await
        .expect("creating the deep version");
    // And a channel, where the schema leaves a field free-form (a typed schema refuses or
    // prunes it: then there is no undecodable channel to skip).
    let spec = custom_spec("exit 1");
    let deep_channel = format!(
        r#"{{"apiVersion":"rancheros.cattle.io/v1","kind":"ManagedOSVersionChannel","metadata":{{"name":"deep"}},"spec":{{"type":"custom","options":{},"upgradeContainer":{{"x":{}}}}}}}"#,
        spec["options"],
        nested(130)
    );
    // Whether the API server kept it that deep (a typed schema prunes the field).
    let deep_channel_kept = match create_raw(&a, "managedosversionchannels", deep_channel).await {
        Err(e) => {
            eprintln!("the deep channel was refused at apply: {e}");
            false
        }
        Ok(()) => {
            let url = format!(
                "/apis/rancheros.cattle.io/v1/namespaces/{}/managedosversionchannels/deep",
                a.ns
            );
            let request = http::Request::get(url).body(Vec::new()).unwrap();
            let text = a.client.request_text(request).await.unwrap();
            text.contains(&nested(130))
        }
    };
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let metrics = format!("--metrics-address=127.0.0.1:{port}");
    // Namespace A, with the deep objects, is the one the operator checks at start. Metrics
    // are open: who may read them is another test's question.
    let args = [
        format!("--namespace={}", b.ns),
        metrics,
        "--metrics-insecure".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for run in ["before", "after"] {
        a.start_operator(&args);
        let script = write_script(&channel_data(&[(&format!("a-{run}"), "v1")]));
        a.create_channel(&format!("a-{run}"), custom_spec(&script))
            .await;
        let script = write_script(&channel_data(&[(&format!("b-{run}"), "v1")]));
        b.create_channel(&format!("b-{run}"), custom_spec(&script))
            .await;
        // Namespace A's own channel too: the deep objects stop not even their own watch.
        a.wait_ready(&format!("a-{run}"), "Synchronized", SYNC)
            .await;
        b.wait_ready(&format!("b-{run}"), "Synchronized", SYNC)
            .await;
        assert!(a.operator_running(), "{}", a.operator_log());
        let (status, _) = http_get(port, "/readyz", None)
            .await
            .expect("/readyz answers");
        assert!(status.contains(" 200"), "/readyz: {status}");
        let (_, text) = http_get(port, "/metrics", None)
            .await
            .expect("/metrics answers");
        let counted = |kind: &str| {
            let series = format!("rancheros_operator_undecodable_objects_total{{kind=\"{kind}\"}}");
            text.lines()
                .find(|l| l.starts_with(&series))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .is_some_and(|n| n >= 1.0)
        };
        // The deep version is no longer a problem to decode: the versions' cache reads
        // metadata only (no spec, no field sets). The deep channel is skipped and counted.
        assert!(
            counted("channel") || !deep_channel_kept,
            "the deep channel is not counted ({run} the restart):\n{text}"
        );
        let log = a.operator_log();
        assert!(
            !log.contains("cannot reach the Kubernetes API server")
                && (log.contains("skipping an object that cannot be decoded")
                    || !deep_channel_kept),
            "{log}"
        );
        a.kill_operator();
    }
    b.cleanup().await;
    a.cleanup().await;
}

/// Sets the channel's `shard` label.
async fn label_shard(t: &TestNs, channel: &str, shard: &str) {
    let patch = json!({"metadata": {"labels": {"shard": shard}}});
    t.channels()
        .patch(
            channel,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
}

/// Whether the operator serving metrics on `port` reports the channel (its series).
async fn reports(port: u16, channel: &str) -> bool {
    let (_, text) = http_get(port, "/metrics", None).await.unwrap_or_default();
    text.contains(&format!("name=\"{channel}\""))
}

/// The leader line of `check` for the shards' Lease (`sharded`) in the test namespace.
async fn check_leader(t: &TestNs, selector: Option<&str>) -> String {
    let mut args = vec![
        "check".to_string(),
        "-n".into(),
        t.ns.clone(),
        "--operator-namespace".into(),
        t.ns.clone(),
        "--leader-election-lease=sharded".into(),
    ];
    args.extend(selector.map(|s| format!("--watch-label-selector={s}")));
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
    });
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("check did not exit within 60 s")
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.contains(" leader: "))
        .unwrap_or_else(|| {
            panic!(
                "no leader line: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .to_string()
}

/// One shard's operator process, killed when the test ends, also on a failure.
struct Shard {
    child: Spawned,
    port: u16,
}

impl Shard {
    fn start(t: &mut TestNs, shard: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let args = [
            format!("--watch-label-selector=shard={shard}"),
            format!("--metrics-address=127.0.0.1:{port}"),
            "--metrics-insecure".into(),
            "--leader-election=true".into(),
            format!("--leader-election-namespace={}", t.ns),
            // The same Lease name for both: each shard derives its own from it.
            "--leader-election-lease=sharded".into(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let pod_name = format!("shard-{shard}");
        let child = t.spawn_operator(&args, &[("POD_NAME", pod_name.as_str())]);
        Shard { child, port }
    }
}

#[tokio::test]
async fn two_shards_serve_only_their_own_channels_and_a_relabelled_channel_moves_once() {
    let mut t = TestNs::new("shards").await;
    for (name, shard) in [("ca", "a"), ("cb", "b")] {
        let data = channel_data(&[(&format!("{name}-v1"), "v1")]);
        t.create_custom(name, &data).await;
        label_shard(&t, name, shard).await;
    }
    let a = Shard::start(&mut t, "a");
    let mut b = Shard::start(&mut t, "b");
    t.wait_ready("ca", "Synchronized", SYNC).await;
    t.wait_ready("cb", "Synchronized", SYNC).await;
    // Both lead at once: one Lease per shard.
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    let holders: Vec<String> = leases
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| l.spec?.holder_identity)
        .collect();
    assert_eq!(holders.len(), 2, "{holders:?}");
    // `check` finds each shard's Lease from its selector; the base name alone is none.
    for shard in ["a", "b"] {
        let line = check_leader(&t, Some(&format!("shard={shard}"))).await;
        assert!(
            line.starts_with("ok") && line.contains(&format!("shard-{shard}")),
            "{line}"
        );
    }
    let line = check_leader(&t, None).await;
    assert!(
        line.starts_with("FAIL") && line.contains("does not exist"),
        "{line}"
    );
    // Each reports only its own.
    t.eventually("each shard to report its own channel", SYNC, || async {
        (reports(a.port, "ca").await && reports(b.port, "cb").await).then_some(())
    })
    .await;
    assert!(!reports(a.port, "cb").await && !reports(b.port, "ca").await);
    assert_eq!(t.pods_created(), 2);

    // Shard b stopped: a keeps serving its channel, and touches none of b's.
    let _ = b.child.kill();
    let _ = b.child.wait();
    let before_b = t.channel("cb").await;
    let before_a = t.channel("ca").await;
    t.request_sync("cb", "while-b-is-down").await;
    t.sync_again("ca", "while-b-is-down", &before_a, SYNC).await;
    let after_b = t.channel("cb").await;
    assert_eq!(
        after_b.status, before_b.status,
        "shard a touched shard b's channel"
    );
    assert_eq!(t.pods_created(), 3, "{}", t.operator_log());

    // ca moves to shard b (started again): picked up without a sync (its status says it
    // is not due) and without a pod left behind; then b serves it, a does not.
    let b = Shard::start(&mut t, "b");
    t.wait_next_attempt("cb", &before_b, SYNC).await; // b serves the request it missed
    let moved = t.channel("ca").await;
    label_shard(&t, "ca", "b").await;
    t.eventually("the moved channel to change shards", SYNC, || async {
        (reports(b.port, "ca").await && !reports(a.port, "ca").await).then_some(())
    })
    .await;
    let ca = t.channel("ca").await;
    let attempt = |c: &rancheros_operator::api::ManagedOSVersionChannel| {
        c.status
            .as_ref()
            .and_then(|s| s.last_sync_attempt_time.clone())
    };
    assert_eq!(attempt(&ca), attempt(&moved), "the move started a sync");
    assert_eq!(t.pods_created(), 4, "{}", t.operator_log());
    let moved = t.channel("ca").await;
    t.sync_again("ca", "after-the-move", &moved, SYNC).await;
    assert_eq!(
        t.pods_created(),
        5,
        "one sync, one pod: {}",
        t.operator_log()
    );
    t.wait_no_pods(SYNC).await;
    drop((a, b));
    t.cleanup().await;
}
