//! The phases of an install: the CRD rights, a first sync, metrics and the webhook served.

use super::*;

/// The start of the operator's warning when RBAC forbids reading its CRDs
/// (`check_installed_crds` in src/commands/operator/mod.rs): the schema check did not run.
pub(crate) const CRD_CHECK_SKIPPED: &str = "not checking the installed CRDs against this build";

/// `kubectl auth can-i` resources for the CRDs: `TYPE/NAME` of each of the operator's two,
/// and the type alone.
pub(crate) const CRD_TYPE: &str = "customresourcedefinitions.apiextensions.k8s.io";

pub(crate) fn crd_resources() -> Vec<String> {
    crd_names()
        .iter()
        .map(|name| format!("{CRD_TYPE}/{name}"))
        .collect()
}

/// Cluster-wide, in every mode: get on the operator's two CRDs, nothing else on CRDs.
pub(crate) fn crd_rights_are_least(rel: &Release) {
    for crd in crd_resources() {
        assert!(
            rel.can_i("get", &crd, None),
            "{} cannot get {crd}: the operator's startup check of its CRDs would be skipped",
            rel.sa()
        );
        for verb in ["update", "patch", "delete", "watch"] {
            assert!(
                !rel.can_i(verb, &crd, None),
                "{} may {verb} {crd}",
                rel.sa()
            );
        }
    }
    let other = format!("{CRD_TYPE}/servicemonitors.monitoring.coreos.com");
    for (verb, resource) in [
        ("get", other.as_str()),
        ("get", CRD_TYPE),
        ("list", CRD_TYPE),
        ("watch", CRD_TYPE),
        ("create", CRD_TYPE),
        ("update", CRD_TYPE),
        ("delete", CRD_TYPE),
        ("deletecollection", CRD_TYPE),
    ] {
        assert!(
            !rel.can_i(verb, resource, None),
            "{} may {verb} {resource}",
            rel.sa()
        );
    }
}

/// What the first phase leaves for the others: the leading pod, the install's NOTES.
pub(crate) struct Synced {
    pub(crate) pod_name: String,
    pub(crate) notes: String,
}

