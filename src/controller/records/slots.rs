//! Sync slots: at most `--max-concurrent-syncs` syncs (syncer pods and json fetches) run at
//! once, and channels that wait are served round robin across namespaces, so that one
//! namespace's many channels cannot delay another namespace's few; no namespace holds
//! more than half the slots (at least one), so its long syncs cannot take them all.
//!
//! Occupancy is what is observed plus what this operator started: a slot is held by a
//! channel from the start of its sync until its outcome, and by a channel whose syncer
//! pod is running (an earlier operator's sync). Only pods the operator recorded creating
//! count. Pure logic; the controller passes what it observed and wakes whom it is told to.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::controller::Key;

/// The answer to a request for a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    Granted,
    /// Waiting; `ahead` channels will be served first (round robin across namespaces).
    Queued {
        ahead: usize,
    },
}

#[derive(Debug)]
pub struct Slots {
    max: usize,
    /// Channels whose sync this operator started and that have not finished.
    held: HashSet<Key>,
    /// Waiting channels of each namespace, in arrival order.
    waiting: HashMap<String, VecDeque<Key>>,
    /// Namespaces with waiting channels, in the order they are served.
    turns: VecDeque<String>,
}

fn namespace(key: &Key) -> String {
    key.namespace.clone().unwrap_or_default()
}

impl Slots {
    pub fn new(max: usize) -> Self {
        Slots {
            max: max.max(1),
            held: HashSet::new(),
            waiting: HashMap::new(),
            turns: VecDeque::new(),
        }
    }

    /// Asks for a slot for `key`. `running`: channels observed syncing (their syncer pod
    /// runs), whether or not this operator started them.
    pub fn take(&mut self, key: &Key, running: &HashSet<Key>) -> Grant {
        if self.held.contains(key) || running.contains(key) {
            self.unqueue(key);
            self.held.insert(key.clone());
            return Grant::Granted;
        }
        let free = self.free(running);
        if !self.is_waiting(key) {
            self.enqueue(key);
        }
        let up = self.next_up(free, running);
        match up.iter().position(|k| k == key) {
            Some(_) => {
                self.unqueue(key);
                self.held.insert(key.clone());
                Grant::Granted
            }
            None => Grant::Queued {
                ahead: self.position(key),
            },
        }
    }

    /// The sync of `key` ended (or it no longer wants one, or it was deleted): its slot and
    /// its place in the queue are given up. Returns who to wake: the channels now first in
    /// line for the free slots.
    pub fn release(&mut self, key: &Key, running: &HashSet<Key>) -> Vec<Key> {
        let had = self.held.remove(key) | self.unqueue(key);
        if !had {
            return Vec::new();
        }
        let free = self.free(running);
        self.next_up(free, running)
    }

    /// The channels first in line for the free slots (to wake again, should a wake-up have
    /// been missed).
    pub fn up_next(&self, running: &HashSet<Key>) -> Vec<Key> {
        self.next_up(self.free(running), running)
    }

    /// Channels waiting for a slot.
    pub fn queued(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }

    #[cfg(test)]
    fn holds(&self, key: &Key) -> bool {
        self.held.contains(key)
    }

    fn free(&self, running: &HashSet<Key>) -> usize {
        let busy = self.held.union(running).count();
        self.max.saturating_sub(busy)
    }

    /// The most slots one namespace holds: half, at least one.
    fn per_namespace(&self) -> usize {
        (self.max / 2).max(1)
    }

    /// Slots held in each namespace (started here, or observed running).
    fn busy_by_namespace(&self, running: &HashSet<Key>) -> HashMap<String, usize> {
        let mut busy: HashMap<String, usize> = HashMap::new();
        for key in self.held.union(running) {
            let n = busy.entry(namespace(key)).or_default();
            *n = n.saturating_add(1);
        }
        busy
    }

    fn is_waiting(&self, key: &Key) -> bool {
        self.waiting
            .get(&namespace(key))
            .is_some_and(|q| q.contains(key))
    }

    fn enqueue(&mut self, key: &Key) {
        let ns = namespace(key);
        let queue = self.waiting.entry(ns.clone()).or_default();
        if queue.is_empty() {
            self.turns.push_back(ns);
        }
        queue.push_back(key.clone());
    }

