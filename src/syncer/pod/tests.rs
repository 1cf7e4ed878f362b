use super::*;
use serde_json::json;

fn pod_with_status(status: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "c"}, "status": status})).unwrap()
}

#[test]
fn progress_from_status() {
    assert_eq!(
        progress(&pod_with_status(json!({"phase": "Pending"}))),
        PodState::Working
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
        PodState::RunnerFailed {
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
    assert_eq!(progress(&ready), PodState::OutputReady { stopped: false });
    let evicted = pod_with_status(
        json!({"phase": "Failed", "reason": "DeadlineExceeded", "message": "too slow"}),
    );
    assert_eq!(
        progress(&evicted),
        PodState::PodFailed {
            reason: "DeadlineExceeded: too slow".into()
        }
    );
}

/// Every rule of the Pod Security Standard `restricted` (Kubernetes 1.25+) that a pod
/// spec can break, as the PodSecurity admission plugin checks them.
fn restricted_violations(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.as_ref().unwrap();
    let pod_sc = spec.security_context.clone().unwrap_or_default();
    let mut out = Vec::new();
    if spec.host_network == Some(true) || spec.host_pid == Some(true) || spec.host_ipc == Some(true)
    {
        out.push("host namespaces".to_string());
    }
    for v in spec.volumes.iter().flatten() {
        let allowed = v.empty_dir.is_some()
            || v.config_map.is_some()
            || v.secret.is_some()
            || v.projected.is_some()
            || v.downward_api.is_some()
            || v.persistent_volume_claim.is_some()
            || v.ephemeral.is_some()
            || v.csi.is_some();
        if !allowed {
            out.push(format!("volume {}", v.name));
        }
    }
    if pod_sc.run_as_user == Some(0) {
        out.push("pod runAsUser 0".into());
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in containers {
        let sc = c.security_context.clone().unwrap_or_default();
        let n = &c.name;
        if sc.privileged == Some(true) {
            out.push(format!("{n}: privileged"));
        }
        if sc.allow_privilege_escalation != Some(false) {
            out.push(format!("{n}: allowPrivilegeEscalation"));
        }
        let caps = sc.capabilities.clone().unwrap_or_default();
        if !caps.drop.iter().flatten().any(|d| d == "ALL") {
            out.push(format!("{n}: capabilities.drop ALL"));
        }
        if caps.add.iter().flatten().any(|a| a != "NET_BIND_SERVICE") {
            out.push(format!("{n}: capabilities.add"));
        }
        if sc.run_as_non_root.or(pod_sc.run_as_non_root) != Some(true) {
            out.push(format!("{n}: runAsNonRoot"));
        }
        if sc.run_as_user == Some(0) {
            out.push(format!("{n}: runAsUser 0"));
        }
        let seccomp = sc.seccomp_profile.or(pod_sc.seccomp_profile.clone());
        if !seccomp.is_some_and(|s| s.type_ == "RuntimeDefault" || s.type_ == "Localhost") {
            out.push(format!("{n}: seccompProfile"));
        }
        if c.ports.iter().flatten().any(|p| p.host_port.is_some()) {
            out.push(format!("{n}: hostPort"));
        }
    }
    out
}

fn options(extra: serde_json::Value) -> CustomOptions {
    let mut spec = json!({"type": "custom", "options": {"image": "runner:1"}});
    for (k, v) in extra.as_object().unwrap() {
        spec["options"][k] = v.clone();
    }
    let spec = serde_json::from_value(spec).unwrap();
    match crate::config::resolve(&spec, &Default::default())
        .unwrap()
        .source
    {
        crate::config::Source::Custom(o) => *o,
        _ => unreachable!(),
    }
}

fn settings(image: &str) -> Settings {
    Settings {
        operator_image: image.into(),
        ..crate::syncer::tests::settings()
    }
}

fn channel() -> ManagedOSVersionChannel {
    crate::syncer::tests::channel(json!({"type": "custom", "options": {"image": "runner:1"}}))
}

#[test]
fn the_pod_meets_the_restricted_profile_when_the_runner_runs_as_non_root() {
    let pod = build(
        &channel(),
        &options(json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 1000}})),
        &settings("op:1"),
        Duration::from_secs(60),
    );
    assert_eq!(restricted_violations(&pod), Vec::<String>::new());
    // By default only the runner's user is left open (it may need root).
    let pod = build(
        &channel(),
        &options(json!({})),
        &settings("op:1"),
        Duration::from_secs(60),
    );
    assert_eq!(restricted_violations(&pod), ["runner: runAsNonRoot"]);
}

#[test]
fn channel_options_reach_the_pod() {
    let pod = build(
        &channel(),
        &options(json!({
            "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": false},
            "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}},
            "imagePullSecrets": [{"name": "regcred"}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "os", "effect": "NoSchedule"}]
        })),
        &settings("op:1"),
        Duration::from_secs(60),
    );
    let pod = serde_json::to_value(pod).unwrap();
    let spec = &pod["spec"];
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(spec["tolerations"][0]["key"], "dedicated");
    let runner = &spec["initContainers"][0];
    assert_eq!(runner["resources"]["limits"]["memory"], "32Mi");
    // The channel's settings are laid over the hardened default, field by field.
    assert_eq!(
        runner["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
               "readOnlyRootFilesystem": false, "runAsUser": 1000})
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

#[test]
fn the_runner_always_drops_all_and_the_output_volume_has_a_size_limit() {
    for (caps, want) in [
        (json!({"drop": []}), json!({"drop": ["ALL"]})),
        (json!({}), json!({"drop": ["ALL"]})),
        (
            json!({"drop": ["NET_RAW"]}),
            json!({"drop": ["ALL", "NET_RAW"]}),
        ),
        (
            json!({"drop": ["CHOWN"]}),
            json!({"drop": ["ALL", "CHOWN"]}),
        ),
    ] {
        let pod = build(
            &channel(),
            &options(json!({"securityContext": {"capabilities": caps.clone()}})),
            &settings("op:1"),
            Duration::from_secs(60),
        );
        let pod = serde_json::to_value(pod).unwrap();
        let runner = &pod["spec"]["initContainers"][0];
        assert_eq!(runner["securityContext"]["capabilities"], want, "{caps}");
    }
    let pod = serde_json::to_value(build(
        &channel(),
        &options(json!({})),
        &settings("op:1"),
        Duration::from_secs(60),
    ))
    .unwrap();
    let max = settings("op:1").max_output_bytes;
    assert_eq!(
        pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"],
        (2 * max).to_string()
    );
    assert_eq!(output_size_limit(10).0, "1048576");
    assert_eq!(output_size_limit(u64::MAX).0, u64::MAX.to_string());
}
