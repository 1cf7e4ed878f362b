//! The decision core. [`decide`] looks at what was observed of one channel (its spec and
//! status, its syncer pod, the pod's logs, the versions in its namespace, the time) and
//! says what to do: which pod to create or delete, which versions to write, which status
//! and events to publish, and when to look again. It performs no I/O; `controller` does
//! what it says. When it needs to see more (a log, the versions) it says so in
//! [`Decision::needs`] and is asked again with that filled in.

pub mod orphan;
pub mod pod;
mod status;
pub mod versions;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::{
    ManagedOSVersion, ManagedOSVersionChannel, ManagedOSVersionChannelStatus, READY, RECONCILING,
    STALLED, SYNC_REQUESTED_AT_ANNOTATION, reason,
};
use crate::channel;
use crate::config::{self, ChannelConfig, CustomOptions, JsonOptions, Source};
use crate::display::{self, Output};
use crate::duration;
use crate::failure::{RunnerOutput, SyncFailure};
use crate::text;
use pod::Progress;
use status::Truth;

/// After this many consecutive failures the channel waits for its interval.
pub const MAX_QUICK_RETRIES: i64 = 4;
/// How often to look again while the display log is still being written, or a pod of the
/// channel is still terminating.
const POLL: Duration = Duration::from_secs(1);
/// How often a queued sync looks for a free slot, should its wake-up be missed (it is
/// woken when its turn comes; a look costs no API request).
const QUEUE_POLL: Duration = Duration::from_secs(30);
/// The most of a runner's log a status message carries.
const TAIL_BYTES: usize = 600;

/// Operator-wide settings the decisions depend on.
#[derive(Clone, Debug)]
pub struct Settings {
    pub operator_image: String,
    pub sync_timeout: Duration,
    pub max_output_bytes: u64,
    /// First delay of the exponential backoff after a failed sync.
    pub retry_delay: Duration,
    /// At most this many syncs (syncer pods and json fetches) run at once.
    pub max_concurrent_syncs: usize,
    /// The most bytes of json bodies kept for conditional requests, all channels together.
    pub json_cache_bytes: usize,
    /// The most versions one channel may list (`--max-versions-per-channel`).
    pub max_versions_per_channel: usize,
    /// Secrets added to every syncer pod's `imagePullSecrets` (the operator image's).
    pub syncer_image_pull_secrets: Vec<String>,
    /// The longest `options.timeout` a channel may ask (`--max-sync-timeout`).
    pub max_sync_timeout: Duration,
    /// The shortest `syncInterval` a channel may ask (`--min-sync-interval`).
    pub min_sync_interval: Duration,
    /// Runner security contexts that grant more than a restricted container are accepted
    /// (`--allow-privileged-runners`).
    pub allow_privileged_runners: bool,
}

/// The operator's defaults (its flags' defaults), with no operator image.
impl Default for Settings {
    fn default() -> Self {
        let limits = config::Limits::default();
        Settings {
            operator_image: String::new(),
            sync_timeout: Duration::from_secs(300),
            max_output_bytes: 16 << 20,
            retry_delay: Duration::from_secs(10),
            max_concurrent_syncs: 10,
            json_cache_bytes: 16 << 20,
            max_versions_per_channel: 10_000,
            syncer_image_pull_secrets: Vec::new(),
            max_sync_timeout: limits.max_sync_timeout,
            min_sync_interval: limits.min_sync_interval,
            allow_privileged_runners: limits.allow_privileged_runners,
        }
    }
}

impl Settings {
    /// What these settings allow a channel's spec.
    pub fn limits(&self) -> config::Limits {
        config::Limits {
            max_sync_timeout: self.max_sync_timeout,
            min_sync_interval: self.min_sync_interval,
            allow_privileged_runners: self.allow_privileged_runners,
        }
    }

    /// The configuration of a channel's spec under these settings (see `config::resolve`).
    pub fn resolve(
        &self,
        spec: &crate::api::ManagedOSVersionChannelSpec,
    ) -> Result<ChannelConfig, String> {
        config::resolve(spec, &self.limits())
    }

