//! Why a sync failed, typed: the decision core, the I/O layer, metrics and events all speak
//! of a failure by its variant; its `Display` is the message users read in `Ready` and in
//! the channel's Events.

use std::time::Duration;

use crate::api::reason;
use crate::duration;

/// How an error is handled. Decided once per failure, read by metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Throttling, a 5xx, a webhook that timed out, a lost connection: may pass.
    Retryable,
    /// The API server refused the request for good (forbidden, invalid, quota, admission).
    Refused,
    /// The channel's own spec, data, runner or source is at fault.
    Input,
}

impl ErrorClass {
    pub fn label(self) -> &'static str {
        match self {
            ErrorClass::Retryable => "retryable",
            ErrorClass::Refused => "refused",
            ErrorClass::Input => "input",
        }
    }
}

/// A failed sync. Each variant's text is the status message (the retry note is added by
/// the decision core).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SyncFailure {
    /// The API server failed or refused a request while the sync observed or wrote.
    #[error("{message}")]
    Api { class: ErrorClass, message: String },
    /// The API server did not create the syncer pod.
    #[error("creating syncer pod {pod}: {message}")]
    PodRefused {
        pod: String,
        class: ErrorClass,
        message: String,
    },
    /// A pod of the channel's name exists that the channel does not control.
    #[error(
        "cannot create the syncer pod: a pod named {pod:?} already exists in namespace {namespace:?} and is not controlled by this channel; it is left alone, delete or rename it"
    )]
    ForeignPod { pod: String, namespace: String },
    #[error(
        "timed out after {}: the syncer pod did not finish ({detail})",
        duration::format(*after)
    )]
    TimedOut { after: Duration, detail: String },
    #[error(
        "the runner container exited with code {exit_code}{}; {output}",
        reason_suffix(reason)
    )]
    RunnerFailed {
        exit_code: i32,
        reason: String,
        /// The end of its log, or why it is not shown.
        output: RunnerOutput,
    },
    /// `display` exited non-zero, or printed its own one-line error.
    #[error("the display container exited with code {exit_code}: {tail}")]
    DisplayFailed { exit_code: i32, tail: String },
    #[error("the syncer pod failed: {reason}")]
    PodFailed { reason: String },
    #[error("the display container stopped before its log held all of the channel data")]
    OutputIncomplete,
    #[error(
        "the channel data is {bytes} bytes, more than the operator's limit of {limit} bytes (--max-output-bytes)"
    )]
    OutputTooLarge { bytes: u64, limit: u64 },
    /// The display log is not what `display` writes.
    #[error("{0}")]
    OutputCorrupt(String),
    /// The channel data breaks a rule (the message of `channel::InvalidChannelData`).
    #[error("{0}")]
    InvalidData(String),
    /// Listed names are taken by versions this channel does not control.
    #[error("{0}")]
    Conflict(String),
    /// A json channel's source could not be read.
    #[error("{0}")]
    Fetch(String),
    /// An oci channel's image whose signature did not verify (`spec.verify`).
    #[error("{0}")]
    Unverified(String),
    #[error(
        "the channel data lists {count} entries, more than the {limit} a channel may list (--max-versions-per-channel); nothing was changed"
    )]
    TooManyVersions { count: usize, limit: usize },
    #[error(
        "the sync would write {bytes} bytes of versions, more than the {limit} one sync may write (--max-sync-write-bytes); nothing was changed"
    )]
    TooManyBytes { bytes: usize, limit: usize },
}

/// What a runner failure message shows of the runner's output.
#[derive(Clone, Debug, PartialEq)]
pub enum RunnerOutput {
    /// The end of its log, on one line.
    Tail(String),
    /// The runner can read a Secret: its output stays in the pod's log.
    Withheld { pod: String },
}

impl std::fmt::Display for RunnerOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunnerOutput::Tail(tail) => write!(f, "the end of its output: {tail}"),
            RunnerOutput::Withheld { pod } => write!(
                f,
                "its output is not copied here because the runner references a Secret; read it with `kubectl logs {pod} -c runner` (the pod is kept until the next sync)"
            ),
        }
    }
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() || reason == "Error" {
        String::new()
    } else {
        format!(" ({reason})")
    }
}

