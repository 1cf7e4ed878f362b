//! The syncer pod of a `custom` channel: its exact shape, and what its status says.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerStateTerminated, ContainerStatus, EmptyDirVolumeSource,
    LocalObjectReference, Pod, PodSecurityContext, PodSpec, PodStatus, ResourceRequirements,
    SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{Resource, ResourceExt};

use super::Settings;
use crate::api::{CHANNEL_LABEL, ManagedOSVersionChannel};
use crate::config::CustomOptions;

pub const RUNNER: &str = "runner";
pub const DISPLAY: &str = "display";
const VOLUME: &str = "channel-data";
/// Annotation on the pod: the channel generation it was created for.
const GENERATION_ANNOTATION: &str = "rancheros.cattle.io/channel-generation";
/// Annotation on the pod: the operator image it was created with. Stale pods are told by
/// this record, never by the container's `image`, which admission (a digest-pinning or
/// mirror webhook) may rewrite.
pub const OPERATOR_IMAGE_ANNOTATION: &str = "rancheros.cattle.io/operator-image";
/// The user `display` runs as (the operator image's own non-root user).
const DISPLAY_UID: i64 = 65532;
/// The kubelet kills a pod this long after the operator's own timeout, in case the
/// operator is not running to do it.
const DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// The hardening both containers get (Pod Security Standard `restricted`), except the user:
/// no privilege escalation, no capabilities, read-only root filesystem.
fn hardened() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        ..Default::default()
    }
}

/// The runner's security context: the hardened default with the channel's own settings
/// laid over it field by field (a user id, `runAsNonRoot`, or a writable root filesystem).
fn runner_security(user: Option<&SecurityContext>) -> SecurityContext {
    let base = hardened();
    let Some(user) = user else { return base };
    // A privileged container escalates by definition: the API server refuses one that
    // also says `allowPrivilegeEscalation: false` (reached only with
    // `--allow-privileged-runners`).
    let escalation = if user.privileged == Some(true) {
        None
    } else {
        base.allow_privilege_escalation
    };
    SecurityContext {
        allow_privilege_escalation: user.allow_privilege_escalation.or(escalation),
        capabilities: Some(drop_all(user.capabilities.as_ref())),
        read_only_root_filesystem: user
            .read_only_root_filesystem
            .or(base.read_only_root_filesystem),
        ..user.clone()
    }
}

/// The channel's capabilities with `ALL` always dropped: an empty or partial `drop` list
/// must not give the runner the runtime's defaults (`NET_RAW` among them). Added ones are
/// kept (refused by `config` unless privileged runners are allowed).
fn drop_all(user: Option<&Capabilities>) -> Capabilities {
    let mut drop: Vec<String> = user.and_then(|c| c.drop.clone()).unwrap_or_default();
    if !drop.iter().any(|d| d == "ALL") {
        drop.insert(0, "ALL".into());
    }
    Capabilities {
        drop: Some(drop),
        add: user.and_then(|c| c.add.clone()),
    }
}

/// The output volume's `sizeLimit`: twice `--max-output-bytes` (the data, and room for a
/// runner that writes a temporary copy first), at least 1 MiB. More than the operator
/// would read anyway; past it the kubelet evicts the pod, which fails the sync.
fn output_size_limit(max_output_bytes: u64) -> Quantity {
    Quantity(max_output_bytes.saturating_mul(2).max(1 << 20).to_string())
}

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity(memory.into())),
    ])
}