/// `helm install --wait` watching `watched`; the pod leads; the sample channel syncs to
/// foo and bar, with Events; its syncer pod goes; json channels resolve names in-cluster.
pub(crate) fn install_and_sync(rel: &Release, watched: &str) -> Synced {
    let started = Instant::now();
    let watched = watched.to_string();
    let diag = || rel.diagnostics();
    // The ServiceAccount `metrics-scraper` of the release namespace may read /metrics.
    let scraper = format!(
        "metrics.readerSubjects[0].kind=ServiceAccount,metrics.readerSubjects[0].name={SCRAPER},metrics.readerSubjects[0].namespace={}",
        rel.ns
    );
    let notes = rel.install(&[
        "--set",
        "operator.retryDelay=5s,webhook.enabled=true",
        "--set",
        &scraper,
    ]);
    assert!(
        notes.contains(&format!("Watches ManagedOSVersionChannels in: {watched}")),
        "{notes}"
    );
    eprintln!("helm install --wait: {:?}", started.elapsed());

    // The operator runs as a pod under the chart's ServiceAccount and leads.
    let pods = rel.operator_pods();
    let pod = &pods["items"][0];
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(pod["spec"]["serviceAccountName"], rel.fullname());
    let lease = wait_for("the leader Lease", Duration::from_secs(60), diag, || {
        let lease = kubectl_json(&["get", "lease", &rel.fullname(), "--namespace", &rel.ns]);
        (lease["spec"]["holderIdentity"] == pod_name.as_str()).then_some(lease)
    });
    assert_eq!(lease["metadata"]["namespace"], rel.ns.as_str());
    // It checked the installed CRDs at start: the chart lets it read them, so no warning
    // that the check was skipped (a pod that leads got past the check; a mismatch would
    // have made it exit).
    let log = run(kubectl().args(["logs", &pod_name, "--namespace", &rel.ns]));
    assert!(
        !log.contains(CRD_CHECK_SKIPPED),
        "the operator could not check the CRDs under the chart's RBAC:\n{log}"
    );

    // The sample channel syncs to foo and bar.
    kubectl_apply(&sample_channel(&watched));
    let t0 = Instant::now();
    let versions = wait_for(
        "versions foo and bar",
        Duration::from_secs(120),
        diag,
        || {
            let list = versions_list(&watched);
            let names: BTreeSet<String> = item_names(&list).into_iter().collect();
            (names == BTreeSet::from(["bar".to_string(), "foo".to_string()])).then_some(list)
        },
    );
    eprintln!("sample channel synced in {:?}", t0.elapsed());
    for v in versions["items"].as_array().unwrap() {
        assert_eq!(
            v["metadata"]["labels"]["rancheros.cattle.io/channel"],
            "testchannel"
        );
        assert_eq!(
            v["metadata"]["ownerReferences"][0]["kind"],
            "ManagedOSVersionChannel"
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
    }
    let channel = wait_for(
        "Ready=True Synchronized",
        Duration::from_secs(60),
        diag,
        || {
            let ch = channel_json(&watched, "testchannel");
            matches!(ready_condition(&ch), Some((s, r, _)) if s == "True" && r == "Synchronized")
                .then_some(ch)
        },
    );
    assert_eq!(channel["status"]["syncedVersions"], 2, "{channel:#}");
    // Its Events were written, reported by this pod (POD_NAME from the downward API).
    let events = wait_for(
        "an Event on the channel",
        Duration::from_secs(30),
        diag,
        || {
            let list = kubectl_json(&["get", "events.events.k8s.io", "--namespace", &watched]);
            let ours: Vec<Value> = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| {
                    e["regarding"]["kind"] == "ManagedOSVersionChannel"
                        && e["regarding"]["name"] == "testchannel"
                        && e["reportingController"] == "rancheros-operator"
                })
                .cloned()
                .collect();
            (!ours.is_empty()).then_some(ours)
        },
    );
    assert_eq!(
        events[0]["reportingInstance"],
        pod_name.as_str(),
        "{events:#?}"
    );
    // The syncer pod is gone once the sync is done.
    wait_for(
        "the syncer pod to be deleted",
        Duration::from_secs(60),
        diag,
        || {
            let pods = kubectl_json(&["get", "pods", "--namespace", &watched]);
            pods["items"].as_array().unwrap().is_empty().then_some(())
        },
    );

    // Name resolution in the static scratch image: a json channel whose URL names the
    // `kubernetes` Service resolves and connects (plain HTTP to the API server's TLS port
    // is answered with 400), while a name the cluster DNS does not know fails as a DNS error.
    kubectl_apply(&format!(
        "apiVersion: rancheros.cattle.io/v1\nkind: ManagedOSVersionChannel\n\
         metadata: {{name: dns-known, namespace: {watched}}}\n\
         spec: {{type: json, options: {{uri: \"http://kubernetes.default.svc:443/\", timeout: 10s}}}}\n\
         ---\n\
         apiVersion: rancheros.cattle.io/v1\nkind: ManagedOSVersionChannel\n\
         metadata: {{name: dns-unknown, namespace: {watched}}}\n\
         spec: {{type: json, options: {{uri: \"http://no-such-service.default.svc.cluster.local/\", timeout: 10s}}}}\n"
    ));
    let failed = |name: &str| {
        wait_for(
            &format!("{name} FailedToSync"),
            Duration::from_secs(60),
            diag,
            || {
                let ch = channel_json(&watched, name);
                match ready_condition(&ch) {
                    Some((_, r, m)) if r == "FailedToSync" => Some(m),
                    _ => None,
                }
            },
        )
    };
    let known = failed("dns-known");
    // The API server's address is private: what it answered is withheld (json egress), but
    // the name resolved (an unresolved name says `cannot resolve`).
    assert!(
        (known.contains("HTTP 400") || known.contains("the request to a private address failed"))
            && !known.contains("resolve"),
        "kubernetes.default.svc did not resolve and connect: {known}"
    );
    let unknown = failed("dns-unknown");
    assert!(
        !unknown.contains("HTTP") && unknown.contains("failed to lookup address"),
        "an unknown name did not fail as a DNS error: {unknown}"
    );
    eprintln!("json channel via kubernetes.default.svc: {known}\nunknown name: {unknown}");
    Synced { pod_name, notes }
}

