//! Field conditions against the local cluster: hostile input, API errors and refusals, a
//! quota that only the writes together exceed, an image-rewriting admission policy, two
//! replicas with a leader killed mid-sync, on-demand requests during a sync, dropped
//! labels, duplicate names. Each test has its own namespace and operator process(es).

#[path = "hardening/admission.rs"]
mod admission;
use crate::common;
#[path = "hardening/drift.rs"]
mod drift;
#[path = "hardening/dry_runs.rs"]
mod dry_runs;
#[path = "hardening/leaders.rs"]
mod leaders;
#[path = "hardening/metrics_access.rs"]
mod metrics_access;
#[path = "hardening/sync_data.rs"]
mod sync_data;
#[path = "hardening/watches_and_shards.rs"]
mod watches_and_shards;

use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const SYNC: Duration = Duration::from_secs(90);

/// Creates channel `ch` (version `a`) whose runner takes `secs` seconds, and waits until its
/// first sync is under way (its pod created).
async fn sync_under_way(t: &TestNs, secs: u32) {
    let data = channel_data(&[("a", "v1")]);
    t.create_channel("ch", custom_spec(&slow_script(secs, &data)))
        .await;
    t.eventually("the first syncer pod", SYNC, || async {
        (t.pods_created() == 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn hostile_uris_leave_the_operator_running_and_other_channels_syncing() {
    let mut t = TestNs::started("hostile-uri", &["--retry-delay=60s"]).await;
    // Multi-byte text next to the scheme, an unparsable host, a huge URL: each is a failed
    // sync of its own channel, never a crash. (`http:€//x` itself the API server now
    // refuses by the CRD's rule; config's unit tests keep it.)
    let hostile = [
        ("multibyte", "http://€€€/ü.json".to_string()),
        ("bad-host", "http://[::1/x".to_string()),
        ("huge", format!("https://{}.example/x", "a".repeat(7000))),
    ];
    for (name, uri) in &hostile {
        t.create_channel(
            name,
            json!({"type": "json", "options": {"uri": uri, "timeout": "2s"}}),
        )
        .await;
    }
    t.create_custom("good", &channel_data(&[("ok", "v1")]))
        .await;
    for (name, _) in &hostile {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        assert!(
            ready_message(&ch).starts_with("fetching "),
            "{name}: {}",
            ready_message(&ch)
        );
    }
    t.wait_ready("good", "Synchronized", SYNC).await;
    assert!(t.operator_running(), "{}", t.operator_log());
    assert_eq!(t.version_names().await, ["ok"]);
    t.cleanup().await;
}

#[tokio::test]
async fn a_quota_that_refuses_the_third_of_five_new_versions_leaves_all_five_absent() {
    let t = TestNs::started_under_quota(
        "quota-undo",
        "versions",
        json!({"count/managedosversions.rancheros.cattle.io": "2"}),
    )
    .await;
    let five = channel_data(&[
        ("v-1", "1"),
        ("v-2", "2"),
        ("v-3", "3"),
        ("v-4", "4"),
        ("v-5", "5"),
    ]);
    t.create_custom("five", &five).await;
    let ch = t.wait_ready("five", "FailedToSync", SYNC).await;
    let message = ready_message(&ch);
    assert!(message.contains("exceeded quota"), "{message}");
    assert!(
        message.contains("earlier writes were undone, so nothing was changed"),
        "{message}"
    );
    assert_eq!(t.version_names().await, Vec::<String>::new());
    assert_eq!(
        ch.status.as_ref().unwrap().failed_synchronization_attempts,
        1
    );
    wait_for_event(&t, "five", |(ty, reason, _)| {
        ty == "Warning" && reason == "FailedToSync"
    })
    .await;
    t.cleanup().await;
}

/// A runner script that prints `n` versions `v-0001`...: names in the same order as the data.
fn numbered_versions_script(n: usize) -> String {
    let item = r#"{"metadata":{"name":"v-%04d"},"spec":{"version":"%d","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.example/os:%d"}}}"#;
    format!(
        "{{ printf '['; for i in $(seq 1 {n}); do [ $i -gt 1 ] && printf ','; \
         printf '{item}' $i $i $i; done; printf ']'; }} > /output/data"
    )
}

#[tokio::test]
async fn a_version_created_by_someone_else_during_the_sync_is_not_taken_over() {
    let t = TestNs::started("created-meanwhile", &["--retry-delay=60s"]).await;
    // 1,000 new versions: every dry run passes (none exists yet), then the real writes take
    // seconds. As soon as the first one lands, someone else creates the last one, long
    // before the operator's own write of it.
    t.create_channel("ch", custom_spec(&numbered_versions_script(1000)))
        .await;
    let versions = t.versions_api();
    t.eventually("the sync's first real write", SYNC, || async {
        let list = versions.list(&ListParams::default().limit(1)).await.ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;
    let theirs: rancheros_operator::api::ManagedOSVersion = serde_json::from_value(json!({
        "metadata": {"name": "v-1000"},
        "spec": {"version": "theirs", "type": "container"}
    }))
    .unwrap();
    versions
        .create(&PostParams::default(), &theirs)
        .await
        .expect("the version is created before the operator gets to it");

    // The rest of the 1,000 writes, then the undo of 999: about 70 s on an idle machine,
    // over 90 s on a loaded one; the outcome is what is checked, not the time.
    let ch = t
        .wait_ready("ch", "FailedToSync", Duration::from_secs(300))
        .await;
    let message = ready_message(&ch);
    assert!(
        message.starts_with(
            "apply version v-1000: version \"v-1000\" already exists and is not controlled by \
             any channel; the sync had not seen it; \
             the sync's 999 earlier writes were undone, so nothing was changed"
        ),
        "{message}"
    );
    // Theirs is untouched and the operator's 999 creates are undone.
    let after = t.versions().await;
    assert_eq!(t.version_names().await, ["v-1000"]);
    assert_eq!(after[0].spec.version.as_deref(), Some("theirs"));
    assert!(after[0].labels().is_empty(), "{:?}", after[0].labels());
    let managers: Vec<_> = after[0]
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !managers.iter().any(|m| m.contains("rancheros")),
        "{managers:?}"
    );
    // The next sync meets it before any write, as a conflict.
    let ch = t.sync_again("ch", "after-the-race", &ch, SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message
            .starts_with("version \"v-1000\" already exists and is not controlled by any channel"),
        "{message}"
    );
    assert_eq!(t.version_names().await, ["v-1000"]);
    t.cleanup().await;
}
