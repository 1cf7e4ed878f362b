//! An in-memory world behind the I/O boundary, for reconcile tests that run in
//! milliseconds: channels (as the API server and the caches have them), pods, versions,
//! logs, a json source, Events; API errors and lagging caches on request; a log of calls.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::{
    CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionChannel, ManagedOSVersionChannelStatus,
};
use crate::config::{JsonOptions, OciOptions};
use crate::controller::Error;
use crate::controller::Key;
use crate::controller::io::{Kind, ObjectIo, PodIo, SourceIo, StatusIo, VersionIo, Written};
use crate::fetch::{Response, Validators};
use crate::syncer::Effect;
use crate::syncer::drift::Known;
use merge::merged;

mod merge;
mod objects;
mod pages;

/// What the json source answers.
pub type Source = Box<dyn Fn(&Validators) -> Response + Send + Sync>;

#[derive(Default)]
pub struct World {
    pub channels: HashMap<Key, ManagedOSVersionChannel>,
    pub pods: HashMap<Key, Pod>,
    pub versions: HashMap<Key, ManagedOSVersion>,
    pub display_logs: HashMap<Key, Vec<u8>>,
    pub source: Option<Source>,
    /// Every Event, with its series as patched.
    pub events: Vec<Event>,
    pub woken: Vec<Key>,
    /// Operations (`"versions"`, `"patch_status"`, ...) that fail with this HTTP status.
    pub failing: HashMap<&'static str, u16>,
    /// The caches do not catch up with the writes (every wait gives up).
    pub caches_lag: bool,
    /// The pod cache does not show the pods yet: no sync is observed running.
    pub pods_unseen: bool,
    /// Versions are served as the metadata-only cache holds them (no spec, no field sets).
    pub metadata_cache: bool,
    /// The resourceVersion the operator last wrote or verified, per version (the cache's
    /// memory, `syncer::drift`); a restart forgets it.
    pub known: HashMap<Key, String>,
    /// The operations performed, in order, with the channel or object they name.
    pub calls: Vec<String>,
    /// ConfigMaps, with their owners: the channels' changelogs, and anyone else's.
    pub configmaps: HashMap<Key, ConfigMap>,
    serial: u64,
}

impl World {
    fn next(&mut self) -> String {
        self.serial = self.serial.saturating_add(1);
        self.serial.to_string()
    }

    fn call(&mut self, what: &'static str, on: &str) -> Result<(), kube::Error> {
        self.calls.push(format!("{what} {on}"));
        match self.failing.get(what) {
            Some(code) => Err(kube::Error::Api(
                kube::core::Status::failure(&format!("{what} fails ({code})"), "Injected")
                    .with_code(*code)
                    .boxed(),
            )),
            None => Ok(()),
        }
    }
}

#[derive(Default)]
pub struct FakeIo {
    world: Mutex<World>,
}

impl FakeIo {
    pub fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn key_of(namespace: &str, name: &str) -> Key {
    kube::runtime::reflector::ObjectRef::new(name).within(namespace)
}

fn status_error(code: u16) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure("refused", "Injected")
            .with_code(code)
            .boxed(),
    )
}