/// The syncer pod for a channel.
pub fn build(
    channel: &ManagedOSVersionChannel,
    options: &CustomOptions,
    settings: &Settings,
    timeout: Duration,
) -> Pod {
    let operator_image = settings.operator_image.as_str();
    // The channel's own pull secrets (its runner image), then the operator's (display).
    let mut pull_secrets: Vec<LocalObjectReference> =
        options.image_pull_secrets.clone().unwrap_or_default();
    for name in &settings.syncer_image_pull_secrets {
        if !pull_secrets.iter().any(|s| &s.name == name) {
            pull_secrets.push(LocalObjectReference { name: name.clone() });
        }
    }
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
            annotations: Some(BTreeMap::from([
                (
                    GENERATION_ANNOTATION.to_string(),
                    channel.metadata.generation.unwrap_or_default().to_string(),
                ),
                (
                    OPERATOR_IMAGE_ANNOTATION.to_string(),
                    operator_image.to_string(),
                ),
            ])),
            owner_references: channel.controller_owner_ref(&()).map(|r| vec![r]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(10),
            active_deadline_seconds: Some(
                i64::try_from(timeout.saturating_add(DEADLINE_MARGIN).as_secs())
                    .unwrap_or(i64::MAX),
            ),
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            image_pull_secrets: (!pull_secrets.is_empty()).then_some(pull_secrets),
            node_selector: options.node_selector.clone(),
            tolerations: options.tolerations.clone(),
            volumes: Some(vec![Volume {
                name: VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    size_limit: Some(output_size_limit(settings.max_output_bytes)),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            init_containers: Some(vec![Container {
                name: RUNNER.into(),
                image: Some(options.image.clone()),
                // Channel images are published under mutable tags: a node must not keep
                // reading an old image (the default policy pulls only `:latest` always).
                image_pull_policy: Some(
                    options
                        .image_pull_policy
                        .clone()
                        .unwrap_or_else(|| "Always".into()),
                ),
                command: options.command.clone(),
                args: options.args.clone(),
                env: options.env.clone(),
                env_from: options.env_from.clone(),
                security_context: Some(runner_security(options.security_context.as_ref())),
                resources: options.resources.clone(),
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
                security_context: Some(SecurityContext {
                    run_as_non_root: Some(true),
                    run_as_user: Some(DISPLAY_UID),
                    run_as_group: Some(DISPLAY_UID),
                    ..hardened()
                }),
                // display streams the file to its log: little CPU, a few MiB.
                resources: Some(ResourceRequirements {
                    requests: Some(quantities("10m", "16Mi")),
                    limits: Some(quantities("200m", "64Mi")),
                    ..Default::default()
                }),
                volume_mounts: mount(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// Whether the operator created this pod for the channel: its uid is the one the operator
/// recorded in the channel's status. Owner references, names and labels prove nothing
/// (whoever may create pods writes them); the status subresource is the operator's alone.
pub fn made_by_operator(pod: &Pod, channel: &ManagedOSVersionChannel) -> bool {
    let recorded = channel
        .status
        .as_ref()
        .and_then(|s| s.syncer_pod_uid.as_deref());
    recorded.is_some() && recorded == pod.metadata.uid.as_deref()
}

/// Why an existing pod of ours can no longer serve the channel's sync, if it can't.
pub fn stale_reason(
    pod: &Pod,
    channel: &ManagedOSVersionChannel,
    operator_image: &str,
) -> Option<String> {
    if !made_by_operator(pod, channel) {
        // Forged (or made by an operator that did not record its pods): never read, and
        // gone before the channel's own pod is created.
        return Some("its uid is not the one the operator recorded in the channel's status".into());
    }
    let image = pod.annotations().get(OPERATOR_IMAGE_ANNOTATION);
    if image.map(String::as_str) != Some(operator_image) {
        return Some(format!(
            "it was created by an operator with image {}",
            image.map_or("(unknown)", String::as_str)
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
pub enum PodState {
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

pub fn progress(pod: &Pod) -> PodState {
    let Some(status) = &pod.status else {
        return PodState::Working;
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
        return PodState::RunnerFailed {
            exit_code: t.exit_code,
            reason: t.reason.unwrap_or_default(),
        };
    }
    if let Some(t) = terminated(&display) {
        return if t.exit_code == 0 {
            // Stopped by a signal after printing: the log is still there to read.
            PodState::OutputReady { stopped: true }
        } else {
            PodState::DisplayFailed {
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
        return PodState::OutputReady { stopped: false };
    }
    if status.phase.as_deref() == Some("Failed") {
        let reason = [status.reason.as_deref(), status.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        return PodState::PodFailed {
            reason: if reason.is_empty() {
                "the pod failed".into()
            } else {
                reason
            },
        };
    }
    PodState::Working
}

fn runner_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == RUNNER)
}

/// The digest of the runner image that ran (`imageID`), as the node reports it.
pub fn runner_image_id(pod: &Pod) -> Option<String> {
    runner_status(pod)
        .map(|c| c.image_id.clone())
        .filter(|id| !id.is_empty())
}

/// When the runner finished, if it did.
pub fn runner_finished_at(pod: &Pod) -> Option<Time> {
    runner_status(pod)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?
        .finished_at
        .clone()
}

/// The statuses of a pod's init containers, then of its containers.
pub fn container_statuses(status: &PodStatus) -> impl Iterator<Item = &ContainerStatus> {
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
}

/// One line on where a pod that is still working is stuck, for a timeout message:
/// `runner: ImagePullBackOff: Back-off pulling image "x"`.
pub fn waiting_summary(pod: &Pod) -> String {
    let Some(status) = &pod.status else {
        return "the pod was never scheduled".into();
    };
    for c in container_statuses(status) {
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
mod tests;
