//! Bounded durations and unprivileged runners on the real cluster: what no flag can allow
//! is refused by the API server (the CRD rules), what the flags bound is
//! `InvalidConfiguration` naming the bound and the flag, and no channel can crash the
//! operator or get a runner that could escape its pod unless the admin allows it.

use crate::common;

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

/// [`synced_spec`] with `upgradeContainer`.
fn with_upgrade_container(upgrade_container: Value) -> Value {
    let mut spec = synced_spec();
    spec["upgradeContainer"] = upgrade_container;
    spec
}

/// The value that overflowed `timeout + 60s` when a syncer pod was built (the operator
/// exited 101, on every restart), and a sync interval of the same size. The API server
/// refuses both; should an object get in (a CRD from before the rules), the operator
/// reports it as invalid. Either way the operator stays up and other channels sync.
#[tokio::test]
async fn a_timeout_of_5124095576030431h_is_refused_and_the_operator_keeps_running() {
    let mut t = TestNs::started("huge-durations", &[]).await;
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
    let ch = t.create_synced("good", synced_spec(), SYNC).await;
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
    let t = TestNs::started("min-interval", &[]).await;
    let mut spec = synced_spec();
    spec["syncInterval"] = json!("30s");
    t.create_channel("fast", spec).await;
    let ch = t.wait_ready("fast", "InvalidConfiguration", SYNC).await;
    assert_eq!(
        ready_message(&ch),
        "spec.syncInterval: \"30s\" is shorter than this operator's minimum of 1m (--min-sync-interval)"
    );
    // The admin lowers the bound: the same channel syncs.
    syncs_with_the_flag(t, "fast", "--min-sync-interval=30s").await;
}

