//! What the operator remembers of each channel between reconciliations: one record per
//! channel (its consecutive reconcile errors, whether its cached copy may be stale, its last
//! Event, its json body kept for conditional requests), keyed by the channel *and its uid*,
//! together with the sync queue. Forgetting a channel is one removal; a channel deleted and
//! created again under the same name starts clean, and a late "gone" of the old one (a
//! watch re-list) leaves the new one alone. Pure: the controller passes what it observed
//! and wakes whom it is told to.

pub(super) mod slots;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::controller::Key;
use crate::controller::records::slots::{Grant, Slots};
use crate::fetch::Validators;

/// The last Event published on a channel (a repeat of it adds to its series).
#[derive(Clone, Debug, PartialEq)]
pub struct LastEvent {
    pub name: String,
    /// Its uid: a series is added to this Event only, never to a namesake made since.
    pub uid: Option<String>,
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
    pub count: i32,
}

/// The last good body of a json channel.
#[derive(Clone, Debug)]
pub struct Body {
    pub uri: String,
    pub validators: Validators,
    pub data: Arc<[u8]>,
}

#[derive(Debug, Default)]
pub struct Record {
    uid: String,
    /// Consecutive reconciliations that ended in `error_policy`.
    pub errors: u32,
    /// The cached channel (or pod) may be older than the operator's last write to it,
    /// because a wait for the cache gave up: read fresh once.
    pub stale: bool,
    pub last_event: Option<LastEvent>,
    /// The uid of the syncer pod this process created for the channel: the proof that a
    /// pod is the operator's, also while the status that records it is not written yet
    /// (or was pruned by an older CRD); after a restart the status alone proves it.
    pub pod_uid: Option<String>,
    body: Option<Body>,
}

/// Every channel's record and the sync queue.
#[derive(Debug)]
pub struct Memory {
    records: HashMap<Key, Record>,
    slots: Slots,
    /// The kept json bodies: at most this many bytes together, least recently used first
    /// out (`order`).
    max_body_bytes: usize,
    body_bytes: usize,
    order: VecDeque<Key>,
}

/// Keys to wake: the channels now first in line for the free slots.
pub type Wake = Vec<Key>;

impl Memory {
    pub fn new(max_concurrent_syncs: usize, max_body_bytes: usize) -> Self {
        Memory {
            records: HashMap::new(),
            slots: Slots::new(max_concurrent_syncs),
            max_body_bytes,
            body_bytes: 0,
            order: VecDeque::new(),
        }
    }

    /// The record of the channel with this uid; a record of a namesake (deleted, created
    /// again) is forgotten first.
    pub fn record(&mut self, key: &Key, uid: &str, running: &HashSet<Key>) -> (&mut Record, Wake) {
        let mut wake = Vec::new();
        if self.records.get(key).is_some_and(|r| r.uid != uid) {
            wake = self.forget(key, None, running);
        }
        let record = self.records.entry(key.clone()).or_insert_with(|| Record {
            uid: uid.to_string(),
            ..Default::default()
        });
        (record, wake)
    }

    /// The record of a channel, if one is kept for this uid.
    pub fn get(&mut self, key: &Key, uid: &str) -> Option<&mut Record> {
        self.records.get_mut(key).filter(|r| r.uid == uid)
    }

    /// The channel is gone (`uid`: that channel, not a namesake created since; `None`:
    /// whichever is kept): its record goes, and with it its slot and its place in line.
    pub fn forget(&mut self, key: &Key, uid: Option<&str>, running: &HashSet<Key>) -> Wake {
        if let Some(uid) = uid
            && self.records.get(key).is_some_and(|r| r.uid != uid)
        {
            return Vec::new();
        }
        if let Some(old) = self.records.remove(key)
            && let Some(body) = old.body
        {
            self.body_bytes = self.body_bytes.saturating_sub(body.data.len());
            self.order.retain(|k| k != key);
        }
        self.slots.release(key, running)
    }

    /// Whether a record with that uid is kept (the uid is not a namesake's).
    pub fn is_current(&self, key: &Key, uid: &str) -> bool {
        self.records.get(key).is_none_or(|r| r.uid == uid)
    }

    pub fn take_slot(&mut self, key: &Key, running: &HashSet<Key>) -> (bool, Wake) {
        match self.slots.take(key, running) {
            Grant::Granted => (true, Vec::new()),
            // Should a wake-up have been missed, whoever is first in line is woken again.
            Grant::Queued { .. } => (false, self.slots.up_next(running)),
        }
    }

