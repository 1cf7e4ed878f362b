//! Who may read the metrics: TokenReview and SubjectAccessReview against tokens.

use super::*;

// ---------------------------------------------------------------------------------------
// Who may read /metrics (every namespace's channel names are in it)

/// A ServiceAccount of the namespace and a token of it.
async fn service_account_token(t: &TestNs, name: &str) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(t.client.clone(), &t.ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap_or_else(|e| panic!("creating ServiceAccount {name}: {e}"));
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // The API server's own audience, as a pod's projected token has.
            audiences: vec![],
            expiration_seconds: Some(600),
            ..Default::default()
        },
        ..Default::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token of {name}: {e}"))
        .status
        .expect("a TokenRequest's status")
        .token
}

/// A ClusterRole granting `get /metrics` (what the chart's `-metrics-reader` grants),
/// bound to the namespace's ServiceAccount `account`; deleted on drop.
struct MetricsReader {
    name: String,
}

impl MetricsReader {
    async fn grant(t: &TestNs, account: &str) -> Self {
        use k8s_openapi::api::authorization::v1::SubjectAccessReview;
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        let name = format!("{}-metrics-reader", t.ns);
        let roles: Api<ClusterRole> = Api::all(t.client.clone());
        let role = json!({
            "metadata": {"name": name},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        });
        create_json(&roles, role, "the metrics reader ClusterRole").await;
        let bindings: Api<ClusterRoleBinding> = Api::all(t.client.clone());
        let binding = json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": t.ns}],
        });
        create_json(&bindings, binding, "the metrics reader ClusterRoleBinding").await;
        // Once the authorizer has the binding (the operator's first answer is cached).
        let reviews: Api<SubjectAccessReview> = Api::all(t.client.clone());
        let user = format!("system:serviceaccount:{}:{account}", t.ns);
        let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
            "user": user,
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{}", t.ns), "system:authenticated"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        }}))
        .unwrap();
        t.eventually("the metrics-reader binding in effect", SYNC, || async {
            let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
            answer.status.is_some_and(|s| s.allowed).then_some(())
        })
        .await;
        MetricsReader { name }
    }
}

impl Drop for MetricsReader {
    fn drop(&mut self) {
        for kind in ["clusterrolebinding", "clusterrole"] {
            let _ = std::process::Command::new("kubectl")
                .args([
                    "delete",
                    kind,
                    &self.name,
                    "--ignore-not-found",
                    "--wait=false",
                ])
                .output();
        }
    }
}

/// An operator for the namespace serving metrics (as it does by default: reviewed) on a
/// port of its own, and the namespace's channel `ch` synced; the port.
async fn reviewed_operator(t: &mut TestNs, extra: &[&str]) -> u16 {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut args = vec![format!("--metrics-address=127.0.0.1:{port}")];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    t.start_operator(&args);
    if t.channels().get_opt("ch").await.unwrap().is_none() {
        let script = write_script(&channel_data(&[("ch-v1", "v1")]));
        t.create_channel("ch", custom_spec(&script)).await;
    }
    t.wait_ready("ch", "Synchronized", SYNC).await;
    port
}

