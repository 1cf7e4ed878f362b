//! The I/O boundary over the API server: reads from the shared watch caches (the API server
//! when a cache is not there or may be stale), writes that wait until the cache shows them.

mod sources;

use std::collections::HashSet;
use std::sync::Arc;

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::api::{ManagedOSVersion, ManagedOSVersionChannel, ManagedOSVersionChannelStatus};
use crate::controller::Key;
use crate::controller::caches::{self, Scope};
use crate::controller::io::errors::delete_uid;
use crate::controller::io::{Kind, ObjectIo, PodIo, StatusIo, VersionIo, Written};
use crate::controller::versions::all_or_nothing;
use crate::controller::versions::writer::{Op, VersionWriter, Writes};
use crate::controller::{Error, pods};

use crate::fetch;
use crate::metrics::Metrics;
use crate::syncer::Effect;
use crate::syncer::drift::Known;

/// Objects per page of a fresh LIST (the Orphan finalizer's): what one page holds in
/// memory, metadata only.
const LIST_PAGE: u32 = 500;

pub struct KubeIo {
    pub client: Client,
    pub scopes: Vec<Scope>,
    /// Wakes a channel's reconciliation (one sender per scope, same order).
    pub wake: Vec<mpsc::UnboundedSender<Key>>,
    pub http: fetch::Client,
    pub registry: crate::registry::Client,
    pub metrics: Arc<Metrics>,
    /// What every version write shares: its namespace's turns, the places in flight.
    pub writes: Writes,
    /// What one sync may write, and keep to undo its writes (`--max-sync-write-bytes`).
    pub max_write_bytes: usize,
}

/// What bounds the version writes: their pace, and what a sync may keep to undo them.
pub struct WriteBounds {
    pub rates: crate::pace::Rates,
    /// `--max-sync-write-bytes`.
    pub max_undo_bytes: usize,
}

impl KubeIo {
    pub fn new(
        client: Client,
        scopes: Vec<Scope>,
        wake: Vec<mpsc::UnboundedSender<Key>>,
        http: fetch::Client,
        registry: crate::registry::Client,
        metrics: Arc<Metrics>,
        writes: WriteBounds,
    ) -> Self {
        KubeIo {
            client,
            scopes,
            wake,
            http,
            registry,
            metrics,
            writes: Writes::new(writes.rates),
            max_write_bytes: writes.max_undo_bytes,
        }
    }

    /// A session of the one writer of versions, for one task in `namespace`.
    fn version_writer<'a>(&'a self, namespace: &'a str) -> VersionWriter<'a> {
        VersionWriter::new(
            self.api(namespace),
            namespace,
            &self.writes,
            &self.metrics,
            self.max_write_bytes,
        )
    }

    fn scope(&self, namespace: &str) -> Option<&Scope> {
        self.scopes.iter().find(|s| s.covers(namespace))
    }

    fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }
}

fn parts(key: &Key) -> (String, &str) {
    (key.namespace.clone().unwrap_or_default(), key.name.as_str())
}

impl PodIo for KubeIo {
    fn running_syncs(&self) -> HashSet<Key> {
        self.scopes.iter().flat_map(Scope::running_syncs).collect()
    }

    fn wake(&self, key: Key) {
        let ns = key.namespace.clone().unwrap_or_default();
        let at = self.scopes.iter().position(|s| s.covers(&ns));
        if let Some(sender) = at.and_then(|i| self.wake.get(i)) {
            let _ = sender.unbounded_send(key);
        }
    }

    async fn pod(&self, key: &Key, fresh: bool) -> Result<Option<Arc<Pod>>, kube::Error> {
        let (ns, name) = parts(key);
        if let Some(scope) = self.scope(&ns).filter(|_| !fresh)
            && let Some(cached) = scope.filled_pod(&ns, name).await
        {
            return Ok(cached);
        }
        Ok(self.api::<Pod>(&ns).get_opt(name).await?.map(Arc::new))
    }

    async fn display_log(
        &self,
        key: &Key,
        max_output_bytes: u64,
        hold: &mut crate::budget::Hold,
    ) -> Result<Vec<u8>, Error> {
        let (ns, name) = parts(key);
        pods::display_log(&self.api(&ns), name, max_output_bytes, hold).await
    }

