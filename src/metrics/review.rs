//! Who may read `/metrics`: the asking half. A token's verdict comes from the cache, or from
//! a TokenReview and a SubjectAccessReview on the operator's own client (`auth.rs` decides
//! from their answers). At most [`MAX_REVIEWS`] run at once; a caller past that gets 503
//! at once, so that a flood of bogus tokens costs the API server a few requests at a time.
//! A token the cluster allowed before is reviewed again on [`MAX_RENEWALS`] permits of its
//! own, which no new token takes: a flood cannot keep the scraper from its renewal.

use std::sync::Mutex;
use std::time::Instant;

use axum::http::HeaderValue;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use super::auth::{self, Verdict};
use super::verdicts::{self, Lookup, Verdicts};

/// Reviews under way at once; more callers get 503 until one ends.
const MAX_REVIEWS: usize = 4;
/// Renewals (tokens allowed before) under way at once, besides [`MAX_REVIEWS`]: two, for a
/// pair of Prometheus replicas.
const MAX_RENEWALS: usize = 2;

const BUSY: &str = "too many authorization reviews under way; retry later";

pub struct Reviewer {
    client: Client,
    permits: Semaphore,
    renewals: Semaphore,
    cache: Mutex<Verdicts>,
}

impl Reviewer {
    pub fn new(client: Client) -> Self {
        Reviewer::with_verdicts(client, Verdicts::default())
    }

    fn with_verdicts(client: Client, verdicts: Verdicts) -> Self {
        Reviewer {
            client,
            permits: Semaphore::new(MAX_REVIEWS),
            renewals: Semaphore::new(MAX_RENEWALS),
            cache: Mutex::new(verdicts),
        }
    }

    /// What `/metrics` answers the caller with this `Authorization` header.
    pub async fn verdict(&self, header: Option<&HeaderValue>) -> Verdict {
        let token = match auth::bearer(header) {
            Ok(token) => token,
            Err(verdict) => return verdict,
        };
        let key = verdicts::token_hash(token);
        let known = match self.cache.lock() {
            Ok(cache) => cache.lookup(&key, Instant::now()),
            Err(_) => Lookup::Ask,
        };
        let permit = match known {
            Lookup::Cached(verdict) => return verdict,
            Lookup::Renew => self
                .renewals
                .try_acquire()
                .or_else(|_| self.permits.try_acquire()),
            Lookup::Ask => self.permits.try_acquire(),
        };
        let Ok(_permit) = permit else {
            return Verdict::Unavailable(BUSY);
        };
        let verdict = self.ask(token).await;
        if let Ok(mut cache) = self.cache.lock() {
            cache.put(key, verdict.clone(), Instant::now());
        }
        verdict
    }

    async fn ask(&self, token: &str) -> Verdict {
        let review = TokenReview {
            // No audiences: the API server's own (a service account token's default).
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let pp = PostParams::default();
        let reviewed = match Api::<TokenReview>::all(self.client.clone())
            .create(&pp, &review)
            .await
        {
            Ok(r) => r,
            Err(e) => return unavailable("TokenReview", &e),
        };
        let access = match auth::access_review(reviewed.status.as_ref()) {
            Ok(access) => access,
            Err(verdict) => {
                debug!("/metrics: a caller's bearer token is not authenticated");
                return verdict;
            }
        };
        let answer = match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&pp, &access)
            .await
        {
            Ok(r) => r,
            Err(e) => return unavailable("SubjectAccessReview", &e),
        };
        let verdict = auth::verdict(&access, answer.status.as_ref());
        if let Verdict::Forbidden(user) = &verdict {
            debug!(%user, "/metrics: the caller is not allowed get /metrics");
        }
        verdict
    }
}

fn unavailable(review: &str, e: &kube::Error) -> Verdict {
    warn!("/metrics: cannot ask the API server a {review}: {e}");
    Verdict::Unavailable("the API server could not be asked whether the caller may read /metrics")
}

#[cfg(test)]
mod tests;
