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

impl Decider<'_> {
    /// The rest of the backoff after a failed attempt of this generation, if it is not over.
    pub(super) fn backing_off(&self, interval: Duration) -> Option<Duration> {
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
        let rest = self.retry_wait(interval).saturating_sub(self.since(last));
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
    pub(super) fn sync_due(&self, config: &ChannelConfig) -> Duration {
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
        self.retry_wait(config.sync_interval)
            .saturating_sub(self.since(last))
    }

    /// The wait after the last attempt: backoff while failing, else the interval.
    pub(super) fn retry_wait(&self, interval: Duration) -> Duration {
        backoff(
            self.settings.retry_delay,
            self.status.failed_synchronization_attempts,
            interval,
        )
    }

    /// The time `after` from now.
    pub(super) fn at(&self, after: Duration) -> Option<Time> {
        let span = k8s_openapi::jiff::SignedDuration::try_from(after).ok()?;
        self.obs.now.checked_add(span).ok().map(Time)
    }
}
