//! The watch caches shared by every channel of a watched scope (a namespace, or all of
//! them): channels, versions (kept lean: only the operator's own `managedFields` entry)
//! and syncer pods; the streams that trigger reconciliations from them; and the waits that
//! keep the caches at least as new as the operator's own writes, so that every decision
//! may read them instead of the API server.

pub(super) mod decoding;

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::api::{ManagedOSVersion, ManagedOSVersionChannel, SYNC_REQUESTED_AT_ANNOTATION};
use crate::controller::Key;

/// How long to wait for a cache (filled, or caught up with the operator's writes).
const CACHE_WAIT: Duration = Duration::from_secs(10);

pub struct Scope {
    /// `None`: every namespace.
    pub namespace: Option<String>,
    pub channels: Store<ManagedOSVersionChannel>,
    pub versions: Arc<crate::controller::versions::index::VersionIndex>,
    pub pods: Store<Pod>,
}

impl Scope {
    pub fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == namespace)
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }

    /// The pod from the cache once the cache holds its first list; `None` (read it fresh)
    /// when it does not within [`CACHE_WAIT`]. Until then the store is empty: a sync in
    /// flight at a restart would see no pod, wait for its next interval, and, its pod then
    /// changing no more, never be woken (seen after an API server outage).
    pub async fn filled_pod(&self, namespace: &str, name: &str) -> Option<Option<Arc<Pod>>> {
        let filled = tokio::time::timeout(CACHE_WAIT, self.pods.wait_until_ready()).await;
        matches!(filled, Ok(Ok(()))).then(|| self.pod(namespace, name))
    }

    /// The versions of a channel's sync (`version_index::relevant`), made from the cache
    /// for this sync, and what the operator remembers of them; `None` until the cache is
    /// filled.
    pub async fn versions_of(
        &self,
        namespace: &str,
        channel: &ManagedOSVersionChannel,
    ) -> Option<(Vec<Arc<ManagedOSVersion>>, crate::syncer::drift::Known)> {
        let ready = tokio::time::timeout(CACHE_WAIT, self.versions.wait_until_ready()).await;
        ready
            .is_ok()
            .then(|| self.versions.of_channel(namespace, channel))
    }

    /// Channels whose syncer pod runs: pods named after a live channel that the operator
    /// recorded creating (their uid in its status), not finished, not terminating. Any
    /// other pod never counts, however it is named, labelled or owned.
    pub fn running_syncs(&self) -> impl Iterator<Item = Key> + '_ {
        self.pods.state().into_iter().filter_map(|pod| {
            let ns = pod.namespace()?;
            let name = pod.name_any();
            let finished = matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
            if finished || pod.metadata.deletion_timestamp.is_some() {
                return None;
            }
            let key: Key = ObjectRef::new(&name).within(&ns);
            let channel = self.channels.get(&key)?;
            crate::syncer::pod::made_by_operator(&pod, &channel).then_some(key)
        })
    }
}

/// Removes what change detection and decisions do not read from cached pods.
/// How a watch cache gets its initial state: by a streaming list (one watch that sends the
/// existing objects first, then a bookmark; Kubernetes' `WatchList`, on by default since
/// 1.32) where the API server serves one, else by the paginated LIST. At 100,000 versions
/// the LIST is 200 requests of 500 objects each, at every start and after every expired
/// watch; the streaming list is one request, served from the API server's watch cache.
pub fn watch_config(streaming: bool) -> watcher::Config {
    let config = watcher::Config::default();
    if streaming {
        config.streaming_lists()
    } else {
        config
    }
}

