//! The data budget: channel data in memory, all syncs together, is at most one output's
//! worth (`--max-output-bytes`), so that memory does not grow with concurrent syncs.
//!
//! A read takes room as its bytes arrive, not up front: a source that trickles or sends
//! nothing holds only what it sent, and every other channel's read goes on. A read that
//! makes no progress for [`IDLE`] (no byte arrives, or no room frees) fails and gives back
//! what it held, so that two reads can never wait for each other for longer than that.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a read may make no progress before it fails.
pub const IDLE: Duration = Duration::from_secs(30);

/// Why a read stopped making progress.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Stall {
    #[error("nothing arrived for {} (a read that makes no progress for that long fails)", crate::duration::format(*.0))]
    Silent(Duration),
    #[error(
        "no room for more channel data for {} (--max-output-bytes bounds the channel data of all syncs together)",
        crate::duration::format(*.0)
    )]
    Full(Duration),
}

/// The budget every sync's reads share (cheap to clone).
#[derive(Clone, Debug)]
pub struct Budget {
    room: Arc<Semaphore>,
    /// The whole budget, in KiB.
    total: usize,
    idle: Duration,
}

/// Bytes in whole KiB, at least one.
fn kib(bytes: u64) -> usize {
    usize::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(usize::MAX >> 4)
}

impl Budget {
    /// A budget of `bytes`; reads fail after `idle` without progress.
    pub fn new(bytes: u64, idle: Duration) -> Self {
        let total = kib(bytes).min(Semaphore::MAX_PERMITS);
        Budget {
            room: Arc::new(Semaphore::new(total)),
            total,
            idle,
        }
    }

    /// An empty hold, for one sync's data.
    pub fn hold(&self) -> Hold {
        Hold {
            budget: self.clone(),
            permit: None,
        }
    }

    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// Runs one step of a read (a chunk, an answer): fails when it takes longer than the
    /// idle bound.
    pub async fn step<T>(&self, step: impl Future<Output = T>) -> Result<T, Stall> {
        tokio::time::timeout(self.idle, step)
            .await
            .map_err(|_| Stall::Silent(self.idle))
    }

    /// KiB free now (for tests and metrics).
    pub fn free(&self) -> usize {
        self.room.available_permits()
    }
}

/// The room one sync's data takes; given back when dropped.
#[derive(Debug)]
pub struct Hold {
    budget: Budget,
    permit: Option<OwnedSemaphorePermit>,
}

impl Hold {
    /// The budget this hold takes from.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    fn held(&self) -> usize {
        self.permit
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Room for `bytes` in all (never more than the whole budget); waits for others to give
    /// room back, at most the idle bound.
    pub async fn grow(&mut self, bytes: usize) -> Result<(), Stall> {
        let want = kib(u64::try_from(bytes).unwrap_or(u64::MAX)).min(self.budget.total);
        let more = want.saturating_sub(self.held());
        if more == 0 {
            return Ok(());
        }
        let n = u32::try_from(more).unwrap_or(u32::MAX);
        let idle = self.budget.idle;
        match tokio::time::timeout(idle, self.budget.room.clone().acquire_many_owned(n)).await {
            Ok(Ok(permit)) => {
                match self.permit.as_mut() {
                    Some(held) => held.merge(permit),
                    None => self.permit = Some(permit),
                }
                Ok(())
            }
            // Closed: never, the budget is not closed.
            Ok(Err(_)) => Ok(()),
            Err(_) => Err(Stall::Full(idle)),
        }
    }

    /// Keeps what `bytes` take; the rest is free for others.
    pub fn fit(&mut self, bytes: usize) {
        let keep = kib(u64::try_from(bytes).unwrap_or(u64::MAX));
        if let Some(permit) = self.permit.as_mut() {
            let surplus = permit.num_permits().saturating_sub(keep);
            drop(permit.split(surplus));
        }
    }

    /// Gives everything back.
    pub fn release(&mut self) {
        self.permit = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short() -> Budget {
        Budget::new(4 << 10, Duration::from_millis(50))
    }

    #[tokio::test]
    async fn room_is_taken_as_bytes_arrive_and_fitted_after() {
        let budget = short();
        let mut a = budget.hold();
        assert_eq!(budget.free(), 4);
        a.grow(1).await.unwrap();
        assert_eq!(budget.free(), 3);
        a.grow(3000).await.unwrap();
        assert_eq!(budget.free(), 1);
        a.fit(100);
        assert_eq!(budget.free(), 3);
        // More than the whole budget: the whole budget.
        a.grow(1 << 30).await.unwrap();
        assert_eq!(budget.free(), 0);
        drop(a);
        assert_eq!(budget.free(), 4);
    }

    #[tokio::test]
    async fn a_full_budget_fails_a_read_after_the_idle_bound_and_a_small_hold_blocks_nobody() {
        let budget = short();
        // A trickling read holds what it got: one KiB.
        let mut trickle = budget.hold();
        trickle.grow(1).await.unwrap();
        let mut other = budget.hold();
        other.grow(3 << 10).await.unwrap();
        // Now full: a third read waits at most the idle bound, then fails.
        let mut third = budget.hold();
        assert_eq!(third.grow(1).await, Err(Stall::Full(budget.idle())));
        // Room given back is room for the next.
        other.release();
        third.grow(1).await.unwrap();
    }

    #[tokio::test]
    async fn a_step_without_progress_fails() {
        let budget = short();
        assert_eq!(budget.step(async { 1 }).await, Ok(1));
        let never = std::future::pending::<()>();
        assert_eq!(budget.step(never).await, Err(Stall::Silent(budget.idle())));
    }
}
