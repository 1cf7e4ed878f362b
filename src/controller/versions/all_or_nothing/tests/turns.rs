//! How a sync's requests are made over time.

use super::*;

/// A sync's requests are made as their turn comes: at most `PARALLEL_WRITES` exist at once
/// (each is some KiB of client state; made all up front, 5,000 of them held 24 MiB).
#[tokio::test]
async fn requests_are_made_when_their_turn_comes_not_all_up_front() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let (made, answered, most) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let results = each(500, |_| {
        let alive = made.fetch_add(1, SeqCst) + 1 - answered.load(SeqCst);
        most.fetch_max(alive, SeqCst);
        Some(async {
            tokio::task::yield_now().await;
            answered.fetch_add(1, SeqCst);
            Ok::<_, kube::Error>(())
        })
    })
    .await;
    assert_eq!(results.len(), 500);
    assert!(results.iter().all(|r| matches!(r, Some(Ok(())))));
    assert_eq!(most.load(SeqCst), PARALLEL_WRITES);
}
