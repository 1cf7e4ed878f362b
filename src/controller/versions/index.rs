//! The versions' watch cache, compact: per namespace, per name, only what decisions read
//! (uid, resourceVersion, the channel label, the three annotations the operator writes,
//! the owner references, the deletion mark, when the operator and anyone else last wrote,
//! and the resourceVersion the operator last wrote or verified, `syncer::drift`). What every version of a channel shares (owner references, the channel's name,
//! the namespace) is kept once. A sync gets its own channel's versions (and, by name, those
//! its listing would create) as `ManagedOSVersion`s made for it, which go when it ends:
//! the cache does not grow with anything tenants add to a version.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use kube::runtime::watcher::Event;

use crate::api::{
    CHANNEL_LABEL, FIELD_MANAGER, ManagedOSVersion, ManagedOSVersionChannel,
    NO_LONGER_IN_SYNC_ANNOTATION, ORPHANED_FROM_ANNOTATION,
};
use crate::syncer::drift::Known;
use crate::syncer::versions::CONTENT_HASH_ANNOTATION;

type Names = HashMap<Box<str>, Cached>;

/// One version as the cache keeps it.
#[derive(Debug)]
struct Cached {
    uid: Box<str>,
    resource_version: Box<str>,
    channel: Option<Arc<str>>,
    owners: Arc<[OwnerReference]>,
    content_hash: Option<Box<str>>,
    no_longer_in_sync: Option<Box<str>>,
    orphaned_from: Option<Box<str>>,
    deleting: Option<Time>,
    /// The latest write of the operator, and of anyone else, to the object (not its
    /// status): `Some(None)` is a write with no time.
    ours: Option<Option<Time>>,
    others: Option<Option<Time>>,
    /// The resourceVersion the operator's last write of this object returned, or that of a
    /// full read that found it as a sync wanted it: kept across the watch's events for the
    /// same object (same uid), gone with it.
    known: Option<Box<str>>,
}

#[derive(Default)]
struct Inner {
    by_namespace: HashMap<Arc<str>, Names>,
    /// A re-list under way: what it has shown so far (it replaces `by_namespace` once done).
    relist: Option<HashMap<Arc<str>, Names>>,
    /// Interned: owner references by the first owner's uid, channel and namespace names.
    owners: HashMap<Box<str>, Arc<[OwnerReference]>>,
    strings: HashSet<Arc<str>>,
}

/// The cache; filled by the versions' watch (`apply`), read by syncs.
pub struct VersionIndex {
    inner: RwLock<Inner>,
    ready: tokio::sync::watch::Sender<bool>,
}

impl Default for VersionIndex {
    fn default() -> Self {
        Self {
            inner: RwLock::default(),
            ready: tokio::sync::watch::Sender::new(false),
        }
    }
}

/// Whether a version belongs to a channel's sync: controlled by it, or labelled with its
/// name (an orphan it may adopt, or one whose owner reference someone removed).
pub fn relevant(
    controller_uid: Option<&str>,
    label: Option<&str>,
    channel: &ManagedOSVersionChannel,
) -> bool {
    let uid = channel.metadata.uid.as_deref();
    (controller_uid.is_some() && controller_uid == uid) || label == channel.metadata.name.as_deref()
}

