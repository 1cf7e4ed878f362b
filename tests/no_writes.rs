//! A sync whose data did not change issues no write request for any ManagedOSVersion,
//! counted by the API server itself: its audit log records every write request on
//! ManagedOSVersions with the namespace, so the count is this test's own and other tests
//! run beside it.

use crate::common;

use std::time::Duration;

use common::*;
use kube::ResourceExt;

#[tokio::test]
async fn an_unchanged_sync_writes_no_version() {
    let t = TestNs::started("no-writes", &[]).await;
    let data = channel_data(&[("a", "v1"), ("b", "v1"), ("c", "v2")]);
    t.create_custom("ch", &data).await;
    let mut ch = t
        .wait_ready("ch", "Synchronized", Duration::from_secs(90))
        .await;
    let start = version_writes(&t.ns).await;
    assert!(
        start.values().sum::<u64>() >= 3,
        "the first sync's writes are counted ({start:?})"
    );

    for round in 0..2 {
        ch = t
            .sync_again(
                "ch",
                &format!("round-{round}"),
                &ch,
                Duration::from_secs(90),
            )
            .await;
        assert_eq!(
            ready_message(&ch),
            "synchronized 3 versions (no changes)",
            "round {round}"
        );
    }
    assert_eq!(
        version_writes(&t.ns).await,
        start,
        "an unchanged sync wrote versions"
    );

    // Fields another manager adds (a label, a spec.metadata key, with a float where the
    // operator wrote an integer nowhere) are not the operator's to undo or to rewrite.
    let foreign = serde_json::json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersion",
        "metadata": {"name": "a", "labels": {"team": "os"}},
        "spec": {"metadata": {"note": "kept", "displayName": "A (from the UI)"}}
    });
    t.versions_api()
        .patch(
            "a",
            &kube::api::PatchParams::apply("someone-else"),
            &kube::api::Patch::Apply(&foreign),
        )
        .await
        .unwrap();
    let start = version_writes(&t.ns).await;
    ch = t
        .sync_again("ch", "after-foreign-edit", &ch, Duration::from_secs(90))
        .await;
    assert_eq!(ready_message(&ch), "synchronized 3 versions (no changes)");
    assert_eq!(
        version_writes(&t.ns).await,
        start,
        "foreign fields made the operator write"
    );
    let a = t.versions_api().get("a").await.unwrap();
    assert_eq!(a.labels().get("team").map(String::as_str), Some("os"));
    assert_eq!(a.spec.metadata.as_ref().unwrap()["note"], "kept");
    t.cleanup().await;
}