    /// Takes `key` out of the queue; whether it was in it. Serving a namespace moves it to
    /// the back of the turns.
    fn unqueue(&mut self, key: &Key) -> bool {
        let ns = namespace(key);
        let Some(queue) = self.waiting.get_mut(&ns) else {
            return false;
        };
        let Some(at) = queue.iter().position(|k| k == key) else {
            return false;
        };
        queue.remove(at);
        let empty = queue.is_empty();
        if empty {
            self.waiting.remove(&ns);
        }
        self.turns.retain(|t| *t != ns);
        if !empty {
            self.turns.push_back(ns);
        }
        true
    }

    /// The next `n` channels in line for a free slot: the first of each namespace in turn,
    /// then the second of each, and so on; a namespace that holds its share of the slots
    /// waits for one of its own to end.
    fn next_up(&self, n: usize, running: &HashSet<Key>) -> Vec<Key> {
        let mut busy = self.busy_by_namespace(running);
        let share = self.per_namespace();
        self.in_line(n, |key| {
            let held = busy.entry(namespace(key)).or_default();
            let room = *held < share;
            if room {
                *held = held.saturating_add(1);
            }
            room
        })
    }

    /// The first `n` waiting channels, in the order they are served, that `may` admits.
    fn in_line(&self, n: usize, mut may: impl FnMut(&Key) -> bool) -> Vec<Key> {
        let mut up = Vec::new();
        let mut depth = 0;
        while up.len() < n {
            let mut any = false;
            for ns in &self.turns {
                if let Some(key) = self.waiting.get(ns).and_then(|q| q.get(depth)) {
                    any = true;
                    if up.len() < n && may(key) {
                        up.push(key.clone());
                    }
                }
            }
            if !any {
                break;
            }
            depth = depth.saturating_add(1);
        }
        up
    }

