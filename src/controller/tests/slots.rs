//! Sync slots over the fake: namespaces take turns, a slot is freed by a deleted channel or
//! a failed pod and wakes the next, and forged pods hold none.

use super::*;

#[tokio::test]
async fn namespaces_take_turns_for_the_free_slots() {
    // Four slots, two of them (half) namespace a's, two namespace c's.
    let mut h = Harness::slots(4);
    let a = reconciled(&mut h, "a", "a", 5).await;
    for i in 0..2 {
        let c = h.create("c", &format!("c{i}"), custom());
        h.ok(&c).await;
        assert!(h.has_pod(&c));
    }
    let b = h.create("b", "only", custom());
    h.ok(&b).await;
    assert!(h.has_pod(&a[0]) && h.has_pod(&a[1]));
    assert!(a[2..].iter().all(|k| h.queued(k) && !h.has_pod(k)));
    assert!(h.queued(&b));
    // The first slot that frees goes to namespace a's first waiting channel...
    h.evict(&a[0]);
    h.ok(&a[0]).await;
    assert_eq!(h.ready_reason(&a[0]), "FailedToSync");
    h.ok(&a[2]).await;
    assert!(h.has_pod(&a[2]), "a2 waited first in namespace a");
    // ...the next to namespace b's, although a3 and a4 arrived before it.
    h.evict(&a[1]);
    h.ok(&a[1]).await;
    h.ok(&a[3]).await;
    assert!(
        !h.has_pod(&a[3]) && h.queued(&a[3]),
        "a3 overtook namespace b"
    );
    h.ok(&b).await;
    assert!(h.has_pod(&b), "namespace b's channel did not get the slot");
}

/// `n` custom channels of `namespace` (`{prefix}0`...), created, then reconciled once
/// each in that order.
async fn reconciled(h: &mut Harness, namespace: &str, prefix: &str, n: usize) -> Vec<Key> {
    let keys: Vec<Key> = (0..n)
        .map(|i| h.create(namespace, &format!("{prefix}{i}"), custom()))
        .collect();
    for k in &keys {
        h.ok(k).await;
    }
    keys
}

/// One slot: x syncs, y waits for it.
async fn x_syncs_y_waits() -> (Harness, Key, Key) {
    let mut h = Harness::slots(1);
    let x = h.create("a", "x", custom());
    let y = h.create("a", "y", custom());
    h.ok(&x).await;
    h.ok(&y).await;
    assert!(h.has_pod(&x) && h.queued(&y));
    h.ctx.io.world().woken.clear();
    (h, x, y)
}

#[tokio::test]
async fn a_deleted_channel_frees_its_slot_and_wakes_the_next() {
    let (h, x, y) = x_syncs_y_waits().await;
    h.delete(&x);
    assert_eq!(
        h.ctx.io.world().woken,
        std::slice::from_ref(&y),
        "y is not woken"
    );
    h.ok(&y).await;
    assert!(h.has_pod(&y));
}

#[tokio::test]
async fn a_failed_pod_frees_its_slot_and_wakes_the_next() {
    let (h, x, y) = x_syncs_y_waits().await;
    h.evict(&x);
    h.ok(&x).await;
    assert!(!h.has_pod(&x), "the failed pod goes");
    assert!(h.ctx.io.world().woken.contains(&y), "y is not woken");
    h.ok(&y).await;
    assert!(h.has_pod(&y));
}

#[tokio::test]
async fn forged_pods_of_stalled_channels_hold_no_slot() {
    let mut h = Harness::slots(2);
    for name in ["s1", "s2"] {
        let k = h.create("t", name, custom());
        let mut world = h.ctx.io.world();
        let ch = world.channels.get_mut(&k).unwrap();
        let uid = ch.uid().unwrap();
        // Past its retries: backing off for its interval, no decision looks at its pod.
        ch.status = Some(
            serde_json::from_value(json!({
                "failedSynchronizationAttempts": 4,
                "lastSyncAttemptTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                "conditions": [{"type": "Ready", "status": "False", "reason": "FailedToSync",
                    "message": "x", "observedGeneration": 1,
                    "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]
            }))
            .unwrap(),
        );
        // Named after it, labelled, controlled by it, running: everything a tenant can write.
        let forged: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "t", "uid": format!("forged-{name}"),
                "labels": {CHANNEL_LABEL: name},
                "ownerReferences": [{"apiVersion": "rancheros.cattle.io/v1",
                    "kind": "ManagedOSVersionChannel", "name": name, "uid": uid,
                    "controller": true}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        world.pods.insert(k, forged);
    }
    assert!(h.ctx.io.running_syncs().is_empty());
    let other = h.create("u", "new", custom());
    h.ok(&other).await;
    assert!(
        h.has_pod(&other) && !h.queued(&other),
        "forged pods held the slots"
    );
}

#[tokio::test]
async fn long_syncs_of_one_namespace_leave_another_namespace_a_slot() {
    let mut h = Harness::slots(2);
    let a = reconciled(&mut h, "a", "sleeper", 3).await;
    assert!(h.has_pod(&a[0]));
    assert!(a[1..].iter().all(|k| h.queued(k) && !h.has_pod(k)));
    let b = h.create("b", "prompt", custom());
    h.ok(&b).await;
    assert!(h.has_pod(&b), "namespace a held every slot");
    // The operator's own pods are proven by the uid it recorded.
    let running = h.ctx.io.running_syncs();
    assert!(running.contains(&a[0]) && running.contains(&b));
}
