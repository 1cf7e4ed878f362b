//! The decision core. [`decide`] looks at what was observed of one channel (its spec and
//! status, its syncer pod, the pod's logs, the versions in its namespace, the time) and
//! says what to do: which pod to create or delete, which versions to write, which status
//! and events to publish, and when to look again. It performs no I/O; `controller` does
//! what it says. When it needs to see more (a log, the versions) it says so in
//! [`Decision::needs`] and is asked again with that filled in.

pub mod pod;
pub mod versions;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::{
    ManagedOSVersion, ManagedOSVersionChannel, ManagedOSVersionChannelStatus, READY,
    SYNC_REQUESTED_AT_ANNOTATION,
};
use crate::channel;
use crate::config::{self, ChannelConfig, JsonOptions, Source};
use crate::display::{self, Output};
use crate::duration;
use pod::Progress;

/// `Ready` reasons, exactly as users and tools see them.
pub mod reason {
    pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";
    pub const SYNCHRONIZING: &str = "Synchronizing";
    pub const SYNCHRONIZED: &str = "Synchronized";
    pub const FAILED_TO_SYNC: &str = "FailedToSync";
    pub const FAILED_TO_CREATE_POD: &str = "FailedToCreatePod";
    pub const CHANNEL_DISABLED: &str = "ChannelDisabled";
}

/// After this many consecutive failures the channel waits for its interval.
pub const MAX_QUICK_RETRIES: i64 = 4;
/// How often to look again while the display log is still being written, or a pod of the
/// channel is still terminating.
const POLL: Duration = Duration::from_secs(1);
/// How often a queued sync looks for a free slot.
const QUEUE_POLL: Duration = Duration::from_secs(2);
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
    pub pod_create_error: Option<&'a str>,
    /// A failure the I/O layer met while observing or performing (an API error, a write
    /// the API server refused): the attempt failed, and says why.
    pub error: Option<&'a str>,
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
pub enum Action {
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

impl Action {
    pub fn describe(&self) -> String {
        match self {
            Action::CreatePod(p) => format!("create pod {}", p.name_any()),
            Action::DeletePod { name, .. } => format!("delete pod {name}"),
            Action::ApplyVersion(v) => format!("apply version {}", v.name_any()),
            Action::MarkVersion {
                name,
                no_longer_in_sync: true,
                ..
            } => format!("flag version {name}"),
            Action::MarkVersion { name, .. } => format!("unflag version {name}"),
            Action::DeleteVersion { name, .. } => format!("delete version {name}"),
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Synchronized,
    Failed,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// When set, nothing else is: observe these, then decide again.
    pub needs: Needs,
    /// Performed in order: the version writes all or none (see `controller`), then the
    /// rest.
    pub actions: Vec<Action>,
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
        let resolved = config::resolve(&self.ch.spec);
        let interval = resolved
            .as_ref()
            .map_or(config::DEFAULT_SYNC_INTERVAL, |c| c.sync_interval);
        if let Some(error) = self.obs.error {
            let pod = our_pod.filter(|p| p.metadata.deletion_timestamp.is_none());
            return self.failure(reason::FAILED_TO_SYNC, error.to_string(), interval, pod);
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
                reason::FAILED_TO_CREATE_POD,
                format!(
                    "cannot create the syncer pod: a pod named {:?} already exists in namespace {:?} and is not controlled by this channel; it is left alone, delete or rename it",
                    pod.name_any(),
                    self.ch.namespace().unwrap_or_default()
                ),
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

    /// `Ready` with the given values; the transition time moves only when the status does.
    fn ready(&self, ok: bool, reason: &str, message: String) -> Vec<Condition> {
        let status = if ok { "True" } else { "False" };
        let previous = self.status.conditions.iter().find(|c| c.type_ == READY);
        let last_transition_time = match previous {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => self.timestamp(),
        };
        let mut conditions: Vec<Condition> = self
            .status
            .conditions
            .iter()
            .filter(|c| c.type_ != READY)
            .cloned()
            .collect();
        conditions.push(Condition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: Some(self.generation),
            last_transition_time,
        });
        conditions
    }

    fn ready_condition(&self) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.type_ == READY)
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

    fn delete_pod(pod: &Pod) -> Action {
        Action::DeletePod {
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
        }
    }

    fn disabled(&self, our_pod: Option<&Pod>) -> Decision {
        let mut actions: Vec<Action> = our_pod.map(Self::delete_pod).into_iter().collect();
        if self.already(reason::CHANNEL_DISABLED) {
            return Decision {
                actions,
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
        actions.extend(plan.actions);
        let mut status = self.status.clone();
        status.conditions = self.ready(
            true,
            reason::CHANNEL_DISABLED,
            "syncing is disabled (spec.enabled is false)".into(),
        );
        Decision {
            actions,
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
        let actions: Vec<Action> = our_pod.map(Self::delete_pod).into_iter().collect();
        let mut status = self.status.clone();
        status.conditions = self.ready(false, reason::INVALID_CONFIGURATION, message.clone());
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
            actions,
            status: Some(status),
            events,
            ..Default::default()
        }
    }

    /// The rest of the backoff after a failed attempt of this generation, if it is not over.
    fn backing_off(&self, interval: Duration) -> Option<Duration> {
        let ready = self.ready_condition()?;
        if self.status.failed_synchronization_attempts == 0
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
        let elapsed = Duration::try_from(self.obs.now.duration_since(*last)).unwrap_or_default();
        let rest = self.retry_wait(interval).saturating_sub(elapsed);
        (!rest.is_zero()).then_some(rest)
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
            || self.on_demand()
        {
            return Duration::ZERO;
        }
        let Some(Time(last)) = &self.status.last_sync_attempt_time else {
            return Duration::ZERO;
        };
        let wait = self.retry_wait(config.sync_interval);
        let elapsed = self.obs.now.duration_since(*last);
        let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
        wait.saturating_sub(elapsed)
    }

    /// The wait after the last attempt: backoff while failing, else the interval.
    fn retry_wait(&self, interval: Duration) -> Duration {
        let failures = self.status.failed_synchronization_attempts;
        if (1..MAX_QUICK_RETRIES).contains(&failures) {
            let backoff = self
                .settings
                .retry_delay
                .saturating_mul(1 << (failures - 1).min(16));
            backoff.min(interval)
        } else {
            interval
        }
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
                    let error = error.to_string();
                    return self.failure(
                        reason::FAILED_TO_CREATE_POD,
                        error,
                        config.sync_interval,
                        None,
                    );
                }
                let timeout = options.timeout.unwrap_or(self.settings.sync_timeout);
                let pod = pod::build(self.ch, options, &self.settings.operator_image, timeout);
                let mut status = self.status.clone();
                status.conditions = self.ready(
                    false,
                    reason::SYNCHRONIZING,
                    format!("syncer pod {} started", pod.name_any()),
                );
                status.sync_requested_at = self.requested_at().or(status.sync_requested_at);
                Decision {
                    actions: vec![Action::CreatePod(Box::new(pod))],
                    status: Some(status),
                    requeue: Some(timeout),
                    ..Default::default()
                }
            }
            Source::Json(options) => self.json_sync(config, options),
        }
    }

