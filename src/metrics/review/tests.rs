//! The reviewer against a fake API server (a `tower-test` mock): a token `good` is
//! allowed, a token starting `hang` is never answered (its review holds a permit), any
//! other token is not authenticated.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use super::*;

struct Fake {
    /// Requests the fake API server received.
    requests: Arc<AtomicUsize>,
    /// Reviews it holds unanswered.
    hanging: Arc<AtomicUsize>,
}

fn reviewer(verdicts: Verdicts) -> (Arc<Reviewer>, Fake) {
    let requests = Arc::new(AtomicUsize::new(0));
    let hanging = Arc::new(AtomicUsize::new(0));
    let fake = Fake {
        requests: requests.clone(),
        hanging: hanging.clone(),
    };
    let client = crate::client::fake_api::client("default", move |head, body| {
        requests.fetch_add(1, Ordering::SeqCst);
        let answer = if head.uri.path().ends_with("/tokenreviews") {
            let token = body["spec"]["token"].as_str().unwrap_or_default();
            if token.starts_with("hang") {
                hanging.fetch_add(1, Ordering::SeqCst);
                return None;
            }
            let status = if token == "good" {
                json!({"authenticated": true, "user": {"username": "prometheus"}})
            } else {
                json!({"authenticated": false})
            };
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                   "metadata": {}, "spec": body["spec"], "status": status})
        } else {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "metadata": {}, "spec": body["spec"], "status": {"allowed": true}})
        };
        Some((201, answer))
    });
    (Arc::new(Reviewer::with_verdicts(client, verdicts)), fake)
}

fn bearer(token: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("Bearer {token}")).unwrap()
}

#[tokio::test]
async fn a_flood_of_made_up_tokens_leaves_the_scrapers_cached_verdict_in_place() {
    let (reviewer, fake) = reviewer(Verdicts::default());
    assert_eq!(
        reviewer.verdict(Some(&bearer("good"))).await,
        Verdict::Allowed
    );
    // More distinct tokens than the refusals' cache holds: every one reviewed, refused.
    for i in 0..verdicts::CACHE_ENTRIES + 100 {
        let verdict = reviewer
            .verdict(Some(&bearer(&format!("made-up-{i}"))))
            .await;
        assert_eq!(verdict.status(), axum::http::StatusCode::UNAUTHORIZED);
    }
    let asked = fake.requests.load(Ordering::SeqCst);
    assert_eq!(
        reviewer.verdict(Some(&bearer("good"))).await,
        Verdict::Allowed
    );
    assert_eq!(
        fake.requests.load(Ordering::SeqCst),
        asked,
        "the scraper's verdict came from the cache"
    );
}

#[tokio::test]
async fn a_scrapers_renewal_has_a_permit_that_a_flood_cannot_take() {
    // Verdicts fresh for no time: the scraper's next request is a renewal at once.
    let verdicts = Verdicts::new(Duration::ZERO, Duration::from_secs(3600), 8, 8);
    let (reviewer, fake) = reviewer(verdicts);
    assert_eq!(
        reviewer.verdict(Some(&bearer("good"))).await,
        Verdict::Allowed
    );
    // Flooders hold every review permit.
    for i in 0..MAX_REVIEWS {
        let reviewer = reviewer.clone();
        tokio::spawn(async move { reviewer.verdict(Some(&bearer(&format!("hang-{i}")))).await });
    }
    for _ in 0..500 {
        if fake.hanging.load(Ordering::SeqCst) == MAX_REVIEWS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fake.hanging.load(Ordering::SeqCst), MAX_REVIEWS);
    // A new token is turned away at once; the scraper is reviewed and served.
    assert_eq!(
        reviewer.verdict(Some(&bearer("made-up"))).await,
        Verdict::Unavailable(BUSY)
    );
    assert_eq!(
        reviewer.verdict(Some(&bearer("good"))).await,
        Verdict::Allowed
    );
}