    /// A channel's sync interval, or the default one when its spec is invalid.
    pub fn sync_interval(&self, spec: &crate::api::ManagedOSVersionChannelSpec) -> Duration {
        self.resolve(spec).map_or_else(
            |_| self.limits().default_sync_interval(),
            |c| c.sync_interval,
        )
    }

    /// How long one sync of these options may take: the channel's `options.timeout`, else
    /// `--sync-timeout`; never more than a year, whatever the settings.
    pub fn sync_timeout_of(&self, options: &CustomOptions) -> Duration {
        options
            .timeout
            .unwrap_or(self.sync_timeout)
            .min(config::MAX_DURATION)
    }
}

/// What a json channel's fetch brought back.
#[derive(Clone, Debug, PartialEq)]
pub enum Fetched {
    Body {
        data: std::sync::Arc<[u8]>,
        etag: Option<String>,
        last_modified: Option<String>,
        /// The server answered 304 and `data` is the body it confirmed: still compared
        /// with the versions, so that drift is repaired.
        not_modified: bool,
    },
    Failed(String),
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

/// What must be observed before a decision can be made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Needs {
    pub display_log: bool,
    pub runner_log: bool,
    pub versions: bool,
    pub fetch: Option<JsonOptions>,
}

impl Needs {
    pub fn any(&self) -> bool {
        self.display_log || self.runner_log || self.versions || self.fetch.is_some()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    CreatePod(Box<Pod>),
    DeletePod {
        name: String,
        uid: String,
    },
    /// Server-side apply of the whole version; it carries the uid of the version it
    /// updates (a precondition), none when it creates one.
    ApplyVersion(Box<ManagedOSVersion>),
    /// Set or remove the no-longer-in-sync annotation of the version with this uid.
    MarkVersion {
        name: String,
        uid: String,
        no_longer_in_sync: bool,
    },
    DeleteVersion {
        name: String,
        uid: String,
    },
}

impl Effect {
    pub fn describe(&self) -> String {
        match self {
            Effect::CreatePod(p) => format!("create pod {}", p.name_any()),
            Effect::DeletePod { name, .. } => format!("delete pod {name}"),
            Effect::ApplyVersion(v) => format!("apply version {}", v.name_any()),
            Effect::MarkVersion {
                name,
                no_longer_in_sync: true,
                ..
            } => format!("flag version {name}"),
            Effect::MarkVersion { name, .. } => format!("unflag version {name}"),
            Effect::DeleteVersion { name, .. } => format!("delete version {name}"),
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
}

/// The decision for one channel.
pub fn decide(obs: &Observation, settings: &Settings) -> Decision {
    let d = Decider {
        obs,
        settings,
        ch: obs.channel,
        status: obs.channel.status.clone().unwrap_or_default(),
        generation: obs.channel.metadata.generation.unwrap_or_default(),
    };
    let mut decision = d.decide();
    if decision.status.as_ref() == obs.channel.status.as_ref() {
        decision.status = None;
    }
    decision
}

struct Decider<'a> {
    obs: &'a Observation<'a>,
    settings: &'a Settings,
    ch: &'a ManagedOSVersionChannel,
    status: ManagedOSVersionChannelStatus,
    generation: i64,
}

fn needs(n: Needs) -> Decision {
    Decision {
        needs: n,
        ..Default::default()
    }
}

fn after(d: Duration) -> Decision {
    Decision {
        requeue: Some(d),
        ..Default::default()
    }
}

impl Decider<'_> {
    fn decide(&self) -> Decision {
        if self.ch.metadata.deletion_timestamp.is_some() {
            // Owner references take the pod and the versions with the channel.
            return Decision::default();
        }
        let our_pod = self
            .obs
            .pod
            .filter(|p| versions::controlled_by(&p.metadata, self.ch));
        // A pause comes first: no sync, no pod, no version touched, whatever else holds.
        if self.ch.spec.suspend == Some(true) {
            return self.suspended(our_pod);
        }
        let resolved = self.settings.resolve(&self.ch.spec);
        let interval = resolved.as_ref().map_or_else(
            |_| self.settings.limits().default_sync_interval(),
            |c| c.sync_interval,
        );
        if let Some(error) = self.obs.error {
            let pod = our_pod.filter(|p| p.metadata.deletion_timestamp.is_none());
            return self.failure(error.clone(), interval, pod);
        }
        // After a failed attempt (an API error on a disabled or invalid channel too), wait
        // out the backoff before trying again: no path retries in a tight loop.
        if let Some(wait) = self.backing_off(interval) {
            return after(wait);
        }
        if !config::enabled(&self.ch.spec) {
            return self.disabled(our_pod);
        }
        let config = match resolved {
            Ok(c) => c,
            Err(message) => return self.invalid(our_pod, message),
        };
        // Only custom channels use a pod; any other pod of that name is not their business.
        let custom = matches!(config.source, Source::Custom(_));
        match (self.obs.pod, our_pod) {
            (Some(pod), Some(_)) if pod.metadata.deletion_timestamp.is_none() => {
                self.with_pod(pod, &config)
            }
            (Some(pod), None) if custom && self.sync_due(&config).is_zero() => self.failure(
                SyncFailure::ForeignPod {
                    pod: pod.name_any(),
                    namespace: self.ch.namespace().unwrap_or_default(),
                },
                config.sync_interval,
                None,
            ),
            (Some(_), _) if custom => {
                // Ours and terminating, or someone else's while no sync is due: wait.
                let due = self.sync_due(&config);
                after(if due.is_zero() { POLL } else { due })
            }
            _ => self.without_pod(&config),
        }
    }

