//! Pacing of the API writes, per namespace (the pure decision; the one writer of versions, `controller::versions::writer`, waits).
//!
//! Every version write (dry runs included: the API server admits and validates them as it
//! does the real ones), of every origin (a sync, its undo, the Orphan finalizer), takes a
//! turn from its namespace's token bucket. The pacing is work-conserving, as the API
//! server's own priority and fairness lends the seats a flow leaves unused: a namespace
//! whose writes are the only ones waiting may use the whole `total_qps`; while other
//! namespaces have writes waiting too, each gets its share, `namespace_qps` or an equal part
//! of `total_qps`, whichever is less, so that the operator's writes together stay within
//! what the API server gives its user and no namespace's backlog starves another's. Each
//! namespace has a clock of its own: the writes one namespace has waiting push back only
//! its own later writes, never another namespace's turn.
//!
//! The buckets are kept as GCRA's "theoretical arrival time": the instant the bucket is full
//! again. A namespace whose time has passed has a full bucket, exactly as one never seen, so
//! it is dropped: memory is bounded by the namespaces that wrote in the last moment.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// `--namespace-write-qps` when not given (see docs/security.md for the measurement).
pub const DEFAULT_NAMESPACE_QPS: u32 = 400;
/// `--namespace-write-burst` when not given.
pub const DEFAULT_BURST: u32 = 100;
/// `--write-qps` when not given.
pub const DEFAULT_TOTAL_QPS: u32 = 500;

/// Idle buckets are looked for at most this often (a sweep costs one pass over the map).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The write rates the operator keeps to; a rate of 0 is no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rates {
    /// Writes per second of one namespace while others have writes waiting
    /// (`--namespace-write-qps`).
    pub namespace_qps: u32,
    /// Writes one namespace may make at once before the rate applies (at least 1).
    pub burst: u32,
    /// Writes per second of all namespaces together, and of one alone (`--write-qps`).
    pub total_qps: u32,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            namespace_qps: DEFAULT_NAMESPACE_QPS,
            burst: DEFAULT_BURST,
            total_qps: DEFAULT_TOTAL_QPS,
        }
    }
}

impl Rates {
    /// No pacing at all.
    pub const UNLIMITED: Rates = Rates {
        namespace_qps: 0,
        burst: 1,
        total_qps: 0,
    };

    /// The rate of one namespace while `waiting` namespaces (itself included) have writes
    /// waiting: alone, all of the total; else its own rate or its equal share of the total,
    /// whichever is less; at least one a second. `None`: unpaced.
    pub fn share(&self, waiting: usize) -> Option<u32> {
        let total = (self.total_qps > 0).then_some(self.total_qps);
        if waiting <= 1 {
            return total;
        }
        let waiting = u32::try_from(waiting).unwrap_or(u32::MAX);
        let share = total.map(|t| t.checked_div(waiting).unwrap_or(1).max(1));
        match (self.namespace_qps, share) {
            (0, share) => share,
            (own, Some(share)) => Some(own.min(share)),
            (own, None) => Some(own),
        }
    }
}

/// One namespace's bucket.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// When it is full again.
    full_at: Instant,
    /// When the last write it gave a turn is sent: later than now while writes wait.
    last_send: Instant,
}

#[derive(Debug)]
pub struct Pacer {
    rates: Rates,
    /// Per namespace that wrote lately.
    buckets: HashMap<String, Bucket>,
    swept: Option<Instant>,
}

impl Pacer {
    pub fn new(rates: Rates) -> Self {
        Pacer {
            rates,
            buckets: HashMap::new(),
            swept: None,
        }
    }

    /// Takes one write's turn for `namespace` at `now`: how long the write waits before it
    /// is sent (zero: at once).
    pub fn reserve(&mut self, namespace: &str, now: Instant) -> Duration {
        self.sweep(now);
        let others = self
            .buckets
            .iter()
            .filter(|(ns, b)| b.last_send > now && ns.as_str() != namespace)
            .count();
        let Some(rate) = self.rates.share(others.saturating_add(1)) else {
            return Duration::ZERO;
        };
        let interval = Duration::from_secs(1)
            .checked_div(rate)
            .unwrap_or(Duration::ZERO);
        // A full bucket lets `burst` writes through at once: the last of them is due when
        // the bucket is `burst - 1` intervals short of full.
        let tolerance = interval.saturating_mul(self.rates.burst.max(1).saturating_sub(1));
        let full_at = self
            .buckets
            .get(namespace)
            .map(|b| b.full_at)
            .filter(|at| *at > now)
            .unwrap_or(now);
        let send_at = full_at.checked_sub(tolerance).unwrap_or(now).max(now);
        self.buckets.insert(
            namespace.to_string(),
            Bucket {
                full_at: full_at.checked_add(interval).unwrap_or(full_at),
                last_send: send_at,
            },
        );
        send_at.saturating_duration_since(now)
    }

    /// Namespaces with a bucket (those that wrote lately).
    pub fn active(&self) -> usize {
        self.buckets.len()
    }