    /// How many are served before `key`.
    fn position(&self, key: &Key) -> usize {
        let all = self.in_line(self.queued(), |_| true);
        all.iter().position(|k| k == key).unwrap_or(all.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::ObjectRef;

    fn key(ns: &str, name: &str) -> Key {
        ObjectRef::new(name).within(ns)
    }

    fn none() -> HashSet<Key> {
        HashSet::new()
    }

    #[test]
    fn bounded_and_in_arrival_order_within_a_namespace() {
        // Four slots: one namespace holds two of them.
        let mut slots = Slots::new(4);
        let grants: Vec<Grant> = (0..5)
            .map(|i| slots.take(&key("a", &format!("c{i}")), &none()))
            .collect();
        assert_eq!(grants[..2], [Grant::Granted, Grant::Granted]);
        assert_eq!(
            grants[2..],
            [
                Grant::Queued { ahead: 0 },
                Grant::Queued { ahead: 1 },
                Grant::Queued { ahead: 2 },
            ]
        );
        // c2 waits first: c4 asking again does not overtake it.
        let wake = slots.release(&key("a", "c0"), &none());
        assert_eq!(wake, [key("a", "c2")]);
        assert_eq!(
            slots.take(&key("a", "c4"), &none()),
            Grant::Queued { ahead: 2 }
        );
        assert_eq!(slots.take(&key("a", "c2"), &none()), Grant::Granted);
        assert_eq!(slots.queued(), 2);
    }

    #[test]
    fn a_namespace_holds_at_most_half_the_slots_at_least_one() {
        assert_eq!(Slots::new(1).per_namespace(), 1);
        assert_eq!(Slots::new(2).per_namespace(), 1);
        assert_eq!(Slots::new(5).per_namespace(), 2);
        assert_eq!(Slots::new(10).per_namespace(), 5);
        // Three long syncs of namespace a: the second waits although a slot is free...
        let mut slots = Slots::new(2);
        assert_eq!(slots.take(&key("a", "a1"), &none()), Grant::Granted);
        assert_eq!(
            slots.take(&key("a", "a2"), &none()),
            Grant::Queued { ahead: 0 }
        );
        slots.take(&key("a", "a3"), &none());
        // ...so that namespace b's channel starts at once.
        assert_eq!(slots.take(&key("b", "b1"), &none()), Grant::Granted);
        // a1 ends: a's next one takes its slot, b's stays.
        assert_eq!(slots.release(&key("a", "a1"), &none()), [key("a", "a2")]);
        assert_eq!(slots.take(&key("a", "a2"), &none()), Grant::Granted);
        assert_eq!(
            slots.take(&key("a", "a3"), &none()),
            Grant::Queued { ahead: 0 }
        );
        // b ends: its slot is not a's to take (a holds its half).
        assert_eq!(slots.release(&key("b", "b1"), &none()), Vec::<Key>::new());
        assert_eq!(
            slots.take(&key("a", "a3"), &none()),
            Grant::Queued { ahead: 0 }
        );
    }

    #[test]
    fn observed_syncs_count_towards_their_namespace_share() {
        let mut slots = Slots::new(2);
        let running: HashSet<Key> = [key("a", "old")].into();
        assert_eq!(
            slots.take(&key("a", "new"), &running),
            Grant::Queued { ahead: 0 }
        );
        assert_eq!(slots.take(&key("b", "x"), &running), Grant::Granted);
        assert_eq!(slots.up_next(&running), Vec::<Key>::new());
        // The old pod ends: a's share is free again.
        assert_eq!(slots.release(&key("b", "x"), &none()), [key("a", "new")]);
    }

    #[test]
    fn namespaces_take_turns() {
        let mut slots = Slots::new(4);
        for i in 0..20 {
            slots.take(&key("a", &format!("c{i}")), &none());
        }
        for i in 0..4 {
            slots.take(&key("b", &format!("b{i}")), &none());
        }
        // Full (a and b hold two each): one channel of a third namespace arrives behind
        // 20 waiting ones...
        assert_eq!(
            slots.take(&key("c", "only"), &none()),
            Grant::Queued { ahead: 2 }
        );
        // ...and is served by the third slot that frees.
        assert_eq!(slots.release(&key("a", "c0"), &none()), [key("a", "c2")]);
        assert_eq!(slots.take(&key("a", "c2"), &none()), Grant::Granted);
        assert_eq!(slots.release(&key("b", "b0"), &none()), [key("b", "b2")]);
        assert_eq!(slots.take(&key("b", "b2"), &none()), Grant::Granted);
        assert_eq!(slots.release(&key("a", "c1"), &none()), [key("c", "only")]);
        assert_eq!(slots.take(&key("c", "only"), &none()), Grant::Granted);
    }

    #[test]
    fn a_deleted_channel_frees_its_slot_and_its_place() {
        let mut slots = Slots::new(1);
        assert_eq!(slots.take(&key("a", "x"), &none()), Grant::Granted);
        slots.take(&key("a", "y"), &none());
        slots.take(&key("a", "z"), &none());
        // y is deleted while it waits: it leaves the queue, nobody is woken for it.
        assert_eq!(slots.release(&key("a", "y"), &none()), Vec::<Key>::new());
        // x is deleted while it syncs: z is next.
        assert_eq!(slots.release(&key("a", "x"), &none()), [key("a", "z")]);
        assert_eq!(slots.queued(), 1);
        assert_eq!(slots.take(&key("a", "z"), &none()), Grant::Granted);
        assert_eq!(slots.queued(), 0);
    }

    #[test]
    fn running_pods_count_and_keep_their_own_slot() {
        let mut slots = Slots::new(4);
        let running: HashSet<Key> = [key("a", "old")].into();
        assert_eq!(slots.take(&key("a", "old"), &running), Grant::Granted);
        assert_eq!(slots.take(&key("a", "c"), &running), Grant::Granted);
        assert_eq!(
            slots.take(&key("a", "d"), &running),
            Grant::Queued { ahead: 0 }
        );
        // A pod of an earlier operator that ends frees its slot.
        assert_eq!(slots.release(&key("a", "old"), &none()), [key("a", "d")]);
    }

    #[test]
    fn releasing_a_stranger_wakes_nobody() {
        let mut slots = Slots::new(1);
        slots.take(&key("a", "x"), &none());
        slots.take(&key("a", "y"), &none());
        assert!(slots.release(&key("a", "nobody"), &none()).is_empty());
        assert!(slots.holds(&key("a", "x")));
    }
}
