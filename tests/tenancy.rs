//! One operator shared by tenants: sync slots that nobody else can hold or leak, a queue
//! that serves namespaces in turn and costs nothing while it waits, and runners that read a
//! Secret without their output reaching the channel's status or Events, and version
//! writes paced per namespace.

use crate::common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use rancheros_operator::api::ManagedOSVersionChannel;
use serde_json::{Value, json};

/// How long a channel may take to sync once a slot is free (pod start included), on a
/// loaded machine: generous; the failures these tests look for never sync at all.
const SYNC: Duration = Duration::from_secs(120);

/// A custom channel whose runner sleeps `seconds`, then writes one version named `version`.
fn slow_spec(seconds: u32, version: &str) -> Value {
    let data = channel_data(&[(version, "v1")]);
    let mut spec = custom_spec(&slow_script(seconds, &data));
    spec["options"]["timeout"] = json!("20m");
    spec
}

/// A pod that sleeps, labelled as a syncer pod of channel `label`, controlled by nobody.
fn foreign_pod(name: &str, label: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"rancheros.cattle.io/channel": label}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "sleep",
                "image": runner_image(),
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "securityContext": {"allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}}
            }]
        }
    }))
    .unwrap()
}

/// Waits until at least `n` of the namespace's channels wait for a slot.
async fn wait_queued(t: &TestNs, n: usize, what: &str) {
    t.eventually(what, SYNC, || async {
        let queued = all_channels(t)
            .await
            .iter()
            .filter(|c| is_queued(c))
            .count();
        (queued >= n).then_some(())
    })
    .await;
}

/// Waits until the pod's first container (init container, if it has one) runs.
async fn wait_running(t: &TestNs, api: &Api<Pod>, name: &str) {
    t.eventually(&format!("pod {name} to run"), SYNC, || async {
        let pod = api.get_opt(name).await.unwrap()?;
        let status = pod.status?;
        let first = status
            .init_container_statuses
            .filter(|s| !s.is_empty())
            .or(status.container_statuses)?;
        first[0]
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .map(|_| ())
    })
    .await;
}

