//! A sync whose data did not change issues no write request for any ManagedOSVersion,
//! counted by the API server itself (`apiserver_request_total`). In a test binary of its
//! own, so that no other test's operator writes versions meanwhile.

use crate::common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

/// Deleting a namespace deletes its versions too (the namespace controller and the garbage
/// collector write): wait until other tests' namespaces are gone before counting.
async fn wait_for_terminating_namespaces(t: &TestNs) {
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    t.eventually(
        "other tests' namespaces to finish terminating",
        Duration::from_secs(180),
        || async {
            let list = namespaces.list(&ListParams::default()).await.unwrap();
            list.items
                .iter()
                .all(|n| n.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating"))
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn an_unchanged_sync_writes_no_version() {
    let t = TestNs::started("no-writes", &[]).await;
    let data = channel_data(&[("a", "v1"), ("b", "v1"), ("c", "v2")]);
    t.create_custom("ch", &data).await;
    let mut ch = t
        .wait_ready("ch", "Synchronized", Duration::from_secs(90))
        .await;
    wait_for_terminating_namespaces(&t).await;
    let start = version_writes(&t.client).await;
    assert!(
        start.values().sum::<u64>() >= 3,
        "the first sync's writes are counted ({start:?})"
    );

    for round in 0..2 {
        t.request_sync("ch", &format!("round-{round}")).await;
        ch = t
            .wait_next_attempt("ch", &ch, Duration::from_secs(90))
            .await;
        assert_eq!(
            ready_message(&ch),
            "synchronized 3 versions (no changes)",
            "round {round}"
        );
    }
    assert_eq!(
        version_writes(&t.client).await,
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
    let start = version_writes(&t.client).await;
    t.request_sync("ch", "after-foreign-edit").await;
    ch = t
        .wait_next_attempt("ch", &ch, Duration::from_secs(90))
        .await;
    assert_eq!(ready_message(&ch), "synchronized 3 versions (no changes)");
    assert_eq!(
        version_writes(&t.client).await,
        start,
        "foreign fields made the operator write"
    );
    let a = t.versions_api().get("a").await.unwrap();
    assert_eq!(a.labels().get("team").map(String::as_str), Some("os"));
    assert_eq!(a.spec.metadata.as_ref().unwrap()["note"], "kept");
    t.cleanup().await;
}