    pub fn release_slot(&mut self, key: &Key, running: &HashSet<Key>) -> Wake {
        self.slots.release(key, running)
    }

    pub fn up_next(&self, running: &HashSet<Key>) -> Wake {
        self.slots.up_next(running)
    }

    pub fn queued(&self) -> usize {
        self.slots.queued()
    }

    /// The body kept for this channel (this uid) and URI.
    pub fn body(&mut self, key: &Key, uid: &str, uri: &str) -> Option<Body> {
        let body = self
            .get(key, uid)?
            .body
            .as_ref()
            .filter(|b| b.uri == uri)
            .cloned()?;
        self.order.retain(|k| k != key);
        self.order.push_back(key.clone());
        Some(body)
    }

    /// Keeps a channel's body (`None`: drops it); one larger than the whole bound is not
    /// kept (its channel then fetches unconditionally).
    pub fn keep_body(&mut self, key: &Key, uid: &str, body: Option<Body>) {
        let Some(record) = self.records.get_mut(key).filter(|r| r.uid == uid) else {
            return;
        };
        if let Some(old) = record.body.take() {
            self.body_bytes = self.body_bytes.saturating_sub(old.data.len());
            self.order.retain(|k| k != key);
        }
        let Some(body) = body.filter(|b| b.data.len() <= self.max_body_bytes) else {
            return;
        };
        self.body_bytes = self.body_bytes.saturating_add(body.data.len());
        record.body = Some(body);
        self.order.push_back(key.clone());
        while self.body_bytes > self.max_body_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.records.get_mut(&oldest).and_then(|r| r.body.take()) {
                self.body_bytes = self.body_bytes.saturating_sub(old.data.len());
            }
        }
    }

    #[cfg(test)]
    fn body_bytes(&self) -> usize {
        self.body_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::ObjectRef;

    fn body(len: usize) -> Option<Body> {
        Some(Body {
            uri: "http://x".into(),
            validators: Validators {
                etag: Some("\"e\"".into()),
                last_modified: None,
            },
            data: vec![b'x'; len].into(),
        })
    }

    fn key(name: &str) -> Key {
        ObjectRef::new(name).within("ns")
    }

    fn memory(bytes: usize) -> Memory {
        let mut m = Memory::new(1, bytes);
        for name in ["a", "b", "c", "d"] {
            m.record(&key(name), "u", &HashSet::new());
        }
        m
    }

    #[test]
    fn bodies_are_bounded_in_bytes_least_recently_used_first_out() {
        let mut m = memory(100);
        m.keep_body(&key("a"), "u", body(40));
        m.keep_body(&key("b"), "u", body(40));
        // a is used again: b is now the oldest.
        assert!(m.body(&key("a"), "u", "http://x").is_some());
        m.keep_body(&key("c"), "u", body(40));
        assert!(m.body_bytes() <= 100);
        assert!(m.body(&key("b"), "u", "http://x").is_none());
        assert!(m.body(&key("a"), "u", "http://x").is_some());
        assert!(m.body(&key("c"), "u", "http://x").is_some());
        // Too large for the bound: not kept at all.
        m.keep_body(&key("d"), "u", body(101));
        assert!(m.body(&key("d"), "u", "http://x").is_none());
    }

    #[test]
    fn a_deleted_channel_loses_its_record_and_a_namesake_starts_clean() {
        let none = HashSet::new();
        let mut m = memory(100);
        m.keep_body(&key("a"), "u", body(10));
        m.get(&key("a"), "u").unwrap().errors = 3;
        assert!(m.body(&key("a"), "u", "http://y").is_none());
        // Created again under the same name: nothing of the old one.
        let (record, _) = m.record(&key("a"), "u2", &none);
        assert_eq!(record.errors, 0);
        assert_eq!(m.body_bytes(), 0);
        assert!(m.body(&key("a"), "u2", "http://x").is_none());
        // The old one's late "gone" (a re-list) leaves the new one alone.
        m.get(&key("a"), "u2").unwrap().stale = true;
        m.forget(&key("a"), Some("u"), &none);
        assert!(m.get(&key("a"), "u2").is_some_and(|r| r.stale));
        m.forget(&key("a"), Some("u2"), &none);
        assert!(m.get(&key("a"), "u2").is_none());
    }
}
