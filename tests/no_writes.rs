//! A sync whose data did not change issues no write request for any ManagedOSVersion,
//! counted by the API server itself (`apiserver_request_total`). In a test binary of its
//! own, so that no other test's operator writes versions meanwhile.

mod common;

use std::time::Duration;

use common::*;

const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// Write requests on managedosversions the API server has served so far.
async fn version_writes(client: &kube::Client) -> u64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client
        .request_text(request)
        .await
        .expect("reading the API server's /metrics");
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("resource=\"managedosversions\""))
        .filter(|l| {
            WRITE_VERBS
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

#[tokio::test]
async fn an_unchanged_sync_writes_no_version() {
    let mut t = TestNs::new("no-writes").await;
    t.start_operator(&[]);
    let data = channel_data(&[("a", "v1"), ("b", "v1"), ("c", "v2")]);
    t.create_channel("ch", custom_spec(&write_script(&data)))
        .await;
    let mut ch = t
        .wait_ready("ch", "Synchronized", Duration::from_secs(90))
        .await;
    let start = version_writes(&t.client).await;
    assert!(start >= 3, "the first sync's writes are counted ({start})");

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
    t.cleanup().await;
}