/// The ServiceAccount the install binds to the `-metrics-reader` ClusterRole.
pub(crate) const SCRAPER: &str = "metrics-scraper";

/// A token of the ServiceAccount `name` in `ns` (created if missing).
pub(crate) fn service_account_token(ns: &str, name: &str) -> String {
    let exists = output(kubectl().args(["get", "serviceaccount", name, "--namespace", ns]));
    if !exists.status.success() {
        run(kubectl().args(["create", "serviceaccount", name, "--namespace", ns]));
    }
    run(kubectl().args([
        "create",
        "token",
        name,
        "--namespace",
        ns,
        "--duration",
        "10m",
    ]))
    .trim()
    .to_string()
}

/// Metrics through the chart's Service, from the pod network: only for the scraper the
/// chart grants them (metrics.readerSubjects); a tenant's token gets 403, none 401.
pub(crate) fn metrics_are_served(rel: &Release) {
    let addr = service_address(rel, "metrics");
    let status = |answer: &str| answer.split(' ').nth(1).unwrap_or_default().to_string();
    let none = http_get(&addr, "/metrics");
    assert_eq!(status(&none), "401", "{none}");
    let tenant = service_account_token(&rel.namespaces[0], "default");
    let refused = http_get_as(&addr, "/metrics", Some(&tenant));
    assert_eq!(status(&refused), "403", "{refused}");
    for answer in [&none, &refused] {
        assert!(!answer.contains("rancheros_operator"), "{answer}");
    }
    let token = service_account_token(&rel.ns, SCRAPER);
    let metrics = http_get_as(&addr, "/metrics", Some(&token));
    assert_eq!(status(&metrics), "200", "{metrics}");
    assert!(metrics.contains("rancheros_operator_leader 1"), "{metrics}");
}

/// The token of the webhook Secret the chart generated.
pub(crate) fn webhook_token(rel: &Release) -> String {
    use base64::Engine;
    let secret = rel.object("secret", "webhook");
    let token = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["token"].as_str().unwrap())
        .unwrap();
    String::from_utf8(token).unwrap()
}

/// The registry webhook as the chart exposes it (`webhook.enabled`): through its Service, a
/// push without the token is refused and requests nothing; with the token of the Secret
/// the chart generated, a push of the sample channel's image is accepted and that channel
/// syncs again. Returns the token.
pub(crate) fn webhook_is_served(rel: &Release, watched: &str) -> String {
    let diag = || rel.diagnostics();
    let addr = service_address(rel, "webhook");
    let channel = || channel_json(watched, "testchannel");
    let requested = |c: &Value| c["metadata"]["annotations"][SYNC_REQUESTED_AT].clone();
    let before = channel();
    let runner =
        std::env::var("RANCHEROS_RUNNER_IMAGE").unwrap_or_else(|_| "rancheros-runner:test".into());
    let push = serde_json::json!({ "image": runner }).to_string();
    let refused = http_request(
        &addr,
        "POST",
        "/hook/registry",
        Some("not-the-token"),
        Some(&push),
    );
    assert!(
        refused.starts_with("HTTP/1.0 401") || refused.starts_with("HTTP/1.1 401"),
        "{refused}"
    );
    let refused = http_request(&addr, "POST", "/hook/registry", None, Some(&push));
    assert!(
        refused.starts_with("HTTP/1.0 401") || refused.starts_with("HTTP/1.1 401"),
        "{refused}"
    );
    assert_eq!(
        requested(&channel()),
        requested(&before),
        "a refused push requested a sync"
    );
    let token = webhook_token(rel);
    let accepted = http_request(&addr, "POST", "/hook/registry", Some(&token), Some(&push));
    assert!(
        accepted.starts_with("HTTP/1.0 202") || accepted.starts_with("HTTP/1.1 202"),
        "{accepted}"
    );
    let synced_at = before["status"]["lastSyncedTime"].clone();
    wait_for(
        "the pushed image's channel to sync again",
        Duration::from_secs(90),
        diag,
        || {
            let c = channel();
            (!requested(&c).is_null()
                && requested(&c) != requested(&before)
                && c["status"]["lastSyncedTime"] != synced_at)
                .then_some(())
        },
    );
    token
}
