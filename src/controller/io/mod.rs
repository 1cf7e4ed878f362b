//! The I/O boundary: everything a reconciliation does to the world, as one trait per thing it
//! serves (pods, versions, the channel and its Events, owned objects, sources), and the API
//! errors with their classes (`errors`). The
//! controller runs over [`KubeIo`](crate::controller::cluster::KubeIo) (the API server, the watch
//! caches, the HTTP client); the reconcile tests run over an in-memory fake in
//! milliseconds. What the API server alone can tell (dry runs, admission, quotas, watches,
//! pods that run) stays with the cluster tests.
//!
//! Methods return the raw `kube::Error`: classifying it, and what a failure means for the
//! sync, is the pipeline's business, the same for every implementation.

pub(super) mod errors;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{ManagedOSVersion, ManagedOSVersionChannel, ManagedOSVersionChannelStatus};
use crate::budget::Hold;
use crate::config::{JsonOptions, OciOptions};
use crate::controller::Error;
use crate::controller::Key;
use crate::fetch::{Response, Validators};
use crate::syncer::Effect;
use crate::syncer::drift::Known;

/// A version the writes of a sync left behind: its name and the resourceVersion the
/// write returned (`None`: deleted). The cache is awaited for these, and remembers them
/// (`syncer::drift`).
pub type Written = (String, Option<String>);

/// The kinds of object the operator writes besides versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pod,
    ConfigMap,
}

impl Kind {
    /// As messages name it.
    pub fn shown(self) -> &'static str {
        match self {
            Kind::Pod => "pod",
            Kind::ConfigMap => "ConfigMap",
        }
    }

    /// The `operation` label of `writes_total` for its delete.
    pub fn delete_label(self) -> &'static str {
        match self {
            Kind::Pod => "delete_pod",
            Kind::ConfigMap => "delete_configmap",
        }
    }
}

/// The syncer pods: reading, creating and waiting for them, their logs, and the sync slots they hold.
pub trait PodIo: Send + Sync + 'static {
    /// Channels observed syncing: their syncer pod runs and a live channel controls it.
    fn running_syncs(&self) -> HashSet<Key>;

    /// Wakes the channel's reconciliation (its turn for a sync slot has come).
    fn wake(&self, key: Key);

    /// The pod named after the channel, whoever controls it: from the cache, or from the
    /// API server when `fresh` (or no cache covers the namespace).
    fn pod(
        &self,
        key: &Key,
        fresh: bool,
    ) -> impl Future<Output = Result<Option<Arc<Pod>>, kube::Error>> + Send;

    /// The `display` container's log, capped at `max_output_bytes` plus the frame; its
    /// bytes take room in `hold` as they arrive.
    fn display_log(
        &self,
        key: &Key,
        max_output_bytes: u64,
        hold: &mut Hold,
    ) -> impl Future<Output = Result<Vec<u8>, Error>> + Send;

    /// The end of the `runner` container's log, or why it could not be read.
    fn runner_tail(&self, key: &Key) -> impl Future<Output = String> + Send;

    fn create_pod(
        &self,
        namespace: &str,
        pod: &Pod,
    ) -> impl Future<Output = Result<Pod, kube::Error>> + Send;

    /// Waits until the pod cache shows a created pod (`created`: its uid) and the deleted
    /// ones (`deleted`); whether it did in time.
    fn pod_cache_shows(
        &self,
        key: &Key,
        created: Option<&str>,
        deleted: &[String],
    ) -> impl Future<Output = bool> + Send;
}