fn reconciling_message(ch: &ManagedOSVersionChannel) -> String {
    ch.status
        .as_ref()
        .and_then(|s| s.sync_under_way())
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

fn is_queued(ch: &ManagedOSVersionChannel) -> bool {
    reconciling_message(ch).contains("waiting for a free sync slot")
}

/// Waits until channel `name` says it waits for a free sync slot.
async fn wait_channel_queued(t: &TestNs, name: &str) {
    t.eventually(&format!("{name} to wait for a slot"), SYNC, || async {
        is_queued(&t.channel(name).await).then_some(())
    })
    .await;
}

async fn all_channels(t: &TestNs) -> Vec<ManagedOSVersionChannel> {
    t.channels()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn foreign_labelled_pods_do_not_hold_sync_slots() {
    let mut t = TestNs::new("foreign-labelled-pods").await;
    // Anyone who may create pods can label them as syncer pods, even of a channel to come.
    for (name, label) in [("impostor-1", "fresh"), ("impostor-2", "other")] {
        t.pods()
            .create(&PostParams::default(), &foreign_pod(name, label))
            .await
            .unwrap_or_else(|e| panic!("creating pod {name}: {e}"));
    }
    for name in ["impostor-1", "impostor-2"] {
        wait_running(&t, &t.pods(), name).await;
    }
    t.start_operator(&["--max-concurrent-syncs=2"]);
    t.create_synced("fresh", slow_spec(0, "fresh-v1"), SYNC)
        .await;
    // The operator left them alone.
    for name in ["impostor-1", "impostor-2"] {
        let pod = t.pods().get(name).await.unwrap();
        assert!(pod.metadata.deletion_timestamp.is_none(), "{name} deleted");
    }
    t.cleanup().await;
}

#[tokio::test]
async fn channels_deleted_mid_sync_free_their_slots() {
    let mut t = TestNs::new("deleted-mid-sync").await;
    // Four slots: the namespace's share is two.
    t.start_operator(&["--max-concurrent-syncs=4"]);
    // Two hold the namespace's share with runners that sleep long; a third waits.
    t.create_channel("slow-1", slow_spec(900, "slow-1-v1"))
        .await;
    t.create_channel("slow-2", slow_spec(900, "slow-2-v1"))
        .await;
    for name in ["slow-1", "slow-2"] {
        wait_running(&t, &t.pods(), name).await;
    }
    t.create_channel("slow-3", slow_spec(900, "slow-3-v1"))
        .await;
    wait_channel_queued(&t, "slow-3").await;
    for name in ["slow-1", "slow-2", "slow-3"] {
        t.channels()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    t.create_synced("fresh", slow_spec(0, "fresh-v1"), SYNC)
        .await;
    t.cleanup().await;
}

/// The operator's log line that says the channel's syncer pod was started.
fn pod_started_line(log: &str, channel: &str) -> Option<String> {
    plain(log)
        .lines()
        .find(|l| l.contains("started the syncer pod") && l.ends_with(&format!("pod={channel}")))
        .map(str::to_string)
}

#[tokio::test]
async fn a_slot_freed_by_a_failed_pod_kept_for_its_log_wakes_the_waiting_channel() {
    let mut t = TestNs::new("kept-pod-frees-slot").await;
    t.create_secret("source-token", None, json!({"TOKEN": "unused"}))
        .await;
    t.start_operator(&["--max-concurrent-syncs=1"]);
    // A runner that reads a Secret and fails: its pod is kept for its log. The pod's phase
    // turns Failed a moment after the failure is decided; only then is the slot free.
    t.create_channel("kept", secret_spec("sleep 15; exit 3", false))
        .await;
    wait_running(&t, &t.pods(), "kept").await;
    t.create_channel("next", slow_spec(0, "next-v1")).await;
    wait_channel_queued(&t, "next").await;
    t.wait_ready("kept", "FailedToSync", SYNC).await;
    t.wait_ready("next", "Synchronized", SYNC).await;
    // A waiting channel looks for a free slot every 30 s anyway; what it must not need is
    // that look: it is woken when the slot frees. The log says what started its pod.
    let log = t.operator_log();
    let started = pod_started_line(&log, "next")
        .unwrap_or_else(|| panic!("no log line says next's pod started\n{}", plain(&log)));
    assert!(
        started.contains("object.reason="),
        "the log no longer says why a reconciliation ran: {started}"
    );
    assert!(
        !started.contains("object.reason=reconciler requested retry"),
        "next waited for its periodic look, not woken when the slot freed: {started}\n{}",
        plain(&log)
    );
    t.cleanup().await;
}

/// Namespaces `PREFIX-a` and `PREFIX-b`, and one operator (a's) for both with two sync
/// slots.
async fn two_namespaces_two_slots(prefix: &str) -> (TestNs, TestNs) {
    let mut a = TestNs::new(&format!("{prefix}-a")).await;
    let b = TestNs::new(&format!("{prefix}-b")).await;
    a.start_operator(&["--max-concurrent-syncs=2", &format!("--namespace={}", b.ns)]);
    (a, b)
}

#[tokio::test]
async fn one_namespace_with_20_channels_does_not_starve_another() {
    let (a, b) = two_namespaces_two_slots("fair-queue").await;
    for i in 0..20 {
        let name = format!("a{i:02}");
        a.create_channel(&name, slow_spec(5, &format!("{name}-v1")))
            .await;
    }
    // Namespace A's queue is long before B's channel arrives.
    wait_queued(&a, 15, "15 of namespace A's channels to queue").await;
    let synced = |chs: &[ManagedOSVersionChannel]| {
        chs.iter()
            .filter_map(|c| c.status.as_ref()?.last_synced_time.clone())
            .collect::<Vec<_>>()
    };
    let before = synced(&all_channels(&a).await).len();
    b.create_channel("only", slow_spec(5, "only-v1")).await;
    // Served first-come-first-served, it would wait for all 20 (some minutes).
    let only = b
        .eventually("namespace B's channel to sync", 6 * MINUTE, || async {
            let ch = b.channel("only").await;
            ch.status.as_ref()?.last_synced_time.clone()
        })
        .await;
    // Times have one-second resolution: a tie counts as synced before B's channel.
    let a_times = synced(&all_channels(&a).await);
    let ahead = a_times.iter().filter(|t| t.0 <= only.0).count();
    eprintln!(
        "namespace A: {before} synced when B's channel was created, {ahead} by the time it synced"
    );
    // Round robin: the two A syncs running when B arrived, and at most one or two more,
    // are served before B's. Margin for ties in one second.
    assert!(
        ahead <= before + 6,
        "namespace B's channel synced after {ahead} of namespace A's channels ({before} had \
         synced when it was created): namespaces are not served in turn\n{}",
        a.operator_log()
    );
    b.cleanup().await;
    a.cleanup().await;
}

/// Kills the operator process when the test ends, also on a failure.
/// Removes terminal colour codes.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a log line is an API request sent by a reconciliation.
fn by_a_reconciliation(line: &str) -> bool {
    line.contains("reconciling object{") && line.contains("requesting")
}

/// How long the no-API-calls test watches a waiting channel: three looks at --queue-poll=5s.
const LOOK_WINDOW: Duration = Duration::from_secs(16);

#[tokio::test]
async fn a_queued_channel_costs_no_api_calls_while_it_waits() {
    let mut t = TestNs::new("queued-costs-nothing").await;
    // The API client logs every request it sends ("requesting", with the URL) in the span
    // of the reconciliation that sends it: what the channels cost, read from the
    // operator's own log. The shared watch caches' requests (a watch that ends, a re-list
    // when the API server says the watch is too old) run in no reconciliation.
    // Looks come every --queue-poll (30 s by default): a short one makes the window short.
    let _operator = t.spawn_operator(
        &["--max-concurrent-syncs=1", "--queue-poll=5s"],
        &[
            (
                "RUST_LOG",
                "info,rancheros_operator=debug,kube_client::client::builder=debug",
            ),
            ("NO_COLOR", "1"),
        ],
    );
    t.create_channel("blocker", slow_spec(900, "blocker-v1"))
        .await;
    wait_running(&t, &t.pods(), "blocker").await;
    t.create_channel("waiter", slow_spec(0, "waiter-v1")).await;
    wait_channel_queued(&t, "waiter").await;
    // Saying that it waits was its last request (a status write); let it settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log_path = t.log_path(1);
    let start = std::fs::read_to_string(&log_path).unwrap().len();
    // The waiting channel looks for a slot every 5 s: two or more looks.
    tokio::time::sleep(LOOK_WINDOW).await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    let window = plain(&log[start..]);
    let looks = window
        .lines()
        .filter(|l| l.contains("reconciled") && l.contains("/waiter."))
        .count();
    let requests: Vec<&str> = window.lines().filter(|l| by_a_reconciliation(l)).collect();
    // The log shows requests at all: the status write that said the channel waits.
    assert!(
        plain(&log[..start])
            .lines()
            .any(|l| by_a_reconciliation(l)
                && l.contains("managedosversionchannels/waiter/status")),
        "the operator's log shows no API requests; the test cannot see them\n{}",
        plain(&log)
    );
    assert!(
        looks >= 2,
        "the waiting channel was looked at {looks} times in {LOOK_WINDOW:?}; the test needs two or more\n{}",
        plain(&log)
    );
    assert!(
        requests.is_empty(),
        "{} API requests by reconciliations while the only work was a channel waiting for a slot:\n{}",
        requests.len(),
        requests.join("\n")
    );
    // It still gets its turn.
    t.channels()
        .delete("blocker", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_ready("waiter", "Synchronized", SYNC).await;
    t.cleanup().await;
}

/// A custom channel whose runner runs `script` with the Secret `source-token` in its
/// environment: as `TOKEN` through `secretKeyRef`, or all of it through `envFrom`.
fn secret_spec(script: &str, env_from: bool) -> Value {
    let mut spec = custom_spec(script);
    if env_from {
        spec["options"]["envFrom"] = json!([{"secretRef": {"name": "source-token"}}]);
    } else {
        spec["options"]["env"] = json!([{"name": "TOKEN", "valueFrom":
            {"secretKeyRef": {"name": "source-token", "key": "TOKEN"}}}]);
    }
    spec
}

#[tokio::test]
async fn a_runner_that_reads_a_secret_gets_none_of_its_output_in_status_or_events() {
    let mut t = TestNs::new("secret-runner").await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let token = format!("s3cr3t-{nanos:x}");
    t.create_secret("source-token", None, json!({"TOKEN": token}))
        .await;
    // Failed pods kept for their log are finished: they hold no sync slot, so the six
    // channels below all get theirs with two slots.
    t.start_operator(&["--max-concurrent-syncs=2"]);

    let prints_and_fails = "echo \"the token is $TOKEN\"; echo \"$TOKEN\" >&2; exit 3";
    // Cut short inside a string that holds the token.
    let bad_json = "echo \"token: $TOKEN\"; \
                    printf '[{\"metadata\": {\"name\": \"%s' \"$TOKEN\" > /output/data";
    // Well-formed, but the token is a value and a key that break the rules.
    let bad_values = "echo \"token: $TOKEN\"; printf '[{\"metadata\": {\"name\": \"a\"}, \"%s\": 1, \"spec\": \
                      {\"version\": \"v1\", \"type\": \"%s\", \"metadata\": {\"upgradeImage\": \"%s\"}}}]' \
                      \"$TOKEN\" \"$TOKEN\" \"$TOKEN\" > /output/data";
    // (name, spec, whether the runner fails: then the pod is kept for its log; data
    // errors name the line and column only.)
    let cases = [
        ("key-ref-fails", secret_spec(prints_and_fails, false), true),
        ("env-from-fails", secret_spec(prints_and_fails, true), true),
        ("key-ref-bad-json", secret_spec(bad_json, false), false),
        ("env-from-bad-values", secret_spec(bad_values, true), false),
    ];
    for (name, spec, _) in &cases {
        t.create_channel(name, spec.clone()).await;
    }
    // The same runners without a Secret reference: their output is quoted, so what the
    // cases above must withhold would show if it were not withheld.
    let controls = [
        ("no-secret-fails", prints_and_fails),
        ("no-secret-bad-values", bad_values),
    ];
    for (name, script) in controls {
        let literal = format!("TOKEN={token}; {script}");
        t.create_channel(name, custom_spec(&literal)).await;
    }
    for (name, _) in controls {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        let message = ready_message(&ch);
        assert!(message.contains(&token), "{name}: {message}");
    }

    // Every case is checked before the test fails, so that a failure shows them all.
    let mut problems = Vec::new();
    for (name, _, runner_fails) in &cases {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        let message = ready_message(&ch);
        let status = serde_json::to_string(&ch.status).unwrap();
        if status.contains(&token) {
            problems.push(format!(
                "{name}: the status shows the Secret's value: {status}"
            ));
        }
        let events = t
            .eventually(&format!("an Event on {name}"), SYNC, || async {
                let events = channel_events(&t, name).await;
                (!events.is_empty()).then_some(events)
            })
            .await;
        for (_, reason, note) in &events {
            if note.contains(&token) {
                problems.push(format!(
                    "{name}: Event {reason} shows the Secret's value: {note}"
                ));
            }
        }
        if !runner_fails {
            if !message.contains("line 1, column") {
                problems.push(format!(
                    "{name}: the message does not say where the data is wrong: {message}"
                ));
            }
            continue;
        }
        let hint = format!("kubectl logs {name} -c runner");
        if !(message.contains(&hint) && message.contains("references a Secret")) {
            problems.push(format!(
                "{name}: the message does not say to read the pod's log: {message}"
            ));
        }
        if !events.iter().any(|(_, _, note)| note.contains(&hint)) {
            problems.push(format!(
                "{name}: no Event says to read the pod's log: {events:?}"
            ));
        }
        // The log the message points to is there, and holds what was withheld.
        let params = kube::api::LogParams {
            container: Some("runner".into()),
            ..Default::default()
        };
        match t.pods().logs(name, &params).await {
            Ok(logs) if logs.contains(&token) => {}
            Ok(logs) => problems.push(format!("{name}: the runner's log: {logs}")),
            Err(e) => problems.push(format!("{name}: the pod's runner log cannot be read: {e}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    t.cleanup().await;
}

/// A pod forged as channel `name`'s syncer pod: its name, its label and a controller owner
/// reference to it (whoever may create pods can write all three); it sleeps.
fn forged_pod(ch: &ManagedOSVersionChannel) -> Pod {
    let name = ch.metadata.name.clone().unwrap();
    let mut pod = foreign_pod(&name, &name);
    pod.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
            "name": name, "uid": ch.metadata.uid.clone().unwrap(), "controller": true
        }))
        .unwrap(),
    ]);
    pod
}

fn stalled(ch: &ManagedOSVersionChannel) -> bool {
    ch.status
        .as_ref()
        .and_then(|s| s.condition("Stalled"))
        .is_some_and(|c| c.status == "True")
}

#[tokio::test]
async fn forged_pods_of_stalled_channels_do_not_hold_sync_slots() {
    let mut t = TestNs::new("forged-stalled-pods").await;
    // Quick retries, so that the channels are past theirs (Stalled) within seconds.
    t.start_operator(&["--max-concurrent-syncs=2", "--retry-delay=1s"]);
    for name in ["stalled-1", "stalled-2"] {
        t.create_channel(name, custom_spec("exit 1")).await;
    }
    for name in ["stalled-1", "stalled-2"] {
        t.eventually(&format!("{name} to stall"), 3 * SYNC, || async {
            let ch = t.channel(name).await;
            (stalled(&ch) && !reconciling(&ch)).then_some(())
        })
        .await;
        t.wait_gone(&t.pods(), name, &format!("{name}'s own pod to go"), SYNC)
            .await;
    }
    // Backing off for their interval: no decision looks at their pods until then.
    for name in ["stalled-1", "stalled-2"] {
        let pod = forged_pod(&t.channel(name).await);
        t.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("forging pod {name}: {e}"));
        wait_running(&t, &t.pods(), name).await;
    }
    t.create_synced("fresh", slow_spec(0, "fresh-v1"), SYNC)
        .await;
    t.cleanup().await;
}

#[tokio::test]
async fn three_sleeping_runners_of_one_namespace_leave_another_a_slot() {
    let (a, b) = two_namespaces_two_slots("sleepers").await;
    for i in 1..=3 {
        a.create_channel(
            &format!("sleeper-{i}"),
            slow_spec(3600, &format!("s{i}-v1")),
        )
        .await;
    }
    let running = a
        .eventually("a sleeper's pod", SYNC, || async {
            let pods = a.pods().list(&ListParams::default()).await.unwrap().items;
            pods.first().and_then(|p| p.metadata.name.clone())
        })
        .await;
    wait_running(&a, &a.pods(), &running).await;
    wait_queued(&a, 1, "a sleeper to wait for a slot").await;
    // Namespace A holds half the slots (one of two): B's channel starts at once.
    b.create_synced("prompt", slow_spec(0, "prompt-v1"), SYNC)
        .await;
    let pods = a.pods().list(&ListParams::default()).await.unwrap().items;
    assert_eq!(pods.len(), 1, "namespace A holds more than half the slots");
    b.cleanup().await;
    a.cleanup().await;
}

#[tokio::test]
async fn thirty_on_demand_requests_in_thirty_seconds_start_at_most_four_syncs() {
    let mut t = TestNs::new("request-storm").await;
    // The default --min-request-interval (10s).
    t.start_operator(&[]);
    t.create_synced("asked", slow_spec(0, "asked-v1"), SYNC)
        .await;
    let before = t.pods_created();
    let start = std::time::Instant::now();
    for i in 0..30 {
        t.request_sync("asked", &format!("storm-{i}")).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let storm = start.elapsed();
    let during = t.pods_created() - before;
    // Never dropped: the last request is served, once its window ends.
    t.eventually("the last request to be served", SYNC, || async {
        let ch = t.channel("asked").await;
        let served = ch.status.as_ref()?.sync_requested_at.clone()?;
        (served == "storm-29"
            && !reconciling(&ch)
            && ready_reason(&ch).as_deref() == Some("Synchronized"))
        .then_some(())
    })
    .await;
    eprintln!("{during} syncer pods during {storm:?} of requests");
    // One per 10 s window (three in 30 s), one more for a window cut by the storm's start.
    assert!(
        during <= 4,
        "{during} syncer pods for 30 requests in {storm:?} (--min-request-interval 10s)"
    );
    t.cleanup().await;
}

/// Serves `body` at `/channel.json` on an ephemeral loopback port; returns its URL.
async fn serve_json(body: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/channel.json",
        axum::routing::get(move || {
            let body = body.clone();
            async move { body }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/channel.json")
}

#[tokio::test]
async fn a_namespace_writing_600_versions_is_paced_and_another_namespace_syncs_meanwhile() {
    // Well below what the API server takes from one namespace unpaced (about 50 creates a
    // second on the loaded local cluster), so that the pacing shows.
    const QPS: usize = 20;
    const BURST: usize = 10;
    const BIG: usize = 600;
    let mut a = TestNs::new("paced-writes-a").await;
    let b = TestNs::new("paced-writes-b").await;
    a.start_operator(&[
        &format!("--namespace={}", b.ns),
        "--egress-allow-cidr=127.0.0.0/8",
        // A namespace alone may use all of --write-qps (the pacing lends what others leave
        // unused), so the total is what bounds A here.
        &format!("--write-qps={QPS}"),
        &format!("--namespace-write-burst={BURST}"),
    ]);
    let names: Vec<(String, String)> = (0..BIG)
        .map(|i| (format!("big-{i:04}"), format!("v{i}")))
        .collect();
    let big = serve_json(channel_data(&names).to_string()).await;
    let small = serve_json(channel_data(&[("small-v1", "v1")]).to_string()).await;
    let json = |uri: &str| json!({"type": "json", "options": {"uri": uri, "timeout": "10s"}});
    a.create_channel("big", json(&big)).await;
    // A's sync is writing (its creates under way) when B's channel is applied.
    a.eventually("namespace A's first version", 2 * SYNC, || async {
        (!a.versions().await.is_empty()).then_some(())
    })
    .await;
    b.create_synced("small", json(&small), SYNC).await;
    let written = a.versions().await.len();
    let big_ch = a.channel("big").await;
    eprintln!("namespace A had {written} of {BIG} versions when B's channel synced");
    assert!(
        written < BIG && ready_reason(&big_ch).as_deref() != Some("Synchronized"),
        "namespace B's channel synced only after namespace A's sync had written all it had \
         ({written} versions, A's Ready {:?})",
        ready_reason(&big_ch)
    );
    a.wait_ready("big", "Synchronized", 2 * SYNC).await;
    // A's creates, by the second the API server stamped them.
    let seconds: Vec<i64> = a
        .versions()
        .await
        .iter()
        .map(|v| {
            v.metadata
                .creation_timestamp
                .as_ref()
                .unwrap()
                .0
                .as_second()
        })
        .collect();
    assert_eq!(seconds.len(), BIG);
    let span = seconds.iter().max().unwrap() - seconds.iter().min().unwrap();
    let span = usize::try_from(span).unwrap();
    eprintln!("namespace A: {BIG} versions created within {span} s (--write-qps {QPS})");
    // Whole seconds: the first and the last may each be a part of one.
    assert!(
        BIG <= QPS * (span + 1) + BURST,
        "namespace A created {BIG} versions within {span} s: faster than \
         --write-qps {QPS} (burst {BURST})"
    );
    assert!(a.operator_running(), "{}", a.operator_log());
    b.cleanup().await;
    a.cleanup().await;
}

/// The watch caches fill by streaming lists where the API server serves them (this
/// cluster's does): one watch each, and no paginated LIST, which at 100,000 versions is
/// 200 requests of 500 objects at every start and every expired watch. The channel still
/// syncs from those caches.
#[tokio::test]
async fn the_watch_caches_fill_by_streaming_lists_not_paginated_lists() {
    let mut t = TestNs::new("streaming-lists").await;
    let _operator = t.spawn_operator(
        &[],
        &[
            (
                "RUST_LOG",
                "info,rancheros_operator=debug,kube_client::client::builder=debug",
            ),
            ("NO_COLOR", "1"),
        ],
    );
    t.synced_custom("streamed", &channel_data(&[("streamed-v1", "v1")]), SYNC)
        .await;
    let log = plain(&std::fs::read_to_string(t.log_path(1)).unwrap());
    assert!(
        log.contains("watch caches fill by streaming lists"),
        "the operator did not choose streaming lists\n{log}"
    );
    let requests: Vec<&str> = log.lines().filter(|l| l.contains("requesting")).collect();
    for resource in ["managedosversions", "managedosversionchannels", "pods"] {
        let to = |l: &&&str| l.contains(&format!("/namespaces/{}/{resource}?", t.ns));
        assert!(
            requests
                .iter()
                .filter(to)
                .any(|l| l.contains("watch=true") && l.contains("sendInitialEvents=true")),
            "no streaming list of {resource}\n{}",
            requests.join("\n")
        );
        // The watcher's paginated LIST asks 500 at a time.
        let listed: Vec<&&str> = requests
            .iter()
            .filter(to)
            .filter(|l| l.contains("limit=500"))
            .collect();
        assert!(
            listed.is_empty(),
            "{resource} filled by a paginated LIST:\n{listed:?}"
        );
    }
    t.cleanup().await;
}