    fn timestamp(&self) -> Time {
        Time(self.obs.now)
    }

    /// The current status with `Ready` set (kept as it is when `None`), `Reconciling` True
    /// with the message given (else left out), `Stalled` True with the reason and message
    /// given (else left out), for this generation.
    fn status_with(
        &self,
        ready: Option<(Truth, &str, String)>,
        reconciling: Option<String>,
        stalled: Option<(&str, String)>,
    ) -> ManagedOSVersionChannelStatus {
        let mut s = self.status.clone();
        s.observed_generation = Some(self.generation);
        let now = self.timestamp();
        let generation = self.generation;
        if let Some((truth, reason, message)) = ready {
            status::set(
                &mut s.conditions,
                READY,
                truth,
                reason,
                message,
                generation,
                &now,
            );
        }
        match reconciling {
            Some(m) => status::set(
                &mut s.conditions,
                RECONCILING,
                Truth::True,
                reason::SYNCHRONIZING,
                m,
                generation,
                &now,
            ),
            None => status::clear(&mut s.conditions, RECONCILING),
        }
        match stalled {
            Some((r, m)) => status::set(
                &mut s.conditions,
                STALLED,
                Truth::True,
                r,
                m,
                generation,
                &now,
            ),
            None => status::clear(&mut s.conditions, STALLED),
        }
        s
    }

    /// `Ready` while a sync runs: kept during a routine resync, `Unknown` on a first sync
    /// and after a spec change (its last outcome says nothing of this spec).
    fn ready_while_syncing(&self) -> Option<(Truth, &'static str, String)> {
        // An invalid spec that the operator now accepts (its flags changed) has no outcome
        // to keep either.
        let routine = self.ready_condition().is_some_and(|r| {
            r.observed_generation == Some(self.generation)
                && r.reason != reason::SYNCHRONIZING
                && r.reason != reason::INVALID_CONFIGURATION
        });
        (!routine).then(|| {
            (
                Truth::Unknown,
                reason::SYNCHRONIZING,
                "the first sync of this spec is under way".to_string(),
            )
        })
    }

    fn ready_condition(&self) -> Option<&Condition> {
        self.status.condition(READY)
    }

    /// Whether a sync is under way (started, or queued for a slot).
    fn syncing(&self) -> bool {
        self.status.sync_under_way().is_some()
    }

    /// Whether the status already says this, for this generation.
    fn already(&self, reason: &str) -> bool {
        self.ready_condition()
            .is_some_and(|c| c.reason == reason && c.observed_generation == Some(self.generation))
    }

    fn requested_at(&self) -> Option<String> {
        self.ch
            .annotations()
            .get(SYNC_REQUESTED_AT_ANNOTATION)
            .cloned()
    }

    fn delete_pod(pod: &Pod) -> Effect {
        Effect::DeletePod {
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
        }
    }