fn controller_uid(owners: &[OwnerReference]) -> Option<&str> {
    owners
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

impl VersionIndex {
    /// One event of the versions' watch (metadata only, see `version_meta`).
    pub fn apply(&self, event: Event<ManagedOSVersion>) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Init => inner.relist = Some(HashMap::new()),
            Event::InitApply(v) => {
                if let Some((ns, name, mut cached)) = inner.compact(v) {
                    // The state before the re-list still serves: the memory is copied.
                    let before = inner.by_namespace.get(&ns).and_then(|n| n.get(&name));
                    if let Some(before) = before.filter(|b| b.uid == cached.uid) {
                        cached.known.clone_from(&before.known);
                    }
                    let relist = inner.relist.get_or_insert_with(HashMap::new);
                    relist.entry(ns).or_default().insert(name, cached);
                }
            }
            Event::InitDone => {
                if let Some(listed) = inner.relist.take() {
                    inner.by_namespace = listed;
                }
                inner.owners.retain(|_, o| Arc::strong_count(o) > 1);
                inner.strings.retain(|s| Arc::strong_count(s) > 1);
                self.ready.send_replace(true);
            }
            Event::Apply(v) => {
                if let Some((ns, name, mut cached)) = inner.compact(v) {
                    let names = inner.by_namespace.entry(ns).or_default();
                    // The same object (a namesake made since starts with nothing remembered).
                    if let Some(before) = names.get_mut(&name).filter(|b| b.uid == cached.uid) {
                        cached.known = before.known.take();
                    }
                    names.insert(name, cached);
                }
            }
            Event::Delete(v) => {
                let ns = v.metadata.namespace.as_deref().unwrap_or_default();
                let name = v.metadata.name.as_deref().unwrap_or_default();
                let removed = inner
                    .by_namespace
                    .get_mut(ns)
                    .and_then(|names| names.remove(name));
                if inner.by_namespace.get(ns).is_some_and(HashMap::is_empty) {
                    inner.by_namespace.remove(ns);
                }
                // The last version with these owners: forget them.
                if let Some(gone) = removed
                    && Arc::strong_count(&gone.owners) == 2
                {
                    let key = gone.owners.first().map(|o| o.uid.as_str()).unwrap_or("");
                    inner.owners.remove(key);
                }
            }
        }
    }

    /// Waits until the first list is in.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.subscribe();
        // The sender lives as long as `self`: this only ends once ready.
        let _ = ready.wait_for(|r| *r).await;
    }

    /// The versions of a channel's sync in its namespace (see `relevant`), and the
    /// resourceVersions the operator remembers writing or verifying them at.
    pub fn of_channel(
        &self,
        namespace: &str,
        channel: &ManagedOSVersionChannel,
    ) -> (Vec<Arc<ManagedOSVersion>>, Known) {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let mut known = Known::new();
        let versions = inner
            .by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter(|(_, c)| relevant(controller_uid(&c.owners), c.channel.as_deref(), channel))
            .map(|(name, c)| {
                if let Some(rv) = &c.known {
                    known.insert(name.to_string(), rv.to_string());
                }
                Arc::new(c.full(namespace, name))
            })
            .collect();
        (versions, known)
    }

    /// Remembers the resourceVersion of each of these versions that the operator wrote, or
    /// read and found as it wants (`syncer::drift`); a version not cached yet is skipped
    /// (until it is written or read again, its `managedFields` decide).
    pub fn remember(&self, namespace: &str, versions: &[(String, String)]) {
        let mut guard = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let inner = &mut *guard;
        // A re-list under way: what it has shown already is remembered too.
        let relisted = inner.relist.as_mut().and_then(|r| r.get_mut(namespace));
        for names in [inner.by_namespace.get_mut(namespace), relisted]
            .into_iter()
            .flatten()
        {
            for (name, rv) in versions {
                if let Some(cached) = names.get_mut(name.as_str()) {
                    cached.known = Some(rv.as_str().into());
                }
            }
        }
    }

    /// The versions of these names in a namespace (those that exist).
    pub fn named(&self, namespace: &str, names: &[String]) -> Vec<Arc<ManagedOSVersion>> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let Some(all) = inner.by_namespace.get(namespace) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|n| all.get_key_value(n.as_str()))
            .map(|(name, c)| Arc::new(c.full(namespace, name)))
            .collect()
    }

    /// The cached resourceVersion of a version (`None`: not in the cache).
    pub fn resource_version(&self, namespace: &str, name: &str) -> Option<String> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let cached = inner.by_namespace.get(namespace)?.get(name)?;
        Some(cached.resource_version.to_string())
    }

    /// How many versions the cache holds.
    pub fn len(&self) -> usize {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.by_namespace.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn intern(&mut self, s: String) -> Arc<str> {
        if let Some(known) = self.strings.get(s.as_str()) {
            return Arc::clone(known);
        }
        let new: Arc<str> = Arc::from(s);
        self.strings.insert(Arc::clone(&new));
        new
    }

    fn compact(&mut self, v: ManagedOSVersion) -> Option<(Arc<str>, Box<str>, Cached)> {
        let m = v.metadata;
        let ns = self.intern(m.namespace.unwrap_or_default());
        let name = m.name?.into_boxed_str();
        let mut labels = m.labels.unwrap_or_default();
        let mut annotations = m.annotations.unwrap_or_default();
        let channel = labels.remove(CHANNEL_LABEL).map(|c| self.intern(c));
        let owners = m.owner_references.unwrap_or_default();
        let key: Box<str> = owners.first().map(|o| o.uid.as_str()).unwrap_or("").into();
        let owners = match self.owners.get(&key) {
            Some(known) if **known == *owners => Arc::clone(known),
            _ => {
                let new: Arc<[OwnerReference]> = owners.into();
                self.owners.insert(key, Arc::clone(&new));
                new
            }
        };
        // The watch's decoding kept of the writers the operator's latest and anyone
        // else's latest (`version_meta::latest_writers`): only their times are kept.
        let (mut ours, mut others) = (None, None);
        for w in m.managed_fields.into_iter().flatten() {
            if w.manager.as_deref() == Some(FIELD_MANAGER) {
                ours = Some(w.time);
            } else {
                others = Some(w.time);
            }
        }
        let boxed = |s: Option<String>| s.map(String::into_boxed_str);
        let cached = Cached {
            uid: m.uid.unwrap_or_default().into_boxed_str(),
            resource_version: m.resource_version.unwrap_or_default().into_boxed_str(),
            channel,
            owners,
            content_hash: boxed(annotations.remove(CONTENT_HASH_ANNOTATION)),
            no_longer_in_sync: boxed(annotations.remove(NO_LONGER_IN_SYNC_ANNOTATION)),
            orphaned_from: boxed(annotations.remove(ORPHANED_FROM_ANNOTATION)),
            deleting: m.deletion_timestamp,
            ours,
            others,
            known: None,
        };
        Some((ns, name, cached))
    }
}

