//! json channels: the fetch, and the last good body of each channel, kept for conditional
//! requests (a `304 Not Modified` is answered from it, so the versions are still compared
//! and repaired). The kept bodies are bounded in total bytes and dropped with their
//! channel.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use kube::ResourceExt;

use super::Context;
use super::slots::Key;
use crate::api::ManagedOSVersionChannel;
use crate::config::JsonOptions;
use crate::fetch::{self, Validators};
use crate::syncer::Fetched;

/// The last good body of a json channel.
struct CachedBody {
    uid: String,
    uri: String,
    validators: Validators,
    data: Arc<[u8]>,
}

/// The kept bodies, least recently used first out when their total passes `max_bytes`.
pub struct Bodies {
    max_bytes: usize,
    total: usize,
    entries: HashMap<Key, CachedBody>,
    /// Least recently used first.
    order: VecDeque<Key>,
}

impl Bodies {
    pub fn new(max_bytes: usize) -> Self {
        Bodies {
            max_bytes,
            total: 0,
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The body kept for this channel (same uid: not a namesake) and URI.
    fn get(&mut self, key: &Key, uid: &str, uri: &str) -> Option<(Validators, Arc<[u8]>)> {
        let found = self
            .entries
            .get(key)
            .filter(|c| c.uid == uid && c.uri == uri)
            .map(|c| (c.validators.clone(), c.data.clone()))?;
        self.touch(key);
        Some(found)
    }

    /// Keeps a body; one larger than the whole bound is not kept (its channel then fetches
    /// unconditionally).
    fn put(&mut self, key: Key, body: CachedBody) {
        self.remove(&key);
        if body.data.len() > self.max_bytes {
            return;
        }
        self.total = self.total.saturating_add(body.data.len());
        self.entries.insert(key.clone(), body);
        self.order.push_back(key);
        while self.total > self.max_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.entries.remove(&oldest) {
                self.total = self.total.saturating_sub(old.data.len());
            }
        }
    }

    /// Drops the body of a channel (deleted, or no longer a json channel).
    pub fn remove(&mut self, key: &Key) {
        if let Some(old) = self.entries.remove(key) {
            self.total = self.total.saturating_sub(old.data.len());
            self.order.retain(|k| k != key);
        }
    }

    fn touch(&mut self, key: &Key) {
        self.order.retain(|k| k != key);
        self.order.push_back(key.clone());
    }

    #[cfg(test)]
    fn total_bytes(&self) -> usize {
        self.total
    }
}

/// Fetches a json channel's data; a 304 is answered from the last good body.
pub async fn fetch(
    channel: &ManagedOSVersionChannel,
    key: &Key,
    options: &JsonOptions,
    ctx: &Context,
) -> Fetched {
    let uid = channel.uid().unwrap_or_default();
    let cached = ctx
        .bodies
        .lock()
        .ok()
        .and_then(|mut b| b.get(key, &uid, &options.uri));
    let validators = cached.as_ref().map(|(v, _)| v.clone()).unwrap_or_default();
    match fetch::get(
        &ctx.http,
        options,
        &validators,
        ctx.settings.max_output_bytes,
    )
    .await
    {
        fetch::Response::Body { data, validators } => Fetched::Body {
            data: data.into(),
            etag: validators.etag,
            last_modified: validators.last_modified,
            not_modified: false,
        },
        fetch::Response::NotModified => match cached {
            Some((validators, data)) => Fetched::Body {
                data,
                etag: validators.etag,
                last_modified: validators.last_modified,
                not_modified: true,
            },
            None => Fetched::Failed(format!(
                "fetching {}: the server answered 304 Not Modified to a request without validators",
                options.uri
            )),
        },
        fetch::Response::Failed(why) => Fetched::Failed(why),
    }
}

/// Keeps the body a successful sync used, for the next conditional request.
pub fn remember(
    channel: &ManagedOSVersionChannel,
    key: &Key,
    options: &JsonOptions,
    fetched: &Fetched,
    ctx: &Context,
) {
    let Fetched::Body {
        data,
        etag,
        last_modified,
        not_modified: false,
    } = fetched
    else {
        return;
    };
    let validators = Validators {
        etag: etag.clone(),
        last_modified: last_modified.clone(),
    };
    let Ok(mut bodies) = ctx.bodies.lock() else {
        return;
    };
    if validators.is_empty() {
        bodies.remove(key);
    } else {
        bodies.put(
            key.clone(),
            CachedBody {
                uid: channel.uid().unwrap_or_default(),
                uri: options.uri.clone(),
                validators,
                data: data.clone(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::ObjectRef;

    fn body(len: usize) -> CachedBody {
        CachedBody {
            uid: "u".into(),
            uri: "http://x".into(),
            validators: Validators {
                etag: Some("\"e\"".into()),
                last_modified: None,
            },
            data: vec![b'x'; len].into(),
        }
    }

    fn key(name: &str) -> Key {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn bodies_are_bounded_in_bytes_least_recently_used_first_out() {
        let mut bodies = Bodies::new(100);
        bodies.put(key("a"), body(40));
        bodies.put(key("b"), body(40));
        // a is used again: b is now the oldest.
        assert!(bodies.get(&key("a"), "u", "http://x").is_some());
        bodies.put(key("c"), body(40));
        assert!(bodies.total_bytes() <= 100);
        assert!(bodies.get(&key("b"), "u", "http://x").is_none());
        assert!(bodies.get(&key("a"), "u", "http://x").is_some());
        assert!(bodies.get(&key("c"), "u", "http://x").is_some());
        // Too large for the bound: not kept at all.
        bodies.put(key("d"), body(101));
        assert!(bodies.get(&key("d"), "u", "http://x").is_none());
    }

    #[test]
    fn a_deleted_channel_loses_its_body_and_a_namesake_never_gets_it() {
        let mut bodies = Bodies::new(100);
        bodies.put(key("a"), body(10));
        assert!(bodies.get(&key("a"), "other-uid", "http://x").is_none());
        assert!(bodies.get(&key("a"), "u", "http://y").is_none());
        bodies.remove(&key("a"));
        assert_eq!(bodies.total_bytes(), 0);
        assert!(bodies.get(&key("a"), "u", "http://x").is_none());
    }
}