    /// `spec.suspend`: a pause. The sync under way stops (its pod goes); versions are left
    /// as they are; `Ready` keeps the last outcome under the reason `Suspended`.
    fn suspended(&self, our_pod: Option<&Pod>) -> Decision {
        let effects: Vec<Effect> = our_pod.map(Self::delete_pod).into_iter().collect();
        if self.already(reason::SUSPENDED) {
            return Decision {
                effects,
                ..Default::default()
            };
        }
        let (truth, message) = match self.ready_condition() {
            Some(r) if r.reason == reason::SUSPENDED => (truth_of(&r.status), r.message.clone()),
            Some(r) => (
                // A sync cut short by the pause says nothing: its outcome is unknown.
                if r.reason == reason::SYNCHRONIZING {
                    Truth::Unknown
                } else {
                    truth_of(&r.status)
                },
                format!(
                    "suspended (spec.suspend is true): no syncs until it is false; the last outcome: {}: {}",
                    r.reason, r.message
                ),
            ),
            None => (
                Truth::Unknown,
                "suspended (spec.suspend is true): no syncs until it is false; no sync has run yet"
                    .into(),
            ),
        };
        let mut status = self.status_with(Some((truth, reason::SUSPENDED, message)), None, None);
        status.next_sync_time = None;
        Decision {
            effects,
            status: Some(status),
            events: vec![Note {
                warning: false,
                reason: reason::SUSPENDED,
                message: "channel suspended: no syncs, versions are left as they are".into(),
            }],
            ..Default::default()
        }
    }

    fn disabled(&self, our_pod: Option<&Pod>) -> Decision {
        let mut effects: Vec<Effect> = our_pod.map(Self::delete_pod).into_iter().collect();
        if self.already(reason::CHANNEL_DISABLED) {
            return Decision {
                effects,
                ..Default::default()
            };
        }
        let Some(existing) = self.obs.versions else {
            return needs(Needs {
                versions: true,
                ..Default::default()
            });
        };
        let delete = self
            .ch
            .spec
            .delete_no_longer_in_sync_versions
            .unwrap_or(false);
        // Nothing is listed, so there is nothing to conflict with.
        let plan = versions::plan(self.ch, None, existing, delete).unwrap_or_default();
        let summary = plan.summary();
        effects.extend(plan.effects);
        let ready = (
            Truth::True,
            reason::CHANNEL_DISABLED,
            "syncing is disabled (spec.enabled is false)".into(),
        );
        let mut status = self.status_with(Some(ready), None, None);
        status.next_sync_time = None;
        Decision {
            effects,
            status: Some(status),
            events: vec![Note {
                warning: false,
                reason: reason::CHANNEL_DISABLED,
                message: format!("channel disabled; versions: {summary}"),
            }],
            ..Default::default()
        }
    }

    fn invalid(&self, our_pod: Option<&Pod>, message: String) -> Decision {
        let effects: Vec<Effect> = our_pod.map(Self::delete_pod).into_iter().collect();
        let ready = (Truth::False, reason::INVALID_CONFIGURATION, message.clone());
        let stalled = (reason::INVALID_CONFIGURATION, message.clone());
        let mut status = self.status_with(Some(ready), None, Some(stalled));
        status.next_sync_time = None;
        let events = if self.already(reason::INVALID_CONFIGURATION) {
            vec![]
        } else {
            vec![Note {
                warning: true,
                reason: reason::INVALID_CONFIGURATION,
                message,
            }]
        };
        Decision {
            effects,
            status: Some(status),
            events,
            ..Default::default()
        }
    }

    /// The rest of the backoff after a failed attempt of this generation, if it is not over.
    fn backing_off(&self, interval: Duration) -> Option<Duration> {
        let ready = self.ready_condition()?;
        // A sync under way (Ready keeps the failure while it runs) goes on.
        if self.status.failed_synchronization_attempts == 0
            || self.syncing()
            || ready.observed_generation != Some(self.generation)
            || !matches!(
                ready.reason.as_str(),
                reason::FAILED_TO_SYNC | reason::FAILED_TO_CREATE_POD
            )
            || self.on_demand()
        {
            return None;
        }
        let Time(last) = self.status.last_sync_attempt_time.as_ref()?;
        let rest = self.retry_wait(interval).saturating_sub(self.since(last));
        (!rest.is_zero()).then_some(rest)
    }