impl Cached {
    /// The version as the metadata-only watch showed it (its other labels and annotations,
    /// which no decision reads, left out).
    fn full(&self, namespace: &str, name: &str) -> ManagedOSVersion {
        let text = |s: &str| Some(s.to_string());
        let labels: std::collections::BTreeMap<String, String> = self
            .channel
            .iter()
            .map(|c| (CHANNEL_LABEL.to_string(), c.to_string()))
            .collect();
        let annotations: std::collections::BTreeMap<String, String> = [
            (CONTENT_HASH_ANNOTATION, &self.content_hash),
            (NO_LONGER_IN_SYNC_ANNOTATION, &self.no_longer_in_sync),
            (ORPHANED_FROM_ANNOTATION, &self.orphaned_from),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), v.to_string())))
        .collect();
        let writer = |manager: Option<&str>, time: &Option<Time>| ManagedFieldsEntry {
            manager: manager.map(str::to_string),
            operation: Some(if manager.is_some() { "Apply" } else { "Update" }.into()),
            time: time.clone(),
            ..Default::default()
        };
        let writers: Vec<ManagedFieldsEntry> = [
            self.ours.as_ref().map(|t| writer(Some(FIELD_MANAGER), t)),
            self.others.as_ref().map(|t| writer(None, t)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut version = ManagedOSVersion::new(name, Default::default());
        version.metadata = ObjectMeta {
            name: text(name),
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            uid: (!self.uid.is_empty()).then(|| self.uid.to_string()),
            resource_version: (!self.resource_version.is_empty())
                .then(|| self.resource_version.to_string()),
            deletion_timestamp: self.deleting.clone(),
            labels: (!labels.is_empty()).then_some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: (!self.owners.is_empty()).then(|| self.owners.to_vec()),
            managed_fields: (!writers.is_empty()).then_some(writers),
            ..Default::default()
        };
        version
    }
}

#[cfg(test)]
mod tests;
