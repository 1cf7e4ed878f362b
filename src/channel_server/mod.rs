//! The channel server (`--channel-server-address`): a read-only HTTP listener that serves
//! what the channels that opt in (`spec.serve: true`) published, as channel data other
//! operators and Elemental read, and the newest version's image tag as the
//! system-upgrade-controller's channel protocol reads it ([docs/channel-server.md]).
//!
//! A GET reads only [`Store`]: the rendered data of each served channel, put there when its
//! sync publishes (or, after a start, once from the API server) and taken away when the
//! channel stops being served. No request reads the API server. The store is bounded
//! (`--channel-server-max-bytes`), and one namespace holds at most half of it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

mod http;
mod render;
mod route;

pub use http::{serve, start};
pub use render::{BadPlatform, Entry, Item, etag, image_tag, not_modified};
pub use route::{Answer, Request, answer};

/// (namespace, name) of a channel.
pub type ChannelKey = (String, String);

/// What the server holds of one channel.
#[derive(Clone, Debug)]
pub enum Served {
    Data(Arc<Entry>),
    /// Its data is over the server's memory bound: answered 503 with this reason.
    TooLarge(String),
}

/// The served channels, shared by the reconciliations (which write) and the server (which
/// reads).
#[derive(Debug)]
pub struct Store {
    max_bytes: usize,
    channels: RwLock<BTreeMap<ChannelKey, Served>>,
    /// Whether this process runs the controllers (a replica waiting for the Lease does
    /// not, and has nothing to serve).
    active: AtomicBool,
}

impl Store {
    pub fn new(max_bytes: usize) -> Self {
        Store {
            max_bytes,
            channels: RwLock::new(BTreeMap::new()),
            active: AtomicBool::new(false),
        }
    }

    /// The controllers run until the guard is dropped; then the data goes (a replica that
    /// lost the Lease serves nothing it might no longer keep up to date).
    pub fn activate(self: &Arc<Self>) -> Active {
        self.active.store(true, Ordering::Relaxed);
        Active(Arc::clone(self))
    }

    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Serves `entry` for the channel, in place of what it served before, when it fits the
    /// bound ([`fits`]); else the channel is answered 503 until a sync that fits.
    pub fn publish(&self, key: ChannelKey, entry: Entry) {
        let mut channels = self
            .channels
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let held = costs(&channels);
        let cost = entry.cost;
        let served = match fits(&held, &key, cost, self.max_bytes) {
            Ok(()) => Served::Data(Arc::new(entry)),
            Err(reason) => {
                tracing::warn!(namespace = %key.0, channel = %key.1, "not served: {reason}");
                Served::TooLarge(reason)
            }
        };
        channels.insert(key, served);
    }

    /// The channel is no longer served (deleted, or `spec.serve` no longer true).
    pub fn remove(&self, key: &ChannelKey) {
        let mut channels = self
            .channels
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        channels.remove(key);
    }

    /// Whether the channel has been published here since the operator started.
    pub fn holds(&self, key: &ChannelKey) -> bool {
        let channels = self.channels.read().unwrap_or_else(PoisonError::into_inner);
        channels.contains_key(key)
    }

    pub fn get(&self, key: &ChannelKey) -> Option<Served> {
        let channels = self.channels.read().unwrap_or_else(PoisonError::into_inner);
        channels.get(key).cloned()
    }

    /// Every served channel, by namespace and name.
    pub fn list(&self) -> Vec<(ChannelKey, Served)> {
        let channels = self.channels.read().unwrap_or_else(PoisonError::into_inner);
        channels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// While it lives, the store's controllers run ([`Store::activate`]).
#[derive(Debug)]
pub struct Active(Arc<Store>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.store(false, Ordering::Relaxed);
        let mut channels = self
            .0
            .channels
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        channels.clear();
    }
}

/// What each served channel holds, by key.
fn costs(channels: &BTreeMap<ChannelKey, Served>) -> HashMap<ChannelKey, usize> {
    channels
        .iter()
        .filter_map(|(k, s)| match s {
            Served::Data(e) => Some((k.clone(), e.cost)),
            Served::TooLarge(_) => None,
        })
        .collect()
}

/// Whether a channel's data of `cost` bytes may replace what it holds now: all channels
/// together stay within `max`, and the channel's namespace within half of it (so that one
/// namespace's channels cannot take the room of every other's). The error is the reason
/// its readers get.
pub fn fits(
    held: &HashMap<ChannelKey, usize>,
    key: &ChannelKey,
    cost: usize,
    max: usize,
) -> Result<(), String> {
    let others = held.iter().filter(|(k, _)| *k != key);
    let total = others
        .clone()
        .fold(cost, |sum, (_, c)| sum.saturating_add(*c));
    let namespace = others
        .filter(|(k, _)| k.0 == key.0)
        .fold(cost, |sum, (_, c)| sum.saturating_add(*c));
    let share = max / 2;
    if namespace > share {
        return Err(format!(
            "the published data of namespace {} would take {namespace} bytes of the channel server's memory, more than its share of {share} (half of --channel-server-max-bytes)",
            key.0
        ));
    }
    if total > max {
        return Err(format!(
            "the channel server's memory is full (--channel-server-max-bytes {max}); this channel's data takes {cost} bytes"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