    async fn runner_tail(&self, key: &Key) -> String {
        let (ns, name) = parts(key);
        pods::runner_tail(&self.api(&ns), name).await
    }

    async fn create_pod(&self, namespace: &str, pod: &Pod) -> Result<Pod, kube::Error> {
        self.api::<Pod>(namespace)
            .create(&PostParams::default(), pod)
            .await
    }

    async fn pod_cache_shows(&self, key: &Key, created: Option<&str>, deleted: &[String]) -> bool {
        let (ns, name) = parts(key);
        let Some(scope) = self.scope(&ns) else {
            return true;
        };
        caches::wait_until(|| {
            let cached = scope.pod(&ns, name);
            let uid = cached.as_ref().and_then(|p| p.uid());
            let shows_created = created.is_none_or(|c| uid.as_deref() == Some(c));
            let shows_deleted = deleted.iter().all(|d| {
                cached.as_ref().is_none_or(|p| {
                    uid.as_deref() != Some(d.as_str()) || p.metadata.deletion_timestamp.is_some()
                })
            });
            shows_created && shows_deleted
        })
        .await
    }
}

impl VersionIo for KubeIo {
    /// From the watch cache (listed only if the cache is not filled yet, which happens
    /// once, at start: then every version of the namespace, none remembered).
    async fn versions(
        &self,
        namespace: &str,
        channel: &ManagedOSVersionChannel,
    ) -> Result<(Vec<Arc<ManagedOSVersion>>, Known), kube::Error> {
        if let Some(scope) = self.scope(namespace)
            && let Some(versions) = scope.versions_of(namespace, channel).await
        {
            return Ok(versions);
        }
        let list = self
            .api::<crate::controller::versions::meta::VersionMeta>(namespace)
            .list(&ListParams::default())
            .await?;
        let versions = list.items.into_iter().map(|v| Arc::new(v.0)).collect();
        Ok((versions, Known::new()))
    }

    fn remember_verified(&self, namespace: &str, verified: &[(String, String)]) {
        if let Some(scope) = self.scope(namespace) {
            scope.versions.remember(namespace, verified);
        }
    }

    /// From the watch cache; none when it is not filled yet (`versions` then listed all).
    async fn versions_named(
        &self,
        namespace: &str,
        names: &[String],
    ) -> Result<Vec<Arc<ManagedOSVersion>>, kube::Error> {
        Ok(self
            .scope(namespace)
            .map(|scope| scope.versions.named(namespace, names))
            .unwrap_or_default())
    }

    /// Waits until the versions cache shows every write (each version at the
    /// resourceVersion the write returned, or gone), so that no decision acts on a cache
    /// that has not seen them. Should it give up, a later decision still sees them, a moment
    /// late. Then the cache remembers each resourceVersion the writes returned: another
    /// one is someone else's write (`syncer::drift`).
    async fn write_versions(
        &self,
        namespace: &str,
        effects: &[Effect],
    ) -> Result<Vec<Written>, Error> {
        let written = all_or_nothing::write_all(
            &self.version_writer(namespace),
            effects,
            self.max_write_bytes,
        )
        .await?;
        if let Some(scope) = self.scope(namespace)
            && !written.is_empty()
        {
            caches::wait_until(|| {
                written.iter().all(|(name, rv)| {
                    let cached = scope.versions.resource_version(namespace, name);
                    match rv {
                        Some(rv) => caches::shows(cached.as_deref(), rv),
                        None => cached.is_none(),
                    }
                })
            })
            .await;
            // After the wait: a create is in the cache by then (one still missing, after a
            // wait that gave up, is judged by its `managedFields`).
            let ours: Vec<(String, String)> = written
                .iter()
                .filter_map(|(name, rv)| Some((name.clone(), rv.clone()?)))
                .collect();
            scope.versions.remember(namespace, &ours);
        }
        Ok(written)
    }

    async fn labelled_versions(
        &self,
        key: &Key,
        continue_token: Option<String>,
    ) -> Result<(Vec<ObjectMeta>, Option<String>), kube::Error> {
        let (ns, name) = parts(key);
        let selector = format!("{}={name}", crate::api::CHANNEL_LABEL);
        let mut params = ListParams::default().labels(&selector).limit(LIST_PAGE);
        if let Some(token) = continue_token {
            params = params.continue_token(&token);
        }
        let list = self
            .api::<ManagedOSVersion>(&ns)
            .list_metadata(&params)
            .await?;
        let next = list.metadata.continue_.filter(|t| !t.is_empty());
        Ok((list.items.into_iter().map(|v| v.metadata).collect(), next))
    }

