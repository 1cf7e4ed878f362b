//! Replicas and leader election: one leader, one set of writes, and a leader that loses its Lease stops.

use super::admission::Policy;
use super::*;

#[tokio::test]
async fn two_replicas_and_a_leader_killed_mid_sync_give_one_pod_and_one_set_of_versions() {
    let mut t = TestNs::new("two-replicas").await;
    let lease_args = |ns: &str| {
        vec![
            "--leader-election=true".to_string(),
            format!("--leader-election-namespace={ns}"),
            "--leader-election-lease=test-leader".to_string(),
        ]
    };
    let args = lease_args(&t.ns);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = t.spawn_operator(&args, &[("POD_NAME", "replica-a")]);
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    let holder = || async {
        leases
            .get_opt("test-leader")
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
    };
    t.eventually("replica-a to lead", SYNC, || async {
        (holder().await.as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let mut second = t.spawn_operator(&args, &[("POD_NAME", "replica-b")]);

    let data = channel_data(&[("x", "v1"), ("y", "v2")]);
    t.create_channel("ch", custom_spec(&slow_script(6, &data)))
        .await;
    // The leader starts the sync and records its pod; it dies (SIGKILL) while the runner
    // still works. (A pod made but not yet recorded is replaced once, by design.)
    t.wait_pod_recorded("ch", SYNC).await;
    assert_eq!(t.pods_created(), 1);
    assert!(t.version_names().await.is_empty());
    first.kill().unwrap();
    first.wait().unwrap();

    // The standby takes the Lease once it expires and finishes the same sync.
    let ch = t
        .wait_ready("ch", "Synchronized", Duration::from_secs(120))
        .await;
    assert_eq!(holder().await.as_deref(), Some("replica-b"));
    assert_eq!(t.pods_created(), 1, "{}", t.operator_log());
    assert_eq!(t.version_names().await, ["x", "y"]);
    assert_eq!(ready_message(&ch), "synchronized 2 versions (2 created)");
    second.kill().unwrap();
    second.wait().unwrap();
    t.cleanup().await;
}

#[tokio::test]
async fn a_leader_that_cannot_renew_its_lease_stops_before_the_lease_can_expire() {
    let mut t = TestNs::new("lease-refused").await;
    let args = [
        "--leader-election=true".to_string(),
        format!("--leader-election-namespace={}", t.ns),
        "--leader-election-lease=cut-off".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut leader = t.spawn_operator(&args, &[("POD_NAME", "cut-off-leader")]);
    let leases: Api<Lease> = Api::namespaced(t.client.clone(), &t.ns);
    t.eventually("the operator to lead", SYNC, || async {
        let lease = leases.get_opt("cut-off").await.unwrap()?;
        (lease.spec?.holder_identity.as_deref() == Some("cut-off-leader")).then_some(())
    })
    .await;
    // A sync is under way when the API server starts refusing the leader's renewals.
    sync_under_way(&t, 30).await;
    let policy = Policy::refusing_lease_renewals(&t, "cut-off").await;
    // It steps down and exits (a restart makes it a follower) before the Lease expires.
    let status = t
        .eventually("the leader to step down", SYNC, || {
            let exited = leader.try_wait().unwrap();
            async move { exited }
        })
        .await;
    let stopped = k8s_openapi::jiff::Timestamp::now();
    // The Lease as the last renewal that went through left it.
    let spec = leases.get("cut-off").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("cut-off-leader"));
    let expires = spec
        .renew_time
        .unwrap()
        .0
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(i64::from(
            spec.lease_duration_seconds.unwrap(),
        )))
        .unwrap();
    assert!(!status.success(), "{status}: {}", t.operator_log());
    assert!(
        stopped < expires,
        "stopped at {stopped}, the Lease expired at {expires}\n{}",
        t.operator_log()
    );
    assert!(
        t.operator_log()
            .contains("could not renew the leader lease in time: stepping down"),
        "{}",
        t.operator_log()
    );
    assert!(
        t.versions().await.is_empty(),
        "it acted after stepping down"
    );
    policy.delete(&t).await;
    t.cleanup().await;
}
