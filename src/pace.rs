//! Pacing of the API writes, per namespace (the pure decision; `controller::pacing` waits).
//!
//! Every version write (dry runs included: the API server admits and validates them as it
//! does the real ones) takes a turn from its namespace's token bucket. A namespace writes at
//! most `namespace_qps` a second after a burst of `burst`; while several namespaces write,
//! each gets an equal share of `total_qps` when that is less, so that the operator's writes
//! together stay within what the API server's priority and fairness gives its user. Each
//! namespace has a clock of its own: the writes one namespace has waiting push back only its
//! own later writes, never another namespace's turn.
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
    /// Writes per second of one namespace (`--namespace-write-qps`).
    pub namespace_qps: u32,
    /// Writes one namespace may make at once before the rate applies (at least 1).
    pub burst: u32,
    /// Writes per second of all namespaces together (`--write-qps`).
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

    /// The rate of one namespace while `active` namespaces write: its own, or its equal
    /// share of the total, whichever is less; at least one a second. `None`: unpaced.
    pub fn share(&self, active: usize) -> Option<u32> {
        let active = u32::try_from(active.max(1)).unwrap_or(u32::MAX);
        let share =
            (self.total_qps > 0).then(|| self.total_qps.checked_div(active).unwrap_or(1).max(1));
        match (self.namespace_qps, share) {
            (0, share) => share,
            (own, Some(share)) => Some(own.min(share)),
            (own, None) => Some(own),
        }
    }
}

#[derive(Debug)]
pub struct Pacer {
    rates: Rates,
    /// Per namespace that wrote lately: when its bucket is full again.
    full_at: HashMap<String, Instant>,
    swept: Option<Instant>,
}

impl Pacer {
    pub fn new(rates: Rates) -> Self {
        Pacer {
            rates,
            full_at: HashMap::new(),
            swept: None,
        }
    }

    /// Takes one write's turn for `namespace` at `now`: how long the write waits before it
    /// is sent (zero: at once).
    pub fn reserve(&mut self, namespace: &str, now: Instant) -> Duration {
        self.sweep(now);
        let active = self
            .full_at
            .len()
            .saturating_add(usize::from(!self.full_at.contains_key(namespace)));
        let Some(rate) = self.rates.share(active) else {
            return Duration::ZERO;
        };
        let interval = Duration::from_secs(1)
            .checked_div(rate)
            .unwrap_or(Duration::ZERO);
        // A full bucket lets `burst` writes through at once: the last of them is due when
        // the bucket is `burst - 1` intervals short of full.
        let tolerance = interval.saturating_mul(self.rates.burst.max(1).saturating_sub(1));
        let full_at = self
            .full_at
            .get(namespace)
            .copied()
            .filter(|at| *at > now)
            .unwrap_or(now);
        let send_at = full_at.checked_sub(tolerance).unwrap_or(now).max(now);
        self.full_at.insert(
            namespace.to_string(),
            full_at.checked_add(interval).unwrap_or(full_at),
        );
        send_at.saturating_duration_since(now)
    }

    /// Namespaces with a bucket (those that wrote lately).
    pub fn active(&self) -> usize {
        self.full_at.len()
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
        self.full_at.retain(|_, at| *at > now);
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

    #[test]
    fn a_burst_goes_at_once_then_the_rate_applies() {
        let mut p = Pacer::new(rates(10, 3, 0));
        let now = Instant::now();
        assert_eq!(
            waits(&mut p, "a", 6, now),
            [ms(0), ms(0), ms(0), ms(100), ms(200), ms(300)]
        );
    }

    #[test]
    fn a_namespace_s_waiting_writes_never_delay_another_namespace() {
        let mut p = Pacer::new(rates(10, 2, 0));
        let now = Instant::now();
        // a has a second's worth of writes waiting...
        let a = waits(&mut p, "a", 12, now);
        assert_eq!(a.last(), Some(&ms(1000)));
        // ...b's burst goes at once, and its rate is its own.
        assert_eq!(waits(&mut p, "b", 3, now), [ms(0), ms(0), ms(100)]);
        // a's next turn is behind a's own writes only.
        assert_eq!(p.reserve("a", now), ms(1100));
    }

    #[test]
    fn namespaces_share_the_total_equally_when_it_is_less() {
        // Alone, a writes at its own rate (100/s, 10 ms apart).
        let mut p = Pacer::new(rates(100, 1, 100));
        let now = Instant::now();
        assert_eq!(waits(&mut p, "a", 3, now), [ms(0), ms(10), ms(20)]);
        // b comes: each namespace's later writes are 20 ms apart (50/s each, 100/s
        // together); b's first goes at once.
        assert_eq!(waits(&mut p, "b", 3, now), [ms(0), ms(20), ms(40)]);
        assert_eq!(p.reserve("a", now), ms(30));
        assert_eq!(p.reserve("a", now), ms(50));
        assert_eq!(Rates::default().share(1), Some(DEFAULT_NAMESPACE_QPS));
        assert_eq!(rates(100, 1, 100).share(1000), Some(1), "never stopped");
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
        let mut p = Pacer::new(rates(10, 2, 0));
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
