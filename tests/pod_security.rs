//! The syncer pod on a cluster that enforces things: Pod Security `restricted`, a quota that
//! requires limits, scheduling options, a channel image in a private registry, and a runner
//! file `display` cannot read.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

const SYNC: Duration = Duration::from_secs(90);

fn non_root(mut spec: serde_json::Value) -> serde_json::Value {
    spec["options"]["securityContext"] = json!({"runAsNonRoot": true, "runAsUser": 1000});
    spec
}

#[tokio::test]
async fn in_a_restricted_namespace_a_non_root_runner_syncs_and_a_root_one_is_refused() {
    let mut t = TestNs::new("restricted").await;
    label_namespace(
        &t,
        json!({"pod-security.kubernetes.io/enforce": "restricted",
               "pod-security.kubernetes.io/enforce-version": "latest"}),
    )
    .await;
    t.start_operator(&[]);
    let data = channel_data(&[("a", "v1")]);
    t.create_channel("non-root", non_root(custom_spec(&write_script(&data))))
        .await;
    t.create_custom("root", &data).await;
    let ch = t.wait_ready("non-root", "Synchronized", SYNC).await;
    assert_eq!(ready_message(&ch), "synchronized 1 versions (1 created)");
    let ch = t.wait_ready("root", "FailedToCreatePod", SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message.contains("violates PodSecurity \"restricted:latest\""),
        "{message}"
    );
    assert!(message.contains("runAsNonRoot != true"), "{message}");
    // Only the refused pod's reason: display itself meets the profile.
    assert!(!message.contains("\"display\""), "{message}");
    t.cleanup().await;
}

#[tokio::test]
async fn in_a_namespace_whose_quota_requires_limits_a_runner_with_resources_syncs() {
    let t = TestNs::started_under_quota(
        "quota-limits",
        "compute",
        json!({"requests.cpu": "2", "requests.memory": "2Gi", "limits.cpu": "4", "limits.memory": "4Gi"}),
    )
    .await;
    let data = channel_data(&[("a", "v1")]);
    let mut with_resources = custom_spec(&write_script(&data));
    with_resources["options"]["resources"] = json!({
        "requests": {"cpu": "10m", "memory": "16Mi"},
        "limits": {"cpu": "200m", "memory": "64Mi"}
    });
    t.create_channel("limited", with_resources).await;
    t.create_custom("unlimited", &data).await;
    t.wait_ready("limited", "Synchronized", SYNC).await;
    let ch = t.wait_ready("unlimited", "FailedToCreatePod", SYNC).await;
    let message = ready_message(&ch);
    assert!(message.contains("must specify limits.cpu"), "{message}");
    // The display container brings its own requests and limits: only the runner is named.
    assert!(message.contains("for: runner"), "{message}");
    t.cleanup().await;
}

#[tokio::test]
async fn scheduling_options_land_on_the_pod() {
    let t = TestNs::started("scheduling", &[]).await;
    let mut spec = custom_spec(&write_script(&channel_data(&[("a", "v1")])));
    spec["options"]["nodeSelector"] = json!({"rancheros.test/pool": "nowhere"});
    spec["options"]["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "os", "effect": "NoSchedule"}]);
    spec["options"]["imagePullSecrets"] = json!([{"name": "regcred"}]);
    spec["options"]["timeout"] = json!("10s");
    t.create_channel("ch", spec).await;
    let pod = t
        .eventually("the syncer pod", SYNC, || async {
            t.pods().get_opt("ch").await.unwrap()
        })
        .await;
    let spec = pod.spec.unwrap();
    assert_eq!(
        spec.node_selector.unwrap()["rancheros.test/pool"],
        "nowhere"
    );
    assert_eq!(
        spec.tolerations.unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    assert_eq!(spec.image_pull_secrets.unwrap()[0].name, "regcred");
    // No node matches: the timeout says where it was stuck.
    let ch = t.wait_ready("ch", "FailedToSync", SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message.starts_with("timed out after 10s: the syncer pod did not finish (not scheduled:"),
        "{message}"
    );
    t.cleanup().await;
}

fn registry_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: the local cluster's test registry is needed; run scripts/test, or eval \"$(scripts/cluster env)\"")
    })
}

/// The local cluster runs a registry on loopback with basic auth (scripts/cluster) holding
/// the runner image under two names; the node has pulled neither before.
#[tokio::test]
async fn a_private_channel_image_is_pulled_with_its_image_pull_secret_and_not_without() {
    let registry = registry_env("RANCHEROS_TEST_REGISTRY");
    let user = registry_env("RANCHEROS_TEST_REGISTRY_USER");
    let password = registry_env("RANCHEROS_TEST_REGISTRY_PASSWORD");
    let mut t = TestNs::new("private-image").await;
    let auths = json!({"auths": {&registry: {"username": user, "password": password}}});
    t.create_pull_secret("regcred", auths).await;
    t.start_operator(&[]);
    let data = channel_data(&[("a", "v1")]);
    let mut with_secret = custom_spec(&write_script(&data));
    with_secret["options"]["image"] = json!(format!("{registry}/private/runner:with-secret"));
    with_secret["options"]["imagePullSecrets"] = json!([{"name": "regcred"}]);
    let mut without_secret = custom_spec(&write_script(&data));
    let refused_image = format!("{registry}/private/runner:without-secret");
    without_secret["options"]["image"] = json!(refused_image);
    without_secret["options"]["timeout"] = json!("20s");
    t.create_channel("with-secret", with_secret).await;
    t.create_channel("without-secret", without_secret).await;
    let ch = t.wait_ready("with-secret", "Synchronized", SYNC).await;
    assert_eq!(ready_message(&ch), "synchronized 1 versions (1 created)");
    // Without credentials the registry answers 401: the sync fails where it was stuck.
    let ch = t.wait_ready("without-secret", "FailedToSync", SYNC).await;
    assert_pull_failed(
        &ch,
        "timed out after 20s: the syncer pod did not finish (runner: ",
        &refused_image,
    );
    t.cleanup().await;
}

#[tokio::test]
async fn a_runner_file_display_cannot_read_says_so_and_how_to_fix_it() {
    let t = TestNs::started("unreadable", &[]).await;
    let script = format!("umask 077; {}", write_script(&channel_data(&[("a", "v1")])));
    t.create_channel("ch", non_root(custom_spec(&script))).await;
    let ch = t.wait_ready("ch", "FailedToSync", SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message.contains("the display container exited with code 1"),
        "{message}"
    );
    assert!(
        message.contains("permission denied; display runs as user 65532"),
        "{message}"
    );
    assert!(message.contains("chmod a+r"), "{message}");
    assert!(t.versions().await.is_empty());
    t.cleanup().await;
}
