//! The phases after: the rights the operator holds, an upgrade that rolls the pod, an uninstall that keeps the CRDs.

use super::*;

/// The annotation that requests a sync (what `sync` and the webhook write).
pub(crate) const SYNC_REQUESTED_AT: &str = "rancheros.cattle.io/sync-requested-at";

/// Least privilege, as the API server's authorizer sees it: every rule of files/rbac.yaml
/// is granted where it should be, and nothing else is.
pub(crate) fn rbac_is_least(rel: &Release, watched: &str) {
    let ns = rel.ns.as_str();
    let w = Some(watched);
    // Each verb of each rule of the one source, for each of its names: in the watched
    // namespace, (the Lease's) in the release namespace and (the CRDs') cluster-wide.
    let granted = |rules: &Value, ns: Option<&str>| {
        let mut checked = 0;
        for rule in rules.as_array().unwrap() {
            let group = rule["apiGroups"][0].as_str().unwrap();
            let names: Vec<Option<&str>> = match rule["resourceNames"].as_array() {
                Some(n) => n.iter().map(|v| v.as_str()).collect(),
                None => vec![None],
            };
            for resource in rule["resources"].as_array().unwrap() {
                let (kind, sub) = match resource.as_str().unwrap().split_once('/') {
                    Some((kind, sub)) => (kind, Some(sub)),
                    None => (resource.as_str().unwrap(), None),
                };
                for name in &names {
                    let mut typ = if group.is_empty() {
                        kind.to_string()
                    } else {
                        format!("{kind}.{group}")
                    };
                    if let Some(name) = name {
                        typ = format!("{typ}/{name}");
                    }
                    if let Some(sub) = sub {
                        typ = format!("{typ}#{sub}");
                    }
                    for verb in rule["verbs"].as_array().unwrap() {
                        let verb = verb.as_str().unwrap();
                        assert!(
                            rel.can_i(verb, &typ, ns),
                            "{RBAC_FILE} grants {verb} {typ} {}, the API server says no to {}",
                            ns.map_or("cluster-wide".into(), |ns| format!("in {ns}")),
                            rel.sa()
                        );
                        checked += 1;
                    }
                }
            }
        }
        checked
    };
    let checked = granted(&expected_rules(), w)
        + granted(&expected_lease_rules(&rel.fullname()), Some(ns))
        + granted(&expected_crd_rules(), None)
        + granted(&expected_admission_rules(), None)
        + granted(&expected_review_rules(), None);
    eprintln!("{checked} granted verbs of {RBAC_FILE} confirmed");
    let lease_name = format!("leases/{}", rel.fullname());
    let channel_status = format!("{CHANNELS}#status");
    rel.assert_rights(&[
        ("get", CHANNELS, w, true),
        ("watch", CHANNELS, w, true),
        ("patch", &channel_status, w, true),
        ("get", VERSIONS, w, true),
        ("list", VERSIONS, w, true),
        ("watch", VERSIONS, w, true),
        ("create", VERSIONS, w, true),
        ("patch", VERSIONS, w, true),
        ("update", VERSIONS, w, true),
        ("delete", VERSIONS, w, true),
        ("create", "pods", w, true),
        ("delete", "pods", w, true),
        ("get", "pods#log", w, true),
        ("create", "events.events.k8s.io", w, true),
        ("create", "leases.coordination.k8s.io", Some(ns), true),
        ("patch", &lease_name, Some(ns), true),
        // Secrets by name only: those an oci channel names (imagePullSecrets, caSecretRef,
        // spec.verify), read at each pull; never listed or watched.
        ("get", "secrets", w, true),
        // Not: listing secrets, other kinds, other namespaces, its own channels' spec,
        // other Leases.
        ("list", "secrets", Some(ns), false),
        ("list", "secrets", None, false),
        // ConfigMaps (changelogs): read by name and written, never listed, watched or
        // deleted (the garbage collector removes them with their channel).
        ("get", "configmaps", w, true),
        ("list", "configmaps", w, false),
        ("watch", "configmaps", w, false),
        ("delete", "configmaps", w, false),
        ("create", "deployments.apps", w, false),
        ("create", "pods#exec", w, false),
        ("update", "pods", w, false),
        ("create", "serviceaccounts#token", w, false),
        ("create", CHANNELS, w, false),
        ("update", CHANNELS, w, false),
        ("delete", CHANNELS, w, false),
        ("update", &channel_status, w, false),
        ("create", "pods", Some(ns), false),
        ("list", "pods", Some("default"), false),
        ("list", CHANNELS, None, false),
        ("create", "leases.coordination.k8s.io", w, false),
        (
            "patch",
            "leases.coordination.k8s.io/someone-else",
            Some(ns),
            false,
        ),
        ("delete", &lease_name, Some(ns), false),
        ("create", "events", w, false),
        ("create", "events.events.k8s.io", Some("default"), false),
        (
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            None,
            false,
        ),
        ("escalate", "roles.rbac.authorization.k8s.io", w, false),
        ("list", "nodes", None, false),
    ]);
    // Watching some namespaces, the one cluster-wide grant is reading the two CRDs.
    crd_rights_are_least(rel);
    let crds = format!("{}-crds", rel.fullname());
    let bound = kubectl_json(&["get", "clusterrolebinding", &crds]);
    assert_eq!(bound["roleRef"]["name"], crds.as_str(), "{bound:#}");
    assert_eq!(
        bound["subjects"][0]["name"],
        rel.fullname().as_str(),
        "{bound:#}"
    );
}

