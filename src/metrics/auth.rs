//! Who may read `/metrics`: the pure half. A caller's `Authorization` header becomes a
//! bearer token or an answer at once; a TokenReview's status becomes the SubjectAccessReview
//! to ask or an answer; a SubjectAccessReview's status becomes the answer. The cluster
//! decides, as for the API server's own `/metrics`: the caller must be authenticated and
//! allowed `get` on the non-resource URL `/metrics`. `review.rs` does the asking.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode};
use k8s_openapi::api::authentication::v1::TokenReviewStatus;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};

/// The path and verb a scraper must be allowed (a ClusterRole's `nonResourceURLs`).
pub const PATH: &str = "/metrics";
pub const VERB: &str = "get";

/// A longer bearer token is refused without a review: service account tokens are about
/// 1 KiB, and a review of a megabyte of junk would cost the API server for nothing.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// What `/metrics` answers a caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The cluster authorises the caller: the metrics.
    Allowed,
    /// 401: no bearer token, a malformed or oversized one, or one the cluster does not
    /// authenticate.
    Unauthenticated(&'static str),
    /// 403: the cluster knows the caller (this user) and does not allow it `get /metrics`.
    Forbidden(String),
    /// 503: the cluster could not be asked (too many reviews at once, or a review failed);
    /// never the metrics.
    Unavailable(&'static str),
}

impl Verdict {
    pub fn status(&self) -> StatusCode {
        match self {
            Verdict::Allowed => StatusCode::OK,
            Verdict::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Verdict::Forbidden(_) => StatusCode::FORBIDDEN,
            Verdict::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The response body: why, in one line (never the token).
    pub fn message(&self) -> String {
        match self {
            Verdict::Allowed => "ok".into(),
            Verdict::Unauthenticated(why) => format!("{why}\n"),
            Verdict::Forbidden(user) => {
                format!("{user} is not allowed to {VERB} {PATH}\n")
            }
            Verdict::Unavailable(why) => format!("{why}\n"),
        }
    }

    /// Whether the verdict may be reused for the same token: the cluster's answers, not a
    /// failure to ask.
    pub fn cacheable(&self) -> bool {
        !matches!(self, Verdict::Unavailable(_))
    }
}

const NO_TOKEN: &str = "a bearer token is required (Authorization: Bearer <token>)";
const BAD_TOKEN: &str = "the bearer token is not valid";

/// The bearer token of an `Authorization` header, or the answer without one.
pub fn bearer(header: Option<&HeaderValue>) -> Result<&str, Verdict> {
    let header = header.ok_or(Verdict::Unauthenticated(NO_TOKEN))?;
    if header.len() > MAX_TOKEN_BYTES.saturating_add("Bearer ".len()) {
        return Err(Verdict::Unauthenticated(BAD_TOKEN));
    }
    let text = header
        .to_str()
        .map_err(|_| Verdict::Unauthenticated(BAD_TOKEN))?;
    let (scheme, token) = text
        .split_once(' ')
        .ok_or(Verdict::Unauthenticated(NO_TOKEN))?;
    // The scheme is case-insensitive (RFC 9110), the token one word.
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Verdict::Unauthenticated(NO_TOKEN));
    }
    let token = token.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES || token.contains(char::is_whitespace) {
        return Err(Verdict::Unauthenticated(BAD_TOKEN));
    }
    Ok(token)
}

/// After the TokenReview: the SubjectAccessReview to ask about the user it names, or 401.
pub fn access_review(status: Option<&TokenReviewStatus>) -> Result<SubjectAccessReview, Verdict> {
    let status = status.ok_or(Verdict::Unauthenticated(BAD_TOKEN))?;
    let user = match (status.authenticated, &status.user) {
        (Some(true), Some(user)) => user,
        _ => return Err(Verdict::Unauthenticated(BAD_TOKEN)),
    };
    let username = user.username.clone().filter(|u| !u.is_empty());
    if username.is_none() && user.groups.as_ref().is_none_or(Vec::is_empty) {
        return Err(Verdict::Unauthenticated(BAD_TOKEN));
    }
    Ok(SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: username,
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(PATH.into()),
                verb: Some(VERB.into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// After the SubjectAccessReview of `review`: allowed, or 403 naming the user.
pub fn verdict(
    review: &SubjectAccessReview,
    status: Option<&SubjectAccessReviewStatus>,
) -> Verdict {
    if status.is_some_and(|s| s.allowed && s.denied != Some(true)) {
        return Verdict::Allowed;
    }
    let user = review
        .spec
        .user
        .clone()
        .unwrap_or_else(|| "the caller".into());
    Verdict::Forbidden(crate::text::clean(&user, 256))
}

/// How long a verdict is reused for the same token, and how many refusals are kept.
pub const CACHE_TTL: Duration = Duration::from_secs(60);
pub const CACHE_ENTRIES: usize = 1024;
/// Tokens the cluster allowed, kept apart from the refusals so that no flood of made-up
/// tokens evicts them: only a token allowed `get /metrics` takes a place (the scrapers).
pub const ALLOWED_ENTRIES: usize = 64;
/// How long an allowed token is remembered past its verdict's [`CACHE_TTL`]: its next review
/// is a renewal, which has a permit of its own (`review.rs`). A projected service account
/// token lives an hour.
pub const ALLOWED_KNOWN_FOR: Duration = Duration::from_secs(3600);

/// A token's SHA-256: the cache's key, so that no token text is kept in memory.
pub type TokenHash = [u8; 32];

pub fn token_hash(token: &str) -> TokenHash {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The cluster's recent verdicts by token hash: at most `max` entries, each for `ttl`, so
/// that a scraper costs two reviews a minute and a flood of bogus tokens a bounded map.
#[derive(Debug)]
pub struct Cache {
    ttl: Duration,
    max: usize,
    entries: HashMap<TokenHash, (Verdict, Instant)>,
}

impl Cache {
    pub fn new(ttl: Duration, max: usize) -> Self {
        Cache {
            ttl,
            max,
            entries: HashMap::new(),
        }
    }

    pub fn get(&self, key: &TokenHash, now: Instant) -> Option<Verdict> {
        self.aged(key, now).map(|(verdict, _)| verdict)
    }

    /// The live entry and how old it is.
    fn aged(&self, key: &TokenHash, now: Instant) -> Option<(Verdict, Duration)> {
        let (verdict, at) = self.entries.get(key)?;
        let age = now.saturating_duration_since(*at);
        (age < self.ttl).then(|| (verdict.clone(), age))
    }

    fn remove(&mut self, key: &TokenHash) {
        self.entries.remove(key);
    }

    /// Keeps a cacheable verdict; when full, the expired entries go, then the oldest.
    pub fn put(&mut self, key: TokenHash, verdict: Verdict, now: Instant) {
        if !verdict.cacheable() || self.max == 0 {
            return;
        }
        if self.entries.len() >= self.max && !self.entries.contains_key(&key) {
            let ttl = self.ttl;
            self.entries
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
            if self.entries.len() >= self.max {
                let oldest = self.entries.iter().min_by_key(|(_, (_, at))| *at);
                if let Some(oldest) = oldest.map(|(k, _)| *k) {
                    self.entries.remove(&oldest);
                }
            }
        }
        self.entries.insert(key, (verdict, now));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What the cache knows of a token.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The cluster's verdict, still fresh.
    Cached(Verdict),
    /// The cluster allowed it, more than [`CACHE_TTL`] ago: review it again, on the
    /// renewals' permit.
    Renew,
    /// Nothing known: review it, if a permit is free.
    Ask,
}

/// The verdicts by token hash, in two caches: the allowed ones (few, remembered for
/// [`ALLOWED_KNOWN_FOR`]) and the refusals (at most [`CACHE_ENTRIES`], oldest out). A
/// flood of made-up tokens fills the refusals only, so the scrapers' verdicts stay.
#[derive(Debug)]
pub struct Verdicts {
    fresh_for: Duration,
    allowed: Cache,
    refused: Cache,
}

impl Default for Verdicts {
    fn default() -> Self {
        Verdicts::new(CACHE_TTL, ALLOWED_KNOWN_FOR, ALLOWED_ENTRIES, CACHE_ENTRIES)
    }
}

impl Verdicts {
    pub fn new(fresh_for: Duration, known_for: Duration, allowed: usize, refused: usize) -> Self {
        Verdicts {
            fresh_for,
            allowed: Cache::new(known_for.max(fresh_for), allowed),
            refused: Cache::new(fresh_for, refused),
        }
    }

    pub fn lookup(&self, key: &TokenHash, now: Instant) -> Lookup {
        if let Some((_, age)) = self.allowed.aged(key, now) {
            return if age < self.fresh_for {
                Lookup::Cached(Verdict::Allowed)
            } else {
                Lookup::Renew
            };
        }
        match self.refused.get(key, now) {
            Some(verdict) => Lookup::Cached(verdict),
            None => Lookup::Ask,
        }
    }

    /// Keeps the cluster's verdict; a failure to ask changes nothing (an allowed token
    /// stays a renewal).
    pub fn put(&mut self, key: TokenHash, verdict: Verdict, now: Instant) {
        match verdict {
            Verdict::Unavailable(_) => {}
            Verdict::Allowed => {
                self.refused.remove(&key);
                self.allowed.put(key, verdict, now);
            }
            refused => {
                // A right revoked: no longer a renewal.
                self.allowed.remove(&key);
                self.refused.put(key, refused, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;

    fn header(text: &str) -> HeaderValue {
        HeaderValue::from_str(text).unwrap()
    }

    #[test]
    fn the_bearer_token_of_the_header_or_401() {
        assert_eq!(bearer(Some(&header("Bearer abc.def"))), Ok("abc.def"));
        assert_eq!(bearer(Some(&header("bearer  abc "))), Ok("abc"));
        for bad in [
            "",
            "Bearer",
            "Bearer ",
            "Basic dXNlcjpwdw==",
            "abc",
            "Bearer a b",
        ] {
            let verdict = bearer(Some(&header(bad))).unwrap_err();
            assert_eq!(verdict.status(), StatusCode::UNAUTHORIZED, "{bad:?}");
        }
        assert_eq!(bearer(None).unwrap_err().status(), StatusCode::UNAUTHORIZED);
        let not_text = HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap();
        assert_eq!(
            bearer(Some(&not_text)).unwrap_err().status(),
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn an_oversized_token_is_refused_without_a_review() {
        let at_bound = "a".repeat(MAX_TOKEN_BYTES);
        assert_eq!(
            bearer(Some(&header(&format!("Bearer {at_bound}")))),
            Ok(at_bound.as_str())
        );
        let over = format!("Bearer {at_bound}a");
        assert_eq!(
            bearer(Some(&header(&over))),
            Err(Verdict::Unauthenticated(BAD_TOKEN))
        );
        let huge = format!("Bearer {}", "a".repeat(1 << 20));
        assert_eq!(
            bearer(Some(&header(&huge))),
            Err(Verdict::Unauthenticated(BAD_TOKEN))
        );
    }

    fn authenticated(user: UserInfo) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(true),
            user: Some(user),
            ..Default::default()
        }
    }

    #[test]
    fn an_authenticated_user_is_asked_about_get_metrics_with_all_it_is() {
        let user = UserInfo {
            username: Some("system:serviceaccount:monitoring:prometheus".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            uid: Some("u-1".into()),
            extra: Some([("scope".to_string(), vec!["a".to_string()])].into()),
        };
        let review = access_review(Some(&authenticated(user.clone()))).unwrap();
        assert_eq!(review.spec.user, user.username);
        assert_eq!(review.spec.groups, user.groups);
        assert_eq!(review.spec.uid, user.uid);
        assert_eq!(review.spec.extra, user.extra);
        assert_eq!(review.spec.resource_attributes, None);
        let attributes = review.spec.non_resource_attributes.unwrap();
        assert_eq!(attributes.path.as_deref(), Some("/metrics"));
        assert_eq!(attributes.verb.as_deref(), Some("get"));
    }

    #[test]
    fn a_token_the_cluster_does_not_authenticate_is_401() {
        let user = UserInfo {
            username: Some("someone".into()),
            ..Default::default()
        };
        let unauthenticated = [
            None,
            Some(TokenReviewStatus::default()),
            Some(TokenReviewStatus {
                authenticated: Some(false),
                user: Some(user.clone()),
                error: Some("token expired".into()),
                ..Default::default()
            }),
            // Authenticated as nobody: nothing to ask about.
            Some(authenticated(UserInfo::default())),
        ];
        for status in unauthenticated {
            let verdict = access_review(status.as_ref()).unwrap_err();
            assert_eq!(verdict.status(), StatusCode::UNAUTHORIZED, "{status:?}");
        }
    }

    #[test]
    fn only_an_allowed_review_is_200_and_a_refusal_names_the_user() {
        let user = UserInfo {
            username: Some("system:serviceaccount:tenant:default".into()),
            ..Default::default()
        };
        let review = access_review(Some(&authenticated(user))).unwrap();
        let status = |allowed, denied| SubjectAccessReviewStatus {
            allowed,
            denied,
            ..Default::default()
        };
        assert_eq!(
            verdict(&review, Some(&status(true, None))),
            Verdict::Allowed
        );
        for answer in [
            None,
            Some(status(false, None)),
            Some(status(false, Some(true))),
            Some(status(true, Some(true))),
        ] {
            let v = verdict(&review, answer.as_ref());
            assert_eq!(v.status(), StatusCode::FORBIDDEN, "{answer:?}");
            assert!(
                v.message().contains(
                    "system:serviceaccount:tenant:default is not allowed to get /metrics"
                ),
                "{}",
                v.message()
            );
        }
    }

    #[test]
    fn the_cache_keeps_the_clusters_answers_briefly_and_boundedly() {
        let t0 = Instant::now();
        let mut cache = Cache::new(Duration::from_secs(60), 3);
        let a = token_hash("a");
        cache.put(a, Verdict::Allowed, t0);
        assert_eq!(
            cache.get(&a, t0 + Duration::from_secs(59)),
            Some(Verdict::Allowed)
        );
        assert_eq!(cache.get(&a, t0 + Duration::from_secs(60)), None);
        // A failure to ask is not an answer: asked again next time.
        let b = token_hash("b");
        cache.put(b, Verdict::Unavailable("x"), t0);
        assert_eq!(cache.get(&b, t0), None);
        // Full: the oldest goes first, never more than the bound.
        for (i, token) in ["b", "c", "d", "e", "f"].iter().enumerate() {
            let at = t0 + Duration::from_secs(u64::try_from(i).unwrap() + 1);
            cache.put(token_hash(token), Verdict::Forbidden((*token).into()), at);
            assert!(cache.len() <= 3);
        }
        let now = t0 + Duration::from_secs(10);
        assert_eq!(cache.get(&a, now), None);
        assert_eq!(cache.get(&token_hash("c"), now), None);
        assert!(cache.get(&token_hash("f"), now).is_some());
        // Expired entries make room before any live one goes.
        let later = t0 + Duration::from_secs(63);
        cache.put(token_hash("g"), Verdict::Allowed, later);
        // d (written at 3s) expired at 63s: it goes, e and f stay.
        assert_eq!(cache.len(), 3);
        assert!(cache.get(&token_hash("e"), later).is_some());
        assert!(cache.get(&token_hash("f"), later).is_some());
    }

    #[test]
    fn a_flood_of_refused_tokens_never_evicts_an_allowed_one() {
        let t0 = Instant::now();
        let mut verdicts = Verdicts::new(Duration::from_secs(60), Duration::from_secs(3600), 2, 3);
        let scraper = token_hash("scraper");
        verdicts.put(scraper, Verdict::Allowed, t0);
        for i in 0..100u64 {
            let at = t0 + Duration::from_millis(i);
            let token = token_hash(&format!("made-up-{i}"));
            assert_eq!(verdicts.lookup(&token, at), Lookup::Ask);
            verdicts.put(token, Verdict::Unauthenticated(BAD_TOKEN), at);
        }
        let now = t0 + Duration::from_secs(1);
        assert_eq!(
            verdicts.lookup(&scraper, now),
            Lookup::Cached(Verdict::Allowed)
        );
        assert_eq!(
            verdicts.lookup(&token_hash("made-up-99"), now),
            Lookup::Cached(Verdict::Unauthenticated(BAD_TOKEN))
        );
        // Past its minute the allowed token is reviewed again, as a renewal; a failure to
        // ask keeps it one, a refusal ends it.
        let later = t0 + Duration::from_secs(61);
        assert_eq!(verdicts.lookup(&scraper, later), Lookup::Renew);
        verdicts.put(scraper, Verdict::Unavailable("x"), later);
        assert_eq!(verdicts.lookup(&scraper, later), Lookup::Renew);
        verdicts.put(scraper, Verdict::Allowed, later);
        assert_eq!(
            verdicts.lookup(&scraper, later),
            Lookup::Cached(Verdict::Allowed)
        );
        verdicts.put(scraper, Verdict::Forbidden("scraper".into()), later);
        assert_eq!(
            verdicts.lookup(&scraper, later),
            Lookup::Cached(Verdict::Forbidden("scraper".into()))
        );
        // Forgotten after the hour it is remembered for.
        let scraper2 = token_hash("scraper2");
        verdicts.put(scraper2, Verdict::Allowed, t0);
        assert_eq!(
            verdicts.lookup(&scraper2, t0 + Duration::from_secs(3600)),
            Lookup::Ask
        );
    }

    #[test]
    fn the_key_is_a_digest_not_the_token() {
        assert_ne!(token_hash("a"), token_hash("b"));
        assert_eq!(token_hash("a"), token_hash("a"));
        assert!(
            !token_hash("secret-token")
                .windows(6)
                .any(|w| w == b"secret")
        );
    }
}