/// A channel refused by the operator's bounds (having started no pod) syncs once the
/// operator is restarted with `flag`.
async fn syncs_with_the_flag(mut t: TestNs, name: &str, flag: &str) {
    assert_eq!(t.pods_created(), 0, "an invalid channel starts no pod");
    t.kill_operator();
    t.start_operator(&[flag]);
    t.wait_ready(name, "Synchronized", SYNC).await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_timeout_above_max_sync_timeout_is_invalid_configuration() {
    let t = TestNs::started("max-timeout", &[]).await;
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
    // The admin raises the bound: the custom channel syncs, its pod's deadline from it.
    syncs_with_the_flag(t, "slow", "--max-sync-timeout=3h").await;
}

/// Without `--allow-privileged-runners` every runner that could escape its pod is refused
/// before a pod exists; with it, they run (here, in a namespace without Pod Security
/// enforcement), and a namespace that enforces `baseline` still refuses their pods.
#[tokio::test]
async fn a_runner_with_added_capabilities_or_privilege_escalation_or_root_is_refused_unless_allowed()
 {
    let mut t = TestNs::started("privileged-runners", &[]).await;
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

/// `kubectl apply` of one channel from JSON (YAML's superset), as a tenant would; its
/// stderr when it refuses.
fn kubectl_apply(t: &TestNs, channel: &Value) -> Result<(), String> {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .args(["apply", "-n", &t.ns, "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl (eval \"$(scripts/cluster env)\")");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(channel.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn channel_object(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name}, "spec": spec
    })
}

#[tokio::test]
async fn a_100_character_channel_name_is_refused_at_apply() {
    let t = TestNs::new("long-name").await;
    let name = "a".repeat(100);
    let message = try_create(&t, &name, &synced_spec()).await.unwrap_err();
    assert!(message.contains("at most 63 characters"), "{message}");
    // 63 is a label value's limit, and allowed.
    try_create(&t, &"b".repeat(63), &synced_spec())
        .await
        .unwrap();
    t.cleanup().await;
}

#[tokio::test]
async fn an_unknown_option_key_or_an_option_of_another_type_is_refused_at_kubectl_apply() {
    let t = TestNs::new("unknown-options").await;
    install_crds(&t.client).await;
    let refused = |name: &str, spec: Value, says: &str| {
        let err = kubectl_apply(&t, &channel_object(name, spec)).unwrap_err();
        assert!(err.contains(says), "{err}");
    };
    let mut spec = synced_spec();
    spec["options"]["imagePullPolicyy"] = json!("Never");
    refused(
        "typo",
        spec,
        "unknown field \"spec.options.imagePullPolicyy\"",
    );
    refused(
        "typo2",
        with_upgrade_container(json!({"image": "u", "imagee": "v"})),
        "unknown field \"spec.upgradeContainer.imagee\"",
    );
    // The system-upgrade-controller's container: `imagePullPolicy` is none of its fields;
    // `envs` and the old `env` are, but not both.
    refused(
        "pull-policy",
        with_upgrade_container(json!({"image": "u", "imagePullPolicy": "Always"})),
        "unknown field \"spec.upgradeContainer.imagePullPolicy\"",
    );
    let vars = json!([{"name": "FORCE", "value": "true"}]);
    refused(
        "both-envs",
        with_upgrade_container(json!({"envs": vars, "env": vars})),
        "spec.upgradeContainer has both `envs` and `env`, its old spelling: give only `envs`",
    );
    for (name, key) in [("envs", "envs"), ("old-env", "env")] {
        let spec = with_upgrade_container(
            json!({key: vars, "volumes": [{"name": "h", "source": "/", "destination": "/host"}]}),
        );
        kubectl_apply(&t, &channel_object(name, spec.clone())).unwrap();
        // Stored as given: nothing pruned.
        let stored = t.channels().get(name).await.unwrap();
        assert_eq!(
            serde_json::to_value(&stored.spec.upgrade_container).unwrap(),
            spec["upgradeContainer"]
        );
    }
    refused(
        "mixed",
        json!({"type": "json", "options": {"uri": "https://x", "image": "i"}}),
        "spec.options of a json channel takes only: uri, timeout",
    );
    let mut spec = synced_spec();
    spec["registry"] = json!("r".repeat(513));
    refused("long-registry", spec, "spec.registry: Too long");
    kubectl_apply(&t, &channel_object("fine", synced_spec())).unwrap();
    t.cleanup().await;
}

/// The object whose LIST once stopped the operator: 130 levels below `upgradeContainer`,
/// past the 128 that the client's decoder reads. Created as a client that skips strict
/// field validation: the API server prunes what the schema does not know.
#[tokio::test]
async fn a_130_deep_upgrade_container_is_pruned_and_the_channel_list_still_decodes() {
    let t = TestNs::new("deep-upgrade-container").await;
    let mut deep = json!(1);
    for _ in 0..130 {
        deep = json!({"a": deep});
    }
    let spec = with_upgrade_container(
        json!({"image": "u", "securityContext": {"privileged": false, "a": deep}}),
    );
    let mixed = with_upgrade_container(json!({"image": "u", "x": deep}));
    for (name, spec) in [("deep", spec), ("deep-top", mixed)] {
        try_create(&t, name, &spec).await.unwrap();
    }
    // The typed LIST the operator's watch makes decodes, and shows what was kept.
    let list = t.channels().list(&Default::default()).await.unwrap();
    let kept: Vec<Value> = list
        .items
        .iter()
        .map(|c| serde_json::to_value(&c.spec.upgrade_container).unwrap())
        .collect();
    assert_eq!(
        kept,
        [
            json!({"image": "u", "securityContext": {"privileged": false}}),
            json!({"image": "u"})
        ]
    );
    t.cleanup().await;
}

#[tokio::test]
async fn a_400_kib_upgrade_container_is_invalid_configuration_and_writes_nothing() {
    let t = TestNs::started("big-upgrade-container", &[]).await;
    let mut spec = custom_spec(&write_script(&channel_data(&[("a", "v1"), ("b", "v2")])));
    // Each argument within what the schema allows, 400 KiB together.
    spec["upgradeContainer"] = json!({"image": "u", "args": vec!["x".repeat(50 * 1024); 8]});
    t.create_channel("big", spec).await;
    let ch = t.wait_ready("big", "InvalidConfiguration", SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message.starts_with("spec.upgradeContainer: ")
            && message.contains("more than the 64 KiB an upgradeContainer may have"),
        "{message}"
    );
    assert!(message.len() <= 1024, "{}", message.len());
    assert_eq!(t.pods_created(), 0);
    assert_eq!(t.version_names().await, Vec::<String>::new());
    t.cleanup().await;
}

#[tokio::test]
async fn a_runner_with_capabilities_drop_empty_still_drops_all_and_its_volume_is_bounded() {
    let t = TestNs::started("drop-empty", &[]).await;
    // A few seconds of runner, so the pod is still there to be read.
    let data = write_script(&channel_data(&[("a", "v1")]));
    let mut spec = custom_spec(&format!("sleep 5; {data}"));
    spec["options"]["securityContext"] = json!({"capabilities": {"drop": []}});
    t.create_channel("nodrop", spec).await;
    let pod = t
        .eventually("the syncer pod", SYNC, || async {
            t.pods().get_opt("nodrop").await.unwrap()
        })
        .await;
    let pod = serde_json::to_value(pod).unwrap();
    let runner = &pod["spec"]["initContainers"][0];
    assert_eq!(
        runner["securityContext"]["capabilities"],
        json!({"drop": ["ALL"]}),
        "{runner}"
    );
    // Twice the default --max-output-bytes (16Mi).
    assert_eq!(
        pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"],
        json!("33554432"),
        "{}",
        pod["spec"]["volumes"]
    );
    t.wait_ready("nodrop", "Synchronized", SYNC).await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_mount_path_of_usr_local_bin_is_invalid_configuration_and_no_pod_runs() {
    let t = TestNs::started("mount-display", &[]).await;
    for (name, path) in [("display-dir", "/usr/local/bin"), ("etc", "/etc")] {
        let mut spec = synced_spec();
        spec["options"]["mountPath"] = json!(path);
        spec["options"]["outputFile"] = json!(format!("{path}/data"));
        t.create_channel(name, spec).await;
    }
    let ch = t
        .wait_ready("display-dir", "InvalidConfiguration", SYNC)
        .await;
    assert!(
        ready_message(&ch)
            .contains("would cover /usr/local/bin, where the syncer pod's display binary lives"),
        "{}",
        ready_message(&ch)
    );
    let ch = t.wait_ready("etc", "InvalidConfiguration", SYNC).await;
    assert_message_contains(&ch, "would cover the system directory /etc");
    assert_eq!(t.pods_created(), 0);
    t.cleanup().await;
}
