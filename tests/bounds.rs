//! Bounded durations and unprivileged runners on the real cluster: what no flag can allow
//! is refused by the API server (the CRD rules), what the flags bound is
//! `InvalidConfiguration` naming the bound and the flag, and no channel can crash the
//! operator or get a runner that could escape its pod unless the admin allows it.

mod common;

use std::time::Duration;

use common::*;
use kube::api::PostParams;
use rancheros_operator::api::ManagedOSVersionChannel;
use serde_json::{Value, json};

const SYNC: Duration = Duration::from_secs(120);

/// Creates a channel; the API server's refusal, if it refuses, as its message. The CRDs are
/// installed again first: the cluster is shared, and a test built from other code may have
/// installed its own version of them meanwhile.
async fn try_create(t: &TestNs, name: &str, spec: &Value) -> Result<(), String> {
    install_crds(&t.client).await;
    let channel: ManagedOSVersionChannel = serde_json::from_value(json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    match t.channels().create(&PostParams::default(), &channel).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{name}: {status:?}");
            Err(status.message)
        }
        Err(e) => panic!("creating channel {name}: {e}"),
    }
}

fn synced_spec() -> Value {
    custom_spec(&write_script(&channel_data(&[("a", "v1")])))
}

/// The value that overflowed `timeout + 60s` when a syncer pod was built (the operator
/// exited 101, on every restart), and a sync interval of the same size. The API server
/// refuses both; should an object get in (a CRD from before the rules), the operator
/// reports it as invalid. Either way the operator stays up and other channels sync.
#[tokio::test]
async fn a_timeout_of_5124095576030431h_is_refused_and_the_operator_keeps_running() {
    let mut t = TestNs::new("huge-durations").await;
    t.start_operator(&[]);
    let mut timeout = synced_spec();
    timeout["options"]["timeout"] = json!("5124095576030431h");
    let mut interval = synced_spec();
    interval["syncInterval"] = json!("5124095576030431h");
    let cases = [
        (
            "huge-timeout",
            timeout,
            "spec.options.timeout must be more than 0 and at most 8760h (a year)",
            "spec.options.timeout: \"5124095576030431h\" is longer than this operator's maximum of 1h (--max-sync-timeout)",
        ),
        (
            "huge-interval",
            interval,
            "spec.syncInterval must be more than 0 and at most 8760h (a year)",
            "spec.syncInterval: \"5124095576030431h\" is longer than a year; use at most 8760h",
        ),
    ];
    for (name, spec, refused, invalid) in &cases {
        match try_create(&t, name, spec).await {
            Err(message) => assert!(message.contains(refused), "{name}: {message}"),
            Ok(()) => {
                let ch = t.wait_ready(name, "InvalidConfiguration", SYNC).await;
                assert_eq!(ready_message(&ch), *invalid);
            }
        }
    }
    // Values past what the API server's own duration type holds are refused by the rule
    // with its message, not by an evaluation error.
    for huge in [
        "9223372036854775808ns",
        "2562048h",
        "99999999999999999999999999999h",
        "99999h99999h99999h99999h99999h99999h99999h99999h99999h99999h",
    ] {
        let mut spec = synced_spec();
        spec["options"]["timeout"] = json!(huge);
        let refused = try_create(&t, "huge", &spec).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|m| m.contains(cases[0].2) && !m.contains("evaluation")),
            "{huge}: {refused:?}"
        );
    }
    t.create_channel("good", synced_spec()).await;
    let ch = t.wait_ready("good", "Synchronized", SYNC).await;
    assert_eq!(ready_message(&ch), "synchronized 1 versions (1 created)");
    assert!(t.operator_running(), "{}", t.operator_log());
    assert!(
        !t.operator_log().contains("panicked"),
        "{}",
        t.operator_log()
    );
    t.cleanup().await;
}

/// Zero and more than a year: no flag allows them, so the API server refuses them.
#[tokio::test]
async fn a_sync_interval_or_timeout_of_zero_or_over_a_year_is_refused_by_the_api_server() {
    let t = TestNs::new("duration-rules").await;
    for (field, value) in [
        ("syncInterval", "0"),
        ("syncInterval", "0s"),
        ("syncInterval", "8760h1s"),
        ("timeout", "0ms"),
        ("timeout", "8761h"),
    ] {
        let mut spec = synced_spec();
        let message = if field == "timeout" {
            spec["options"]["timeout"] = json!(value);
            "spec.options.timeout must be more than 0 and at most 8760h (a year)"
        } else {
            spec["syncInterval"] = json!(value);
            "spec.syncInterval must be more than 0 and at most 8760h (a year)"
        };
        let refused = try_create(&t, "bad", &spec).await;
        assert!(
            refused.as_ref().is_err_and(|m| m.contains(message)),
            "{field} {value}: {refused:?}"
        );
    }
    // The bounds themselves are fine for the API server (the flags decide the rest).
    let mut spec = synced_spec();
    spec["syncInterval"] = json!("8760h");
    spec["options"]["timeout"] = json!("8760h");
    assert_eq!(try_create(&t, "a-year", &spec).await, Ok(()));
    t.cleanup().await;
}

