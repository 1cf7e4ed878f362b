//! The controller's side of the sync slots (the pure queue is `slots`): taking a slot or
//! a place in line, giving it back, and waking whoever is next.

use std::collections::HashSet;

use super::Context;
use super::slots::{Grant, Key};
use crate::controller::caches::Scope;

impl Context {
    /// Channels observed syncing: their syncer pod runs.
    pub(super) fn running(&self) -> HashSet<Key> {
        self.scopes.iter().flat_map(Scope::running_syncs).collect()
    }

    /// Takes a sync slot for the channel, or queues it (round robin across namespaces).
    pub(super) fn take_slot(&self, key: &Key) -> bool {
        let running = self.running();
        let Ok(mut slots) = self.slots.lock() else {
            return true;
        };
        let grant = slots.take(key, &running);
        self.metrics.queue_length(slots.queued());
        match grant {
            Grant::Granted => true,
            Grant::Queued { .. } => {
                // Should a wake-up have been missed, whoever is first in line is woken again.
                let up = slots.up_next(&running);
                drop(slots);
                self.wake_all(up);
                false
            }
        }
    }

    /// Gives up the channel's slot and its place in the queue; wakes who is next.
    pub(super) fn release_slot(&self, key: &Key) {
        let running = self.running();
        let up = match self.slots.lock() {
            Ok(mut slots) => {
                let up = slots.release(key, &running);
                self.metrics.queue_length(slots.queued());
                up
            }
            Err(_) => Vec::new(),
        };
        self.wake_all(up);
    }

    /// Wakes the channels first in line for the slots that are free. A slot also frees
    /// without a release: a syncer pod finishes or goes after its sync was decided (a failed
    /// pod kept for its log turns `Failed` a moment later; an earlier operator's pod ends),
    /// and only the reconciliation that sees it can tell; without this, the slot stays idle
    /// until the waiting channel's next look.
    pub(super) fn wake_waiting(&self) {
        if self.slots.lock().map_or(true, |s| s.queued() == 0) {
            return;
        }
        let running = self.running();
        let up = match self.slots.lock() {
            Ok(slots) => slots.up_next(&running),
            Err(_) => return,
        };
        self.wake_all(up);
    }

    pub(super) fn wake_all(&self, keys: Vec<Key>) {
        for key in keys {
            let ns = key.namespace.clone().unwrap_or_default();
            let at = self.scopes.iter().position(|s| s.covers(&ns));
            if let Some(sender) = at.and_then(|i| self.wake.get(i)) {
                let _ = sender.unbounded_send(key);
            }
        }
    }
}
