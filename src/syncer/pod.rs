//! The syncer pod of a `custom` channel: its exact shape, and what its status says.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerStateTerminated, ContainerStatus, EmptyDirVolumeSource, Pod, PodSpec,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::api::{CHANNEL_LABEL, ManagedOSVersionChannel};
use crate::config::CustomOptions;

pub const RUNNER: &str = "runner";
pub const DISPLAY: &str = "display";
const VOLUME: &str = "channel-data";
/// Annotation on the pod: the channel generation it was created for.
pub const GENERATION_ANNOTATION: &str = "rancheros.cattle.io/channel-generation";
/// The kubelet kills a pod this long after the operator's own timeout, in case the
/// operator is not running to do it.
const DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// The syncer pod for a channel.
pub fn build(
    channel: &ManagedOSVersionChannel,
    options: &CustomOptions,
    operator_image: &str,
    timeout: Duration,
) -> Pod {
    let mount = || {
        Some(vec![VolumeMount {
            name: VOLUME.into(),
            mount_path: options.mount_path.clone(),
            ..Default::default()
        }])
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(channel.name_any()),
            namespace: channel.namespace(),
            labels: Some(BTreeMap::from([(
                CHANNEL_LABEL.to_string(),
                channel.name_any(),
            )])),
            annotations: Some(BTreeMap::from([(
                GENERATION_ANNOTATION.to_string(),
                channel.metadata.generation.unwrap_or_default().to_string(),
            )])),
            owner_references: channel.controller_owner_ref(&()).map(|r| vec![r]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(10),
            active_deadline_seconds: Some((timeout + DEADLINE_MARGIN).as_secs() as i64),
            volumes: Some(vec![Volume {
                name: VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            init_containers: Some(vec![Container {
                name: RUNNER.into(),
                image: Some(options.image.clone()),
                command: options.command.clone(),
                args: options.args.clone(),
                env: options.env.clone(),
                env_from: options.env_from.clone(),
                volume_mounts: mount(),
                ..Default::default()
            }]),
            containers: vec![Container {
                name: DISPLAY.into(),
                image: Some(operator_image.into()),
                image_pull_policy: Some("IfNotPresent".into()),
                args: Some(vec![
                    "display".into(),
                    "--file".into(),
                    options.output_file.clone(),
                ]),
                volume_mounts: mount(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// Why an existing pod of ours can no longer serve the channel's sync, if it can't.
pub fn stale_reason(
    pod: &Pod,
    channel: &ManagedOSVersionChannel,
    operator_image: &str,
) -> Option<String> {
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == DISPLAY))
        .and_then(|c| c.image.as_deref());
    if image != Some(operator_image) {
        return Some(format!(
            "it was created by an operator with image {}",
            image.unwrap_or("(none)")
        ));
    }
    let generation = pod.annotations().get(GENERATION_ANNOTATION);
    let current = channel.metadata.generation.unwrap_or_default().to_string();
    if generation != Some(&current) {
        return Some(format!(
            "it was created for generation {} of the channel, which is now at {current}",
            generation.map_or("(unknown)", String::as_str)
        ));
    }
    None
}

/// How far a syncer pod has come.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Still pulling, starting or running the runner.
    Working,
    /// The runner finished and `display` is up (or stopped after printing): its log holds
    /// the data. `stopped`: the log will not grow any more.
    OutputReady {
        stopped: bool,
    },
    RunnerFailed {
        exit_code: i32,
        reason: String,
    },
    DisplayFailed {
        exit_code: i32,
        reason: String,
    },
    /// The pod failed without a container to blame (evicted, deadline exceeded, ...).
    PodFailed {
        reason: String,
    },
}

pub fn progress(pod: &Pod) -> Progress {
    let Some(status) = &pod.status else {
        return Progress::Working;
    };
    let find = |list: &Option<Vec<ContainerStatus>>, name: &str| {
        list.as_ref()
            .and_then(|l| l.iter().find(|c| c.name == name).cloned())
    };
    let terminated = |c: &Option<ContainerStatus>| -> Option<ContainerStateTerminated> {
        c.as_ref()
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.clone())
    };
    let runner = find(&status.init_container_statuses, RUNNER);
    let display = find(&status.container_statuses, DISPLAY);
    if let Some(t) = terminated(&runner)
        && t.exit_code != 0
    {
        return Progress::RunnerFailed {
            exit_code: t.exit_code,
            reason: t.reason.unwrap_or_default(),
        };
    }
    if let Some(t) = terminated(&display) {
        return if t.exit_code == 0 {
            // Stopped by a signal after printing: the log is still there to read.
            Progress::OutputReady { stopped: true }
        } else {
            Progress::DisplayFailed {
                exit_code: t.exit_code,
                reason: t.reason.unwrap_or_default(),
            }
        };
    }
    let display_running = display
        .as_ref()
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some());
    if display_running {
        return Progress::OutputReady { stopped: false };
    }
    if status.phase.as_deref() == Some("Failed") {
        let reason = [status.reason.as_deref(), status.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        return Progress::PodFailed {
            reason: if reason.is_empty() {
                "the pod failed".into()
            } else {
                reason
            },
        };
    }
    Progress::Working
}

/// One line on where a pod that is still working is stuck, for a timeout message:
/// `runner: ImagePullBackOff: Back-off pulling image "x"`.
pub fn waiting_summary(pod: &Pod) -> String {
    let Some(status) = &pod.status else {
        return "the pod was never scheduled".into();
    };
    let all = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in all {
        let Some(state) = &c.state else { continue };
        if let Some(w) = &state.waiting {
            let mut s = format!("{}: {}", c.name, w.reason.as_deref().unwrap_or("waiting"));
            if let Some(m) = &w.message {
                s.push_str(&format!(": {m}"));
            }
            return s;
        }
        if state.running.is_some() && c.name == RUNNER {
            return "runner: still running".into();
        }
    }
    let scheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled");
    match scheduled {
        Some(c) if c.status == "False" => format!(
            "not scheduled: {}",
            c.message
                .as_deref()
                .or(c.reason.as_deref())
                .unwrap_or("unknown reason")
        ),
        _ => format!("pod phase {}", status.phase.as_deref().unwrap_or("Pending")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_with_status(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "c"}, "status": status})).unwrap()
    }

    #[test]
    fn progress_from_status() {
        assert_eq!(
            progress(&pod_with_status(json!({"phase": "Pending"}))),
            Progress::Working
        );
        let failed = pod_with_status(json!({
            "phase": "Failed",
            "initContainerStatuses": [{"name": "runner", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}],
            "containerStatuses": [{"name": "display", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                "state": {"waiting": {"reason": "PodInitializing"}}}]
        }));
        assert_eq!(
            progress(&failed),
            Progress::RunnerFailed {
                exit_code: 3,
                reason: "Error".into()
            }
        );
        let ready = pod_with_status(json!({
            "phase": "Running",
            "initContainerStatuses": [{"name": "runner", "ready": true, "restartCount": 0, "image": "", "imageID": "",
                "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [{"name": "display", "ready": true, "restartCount": 0, "image": "", "imageID": "",
                "state": {"running": {}}}]
        }));
        assert_eq!(progress(&ready), Progress::OutputReady { stopped: false });
        let evicted = pod_with_status(
            json!({"phase": "Failed", "reason": "DeadlineExceeded", "message": "too slow"}),
        );
        assert_eq!(
            progress(&evicted),
            Progress::PodFailed {
                reason: "DeadlineExceeded: too slow".into()
            }
        );
    }

    #[test]
    fn waiting_summary_names_the_stuck_container() {
        let pod = pod_with_status(json!({
            "phase": "Pending",
            "initContainerStatuses": [{"name": "runner", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"nope\""}}}]
        }));
        assert_eq!(
            waiting_summary(&pod),
            "runner: ImagePullBackOff: Back-off pulling image \"nope\""
        );
    }
}