    /// Drops the buckets that are full again (the same as none).
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_EVERY)
        {
            return;
        }
        self.swept = Some(now);
        self.buckets.retain(|_, b| b.full_at > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(namespace_qps: u32, burst: u32, total_qps: u32) -> Rates {
        Rates {
            namespace_qps,
            burst,
            total_qps,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The waits of `n` writes of `ns` asked for at once.
    fn waits(p: &mut Pacer, ns: &str, n: usize, now: Instant) -> Vec<Duration> {
        (0..n).map(|_| p.reserve(ns, now)).collect()
    }

    /// The waits of the first `n` writes of a namespace, asked for at once.
    fn first_waits(rates: Rates, n: usize) -> Vec<Duration> {
        waits(&mut Pacer::new(rates), "a", n, Instant::now())
    }

    #[test]
    fn a_burst_goes_at_once_then_the_rate_applies() {
        assert_eq!(
            first_waits(rates(5, 3, 10), 6),
            [ms(0), ms(0), ms(0), ms(100), ms(200), ms(300)]
        );
    }

    #[test]
    fn a_namespace_alone_uses_the_whole_total_rate() {
        // Its own rate is 100/s, the total 400/s: alone, nothing is left unused.
        assert_eq!(
            first_waits(rates(100, 1, 400), 3),
            [ms(0), ms(2) + ms(1) / 2, ms(5)]
        );
        assert_eq!(Rates::default().share(1), Some(DEFAULT_TOTAL_QPS));
        // With no total, a namespace alone is not paced; its own rate is its share.
        assert_eq!(rates(100, 1, 0).share(1), None);
        assert_eq!(rates(100, 1, 0).share(2), Some(100));
        assert!(
            first_waits(rates(100, 1, 0), 50)
                .iter()
                .all(Duration::is_zero)
        );
    }

    #[test]
    fn a_namespace_s_waiting_writes_never_delay_another_namespace() {
        let mut p = Pacer::new(rates(10, 2, 10));
        let now = Instant::now();
        // a has a second's worth of writes waiting...
        let a = waits(&mut p, "a", 12, now);
        assert_eq!(a.last(), Some(&ms(1000)));
        // ...b's burst goes at once, and then its share (5/s, a having writes waiting).
        assert_eq!(waits(&mut p, "b", 3, now), [ms(0), ms(0), ms(200)]);
        // a's next turns are behind a's own writes only, now at its share too (the first
        // at a's last: the bucket's tolerance is counted at the new rate).
        assert_eq!(waits(&mut p, "a", 3, now), [ms(1000), ms(1200), ms(1400)]);
    }

    #[test]
    fn namespaces_share_the_total_only_while_others_have_writes_waiting() {
        let mut p = Pacer::new(rates(100, 1, 100));
        let now = Instant::now();
        // Alone, a writes at the total (100/s, 10 ms apart).
        assert_eq!(waits(&mut p, "a", 3, now), [ms(0), ms(10), ms(20)]);
        // b comes: each namespace's later writes are 20 ms apart (50/s each, 100/s
        // together); b's first goes at once.
        assert_eq!(waits(&mut p, "b", 3, now), [ms(0), ms(20), ms(40)]);
        assert_eq!(p.reserve("a", now), ms(30));
        assert_eq!(p.reserve("a", now), ms(50));
        // Once b's writes are all sent, none of b's wait: a has the total again.
        let later = now + ms(45);
        assert_eq!(waits(&mut p, "a", 2, later), [ms(25), ms(35)]);
        assert_eq!(rates(100, 1, 100).share(1000), Some(1), "never stopped");
        assert_eq!(
            rates(30, 1, 100).share(2),
            Some(30),
            "its own rate when less"
        );
    }

    #[test]
    fn a_namespace_whose_writes_all_went_at_once_does_not_take_a_share() {
        // b's writes fit its burst: none waits, so a keeps the whole total.
        let mut p = Pacer::new(rates(10, 5, 100));
        let now = Instant::now();
        assert!(waits(&mut p, "b", 5, now).iter().all(Duration::is_zero));
        assert_eq!(
            waits(&mut p, "a", 7, now),
            [ms(0), ms(0), ms(0), ms(0), ms(0), ms(10), ms(20)]
        );
    }

    #[test]
    fn a_rate_of_zero_is_no_limit() {
        let mut p = Pacer::new(Rates::UNLIMITED);
        let now = Instant::now();
        assert!(waits(&mut p, "a", 1000, now).iter().all(Duration::is_zero));
        assert_eq!(p.active(), 0, "nothing is kept for an unpaced write");
        // Only a total: a namespace alone may take all of it.
        assert_eq!(rates(0, 1, 300).share(1), Some(300));
        assert_eq!(rates(0, 1, 300).share(3), Some(100));
    }

    #[test]
    fn the_bucket_refills_with_time_and_idle_namespaces_are_dropped() {
        let mut p = Pacer::new(rates(10, 2, 10));
        let start = Instant::now();
        assert_eq!(waits(&mut p, "a", 3, start), [ms(0), ms(0), ms(100)]);
        // 150 ms later the bucket holds one more token: one goes at once, the next waits.
        let later = start + ms(150);
        assert_eq!(waits(&mut p, "a", 2, later), [ms(50), ms(150)]);
        for i in 0..100 {
            p.reserve(&format!("tenant-{i}"), later);
        }
        assert_eq!(p.active(), 101);
        // Once every bucket is full again, a write of anyone drops them all but its own.
        let idle = later + Duration::from_secs(2);
        assert_eq!(p.reserve("b", idle), Duration::ZERO);
        assert_eq!(p.active(), 1);
    }
}