    /// A due sync waiting for a free slot: says so once, and looks again shortly.
    fn queued(&self) -> Decision {
        let mut status = self.status.clone();
        status.conditions = self.ready(
            false,
            reason::SYNCHRONIZING,
            format!(
                "queued: waiting for a free sync slot (at most {} syncs run at once, --max-concurrent-syncs)",
                self.settings.max_concurrent_syncs
            ),
        );
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
                reason::FAILED_TO_SYNC,
                message.clone(),
                config.sync_interval,
                None,
            ),
            Fetched::Body {
                data,
                etag,
                last_modified,
                not_modified,
            } => {
                let mut d = self.apply_data(data, config, None);
                if d.outcome == Some(Outcome::Synchronized)
                    && let Some(status) = d.status.as_mut()
                {
                    status.source_etag = etag.clone();
                    status.source_last_modified = last_modified.clone();
                    if *not_modified
                        && let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == READY)
                    {
                        c.message.push_str(" (the source answered: not modified)");
                    }
                }
                d
            }
        }
    }

    fn with_pod(&self, pod: &Pod, config: &ChannelConfig) -> Decision {
        let Source::Custom(options) = &config.source else {
            return Decision {
                actions: vec![Self::delete_pod(pod)],
                requeue: Some(POLL),
                ..Default::default()
            };
        };
        if let Some(why) = pod::stale_reason(pod, self.ch, &self.settings.operator_image) {
            tracing::info!(pod = %pod.name_any(), "replacing the syncer pod: {why}");
            return Decision {
                actions: vec![Self::delete_pod(pod)],
                requeue: Some(POLL),
                ..Default::default()
            };
        }
        let timeout = options.timeout.unwrap_or(self.settings.sync_timeout);
        let age = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|Time(t)| Duration::try_from(self.obs.now.duration_since(*t)).unwrap_or_default())
            .unwrap_or_default();
        let progress = pod::progress(pod);
        let timed_out = |detail: String| {
            self.failure(
                reason::FAILED_TO_SYNC,
                format!(
                    "timed out after {}: the syncer pod did not finish ({detail})",
                    duration::format(timeout)
                ),
                config.sync_interval,
                Some(pod),
            )
        };
        let left = timeout.saturating_sub(age);
        match progress {
            Progress::Working if left.is_zero() => timed_out(pod::waiting_summary(pod)),
            Progress::Working => after(left),
            Progress::RunnerFailed { exit_code, reason } => {
                let Some(log) = self.obs.runner_log else {
                    return needs(Needs {
                        runner_log: true,
                        ..Default::default()
                    });
                };
                let reason = if reason.is_empty() || reason == "Error" {
                    String::new()
                } else {
                    format!(" ({reason})")
                };
                self.failure(
                    reason::FAILED_TO_SYNC,
                    format!(
                        "the runner container exited with code {exit_code}{reason}; the end of its output: {}",
                        tail(log)
                    ),
                    config.sync_interval,
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
                self.failure(
                    reason::FAILED_TO_SYNC,
                    format!(
                        "the display container exited with code {exit_code}: {}",
                        tail(&String::from_utf8_lossy(log))
                    ),
                    config.sync_interval,
                    Some(pod),
                )
            }
            Progress::PodFailed { reason } => self.failure(
                reason::FAILED_TO_SYNC,
                format!("the syncer pod failed: {reason}"),
                config.sync_interval,
                Some(pod),
            ),
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
                    Output::Incomplete if stopped => self.failure(
                        reason::FAILED_TO_SYNC,
                        "the display container stopped before its log held all of the channel data".into(),
                        config.sync_interval,
                        Some(pod),
                    ),
                    Output::Incomplete if left.is_zero() => {
                        timed_out("the display log never held complete output".into())
                    }
                    Output::Incomplete => after(POLL.min(left)),
                    Output::TooLarge { bytes } => self.failure(
                        reason::FAILED_TO_SYNC,
                        format!(
                            "the channel data is {bytes} bytes, more than the operator's limit of {} bytes (--max-output-bytes)",
                            self.settings.max_output_bytes
                        ),
                        config.sync_interval,
                        Some(pod),
                    ),
                    Output::Corrupt(why) => {
                        // `display` failed (and is about to exit 1): its one-line error says why.
                        let why = match log.strip_prefix(b"error: ") {
                            Some(_) => format!(
                                "the display container exited with code 1: {}",
                                tail(&String::from_utf8_lossy(log))
                            ),
                            None => why,
                        };
                        self.failure(reason::FAILED_TO_SYNC, why, config.sync_interval, Some(pod))
                    }
                    Output::Complete(data) => self.apply_data(data, config, Some(pod)),
                }
            }
        }
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

    /// Parses the channel data and, when valid, writes the versions.
    fn apply_data(&self, data: &[u8], config: &ChannelConfig, pod: Option<&Pod>) -> Decision {
        let existing = self.obs.versions.unwrap_or_default();
        let interval = config.sync_interval;
        let parsed = match channel::parse(data) {
            Ok(parsed) => parsed,
            Err(e) => {
                return self.failure(reason::FAILED_TO_SYNC, e.to_string(), interval, pod);
            }
        };
        let items = &parsed.versions;
        let plan = match versions::plan(
            self.ch,
            Some((config, items)),
            existing,
            config.delete_no_longer_in_sync,
        ) {
            Ok(plan) => plan,
            Err(conflict) => return self.failure(reason::FAILED_TO_SYNC, conflict, interval, pod),
        };
        let mut summary = format!("synchronized {} versions ({})", items.len(), plan.summary());
        let mut events = Vec::new();
        if !parsed.duplicates.is_empty() {
            let names = parsed.duplicates.join(", ");
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
        events.push(Note {
            warning: false,
            reason: reason::SYNCHRONIZED,
            message: summary.clone(),
        });
        let mut actions = plan.actions;
        actions.extend(pod.map(Self::delete_pod));
        let mut status = self.status.clone();
        status.conditions = self.ready(true, reason::SYNCHRONIZED, summary);
        status.last_synced_time = Some(self.timestamp());
        status.last_sync_attempt_time = Some(self.timestamp());
        status.synced_generation = Some(self.generation);
        status.synced_versions = i64::try_from(items.len()).ok();
        status.failed_synchronization_attempts = 0;
        status.sync_requested_at = self.served_request(pod);
        Decision {
            actions,
            status: Some(status),
            events,
            requeue: Some(interval),
            outcome: Some(Outcome::Synchronized),
            ..Default::default()
        }
    }

    /// A failed sync: nothing is written to versions; the pod, if any, goes.
    fn failure(
        &self,
        reason: &'static str,
        message: String,
        interval: Duration,
        pod: Option<&Pod>,
    ) -> Decision {
        let mut status = self.status.clone();
        status.failed_synchronization_attempts =
            status.failed_synchronization_attempts.saturating_add(1);
        status.last_sync_attempt_time = Some(self.timestamp());
        status.sync_requested_at = self.served_request(pod);
        let attempts = status.failed_synchronization_attempts;
        let next = {
            let probe = Decider {
                status: status.clone(),
                ..*self
            };
            probe.retry_wait(interval)
        };
        let retry = if attempts >= MAX_QUICK_RETRIES {
            format!(
                "{attempts} failures in a row; next try in {} (the sync interval)",
                duration::format(next)
            )
        } else {
            format!("attempt {attempts}; retrying in {}", duration::format(next))
        };
        status.conditions = self.ready(false, reason, format!("{message} ({retry})"));
        Decision {
            actions: pod.map(Self::delete_pod).into_iter().collect(),
            status: Some(status),
            events: vec![Note {
                warning: true,
                reason,
                message,
            }],
            requeue: Some(next),
            outcome: Some(Outcome::Failed),
            ..Default::default()
        }
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
    let joined = lines.join(" | ");
    if joined.len() <= TAIL_BYTES {
        return joined;
    }
    let mut start = joined.len().saturating_sub(TAIL_BYTES);
    while !joined.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", joined.get(start..).unwrap_or_default())
}

#[cfg(test)]
pub(crate) mod tests;
