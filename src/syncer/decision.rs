//! What the decision core reads (`Observation`) and what it says (`Decision`).

use super::*;

/// What a json channel's fetch (or an oci channel's pull) brought back.
#[derive(Clone, Debug, PartialEq)]
pub enum Fetched {
    Body {
        data: std::sync::Arc<[u8]>,
        /// What the source sent to validate the body with (a conditional request's
        /// `If-None-Match`/`If-Modified-Since` next time).
        validators: crate::fetch::Validators,
        /// The server answered 304 and `data` is the body it confirmed: still compared
        /// with the versions, so that drift is repaired.
        not_modified: bool,
        /// An oci image's changelogs, when its data was read now (`None`: not an image,
        /// or the data kept from before).
        changelogs: Option<Arc<crate::channel::changelogs::Changelogs>>,
    },
    Failed(String),
    /// `spec.verify` refused the image: nothing of it is used.
    Unverified(String),
}

/// Everything observed of one channel. Optional parts are filled in when asked for.
pub struct Observation<'a> {
    pub channel: &'a ManagedOSVersionChannel,
    /// The pod named after the channel, whoever controls it.
    pub pod: Option<&'a Pod>,
    /// The `display` container's log, read with a cap of `max_output_bytes` plus the frame.
    pub display_log: Option<&'a [u8]>,
    /// The tail of the `runner` container's log.
    pub runner_log: Option<&'a str>,
    pub fetched: Option<&'a Fetched>,
    /// Every `ManagedOSVersion` in the channel's namespace (shared with the watch cache).
    pub versions: Option<&'a [Arc<ManagedOSVersion>]>,
    /// Why creating the syncer pod this decision asked for failed, when it did.
    pub pod_create_error: Option<&'a SyncFailure>,
    /// A failure the I/O layer met while observing or performing (an API error, a write
    /// the API server refused): the attempt failed, and says why.
    pub error: Option<&'a SyncFailure>,
    /// No sync slot is free (`max_concurrent_syncs` run): a due sync waits its turn.
    pub queued: bool,
    pub now: Timestamp,
}

impl<'a> Observation<'a> {
    /// The channel alone, seen at `now`: the first look, before anything was asked for.
    /// Callers fill in what they have with `..Observation::new(channel, now)`.
    pub fn new(channel: &'a ManagedOSVersionChannel, now: Timestamp) -> Self {
        Observation {
            channel,
            pod: None,
            display_log: None,
            runner_log: None,
            fetched: None,
            versions: None,
            pod_create_error: None,
            error: None,
            queued: false,
            now,
        }
    }
}

/// What must be observed before a decision can be made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Needs {
    pub display_log: bool,
    pub runner_log: bool,
    pub versions: bool,
    pub fetch: Option<JsonOptions>,
    /// An oci channel's pull (its answer is `Observation::fetched` too).
    pub pull: Option<crate::config::OciOptions>,
}

impl Needs {
    pub fn any(&self) -> bool {
        self.display_log
            || self.runner_log
            || self.versions
            || self.fetch.is_some()
            || self.pull.is_some()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    CreatePod(Box<Pod>),
    DeletePod {
        name: String,
        uid: String,
    },
    /// The whole version: server-side apply of it over `replaces`, the version it updates
    /// as the sync read it (`want` carries its uid, a precondition); a create where that
    /// is `None`.
    ApplyVersion {
        want: Box<ManagedOSVersion>,
        replaces: Option<Arc<ManagedOSVersion>>,
    },
    /// Set or remove the no-longer-in-sync annotation of the version with this uid.
    MarkVersion {
        name: String,
        uid: String,
        no_longer_in_sync: bool,
    },
    /// Store (`Some`) or empty (`None`) the channel's changelogs, in the ConfigMap `name`
    /// (an oci image's `/changelog/*.updates.log`, read with its data).
    Changelogs {
        name: String,
        files: Option<Arc<crate::channel::changelogs::Changelogs>>,
    },
    /// Delete the version with this uid; `before`: the version as the sync read it.
    DeleteVersion {
        name: String,
        uid: String,
        before: Arc<ManagedOSVersion>,
    },
}

impl Effect {
    pub fn describe(&self) -> String {
        match self {
            Effect::CreatePod(p) => format!("create pod {}", p.name_any()),
            Effect::DeletePod { name, .. } => format!("delete pod {name}"),
            Effect::ApplyVersion { want, .. } => format!("apply version {}", want.name_any()),
            Effect::MarkVersion {
                name,
                no_longer_in_sync: true,
                ..
            } => format!("flag version {name}"),
            Effect::MarkVersion { name, .. } => format!("unflag version {name}"),
            Effect::DeleteVersion { name, .. } => format!("delete version {name}"),
            Effect::Changelogs {
                name,
                files: Some(f),
            } => format!("store {} changelogs in configmap {name}", f.files.len()),
            Effect::Changelogs { name, .. } => format!("empty configmap {name}"),
        }
    }
}

/// A Kubernetes Event to publish on the channel.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// How a sync ended, for metrics.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Synchronized,
    Failed(SyncFailure),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// When set, nothing else is: observe these, then decide again.
    pub needs: Needs,
    /// Performed in order: the version writes all or none (see `controller`), then the
    /// rest.
    pub effects: Vec<Effect>,
    /// The new status, when it differs from the current one.
    pub status: Option<ManagedOSVersionChannelStatus>,
    pub events: Vec<Note>,
    /// Look again after this long (also when nothing changes); `None`: on the next change.
    pub requeue: Option<Duration>,
    pub outcome: Option<Outcome>,
    /// Versions read in full and found as the sync wants them (name, resourceVersion): the
    /// operator need not read them again while they stay at that resourceVersion.
    pub verified: Vec<(String, String)>,
    /// A successful sync of a channel with `spec.serve: true`: the versions it publishes,
    /// as written, for the channel server (`channel_server`).
    pub published: Option<Vec<ManagedOSVersion>>,
}

impl Decision {
    /// The syncer pod this decision creates, if it creates one.
    pub fn pod_to_create(&self) -> Option<&Pod> {
        self.effects.iter().find_map(|e| match e {
            Effect::CreatePod(pod) => Some(&**pod),
            _ => None,
        })
    }
}
