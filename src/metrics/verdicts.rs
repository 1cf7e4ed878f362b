//! Who may read `/metrics`: the cluster's recent answers, by token hash, so that a scraper
//! costs two reviews a minute and a flood of bogus tokens a bounded map. `auth.rs` makes the
//! verdicts; `review.rs` asks for them and keeps them here.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::auth::Verdict;

/// How long a verdict is reused for the same token, and how many refusals are kept.
const CACHE_TTL: Duration = Duration::from_secs(60);
pub const CACHE_ENTRIES: usize = 1024;
/// Tokens the cluster allowed, kept apart from the refusals so that no flood of made-up
/// tokens evicts them: only a token allowed `get /metrics` takes a place (the scrapers).
const ALLOWED_ENTRIES: usize = 64;
/// How long an allowed token is remembered past its verdict's [`CACHE_TTL`]: its next review
/// is a renewal, which has a permit of its own (`review.rs`). A projected service account
/// token lives an hour.
const ALLOWED_KNOWN_FOR: Duration = Duration::from_secs(3600);

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
struct Cache {
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

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
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
    use crate::metrics::auth::BAD_TOKEN;

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
