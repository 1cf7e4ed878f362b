//! The shared state of all reconciliations, and the only ways to it: a channel's record, its
//! sync slot (the pure queue is `slots`, kept in `record`'s memory), and waking whoever is
//! next.

use std::sync::{Arc, Mutex};

use crate::api::ManagedOSVersionChannel;
use crate::controller::Key;
use crate::controller::io::ChannelIo;
use crate::controller::records::{Memory, Record, Wake};
use crate::metrics::Metrics;
use crate::syncer::Settings;

/// Who publishes: the `reportingController` and `reportingInstance` of every Event (kept
/// here, with the state it is part of, so that `events` depends on `context` and not the
/// other way round).
#[derive(Clone, Debug)]
pub struct Reporter {
    pub controller: String,
    pub instance: String,
}

/// Shared state of all reconciliations.
pub struct Context<I: ChannelIo> {
    pub io: I,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub(super) reporter: Reporter,
    /// Every channel's record, and the sync queue.
    pub(super) memory: Mutex<Memory>,
    /// Channel data in memory, all syncs together: one output's worth
    /// (`--max-output-bytes`), taken as bytes arrive (docs/security.md).
    pub(super) budget: crate::budget::Budget,
    /// The channel server's data, when it runs (`--channel-server-address`).
    pub(super) served: Option<Arc<crate::channel_server::Store>>,
}

impl<I: ChannelIo> Context<I> {
    pub fn new(io: I, settings: Settings, metrics: Arc<Metrics>, reporter: Reporter) -> Self {
        Context {
            io,
            metrics,
            reporter,
            memory: Mutex::new(Memory::new(
                settings.max_concurrent_syncs,
                settings.json_cache_bytes,
            )),
            budget: crate::budget::Budget::new(settings.max_output_bytes, settings.read_idle),
            settings,
            served: None,
        }
    }

    /// The same, publishing the channels that opt in to `store` (the channel server's).
    pub fn serving(mut self, store: Option<Arc<crate::channel_server::Store>>) -> Self {
        self.served = store;
        self
    }

    /// Runs `f` on the memory, with the channels observed syncing; wakes whom it says.
    fn with_memory<T>(
        &self,
        f: impl FnOnce(&mut Memory, &std::collections::HashSet<Key>) -> (T, Wake),
    ) -> Option<T> {
        let running = self.io.running_syncs();
        let (out, wake) = {
            let mut memory = self.memory.lock().ok()?;
            let (out, wake) = f(&mut memory, &running);
            self.metrics.queue_length(memory.queued());
            (out, wake)
        };
        self.wake_all(wake);
        Some(out)
    }

    /// Runs `f` on the channel's record (this uid), made if there is none; a namesake's
    /// record is forgotten first.
    pub(super) fn with_record<T>(
        &self,
        key: &Key,
        uid: &str,
        f: impl FnOnce(&mut Record) -> T,
    ) -> Option<T> {
        self.with_memory(|m, running| {
            let (record, wake) = m.record(key, uid, running);
            (f(record), wake)
        })
    }

    /// Takes a sync slot for the channel, or queues it (round robin across namespaces).
    pub(super) fn take_slot(&self, key: &Key) -> bool {
        self.with_memory(|m, running| m.take_slot(key, running))
            .unwrap_or(true)
    }

    /// Gives up the channel's slot and its place in the queue; wakes who is next.
    pub(super) fn release_slot(&self, key: &Key) {
        self.with_memory(|m, running| ((), m.release_slot(key, running)));
    }

    /// A channel is gone (this uid, or whichever is kept): its record (slot, queue place,
    /// kept body, errors, last Event) and metrics go with it.
    pub(super) fn forget(&self, key: &Key, uid: Option<&str>) {
        let current = self
            .with_memory(|m, running| {
                let current = uid.is_none_or(|u| m.is_current(key, u));
                (current, m.forget(key, uid, running))
            })
            .unwrap_or(true);
        if current {
            self.metrics.forget_channel(key);
            self.unserve(key);
        }
    }

    /// Wakes the channels first in line for the slots that are free. A slot also frees
    /// without a release: a syncer pod finishes or goes after its sync was decided (a failed
    /// pod kept for its log turns `Failed` a moment later; an earlier operator's pod ends),
    /// and only the reconciliation that sees it can tell; without this, the slot stays idle
    /// until the waiting channel's next look.
    pub(super) fn wake_waiting(&self) {
        if self.memory.lock().map_or(true, |m| m.queued() == 0) {
            return;
        }
        self.with_memory(|m, running| ((), m.up_next(running)));
    }

    /// The channel's attempt succeeded: its count of reconcile errors starts again.
    pub(super) fn clear_errors(&self, key: &Key, uid: &str) {
        if let Ok(mut memory) = self.memory.lock()
            && let Some(record) = memory.get(key, uid)
        {
            record.errors = 0;
        }
    }

    fn wake_all(&self, keys: Vec<Key>) {
        for key in keys {
            self.io.wake(key);
        }
    }

    /// The channel with the pod uid this process recorded creating, when its status does not
    /// show it (not written yet, or pruned by a CRD without the field): the decision knows its
    /// own pod, and the next status write records it again.
    pub(super) fn with_recorded_pod(
        &self,
        key: &Key,
        uid: &str,
        mut channel: Arc<ManagedOSVersionChannel>,
    ) -> Arc<ManagedOSVersionChannel> {
        let recorded = self.with_record(key, uid, |r| r.pod_uid.clone()).flatten();
        let shown = channel
            .status
            .as_ref()
            .and_then(|s| s.syncer_pod_uid.clone());
        if let Some(recorded) = recorded
            && shown.as_ref() != Some(&recorded)
        {
            Arc::make_mut(&mut channel)
                .status
                .get_or_insert_with(Default::default)
                .syncer_pod_uid = Some(recorded);
        }
        channel
    }
}
