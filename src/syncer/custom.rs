//! custom channels: what the syncer pod's state says, and reading its output.

use super::*;

impl Decider<'_> {
    /// Whether what the runner printed stays out of the status and Events: a runner that can
    /// read a Secret could print it there for anyone who may read the channel.
    pub(super) fn withholds_output(options: &CustomOptions) -> bool {
        options.references_secrets()
    }

    pub(super) fn with_pod(&self, pod: &Pod, config: &ChannelConfig) -> Decision {
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
            let due = self.sync_due();
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
        let timeout = self.resolved.sync_timeout();
        let age = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|Time(t)| self.since(t))
            .unwrap_or_default();
        let timed_out = |detail: String| {
            self.failure(
                SyncFailure::TimedOut {
                    after: timeout,
                    detail,
                },
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
            PodState::Working if left.is_zero() => timed_out(pod::waiting_summary(pod)),
            PodState::Working => after(left),
            PodState::RunnerFailed { exit_code, reason } if withheld => {
                let mut failed = self.failure(
                    SyncFailure::RunnerFailed {
                        exit_code,
                        reason,
                        output: RunnerOutput::Withheld {
                            pod: pod.name_any(),
                        },
                    },
                    // The attempt had this pod: a request made while it ran is not served.
                    Some(pod),
                );
                // Kept, so that its log can be read (it goes when the next sync is due).
                failed.effects.clear();
                failed
            }
            PodState::RunnerFailed { exit_code, reason } => {
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
                    Some(pod),
                )
            }
            PodState::DisplayFailed { exit_code, .. } => {
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
                self.failure(SyncFailure::DisplayFailed { exit_code, tail }, Some(pod))
            }
            PodState::PodFailed { reason } => {
                self.failure(SyncFailure::PodFailed { reason }, Some(pod))
            }
            PodState::OutputReady { stopped } => {
                let (Some(log), Some(_)) = (self.obs.display_log, self.obs.versions) else {
                    return needs(Needs {
                        display_log: true,
                        versions: true,
                        ..Default::default()
                    });
                };
                // Complete data is used whatever the pod's age: an operator that comes back
                // after the timeout still has a finished sync to apply.
                match frame::decode(log, self.settings.max_output_bytes) {
                    Output::Incomplete if stopped => {
                        self.failure(SyncFailure::OutputIncomplete, Some(pod))
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
                        self.failure(failure, Some(pod))
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
    pub(super) fn reported(&self, pod: &Pod, progress: &PodState) -> bool {
        let (PodState::RunnerFailed { .. }, Some(Time(finished)), Some(Time(attempt))) = (
            progress,
            pod::runner_finished_at(pod),
            self.status.last_sync_attempt_time.as_ref(),
        ) else {
            return false;
        };
        finished < *attempt
    }
}