/// Whether the API server serves streaming lists: a streaming watch of channels that
/// matches none must end its initial events with the bookmark that says so. A server
/// without the feature refuses the request or sends no such bookmark.
pub async fn streaming_lists_served(client: &kube::Client, namespace: Option<&str>) -> bool {
    use futures::TryStreamExt;
    use kube::api::{WatchEvent, WatchParams};
    let api: kube::Api<ManagedOSVersionChannel> = match namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    };
    let params = WatchParams::streaming_lists()
        .labels("rancheros.cattle.io/streaming-list-probe=none")
        .timeout(5);
    let probe = async {
        let mut events = Box::pin(api.watch_metadata(&params, "0").await.ok()?);
        while let Some(event) = events.try_next().await.ok()? {
            if let WatchEvent::Bookmark(b) = event {
                return Some(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .is_some_and(|v| v == "true"),
                );
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(10), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

pub fn lean_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
}

/// What of a channel starts a sync: its spec (generation), an on-demand request, its
/// deletion. The operator's own status writes change none of these.
pub fn channel_fingerprint(ch: &ManagedOSVersionChannel) -> u64 {
    let mut h = DefaultHasher::new();
    ch.metadata.generation.hash(&mut h);
    ch.annotations()
        .get(SYNC_REQUESTED_AT_ANNOTATION)
        .hash(&mut h);
    ch.metadata.deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

/// What of a syncer pod moves its sync on: its phase and the state of each container (a
/// waiting reason, such as a pull back-off, changes nothing: the timeout covers it).
pub fn pod_fingerprint(pod: &Pod) -> u64 {
    let mut h = DefaultHasher::new();
    pod.metadata.deletion_timestamp.is_some().hash(&mut h);
    if let Some(status) = &pod.status {
        status.phase.hash(&mut h);
        for c in crate::syncer::pod::container_statuses(status) {
            c.name.hash(&mut h);
            if let Some(state) = &c.state {
                state.running.is_some().hash(&mut h);
                state.terminated.as_ref().map(|t| t.exit_code).hash(&mut h);
            }
        }
    }
    h.finish()
}

/// The objects of a watch whose fingerprint changed, and every deleted one (reported to
/// `gone` too, also when a re-list no longer shows it): the reconciliations worth running.
pub fn changes<K, S>(
    events: S,
    fingerprint: fn(&K) -> u64,
    mut gone: impl FnMut(ObjectRef<K>) + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    // uid -> (fingerprint, reference)
    let mut seen: HashMap<String, (u64, ObjectRef<K>)> = HashMap::new();
    let mut relisted: Option<HashSet<String>> = None;
    events.flat_map(move |event| {
        let mut out = Vec::new();
        match event {
            Err(e) => out.push(Err(e)),
            Ok(watcher::Event::Init) => relisted = Some(HashSet::new()),
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                let uid = obj.meta().uid.clone().unwrap_or_default();
                if let Some(listed) = relisted.as_mut() {
                    listed.insert(uid.clone());
                }
                let print = fingerprint(&obj);
                let previous = seen.insert(uid, (print, ObjectRef::from_obj(&obj)));
                if previous.is_none_or(|(p, _)| p != print) {
                    out.push(Ok(obj));
                }
            }
            Ok(watcher::Event::Delete(obj)) => {
                seen.remove(&obj.meta().uid.clone().unwrap_or_default());
                gone(ObjectRef::from_obj(&obj));
                out.push(Ok(obj));
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(listed) = relisted.take() {
                    let before = std::mem::take(&mut seen);
                    for (uid, (print, reference)) in before {
                        if listed.contains(&uid) {
                            seen.insert(uid, (print, reference));
                        } else {
                            gone(reference);
                        }
                    }
                }
            }
        }
        futures::stream::iter(out)
    })
}

/// Waits until `caught_up` holds (polled every 20 ms), at most [`CACHE_WAIT`]; whether it
/// did. Watch events arrive within milliseconds of a write; the bound guards a lagging watch.
pub async fn wait_until(caught_up: impl Fn() -> bool) -> bool {
    let start = tokio::time::Instant::now();
    // No deadline can be computed (at the end of time): look once.
    let deadline = start.checked_add(CACHE_WAIT).unwrap_or(start);
    loop {
        if caught_up() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a cached object at `cached` shows a write that returned `written`: the same
/// resourceVersion, or a later one. resourceVersions are opaque; when either is not the
/// number the API server uses today, only equality counts (a caller then waits or reads).
pub fn shows(cached: Option<&str>, written: &str) -> bool {
    match cached {
        None => false,
        Some(c) if c == written => true,
        Some(c) => matches!(
            (c.parse::<u64>(), written.parse::<u64>()),
            (Ok(c), Ok(w)) if c > w
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn channel(uid: &str, generation: i64, request: Option<&str>) -> ManagedOSVersionChannel {
        let mut ch: ManagedOSVersionChannel = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": uid, "generation": generation},
            "spec": {"type": "json"}
        }))
        .unwrap();
        if let Some(r) = request {
            ch.annotations_mut()
                .insert(SYNC_REQUESTED_AT_ANNOTATION.into(), r.into());
        }
        ch
    }

    #[tokio::test]
    async fn only_changes_that_start_a_sync_pass_and_deletions_are_reported() {
        let mut status_only = channel("u1", 1, None);
        status_only.status = Some(Default::default());
        let events = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(channel("u1", 1, None))),
            Ok(watcher::Event::InitApply(channel("u2", 1, None))),
            Ok(watcher::Event::InitDone),
            // The operator's own status write: no new generation, no request.
            Ok(watcher::Event::Apply(status_only)),
            Ok(watcher::Event::Apply(channel("u1", 2, None))),
            Ok(watcher::Event::Apply(channel("u1", 2, Some("now")))),
            Ok(watcher::Event::Delete(channel("u2", 1, None))),
            // A re-list that no longer shows u1: it was deleted while the watch was down.
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
        ];
        let gone = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = gone.clone();
        let passed: Vec<(String, i64)> = changes(
            futures::stream::iter(events),
            channel_fingerprint,
            move |r| seen.lock().unwrap().push(r.name),
        )
        .map(|r| {
            let ch = r.unwrap();
            (ch.uid().unwrap(), ch.metadata.generation.unwrap())
        })
        .collect()
        .await;
        assert_eq!(
            passed,
            [
                ("u1".into(), 1),
                ("u2".into(), 1),
                ("u1".into(), 2),
                ("u1".into(), 2),
                ("u2".into(), 1)
            ]
        );
        assert_eq!(*gone.lock().unwrap(), ["c", "c"]);
    }

    #[test]
    fn a_cache_shows_a_write_at_its_version_or_later() {
        assert!(shows(Some("12"), "12"));
        assert!(shows(Some("13"), "12"));
        assert!(!shows(Some("11"), "12"));
        assert!(!shows(None, "12"));
        assert!(!shows(Some("x"), "12"));
        assert!(shows(Some("x"), "x"));
    }
}