    async fn read_version(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ManagedOSVersion>, kube::Error> {
        self.api::<ManagedOSVersion>(namespace).get_opt(name).await
    }

    async fn patch_version(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), kube::Error> {
        self.version_writer(namespace)
            .patch(Op::Orphan, name, &manager(), &Patch::Merge(patch))
            .await
            .map(drop)
    }
}

impl StatusIo for KubeIo {
    async fn read_channel(
        &self,
        key: &Key,
    ) -> Result<Option<ManagedOSVersionChannel>, kube::Error> {
        let (ns, name) = parts(key);
        self.api::<ManagedOSVersionChannel>(&ns).get_opt(name).await
    }

    async fn patch_status(
        &self,
        key: &Key,
        status: &ManagedOSVersionChannelStatus,
    ) -> Result<bool, kube::Error> {
        let (ns, name) = parts(key);
        let written = self
            .api::<ManagedOSVersionChannel>(&ns)
            .patch_status(name, &PatchParams::default(), &whole_status(status)?)
            .await?;
        let (Some(scope), Some(rv)) = (self.scope(&ns), written.resource_version()) else {
            return Ok(true);
        };
        Ok(caches::wait_until(|| {
            let cached = scope.channels.get(key);
            caches::shows(cached.and_then(|c| c.resource_version()).as_deref(), &rv)
        })
        .await)
    }

    async fn create_event(
        &self,
        namespace: &str,
        event: &Event,
    ) -> Result<Option<String>, kube::Error> {
        let created = self
            .api::<Event>(namespace)
            .create(&PostParams::default(), event)
            .await?;
        Ok(created.metadata.uid)
    }

    async fn patch_event_series(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        series: EventSeries,
    ) -> Result<(), kube::Error> {
        let mut patch = json!({ "series": series });
        if let Some(uid) = uid {
            // A precondition (a null would remove the field instead).
            patch["metadata"] = json!({ "uid": uid });
        }
        self.api::<Event>(namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
    }

    async fn patch_channel(&self, key: &Key, patch: &serde_json::Value) -> Result<(), kube::Error> {
        let (ns, name) = parts(key);
        self.api::<ManagedOSVersionChannel>(&ns)
            .patch(name, &manager(), &Patch::Merge(patch))
            .await
            .map(drop)
    }
}

impl ObjectIo for KubeIo {
    async fn read_meta(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ObjectMeta>, kube::Error> {
        Ok(match kind {
            Kind::Pod => self
                .api::<Pod>(namespace)
                .get_metadata_opt(name)
                .await?
                .map(|m| m.metadata),
            Kind::ConfigMap => self
                .api::<ConfigMap>(namespace)
                .get_metadata_opt(name)
                .await?
                .map(|m| m.metadata),
        })
    }

    async fn delete_object(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), kube::Error> {
        let params = delete_uid(uid, false);
        match kind {
            Kind::Pod => self
                .api::<Pod>(namespace)
                .delete(name, &params)
                .await
                .map(drop),
            Kind::ConfigMap => self
                .api::<ConfigMap>(namespace)
                .delete(name, &params)
                .await
                .map(drop),
        }
    }

    async fn apply_config_map(&self, namespace: &str, map: &ConfigMap) -> Result<(), kube::Error> {
        let name = map.name_any();
        self.api::<ConfigMap>(namespace)
            .patch(&name, &manager().force(), &Patch::Apply(map))
            .await
            .map(drop)
    }
}

/// The operator's field manager, for its merge patches.
fn manager() -> PatchParams {
    PatchParams {
        field_manager: Some(crate::api::FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The status written whole (a JSON patch adding `/status`), not merged: a merge patch
/// cannot remove a field the new status leaves out, nor a key gone from one of its maps
/// (`firstSeen`, `heldBack`).
fn whole_status(
    status: &ManagedOSVersionChannelStatus,
) -> Result<Patch<ManagedOSVersionChannelStatus>, kube::Error> {
    let ops = json!([{"op": "add", "path": "/status", "value": status}]);
    serde_json::from_value(ops)
        .map(Patch::Json)
        .map_err(kube::Error::SerdeError)
}