impl PodIo for FakeIo {
    fn running_syncs(&self) -> HashSet<Key> {
        let world = self.world();
        if world.pods_unseen {
            return HashSet::new();
        }
        world
            .pods
            .iter()
            .filter(|(_, pod)| {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed"))
                    && pod.metadata.deletion_timestamp.is_none()
            })
            .filter(|(key, pod)| {
                world
                    .channels
                    .get(key)
                    .is_some_and(|ch| crate::syncer::pod::made_by_operator(pod, ch))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn wake(&self, key: Key) {
        self.world().woken.push(key);
    }

    async fn pod(&self, key: &Key, fresh: bool) -> Result<Option<Arc<Pod>>, kube::Error> {
        let mut world = self.world();
        if fresh {
            world.call("read_pod", &key.name)?;
        }
        Ok(world.pods.get(key).cloned().map(Arc::new))
    }

    async fn display_log(
        &self,
        key: &Key,
        _max: u64,
        hold: &mut crate::budget::Hold,
    ) -> Result<Vec<u8>, Error> {
        let log = {
            let mut world = self.world();
            world.call("display_log", &key.name).map_err(
                crate::controller::io::errors::kube_err("reading the display log"),
            )?;
            world.display_logs.get(key).cloned().unwrap_or_default()
        };
        let _ = hold.grow(log.len()).await;
        Ok(log)
    }

    async fn runner_tail(&self, key: &Key) -> String {
        let mut world = self.world();
        world.calls.push(format!("runner_tail {}", key.name));
        "runner output".into()
    }

    async fn create_pod(&self, namespace: &str, pod: &Pod) -> Result<Pod, kube::Error> {
        let mut world = self.world();
        world.call("create_pod", &pod.name_any())?;
        let key = key_of(namespace, &pod.name_any());
        if world.pods.contains_key(&key) {
            return Err(status_error(409));
        }
        let mut pod = pod.clone();
        pod.metadata.uid = Some(format!("pod-{}", world.next()));
        pod.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        world.pods.insert(key, pod.clone());
        Ok(pod)
    }

    async fn pod_cache_shows(
        &self,
        _key: &Key,
        _created: Option<&str>,
        _deleted: &[String],
    ) -> bool {
        !self.world().caches_lag
    }
}

impl VersionIo for FakeIo {
    /// As the cache answers: only the channel's own (`relevant`).
    async fn versions(
        &self,
        namespace: &str,
        channel: &ManagedOSVersionChannel,
    ) -> Result<(Vec<Arc<ManagedOSVersion>>, Known), kube::Error> {
        let mut world = self.world();
        world.call("versions", namespace)?;
        let mut known = Known::new();
        let versions = world
            .versions
            .iter()
            .filter(|(k, v)| {
                let controller = v
                    .owner_references()
                    .iter()
                    .find(|o| o.controller == Some(true));
                k.namespace.as_deref() == Some(namespace)
                    && crate::controller::versions::index::relevant(
                        controller.map(|o| o.uid.as_str()),
                        v.labels().get(CHANNEL_LABEL).map(String::as_str),
                        channel,
                    )
            })
            .map(|(k, v)| {
                if let Some(rv) = world.known.get(k) {
                    known.insert(k.name.clone(), rv.clone());
                }
                let mut v = v.clone();
                if world.metadata_cache {
                    v.spec = Default::default();
                    for w in v.metadata.managed_fields.iter_mut().flatten() {
                        w.fields_v1 = None;
                    }
                }
                Arc::new(v)
            })
            .collect();
        Ok((versions, known))
    }

    fn remember_verified(&self, namespace: &str, verified: &[(String, String)]) {
        let mut world = self.world();
        for (name, rv) in verified {
            world.calls.push(format!("verified {name}"));
            world.known.insert(key_of(namespace, name), rv.clone());
        }
    }

    async fn versions_named(
        &self,
        namespace: &str,
        names: &[String],
    ) -> Result<Vec<Arc<ManagedOSVersion>>, kube::Error> {
        let world = self.world();
        Ok(names
            .iter()
            .filter_map(|n| world.versions.get(&key_of(namespace, n)))
            .map(|v| Arc::new(v.clone()))
            .collect())
    }

    async fn write_versions(
        &self,
        namespace: &str,
        effects: &[Effect],
    ) -> Result<Vec<Written>, Error> {
        let mut world = self.world();
        world
            .call("write_versions", namespace)
            .map_err(crate::controller::io::errors::kube_err("writing versions"))?;
        let mut written = Vec::new();
        for effect in effects {
            match effect {
                Effect::ApplyVersion { want, .. } => {
                    let mut v = want.as_ref().clone();
                    let rv = world.next();
                    v.metadata.uid = v.metadata.uid.take().or_else(|| Some(format!("v-{rv}")));
                    v.metadata.resource_version = Some(rv.clone());
                    let key = key_of(namespace, &v.name_any());
                    written.push((v.name_any(), Some(rv.clone())));
                    world.known.insert(key.clone(), rv);
                    world.versions.insert(key, v);
                }
                Effect::DeleteVersion { name, .. } => {
                    world.versions.remove(&key_of(namespace, name));
                    world.known.remove(&key_of(namespace, name));
                    written.push((name.clone(), None));
                }
                Effect::MarkVersion { name, .. } => written.push((name.clone(), None)),
                Effect::CreatePod(_) | Effect::DeletePod { .. } | Effect::Changelogs { .. } => {}
            }
        }
        Ok(written)
    }

    async fn labelled_versions(
        &self,
        key: &Key,
        continue_token: Option<String>,
    ) -> Result<(Vec<ObjectMeta>, Option<String>), kube::Error> {
        let mut world = self.world();
        world.call("labelled_versions", &key.name)?;
        Ok(pages::page(&world.versions, key, continue_token))
    }

    async fn read_version(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ManagedOSVersion>, kube::Error> {
        let mut world = self.world();
        world.call("read_version", name)?;
        Ok(world.versions.get(&key_of(namespace, name)).cloned())
    }

    async fn patch_version(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), kube::Error> {
        let mut world = self.world();
        world.call("patch_version", name)?;
        let rv = world.next();
        let Some(version) = world.versions.get_mut(&key_of(namespace, name)) else {
            return Err(status_error(404));
        };
        *version = merged(version, patch, rv)?;
        Ok(())
    }
}

impl StatusIo for FakeIo {
    async fn read_channel(
        &self,
        key: &Key,
    ) -> Result<Option<ManagedOSVersionChannel>, kube::Error> {
        let mut world = self.world();
        world.call("read_channel", &key.name)?;
        Ok(world.channels.get(key).cloned())
    }

    async fn patch_status(
        &self,
        key: &Key,
        status: &ManagedOSVersionChannelStatus,
    ) -> Result<bool, kube::Error> {
        let mut world = self.world();
        world.call("patch_status", &key.name)?;
        let rv = world.next();
        let Some(channel) = world.channels.get_mut(key) else {
            return Err(status_error(404));
        };
        channel.status = Some(status.clone());
        channel.metadata.resource_version = Some(rv);
        Ok(!world.caches_lag)
    }

    async fn create_event(&self, _ns: &str, event: &Event) -> Result<Option<String>, kube::Error> {
        self.world().create_event(event)
    }

    async fn patch_event_series(
        &self,
        _namespace: &str,
        name: &str,
        uid: Option<&str>,
        series: EventSeries,
    ) -> Result<(), kube::Error> {
        self.world().patch_event_series(name, uid, series)
    }

    async fn patch_channel(&self, key: &Key, patch: &serde_json::Value) -> Result<(), kube::Error> {
        let mut world = self.world();
        world.call("patch_channel", &key.name)?;
        let rv = world.next();
        let Some(channel) = world.channels.get_mut(key) else {
            return Err(status_error(404));
        };
        *channel = merged(channel, patch, rv)?;
        Ok(())
    }
}

impl ObjectIo for FakeIo {
    async fn read_meta(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ObjectMeta>, kube::Error> {
        self.world().read_meta(kind, &key_of(namespace, name))
    }

    async fn delete_object(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), kube::Error> {
        self.world()
            .delete_object(kind, &key_of(namespace, name), uid)
    }

    async fn apply_config_map(&self, namespace: &str, map: &ConfigMap) -> Result<(), kube::Error> {
        self.world()
            .apply_config_map(&key_of(namespace, &map.name_any()), map)
    }
}

impl SourceIo for FakeIo {
    async fn fetch(
        &self,
        options: &JsonOptions,
        validators: &Validators,
        _max: u64,
        hold: &mut crate::budget::Hold,
    ) -> Response {
        let response = {
            let mut world = self.world();
            world.calls.push(format!("fetch {}", options.uri));
            match &world.source {
                Some(source) => source(validators),
                None => Response::Failed("no source".into()),
            }
        };
        if let Response::Body { data, .. } = &response {
            let _ = hold.grow(data.len()).await;
        }
        response
    }

    async fn pull(
        &self,
        _namespace: &str,
        options: &OciOptions,
        known: &Validators,
        _max: u64,
        _hold: &mut crate::budget::Hold,
    ) -> Response {
        let mut world = self.world();
        world.calls.push(format!("pull {}", options.image));
        match &world.source {
            Some(source) => source(known),
            None => Response::Failed("no source".into()),
        }
    }
}
