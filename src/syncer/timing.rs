//! When: the backoff after a failure, the next sync due, on-demand requests.

use super::*;

/// The one backoff policy, of failed syncs and of reconciliations that could not even write
/// their status alike: after failure *n* (1 to `MAX_QUICK_RETRIES - 1`), `retry_delay ×
/// 2^(n-1)`, never more than the interval; from then on (and with no failure), the interval.
pub fn backoff(retry_delay: Duration, failures: i64, interval: Duration) -> Duration {
    if (1..MAX_QUICK_RETRIES).contains(&failures) {
        let doublings = u32::try_from(failures.saturating_sub(1))
            .unwrap_or(16)
            .min(16);
        retry_delay.saturating_mul(1_u32 << doublings).min(interval)
    } else {
        interval
    }
}

/// The interval a channel resyncs at: `interval` stretched by the channel's own share of
/// `jitter_percent`, fixed per channel (from its uid: the same across restarts and
/// replicas), never shorter than `interval`. Channels created together then drift apart
/// instead of resyncing together for ever.
pub fn jittered(interval: Duration, jitter_percent: u8, uid: &str) -> Duration {
    // FNV-1a: stable across builds (std's hasher is not), good enough to spread uids.
    let hash = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let share = u128::from(hash % 10_000); // of 10,000
    let extra = interval
        .as_millis()
        .checked_mul(u128::from(jitter_percent.min(100)))
        .and_then(|m| m.checked_mul(share))
        .map_or(0, |m| m / 1_000_000);
    interval.saturating_add(Duration::from_millis(
        u64::try_from(extra).unwrap_or(u64::MAX),
    ))
}

impl Decider<'_> {
    /// The rest of the backoff after a failed attempt of this generation, if it is not over.
    pub(super) fn backing_off(&self) -> Option<Duration> {
        let ready = self.ready_condition()?;
        // A sync under way (Ready keeps the failure while it runs) goes on.
        if self.status.failed_synchronization_attempts == 0
            || self.syncing()
            || ready.observed_generation != Some(self.generation)
            || !matches!(
                ready.reason.as_str(),
                reason::FAILED_TO_SYNC | reason::FAILED_TO_CREATE_POD
            )
            || self.on_demand()
        {
            return None;
        }
        let Time(last) = self.status.last_sync_attempt_time.as_ref()?;
        let rest = self.retry_wait().saturating_sub(self.since(last));
        (!rest.is_zero()).then_some(rest)
    }

    /// Time since `t` (zero if `t` is in the future).
    pub(super) fn since(&self, t: &Timestamp) -> Duration {
        Duration::try_from(self.obs.now.duration_since(*t)).unwrap_or_default()
    }

    /// Whether the sync-requested-at annotation asks for a sync not acted on yet.
    pub(super) fn on_demand(&self) -> bool {
        self.requested_at().is_some() && self.requested_at() != self.status.sync_requested_at
    }

    /// How long until the next sync is due (zero: now).
    pub(super) fn sync_due(&self) -> Duration {
        let Some(ready) = self.ready_condition() else {
            return Duration::ZERO;
        };
        if ready.observed_generation != Some(self.generation)
            || ready.reason == reason::SYNCHRONIZING
            || self.syncing()
        {
            return Duration::ZERO;
        }
        let Some(Time(last)) = &self.status.last_sync_attempt_time else {
            return Duration::ZERO;
        };
        if self.on_demand() {
            // A request bypasses the interval and the backoff, but starts at most one
            // sync per --min-request-interval: one inside the window waits for its end.
            return self
                .settings
                .min_request_interval
                .saturating_sub(self.since(last));
        }
        self.retry_wait()
            .saturating_sub(self.since(last))
            .min(self.ripening())
    }

    /// How long until the first version `spec.versions.minAge` holds comes of age (the
    /// sync that publishes it is due then, not an interval later); `MAX` when none waits.
    fn ripening(&self) -> Duration {
        let min_age = self
            .resolved
            .config
            .as_ref()
            .ok()
            .and_then(|c| c.policy.min_age);
        let (Some(age), false) = (min_age, self.status.failed_synchronization_attempts > 0) else {
            return Duration::MAX;
        };
        self.status
            .first_seen
            .values()
            .map(|Time(t)| age.saturating_sub(self.since(t)))
            .min()
            .unwrap_or(Duration::MAX)
    }

    /// The wait after the last attempt: backoff while failing, else the interval.
    pub(super) fn retry_wait(&self) -> Duration {
        self.resolved
            .retry_wait(self.status.failed_synchronization_attempts)
    }

    /// The time `after` from now.
    pub(super) fn at(&self, after: Duration) -> Option<Time> {
        let span = k8s_openapi::jiff::SignedDuration::try_from(after).ok()?;
        self.obs.now.checked_add(span).ok().map(Time)
    }
}

#[cfg(test)]
mod tests {
    use super::jittered;
    use std::time::Duration;

    #[test]
    fn each_channel_has_its_own_fixed_share_of_the_jitter() {
        let hour = Duration::from_secs(3600);
        let uids: Vec<String> = (0..200).map(|i| format!("9f1c-{i}")).collect();
        let intervals: Vec<Duration> = uids.iter().map(|u| jittered(hour, 10, u)).collect();
        // Deterministic: the same uid, the same interval.
        assert_eq!(intervals[7], jittered(hour, 10, &uids[7]));
        // Within [interval, interval + 10%], never shorter.
        assert!(
            intervals
                .iter()
                .all(|d| *d >= hour && *d <= hour + hour / 10)
        );
        // Spread: channels created together do not keep resyncing together.
        let distinct: std::collections::BTreeSet<_> = intervals.iter().collect();
        assert!(
            distinct.len() > 190,
            "{} distinct intervals",
            distinct.len()
        );
        let spread = intervals
            .iter()
            .max()
            .unwrap()
            .saturating_sub(*intervals.iter().min().unwrap());
        assert!(spread > hour / 20, "spread {spread:?}");
        // No jitter: the interval itself; and no overflow at the largest intervals.
        assert_eq!(jittered(hour, 0, "x"), hour);
        assert!(jittered(Duration::MAX, 100, "x") == Duration::MAX);
    }
}