impl SyncFailure {
    /// The `Ready` reason this failure shows.
    pub fn reason(&self) -> &'static str {
        match self {
            SyncFailure::PodRefused { .. } | SyncFailure::ForeignPod { .. } => {
                reason::FAILED_TO_CREATE_POD
            }
            _ => reason::FAILED_TO_SYNC,
        }
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            SyncFailure::Api { class, .. } | SyncFailure::PodRefused { class, .. } => *class,
            _ => ErrorClass::Input,
        }
    }

    /// The variant, as a metrics label.
    pub fn kind(&self) -> &'static str {
        match self {
            SyncFailure::Api { .. } => "api",
            SyncFailure::PodRefused { .. } => "pod_refused",
            SyncFailure::ForeignPod { .. } => "foreign_pod",
            SyncFailure::TimedOut { .. } => "timed_out",
            SyncFailure::RunnerFailed { .. } => "runner_failed",
            SyncFailure::DisplayFailed { .. } => "display_failed",
            SyncFailure::PodFailed { .. } => "pod_failed",
            SyncFailure::OutputIncomplete => "output_incomplete",
            SyncFailure::OutputTooLarge { .. } => "output_too_large",
            SyncFailure::OutputCorrupt(_) => "output_corrupt",
            SyncFailure::InvalidData(_) => "invalid_data",
            SyncFailure::Conflict(_) => "conflict",
            SyncFailure::Fetch(_) => "fetch",
            SyncFailure::Unverified(_) => "unverified",
            SyncFailure::TooManyVersions { .. } => "too_many_versions",
            SyncFailure::TooManyBytes { .. } => "too_many_bytes",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_before() {
        let runner = SyncFailure::RunnerFailed {
            exit_code: 3,
            reason: "Error".into(),
            output: RunnerOutput::Tail("boom".into()),
        };
        assert_eq!(
            runner.to_string(),
            "the runner container exited with code 3; the end of its output: boom"
        );
        let oom = SyncFailure::RunnerFailed {
            exit_code: 137,
            reason: "OOMKilled".into(),
            output: RunnerOutput::Tail("(no output)".into()),
        };
        assert!(oom.to_string().contains("code 137 (OOMKilled);"), "{oom}");
        let timeout = SyncFailure::TimedOut {
            after: Duration::from_secs(300),
            detail: "runner: still running".into(),
        };
        assert_eq!(
            timeout.to_string(),
            "timed out after 5m: the syncer pod did not finish (runner: still running)"
        );
        assert_eq!(timeout.reason(), reason::FAILED_TO_SYNC);
        let foreign = SyncFailure::ForeignPod {
            pod: "c".into(),
            namespace: "ns".into(),
        };
        assert_eq!(foreign.reason(), reason::FAILED_TO_CREATE_POD);
    }

    #[test]
    fn every_kind_is_a_label_of_its_own() {
        let all = [
            SyncFailure::Api {
                class: ErrorClass::Retryable,
                message: String::new(),
            },
            SyncFailure::PodRefused {
                pod: String::new(),
                class: ErrorClass::Refused,
                message: String::new(),
            },
            SyncFailure::ForeignPod {
                pod: String::new(),
                namespace: String::new(),
            },
            SyncFailure::TimedOut {
                after: Duration::ZERO,
                detail: String::new(),
            },
            SyncFailure::RunnerFailed {
                exit_code: 1,
                reason: String::new(),
                output: RunnerOutput::Withheld { pod: String::new() },
            },
            SyncFailure::DisplayFailed {
                exit_code: 1,
                tail: String::new(),
            },
            SyncFailure::PodFailed {
                reason: String::new(),
            },
            SyncFailure::OutputIncomplete,
            SyncFailure::OutputTooLarge { bytes: 2, limit: 1 },
            SyncFailure::OutputCorrupt(String::new()),
            SyncFailure::InvalidData(String::new()),
            SyncFailure::Conflict(String::new()),
            SyncFailure::Fetch(String::new()),
            SyncFailure::Unverified(String::new()),
            SyncFailure::TooManyVersions { count: 2, limit: 1 },
            SyncFailure::TooManyBytes { bytes: 2, limit: 1 },
        ];
        let kinds: std::collections::BTreeSet<&str> = all.iter().map(SyncFailure::kind).collect();
        assert_eq!(kinds.len(), all.len(), "{kinds:?}");
        assert!(
            kinds
                .iter()
                .all(|k| k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')),
            "{kinds:?}"
        );
    }
}
