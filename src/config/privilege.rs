//! Which runner `securityContext` settings count as privileged.

use k8s_openapi::api::core::v1::SecurityContext;

/// What a runner `securityContext` asks for beyond a restricted container, as the field
/// that asks it and why: such a runner could escape its pod or act as root on the node,
/// which the channel's author may not be allowed in the namespace. The pod-level settings
/// of the syncer pod are the operator's own (no host namespaces, no hostPath, a fixed pod
/// `securityContext`); only the runner's container `securityContext` comes from the spec.
pub fn runner_privilege(sc: &SecurityContext) -> Option<(&'static str, String)> {
    if sc.privileged == Some(true) {
        return Some((
            "privileged",
            "true runs the runner with every capability and device of the node".into(),
        ));
    }
    if sc.allow_privilege_escalation == Some(true) {
        return Some((
            "allowPrivilegeEscalation",
            "true lets the runner's processes gain privileges (setuid binaries)".into(),
        ));
    }
    if let Some(add) = sc.capabilities.as_ref().and_then(|c| c.add.as_ref())
        && !add.is_empty()
    {
        return Some((
            "capabilities.add",
            format!(
                "[{}] adds capabilities to the runner",
                crate::text::head(&crate::text::list(add, ", "), 200)
            ),
        ));
    }
    if sc.run_as_user == Some(0) {
        return Some(("runAsUser", "0 runs the runner as root".into()));
    }
    // What Pod Security `baseline` forbids too: ways out of the container's confinement.
    if let Some(se) = &sc.se_linux_options {
        let allowed_type = se.type_.as_deref().is_none_or(|t| {
            [
                "",
                "container_t",
                "container_init_t",
                "container_kvm_t",
                "container_engine_t",
            ]
            .contains(&t)
        });
        let user_or_role = se.user.as_deref().is_some_and(|u| !u.is_empty())
            || se.role.as_deref().is_some_and(|r| !r.is_empty());
        if !allowed_type || user_or_role {
            return Some((
                "seLinuxOptions",
                "sets an SELinux type, user or role other than a container's".into(),
            ));
        }
    }
    // The rest refuse one setting each; the first that applies is the one reported.
    [
        (
            sc.proc_mount.as_deref().is_some_and(|p| p != "Default"),
            "procMount",
            "other than Default unmasks the node's /proc",
        ),
        (
            sc.seccomp_profile
                .as_ref()
                .is_some_and(|p| p.type_ == "Unconfined"),
            "seccompProfile.type",
            "Unconfined lifts the runner's system call filter",
        ),
        (
            sc.app_armor_profile
                .as_ref()
                .is_some_and(|p| p.type_ == "Unconfined"),
            "appArmorProfile.type",
            "Unconfined lifts the runner's AppArmor profile",
        ),
        (
            sc.windows_options
                .as_ref()
                .is_some_and(|w| w.host_process == Some(true)),
            "windowsOptions.hostProcess",
            "true runs the runner as a process of the node",
        ),
    ]
    .into_iter()
    .find(|(refused, _, _)| *refused)
    .map(|(_, field, why)| (field, why.into()))
}