#[tokio::test]
async fn a_tenants_service_account_token_gets_403_and_no_metrics_only_a_metrics_reader_gets_them() {
    let mut t = TestNs::new("metrics-auth").await;
    let tenant = service_account_token(&t, "tenant").await;
    let scraper = service_account_token(&t, "scraper").await;
    let _reader = MetricsReader::grant(&t, "scraper").await;
    let port = reviewed_operator(&mut t, &[]).await;
    let series = format!("namespace=\"{}\",name=\"ch\"", t.ns);
    // The granted scraper: the channel's series.
    let (status, text) = t
        .eventually(
            "the reader's scrape with the channel's series",
            SYNC,
            || async {
                let (status, text) = http_get(port, "/metrics", Some(&scraper)).await?;
                text.contains(&series).then_some((status, text))
            },
        )
        .await;
    assert!(status.contains(" 200"), "{status}\n{text}");
    assert!(
        text.contains(&format!("rancheros_operator_channel_ready{{{series}}} 1")),
        "{text}"
    );
    // Everyone else: no metrics text at all.
    let oversized = "a".repeat(9 * 1024);
    for (who, token, code) in [
        ("a tenant's ServiceAccount", Some(tenant.as_str()), " 403 "),
        ("no token", None, " 401 "),
        ("a made-up token", Some("not-a-token"), " 401 "),
        ("an oversized token", Some(oversized.as_str()), " 401 "),
    ] {
        let (status, text) = http_get(port, "/metrics", token)
            .await
            .expect("/metrics answers");
        assert!(status.contains(code), "{who}: {status}\n{text}");
        assert!(
            !text.contains("rancheros_operator") && !text.contains("name=\"ch\""),
            "{who} got metrics: {text}"
        );
    }
    let (_, text) = http_get(port, "/metrics", Some(&tenant)).await.unwrap();
    assert!(
        text.contains(&format!(
            "system:serviceaccount:{}:tenant is not allowed",
            t.ns
        )),
        "{text}"
    );
    // The kubelet's probes carry no token.
    for probe in ["/healthz", "/readyz"] {
        let (status, _) = http_get(port, probe, None).await.unwrap();
        assert!(status.contains(" 200"), "{probe}: {status}");
    }
    assert!(
        t.operator_log()
            .contains("/metrics answers only callers the cluster authorises"),
        "{}",
        t.operator_log()
    );

    // --metrics-insecure: open to a caller without a token, and said so in the log.
    t.kill_operator();
    let port = reviewed_operator(&mut t, &["--metrics-insecure"]).await;
    let text = t
        .eventually("an open scrape with the channel's series", SYNC, || async {
            let (status, text) = http_get(port, "/metrics", None).await?;
            (status.contains(" 200") && text.contains(&series)).then_some(text)
        })
        .await;
    assert!(text.contains("rancheros_operator_build_info"), "{text}");
    assert!(
        t.operator_log().contains("(--metrics-insecure)"),
        "{}",
        t.operator_log()
    );
    t.cleanup().await;
}

#[tokio::test]
async fn a_flood_of_made_up_tokens_gets_no_metrics_and_the_metrics_reader_is_still_served() {
    let mut t = TestNs::new("metrics-flood").await;
    let scraper = service_account_token(&t, "scraper").await;
    let _reader = MetricsReader::grant(&t, "scraper").await;
    let port = reviewed_operator(&mut t, &[]).await;
    // 400 distinct made-up tokens, 25 at a time (within one peer's share of connections):
    // each one is a review the operator must not let pile up (at most a few at once; the
    // rest 503 at once), never metrics.
    let nonce = std::process::id();
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for batch in 0..16 {
        let calls = (0..25).map(|i| {
            let token = format!("made-up-{nonce}-{batch}-{i}");
            async move { http_get(port, "/metrics", Some(&token)).await }
        });
        for answer in futures::future::join_all(calls).await {
            let (status, text) = answer.expect("/metrics answers during the flood");
            assert!(!text.contains("rancheros_operator"), "{status}: {text}");
            let code = status.split(' ').nth(1).unwrap_or_default().to_string();
            *codes.entry(code).or_default() += 1;
        }
    }
    eprintln!("answers to 400 made-up tokens: {codes:?}");
    assert!(codes.keys().all(|c| c == "401" || c == "503"), "{codes:?}");
    // 25 callers at once against 4 reviews: most are turned away without a review (an
    // operator that reviewed them all would answer 401 to every one).
    assert!(codes.get("401").is_some_and(|n| *n > 0), "{codes:?}");
    assert!(codes.get("503").is_some_and(|n| *n > 0), "{codes:?}");
    // The reader gets its metrics right after, and the operator stood.
    let text = t
        .eventually("the reader's scrape after the flood", SYNC, || async {
            let (status, text) = http_get(port, "/metrics", Some(&scraper)).await?;
            status.contains(" 200").then_some(text)
        })
        .await;
    assert!(text.contains("name=\"ch\""), "{text}");
    assert!(t.operator_running(), "{}", t.operator_log());
    t.cleanup().await;
}