    /// Time since `t` (zero if `t` is in the future).
    fn since(&self, t: &Timestamp) -> Duration {
        Duration::try_from(self.obs.now.duration_since(*t)).unwrap_or_default()
    }

    /// Whether the sync-requested-at annotation asks for a sync not acted on yet.
    fn on_demand(&self) -> bool {
        self.requested_at().is_some() && self.requested_at() != self.status.sync_requested_at
    }

    /// How long until the next sync is due (zero: now).
    fn sync_due(&self, config: &ChannelConfig) -> Duration {
        let Some(ready) = self.ready_condition() else {
            return Duration::ZERO;
        };
        if ready.observed_generation != Some(self.generation)
            || ready.reason == reason::SYNCHRONIZING
            || self.syncing()
            || self.on_demand()
        {
            return Duration::ZERO;
        }
        let Some(Time(last)) = &self.status.last_sync_attempt_time else {
            return Duration::ZERO;
        };
        self.retry_wait(config.sync_interval)
            .saturating_sub(self.since(last))
    }

    /// The wait after the last attempt: backoff while failing, else the interval.
    fn retry_wait(&self, interval: Duration) -> Duration {
        let failures = self.status.failed_synchronization_attempts;
        if (1..MAX_QUICK_RETRIES).contains(&failures) {
            let doublings = u32::try_from(failures.saturating_sub(1))
                .unwrap_or(16)
                .min(16);
            let backoff = self.settings.retry_delay.saturating_mul(1_u32 << doublings);
            backoff.min(interval)
        } else {
            interval
        }
    }

    /// A sync begins (its pod is created, or it waits for a slot): `Reconciling` says so.
    fn sync_begins(&self, what: String) -> ManagedOSVersionChannelStatus {
        let mut status = self.status_with(self.ready_while_syncing(), Some(what), None);
        status.sync_requested_at = self.requested_at().or(status.sync_requested_at);
        status
    }

    fn without_pod(&self, config: &ChannelConfig) -> Decision {
        let due = self.sync_due(config);
        if !due.is_zero() {
            return after(due);
        }
        if self.obs.queued {
            return self.queued();
        }
        match &config.source {
            Source::Custom(options) => {
                if let Some(error) = self.obs.pod_create_error {
                    return self.failure(error.clone(), config.sync_interval, None);
                }
                let timeout = self.settings.sync_timeout_of(options);
                let pod = pod::build(self.ch, options, self.settings, timeout);
                let status = self.sync_begins(format!("syncer pod {} started", pod.name_any()));
                Decision {
                    effects: vec![Effect::CreatePod(Box::new(pod))],
                    status: Some(status),
                    requeue: Some(timeout),
                    ..Default::default()
                }
            }
            Source::Json(options) => self.json_sync(config, options),
        }
    }

    /// A due sync waiting for a free slot: says so once; it is woken when its turn comes
    /// (and looks again now and then, should a wake-up be missed).
    fn queued(&self) -> Decision {
        let status = self.sync_begins(format!(
            "queued: waiting for a free sync slot (at most {} syncs run at once, --max-concurrent-syncs)",
            self.settings.max_concurrent_syncs
        ));
        Decision {
            status: Some(status),
            requeue: Some(QUEUE_POLL),
            ..Default::default()
        }
    }

    fn json_sync(&self, config: &ChannelConfig, options: &JsonOptions) -> Decision {
        let (Some(fetched), Some(_)) = (self.obs.fetched, self.obs.versions) else {
            return needs(Needs {
                fetch: Some(options.clone()),
                versions: true,
                ..Default::default()
            });
        };
        match fetched {
            Fetched::Failed(message) => self.failure(
                SyncFailure::Fetch(message.clone()),
                config.sync_interval,
                None,
            ),
            Fetched::Body {
                data,
                etag,
                last_modified,
                not_modified,
            } => {
                let revision = etag.clone().or_else(|| last_modified.clone());
                // The body is the source's, not the tenant's: no byte of it in a message.
                let mut d = self.apply_data(data, config, None, revision, Redact::Values);
                if *not_modified
                    && d.outcome == Some(Outcome::Synchronized)
                    && let Some(status) = d.status.as_mut()
                    && let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == READY)
                {
                    c.message.push_str(" (the source answered: not modified)");
                }
                d
            }
        }
    }