/// An upgrade rolls the pod: the new one takes the Lease, and the restart starts no
/// sync (the channel's last sync stays as it was).
pub(crate) fn upgrade_rolls_the_pod(rel: &Release, watched: &str, synced: &Synced) {
    let diag = || rel.diagnostics();
    let pod_name = &synced.pod_name;
    // As it is now: the webhook phase made the sample channel sync again since install.
    let synced_at = channel_json(watched, "testchannel")["status"]["lastSyncedTime"].clone();
    let t0 = Instant::now();
    run(command("helm")
        .args(["upgrade", &rel.name])
        .arg(chart_dir())
        .args([
            "--namespace",
            &rel.ns,
            "--reset-then-reuse-values",
            "--wait",
            "--timeout",
            "180s",
        ])
        .args(["--set", "operator.logFormat=json"]));
    let new_pod = wait_for(
        "the upgraded pod to lead",
        Duration::from_secs(90),
        diag,
        || {
            let pods = rel.operator_pods();
            let items = pods["items"].as_array().unwrap();
            let [pod] = items.as_slice() else { return None };
            let name = pod["metadata"]["name"].as_str().unwrap().to_string();
            let lease = kubectl_json(&["get", "lease", &rel.fullname(), "--namespace", &rel.ns]);
            (name != *pod_name && lease["spec"]["holderIdentity"] == name.as_str()).then_some(name)
        },
    );
    eprintln!("helm upgrade, new leader {new_pod}: {:?}", t0.elapsed());
    let log = run(kubectl().args(["logs", &new_pod, "--namespace", &rel.ns]));
    assert!(
        log.lines().next().is_some_and(|l| l.starts_with('{')),
        "logFormat=json: {log}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let channel = channel_json(watched, "testchannel");
    assert_eq!(
        channel["status"]["lastSyncedTime"], synced_at,
        "a restart started a sync"
    );
}

/// Uninstall keeps the CRDs and what the operator made.
pub(crate) fn uninstall_keeps_crds_and_versions(rel: &Release, watched: &str) {
    let t0 = Instant::now();
    run(command("helm").args(["uninstall", &rel.name, "--namespace", &rel.ns, "--wait"]));
    eprintln!("helm uninstall --wait: {:?}", t0.elapsed());
    run(kubectl().args(["get", "crd", "managedosversions.rancheros.cattle.io"]));
    let left = versions_list(watched);
    assert_eq!(left["items"].as_array().unwrap().len(), 2);
    let roles = kubectl_json(&["get", "roles,rolebindings", "--namespace", watched]);
    assert!(roles["items"].as_array().unwrap().is_empty(), "{roles:#}");
    let crds = format!("{}-crds", rel.fullname());
    for kind in ["clusterrole", "clusterrolebinding"] {
        let out = output(kubectl().args(["get", kind, &crds]));
        assert!(!out.status.success(), "{kind} {crds} outlived the release");
    }
}
