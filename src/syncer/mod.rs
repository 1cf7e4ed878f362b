//! The decision core. [`decide`] looks at what was observed of one channel (its spec and
//! status, its syncer pod, the pod's logs, the versions in its namespace, the time) and
//! says what to do: which pod to create or delete, which versions to write, which status
//! and events to publish, and when to look again. It performs no I/O; `controller` does
//! what it says. When it needs to see more (a log, the versions) it says so in
//! [`Decision::needs`] and is asked again with that filled in.

mod budget;
mod custom;
mod decision;
pub mod drift;
pub mod fields;
pub mod frame;
mod json;
pub mod orphan;
mod outcome;
mod owner;
mod paused;
mod phase;
pub mod pod;
mod resolved;
mod settings;
mod status;
mod timing;
pub mod versions;

pub use decision::{Decision, Effect, Fetched, Needs, Note, Observation, Outcome};
pub use phase::{Phase, phase};
pub use resolved::Resolved;
pub use settings::Settings;
pub use timing::{backoff, jittered};

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::{
    ManagedOSVersion, ManagedOSVersionChannel, ManagedOSVersionChannelStatus, READY, RECONCILING,
    SYNC_REQUESTED_AT_ANNOTATION, reason,
};
use crate::channel;
use crate::config::{self, ChannelConfig, CustomOptions, JsonOptions, OciOptions, Source};
use crate::duration;
use crate::failure::{RunnerOutput, SyncFailure};
use crate::text;
use frame::Output;
use pod::PodState;
use status::Truth;

/// After this many consecutive failures the channel waits for its interval.
const MAX_QUICK_RETRIES: i64 = 4;
/// How often to look again while the display log is still being written, or a pod of the
/// channel is still terminating.
const POLL: Duration = Duration::from_secs(1);
/// The most of a runner's log a status message carries.
const TAIL_BYTES: usize = 600;

/// The decision for one channel, its spec resolved by the caller (`Settings::resolve_channel`):
/// once per attempt, however many observations it decides on.
pub fn decide(obs: &Observation, settings: &Settings, resolved: &Resolved) -> Decision {
    let mut decision = Decider::new(obs, settings, resolved).decide();
    if decision.status.as_ref() == obs.channel.status.as_ref() {
        decision.status = None;
    }
    decision
}

struct Decider<'a> {
    obs: &'a Observation<'a>,
    settings: &'a Settings,
    resolved: &'a Resolved,
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

impl<'a> Decider<'a> {
    fn new(obs: &'a Observation<'a>, settings: &'a Settings, resolved: &'a Resolved) -> Self {
        Decider {
            obs,
            settings,
            resolved,
            ch: obs.channel,
            status: obs.channel.status.clone().unwrap_or_default(),
            generation: obs.channel.metadata.generation.unwrap_or_default(),
        }
    }
}

impl Decider<'_> {
    fn decide(&self) -> Decision {
        // The phase says which way it goes.
        let our_pod = self.our_pod();
        let phase = self.phase();
        let config = match (&phase, &self.resolved.config) {
            (Phase::Running | Phase::Blocked | Phase::Due { .. }, Ok(config)) => config,
            (Phase::Deleted, _) => return Decision::default(),
            (Phase::Suspended, _) => return self.suspended(our_pod),
            (Phase::Failed, _) => return self.failed_attempt(our_pod),
            (Phase::BackingOff(wait) | Phase::Waiting(wait), _) => return after(*wait),
            (Phase::Disabled, _) => return self.disabled(our_pod),
            (Phase::Invalid(message), _) => return self.invalid(our_pod, message.clone()),
            // A phase past `Invalid` has a valid spec.
            (_, Err(message)) => return self.invalid(our_pod, message.clone()),
        };
        match (phase, self.obs.pod) {
            (Phase::Running, Some(pod)) => self.with_pod(pod, config),
            (Phase::Blocked, Some(pod)) => self.failure(
                SyncFailure::ForeignPod {
                    pod: pod.name_any(),
                    namespace: self.ch.namespace().unwrap_or_default(),
                },
                None,
            ),
            _ => self.start(config),
        }
    }

    /// The I/O layer's failure in this attempt, as a failed sync.
    fn failed_attempt(&self, our_pod: Option<&Pod>) -> Decision {
        let Some(error) = self.obs.error else {
            return Decision::default();
        };
        let pod = our_pod.filter(|p| p.metadata.deletion_timestamp.is_none());
        self.failure(error.clone(), pod)
    }

    fn timestamp(&self) -> Time {
        Time(self.obs.now)
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

    /// A due sync starts: its pod is created, or its source fetched (or it waits for a
    /// slot).
    fn start(&self, config: &ChannelConfig) -> Decision {
        if self.obs.queued {
            return self.queued();
        }
        match &config.source {
            Source::Custom(options) => {
                if let Some(error) = self.obs.pod_create_error {
                    return self.failure(error.clone(), None);
                }
                let timeout = self.resolved.sync_timeout();
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
            Source::Oci(options) => self.oci_sync(config, options),
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
            requeue: Some(self.settings.queue_poll.min(config::MAX_DURATION)),
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