#[tokio::test]
async fn a_sync_interval_below_the_minimum_is_invalid_configuration_naming_the_flag() {
    let mut t = TestNs::new("min-interval").await;
    t.start_operator(&[]);
    let mut spec = synced_spec();
    spec["syncInterval"] = json!("30s");
    t.create_channel("fast", spec).await;
    let ch = t.wait_ready("fast", "InvalidConfiguration", SYNC).await;
    assert_eq!(
        ready_message(&ch),
        "spec.syncInterval: \"30s\" is shorter than this operator's minimum of 1m (--min-sync-interval)"
    );
    assert_eq!(t.pods_created(), 0, "an invalid channel starts no pod");
    // The admin lowers the bound: the same channel syncs.
    t.kill_operator();
    t.start_operator(&["--min-sync-interval=30s"]);
    t.wait_ready("fast", "Synchronized", SYNC).await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_timeout_above_max_sync_timeout_is_invalid_configuration() {
    let mut t = TestNs::new("max-timeout").await;
    t.start_operator(&[]);
    let mut custom = synced_spec();
    custom["options"]["timeout"] = json!("2h");
    t.create_channel("slow", custom).await;
    t.create_channel(
        "slow-json",
        json!({"type": "json", "options": {"uri": "http://example.invalid/c.json", "timeout": "90m"}}),
    )
    .await;
    let ch = t.wait_ready("slow", "InvalidConfiguration", SYNC).await;
    assert_eq!(
        ready_message(&ch),
        "spec.options.timeout: \"2h\" is longer than this operator's maximum of 1h (--max-sync-timeout)"
    );
    let ch = t
        .wait_ready("slow-json", "InvalidConfiguration", SYNC)
        .await;
    assert_eq!(
        ready_message(&ch),
        "spec.options.timeout: \"90m\" is longer than this operator's maximum of 1h (--max-sync-timeout)"
    );
    assert_eq!(t.pods_created(), 0, "an invalid channel starts no pod");
    // The admin raises the bound: the custom channel syncs, its pod's deadline from it.
    t.kill_operator();
    t.start_operator(&["--max-sync-timeout=3h"]);
    t.wait_ready("slow", "Synchronized", SYNC).await;
    t.cleanup().await;
}

/// Without `--allow-privileged-runners` every runner that could escape its pod is refused
/// before a pod exists; with it, they run (here, in a namespace without Pod Security
/// enforcement), and a namespace that enforces `baseline` still refuses their pods.
#[tokio::test]
async fn a_runner_with_added_capabilities_or_privilege_escalation_or_root_is_refused_unless_allowed()
 {
    let mut t = TestNs::new("privileged-runners").await;
    t.start_operator(&[]);
    let cases = [
        (
            "caps",
            json!({"capabilities": {"add": ["SYS_ADMIN"]}}),
            "spec.options.securityContext.capabilities.add: [SYS_ADMIN] adds capabilities to the runner",
        ),
        (
            "escalation",
            json!({"allowPrivilegeEscalation": true}),
            "spec.options.securityContext.allowPrivilegeEscalation: true lets",
        ),
        (
            "root",
            json!({"runAsUser": 0}),
            "spec.options.securityContext.runAsUser: 0 runs the runner as root",
        ),
        (
            "privileged",
            json!({"privileged": true}),
            "spec.options.securityContext.privileged: true runs the runner",
        ),
    ];
    for (name, sc, _) in &cases {
        // A version of its own each, so that the channels do not conflict.
        let mut spec = custom_spec(&write_script(&channel_data(&[(name, "v1")])));
        spec["options"]["securityContext"] = sc.clone();
        t.create_channel(name, spec).await;
    }
    for (name, _, message) in &cases {
        let ch = t.wait_ready(name, "InvalidConfiguration", SYNC).await;
        let got = ready_message(&ch);
        assert!(
            got.starts_with(message)
                && got.ends_with(
                    "this operator refuses privileged runners (its admin can allow them with --allow-privileged-runners)"
                ),
            "{name}: {got}"
        );
    }
    assert_eq!(t.pods_created(), 0, "a refused runner gets no pod");

    // Allowed by the admin: each syncs.
    t.kill_operator();
    t.start_operator(&["--allow-privileged-runners"]);
    for (name, _, _) in &cases {
        let ch = t.wait_ready(name, "Synchronized", SYNC).await;
        assert_eq!(
            ready_message(&ch),
            "synchronized 1 versions (1 created)",
            "{name}"
        );
    }

    // The namespace's own admission still applies to what the flag lets through.
    label_namespace(
        &t,
        json!({"pod-security.kubernetes.io/enforce": "baseline",
               "pod-security.kubernetes.io/enforce-version": "latest"}),
    )
    .await;
    t.request_sync("caps", "after-baseline").await;
    let ch = t.wait_ready("caps", "FailedToCreatePod", SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message.contains("violates PodSecurity \"baseline:latest\"")
            && message.contains("SYS_ADMIN"),
        "{message}"
    );
    t.cleanup().await;
}

/// Flags that contradict each other, or leave a year, stop the operator before it
/// connects: a usage error (exit 2) that names the flags.
#[test]
fn bound_flags_out_of_range_are_a_usage_error() {
    for (flags, message) in [
        (
            &["--sync-timeout=2h"][..],
            "--sync-timeout 2h must lie between 1s and --max-sync-timeout (1h)",
        ),
        (
            &["--max-sync-timeout=9000h", "--sync-timeout=1m"],
            "--max-sync-timeout 9000h must lie between 1s and 8760h",
        ),
        (
            &["--min-sync-interval=0s"],
            "--min-sync-interval 0s must lie between 1s and 8760h",
        ),
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
            .args(["operator", "--operator-image=x"])
            .args(flags)
            .env("KUBECONFIG", "/no/such/kubeconfig")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
}