    /// Whether what the runner printed stays out of the status and Events: a runner that can
    /// read a Secret could print it there for anyone who may read the channel.
    fn withholds_output(options: &CustomOptions) -> bool {
        options.references_secrets()
    }

    fn with_pod(&self, pod: &Pod, config: &ChannelConfig) -> Decision {
        let Source::Custom(options) = &config.source else {
            return Decision {
                effects: vec![Self::delete_pod(pod)],
                requeue: Some(POLL),
                ..Default::default()
            };
        };
        if let Some(why) = pod::stale_reason(pod, self.ch, &self.settings.operator_image) {
            tracing::info!(pod = %pod.name_any(), "replacing the syncer pod: {why}");
            return Decision {
                effects: vec![Self::delete_pod(pod)],
                requeue: Some(POLL),
                ..Default::default()
            };
        }
        let progress = pod::progress(pod);
        if self.reported(pod, &progress) {
            // Kept after its failure so that its log can be read: it goes when the next
            // sync is due.
            let due = self.sync_due(config);
            return if due.is_zero() {
                Decision {
                    effects: vec![Self::delete_pod(pod)],
                    requeue: Some(POLL),
                    ..Default::default()
                }
            } else {
                after(due)
            };
        }
        let timeout = self.settings.sync_timeout_of(options);
        let age = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|Time(t)| self.since(t))
            .unwrap_or_default();
        let interval = config.sync_interval;
        let timed_out = |detail: String| {
            self.failure(
                SyncFailure::TimedOut {
                    after: timeout,
                    detail,
                },
                interval,
                Some(pod),
            )
        };
        let withheld = Self::withholds_output(options);
        let redact = if withheld {
            Redact::Values
        } else {
            Redact::Nothing
        };
        let left = timeout.saturating_sub(age);
        match progress {
            Progress::Working if left.is_zero() => timed_out(pod::waiting_summary(pod)),
            Progress::Working => after(left),
            Progress::RunnerFailed { exit_code, reason } if withheld => {
                let mut failed = self.failure(
                    SyncFailure::RunnerFailed {
                        exit_code,
                        reason,
                        output: RunnerOutput::Withheld {
                            pod: pod.name_any(),
                        },
                    },
                    interval,
                    // The attempt had this pod: a request made while it ran is not served.
                    Some(pod),
                );
                // Kept, so that its log can be read (it goes when the next sync is due).
                failed.effects.clear();
                failed
            }
            Progress::RunnerFailed { exit_code, reason } => {
                let Some(log) = self.obs.runner_log else {
                    return needs(Needs {
                        runner_log: true,
                        ..Default::default()
                    });
                };
                self.failure(
                    SyncFailure::RunnerFailed {
                        exit_code,
                        reason,
                        output: RunnerOutput::Tail(tail(log)),
                    },
                    interval,
                    Some(pod),
                )
            }
            Progress::DisplayFailed { exit_code, .. } => {
                let Some(log) = self.obs.display_log else {
                    return needs(Needs {
                        display_log: true,
                        ..Default::default()
                    });
                };
                let tail = match redact {
                    Redact::Values => WITHHELD.to_string(),
                    Redact::Nothing => tail(&String::from_utf8_lossy(log)),
                };
                self.failure(
                    SyncFailure::DisplayFailed { exit_code, tail },
                    interval,
                    Some(pod),
                )
            }
            Progress::PodFailed { reason } => {
                self.failure(SyncFailure::PodFailed { reason }, interval, Some(pod))
            }
            Progress::OutputReady { stopped } => {
                let (Some(log), Some(_)) = (self.obs.display_log, self.obs.versions) else {
                    return needs(Needs {
                        display_log: true,
                        versions: true,
                        ..Default::default()
                    });
                };
                // Complete data is used whatever the pod's age: an operator that comes back
                // after the timeout still has a finished sync to apply.
                match display::decode(log, self.settings.max_output_bytes) {
                    Output::Incomplete if stopped => {
                        self.failure(SyncFailure::OutputIncomplete, interval, Some(pod))
                    }
                    Output::Incomplete if left.is_zero() => {
                        timed_out("the display log never held complete output".into())
                    }
                    Output::Incomplete => after(POLL.min(left)),
                    Output::TooLarge { bytes } => self.failure(
                        SyncFailure::OutputTooLarge {
                            bytes,
                            limit: self.settings.max_output_bytes,
                        },
                        interval,
                        Some(pod),
                    ),
                    Output::Corrupt(why) => {
                        // `display` failed (and is about to exit 1): its one-line error says why.
                        let failure = match (log.strip_prefix(b"error: "), redact) {
                            (Some(_), Redact::Nothing) => SyncFailure::DisplayFailed {
                                exit_code: 1,
                                tail: tail(&String::from_utf8_lossy(log)),
                            },
                            (Some(_), Redact::Values) => SyncFailure::DisplayFailed {
                                exit_code: 1,
                                tail: WITHHELD.into(),
                            },
                            (None, Redact::Nothing) => SyncFailure::OutputCorrupt(why),
                            (None, Redact::Values) => SyncFailure::OutputCorrupt(format!(
                                "the display container's log is not what display writes; {WITHHELD}"
                            )),
                        };
                        self.failure(failure, interval, Some(pod))
                    }
                    Output::Complete(data) => {
                        let revision = pod::runner_image_id(pod);
                        self.apply_data(data, config, Some(pod), revision, redact)
                    }
                }
            }
        }
    }

    /// Whether the pod is a finished one whose failure the status already reports (it was
    /// kept so that its log can be read).
    fn reported(&self, pod: &Pod, progress: &Progress) -> bool {
        let (Progress::RunnerFailed { .. }, Some(Time(finished)), Some(Time(attempt))) = (
            progress,
            pod::runner_finished_at(pod),
            self.status.last_sync_attempt_time.as_ref(),
        ) else {
            return false;
        };
        finished < *attempt
    }

    /// The on-demand request this attempt serves: the one recorded when its pod started
    /// (a request made while the pod ran asks for one more sync), or the current one.
    fn served_request(&self, pod: Option<&Pod>) -> Option<String> {
        if pod.is_some() {
            self.status.sync_requested_at.clone()
        } else {
            self.requested_at()
                .or(self.status.sync_requested_at.clone())
        }
    }

    /// Whether the last sync of this spec succeeded and nothing has failed since.
    fn was_healthy(&self) -> bool {
        self.status.failed_synchronization_attempts == 0
            && self.ready_condition().is_some_and(|r| {
                r.reason == reason::SYNCHRONIZED && r.observed_generation == Some(self.generation)
            })
    }

    /// Parses the channel data and, when valid, writes the versions.
    fn apply_data(
        &self,
        data: &[u8],
        config: &ChannelConfig,
        pod: Option<&Pod>,
        revision: Option<String>,
        redact: Redact,
    ) -> Decision {
        let existing = self.obs.versions.unwrap_or_default();
        let interval = config.sync_interval;
        let limit = self.settings.max_versions_per_channel;
        let parsed = match channel::parse_at_most(data, limit) {
            Ok(parsed) => parsed,
            Err(e) => {
                let message = match redact {
                    Redact::Nothing => e.to_string(),
                    Redact::Values => e.without_values(),
                };
                return self.failure(SyncFailure::InvalidData(message), interval, pod);
            }
        };
        let items = &parsed.versions;
        if parsed.listed > limit {
            return self.failure(
                SyncFailure::TooManyVersions {
                    count: parsed.listed,
                    limit,
                },
                interval,
                pod,
            );
        }
        let plan = match versions::plan(
            self.ch,
            Some((config, items)),
            existing,
            config.delete_no_longer_in_sync,
        ) {
            Ok(plan) => plan,
            Err(conflict) => {
                return self.failure(SyncFailure::Conflict(conflict), interval, pod);
            }
        };
        let mut summary = format!("synchronized {} versions ({})", items.len(), plan.summary());
        let mut events = Vec::new();
        if !parsed.duplicates.is_empty() {
            let names = text::list(&parsed.duplicates, ", ");
            summary.push_str(&format!(
                "; duplicate names in the channel data, the last entry of each was used: {names}"
            ));
            events.push(Note {
                warning: true,
                reason: "DuplicateVersions",
                message: format!(
                    "the channel data lists these names more than once; the last entry of each was used: {names}"
                ),
            });
        }
        // A sync that changed nothing is in the status already; an Event is for news.
        if !plan.effects.is_empty() || !self.was_healthy() {
            events.push(Note {
                warning: false,
                reason: reason::SYNCHRONIZED,
                message: summary.clone(),
            });
        }
        let mut effects = plan.effects;
        effects.extend(pod.map(Self::delete_pod));
        let mut status = self.status_with(
            Some((Truth::True, reason::SYNCHRONIZED, summary)),
            None,
            None,
        );
        status.last_synced_time = Some(self.timestamp());
        status.last_sync_attempt_time = Some(self.timestamp());
        status.synced_generation = Some(self.generation);
        status.synced_versions = i64::try_from(items.len()).ok();
        status.failed_synchronization_attempts = 0;
        status.sync_requested_at = self.served_request(pod);
        status.source_revision = revision;
        status.next_sync_time = self.at(interval);
        Decision {
            effects,
            status: Some(status),
            events,
            requeue: Some(interval),
            outcome: Some(Outcome::Synchronized),
            ..Default::default()
        }
    }

    /// The time `after` from now.
    fn at(&self, after: Duration) -> Option<Time> {
        let span = k8s_openapi::jiff::SignedDuration::try_from(after).ok()?;
        self.obs.now.checked_add(span).ok().map(Time)
    }

    /// A failed sync: nothing is written to versions; the pod, if any, goes.
    fn failure(&self, failure: SyncFailure, interval: Duration, pod: Option<&Pod>) -> Decision {
        let attempts = self
            .status
            .failed_synchronization_attempts
            .saturating_add(1);
        let next = {
            let mut probe = self.status.clone();
            probe.failed_synchronization_attempts = attempts;
            Decider {
                status: probe,
                ..*self
            }
            .retry_wait(interval)
        };
        let (retry, stalled) = if attempts >= MAX_QUICK_RETRIES {
            let retry = format!(
                "{attempts} failures in a row; next try in {} (the sync interval)",
                duration::format(next)
            );
            (retry.clone(), Some(retry))
        } else {
            let retry = format!("attempt {attempts}; retrying in {}", duration::format(next));
            (retry, None)
        };
        let reason = failure.reason();
        let message = failure.to_string();
        let ready = (Truth::False, reason, format!("{message} ({retry})"));
        let stalled = stalled.map(|why| (reason, format!("{message} ({why})")));
        let retrying = stalled.is_none().then(|| retry.clone());
        let mut status = self.status_with(Some(ready), None, stalled);
        if let Some(retry) = retrying {
            // Still progressing (kstatus: InProgress), as Flux's controllers say it.
            status::set(
                &mut status.conditions,
                RECONCILING,
                Truth::True,
                reason::PROGRESSING_WITH_RETRY,
                format!("{reason}: {message} ({retry})"),
                self.generation,
                &self.timestamp(),
            );
        }
        status.failed_synchronization_attempts = attempts;
        status.last_sync_attempt_time = Some(self.timestamp());
        status.sync_requested_at = self.served_request(pod);
        status.next_sync_time = self.at(next);
        Decision {
            effects: pod.map(Self::delete_pod).into_iter().collect(),
            status: Some(status),
            events: vec![Note {
                warning: true,
                reason,
                message,
            }],
            requeue: Some(next),
            outcome: Some(Outcome::Failed(failure)),
            ..Default::default()
        }
    }
}

/// Whether messages may quote the data a sync read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Redact {
    Nothing,
    /// No byte of the data (or of the runner's output) in any message.
    Values,
}

/// What a message says instead of output it may not quote.
const WITHHELD: &str = "its output is not copied here because the runner references a Secret or the data comes from a json source";

fn truth_of(status: &str) -> Truth {
    match status {
        "True" => Truth::True,
        "False" => Truth::False,
        _ => Truth::Unknown,
    }
}

/// The end of a log, on one line, short enough for a condition message.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return "(no output)".into();
    }
    text::tail(&lines.join(" | "), TAIL_BYTES)
}

#[cfg(test)]
pub(crate) mod tests;