/// The versions: the cache and fresh reads, the all-or-nothing writes of a sync, and the finalizer's patches.
pub trait VersionIo: Send + Sync + 'static {
    /// The versions of a channel's sync in its namespace: those it controls or that carry
    /// its name (`version_index::relevant`); more is harmless. With them, the
    /// resourceVersions the operator remembers writing or verifying them at (`syncer::drift`).
    fn versions(
        &self,
        namespace: &str,
        channel: &ManagedOSVersionChannel,
    ) -> impl Future<Output = Result<(Vec<Arc<ManagedOSVersion>>, Known), kube::Error>> + Send;

    /// Remembers versions read in full and found as a sync wants them (name,
    /// resourceVersion): not read again while they stay so (`syncer::drift`).
    fn remember_verified(&self, namespace: &str, verified: &[(String, String)]);

    /// The versions of these names in a namespace, whoever controls them: those a sync
    /// would create, to tell a conflict or an adoption.
    fn versions_named(
        &self,
        namespace: &str,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<Arc<ManagedOSVersion>>, kube::Error>> + Send;

    /// The version writes among `effects`, all or nothing (`super::writes`: dry runs of the
    /// writes to existing versions first, undone on a later refusal); waits until the cache
    /// shows them.
    fn write_versions(
        &self,
        namespace: &str,
        effects: &[Effect],
    ) -> impl Future<Output = Result<Vec<Written>, Error>> + Send;

    /// One page of the metadata of the versions labelled as the channel's, read fresh from
    /// the API server (not the cache: a version created a moment ago must not be missed),
    /// and the token of the next page. Metadata only and paged: a namespace's versions can
    /// be many and large, and the finalizer needs only who owns them.
    fn labelled_versions(
        &self,
        key: &Key,
        continue_token: Option<String>,
    ) -> impl Future<Output = Result<(Vec<ObjectMeta>, Option<String>), kube::Error>> + Send;

    /// One version, read fresh.
    fn read_version(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ManagedOSVersion>, kube::Error>> + Send;

    /// A merge patch of one version by the Orphan finalizer (the patch carries its uid and
    /// resourceVersion as preconditions), through the one writer of versions like every
    /// version write (`super::writer`).
    fn patch_version(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// The channel itself: fresh reads, its status and finalizers, and its Events.
pub trait StatusIo: Send + Sync + 'static {
    /// The channel as the API server has it now (after a cache wait gave up).
    fn read_channel(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Option<ManagedOSVersionChannel>, kube::Error>> + Send;

    /// Writes the channel's status and waits until the cache shows it; whether it did.
    fn patch_status(
        &self,
        key: &Key,
        status: &ManagedOSVersionChannelStatus,
    ) -> impl Future<Output = Result<bool, kube::Error>> + Send;

    /// Creates the Event; the uid the API server gave it.
    fn create_event(
        &self,
        namespace: &str,
        event: &Event,
    ) -> impl Future<Output = Result<Option<String>, kube::Error>> + Send;

    /// Adds to the series of an Event published before, with its uid as a precondition:
    /// one of that name made by someone else since (it expired) is refused (409).
    fn patch_event_series(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        series: EventSeries,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;

    /// A merge patch of the channel itself (its finalizers; the patch carries its
    /// resourceVersion as a precondition).
    fn patch_channel(
        &self,
        key: &Key,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// Objects a channel owns besides versions and pods' creation (only `objects::owned` calls it).
pub trait ObjectIo: Send + Sync + 'static {
    /// The metadata of the object of `kind` named `name`, read fresh from the API server
    /// (`super::owned` reads before it changes anything).
    fn read_meta(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ObjectMeta>, kube::Error>> + Send;

    /// Deletes exactly the object with this uid (a uid precondition: 409 for another).
    /// Only `super::owned` calls it.
    fn delete_object(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;

    /// Server-side apply of a ConfigMap, whose metadata carries the precondition (its uid,
    /// or the create-only resourceVersion). Only `super::owned` calls it.
    fn apply_config_map(
        &self,
        namespace: &str,
        map: &ConfigMap,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// json fetches and oci pulls.
pub trait SourceIo: Send + Sync + 'static {
    /// A json channel's fetch, conditional on `validators`, capped at `max_bytes`; the
    /// body takes room in `hold` as it arrives.
    fn fetch(
        &self,
        options: &JsonOptions,
        validators: &Validators,
        max_bytes: u64,
        hold: &mut Hold,
    ) -> impl Future<Output = Response> + Send;

    /// An oci channel's pull (with the Secrets its options name, read in `namespace`);
    /// `known`: the revision of the data kept from before (unchanged: `NotModified`).
    fn pull(
        &self,
        namespace: &str,
        options: &OciOptions,
        known: &Validators,
        max_bytes: u64,
        hold: &mut Hold,
    ) -> impl Future<Output = Response> + Send;
}

/// All of the I/O a reconciliation does; what implements every part implements it.
pub trait ChannelIo: PodIo + VersionIo + StatusIo + ObjectIo + SourceIo {}

impl<T: PodIo + VersionIo + StatusIo + ObjectIo + SourceIo> ChannelIo for T {}
