//! Channel images re-pushed to a registry, and the registry's push webhook.

use super::*;

// ---------------------------------------------------------------------------------------
// 1. A re-pushed channel tag is seen

#[tokio::test]
async fn a_re_pushed_channel_tag_is_seen_on_the_next_sync() {
    let registry = Registry::from_env();
    let mut t = TestNs::new("re-pushed-tag").await;
    registry.pull_secret(&t, "regcred").await;
    // A repository of its own: the node has never pulled this tag.
    let image = format!(
        "{}/channels/sl-micro-{}:6.1-baremetal",
        registry.addr,
        nonce()
    );
    let first = registry.push_channel(&image, &[("a", "v1")]).await;
    t.start_operator(&[]);
    // The channel image prints what it was built with; no imagePullPolicy (default Always).
    let mut spec = custom_spec("echo \"$CHANNEL_DATA\" > /output/data");
    let options = spec["options"].as_object_mut().unwrap();
    options.remove("imagePullPolicy");
    options.insert("image".into(), json!(image));
    options.insert("imagePullSecrets".into(), json!([{"name": "regcred"}]));
    let synced = t.create_synced("ch", spec, SYNC).await;
    assert_eq!(t.version_names().await, ["a"]);
    let revision = synced.status.as_ref().unwrap().source_revision.clone();
    assert!(
        revision.as_deref().is_some_and(|r| r.ends_with(&first)),
        "sourceRevision {revision:?} is not the pushed digest {first}"
    );

    // The same tag, pushed again with one more version.
    let second = registry
        .push_channel(&image, &[("a", "v1"), ("b", "v2")])
        .await;
    assert_ne!(first, second);
    let ch = t.sync_again("ch", "after-the-re-push", &synced, SYNC).await;
    assert_reason(&ch, "Synchronized");
    let message = ready_message(&ch);
    assert_eq!(
        message, "synchronized 2 versions (1 created)",
        "the re-pushed image was not read"
    );
    assert_eq!(t.version_names().await, ["a", "b"]);
    let revision = ch.status.as_ref().unwrap().source_revision.clone();
    assert!(
        revision.as_deref().is_some_and(|r| r.ends_with(&second)),
        "sourceRevision {revision:?} is not the re-pushed digest {second}"
    );
    t.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// 1b. A push to the registry syncs the channels whose image it names

/// The address the test registry notifies pushes to (its `notifications` endpoint), and
/// the bearer token it sends; one test at a time listens there.
fn registry_webhook() -> (String, String) {
    (
        registry_env("RANCHEROS_TEST_WEBHOOK_ADDR"),
        registry_env("RANCHEROS_TEST_WEBHOOK_TOKEN_FILE"),
    )
}

/// A custom channel reading `image` from the registry (default pull policy, Always) with
/// the test's pull secret; it syncs only when asked (interval 1h).
fn registry_channel(image: &str) -> Value {
    let mut spec = custom_spec("echo \"$CHANNEL_DATA\" > /output/data");
    spec["syncInterval"] = json!("1h");
    let options = spec["options"].as_object_mut().unwrap();
    options.remove("imagePullPolicy");
    options.insert("image".into(), json!(image));
    options.insert("imagePullSecrets".into(), json!([{"name": "regcred"}]));
    spec
}

#[tokio::test]
async fn a_push_to_the_registry_syncs_the_channels_whose_image_it_names() {
    let registry = Registry::from_env();
    let (hook_addr, token_file) = registry_webhook();
    let mut t = TestNs::new("registry-push").await;
    registry.pull_secret(&t, "regcred").await;
    t.start_operator(&[
        &format!("--webhook-address={hook_addr}"),
        &format!("--webhook-token-file={token_file}"),
    ]);
    let image = format!("{}/hook/channel-{}:v1", registry.addr, nonce());
    registry.push_channel(&image, &[("a", "v1")]).await;
    t.create_channel("moved", registry_channel(&image)).await;
    // Another tag of the registry that nobody pushes during the test.
    let mut other = registry_channel(&format!("{}/private/runner:with-secret", registry.addr));
    other["options"]["args"] = json!([write_script(&channel_data(&[("o", "v1")]))]);
    t.create_channel("other", other).await;
    t.wait_ready("moved", "Synchronized", SYNC).await;
    t.wait_ready("other", "Synchronized", SYNC).await;
    assert_eq!(t.version_names().await, ["a", "o"]);

    // The same tag pushed again with one more version: the registry notifies the push,
    // and nothing else asks for a sync (no annotation from the test, interval 1h).
    let push_began = k8s_openapi::jiff::Timestamp::now();
    let pushed = std::time::Instant::now();
    registry
        .push_channel(&image, &[("a", "v1"), ("b", "v2")])
        .await;
    let push_took = pushed.elapsed();
    t.eventually("the push to sync the channel", SYNC, || async {
        let names = t.version_names().await;
        names.contains(&"b".to_string()).then_some(())
    })
    .await;
    let ch = t.wait_ready("moved", "Synchronized", SYNC).await;
    eprintln!(
        "push-to-Synchronized: {:.1} s after the push ended ({:.1} s to push)",
        pushed.elapsed().saturating_sub(push_took).as_secs_f64(),
        push_took.as_secs_f64()
    );
    let requested = ch
        .annotations()
        .get(rancheros_operator::api::SYNC_REQUESTED_AT_ANNOTATION)
        .cloned();
    assert!(
        requested.is_some(),
        "the sync was not requested by the webhook"
    );
    assert!(
        t.operator_log()
            .contains("a registry push requested a sync"),
        "{}",
        t.operator_log()
    );
    // A push of another tag requests nothing of the other channel. (The registry keeps the
    // events of pushes made while nobody listened, such as the cluster's own push of the
    // runner image, and delivers them once the operator listens: a request for the other
    // channel may come from those, never from this push.)
    let other_now = t.channel("other").await;
    if let Some(asked) = other_now
        .annotations()
        .get(rancheros_operator::api::SYNC_REQUESTED_AT_ANNOTATION)
    {
        let asked: k8s_openapi::jiff::Timestamp = asked.parse().unwrap();
        assert!(
            asked < push_began,
            "the other channel was asked to sync ({asked}) by a push that does not name its tag"
        );
    }
    t.cleanup().await;
}

/// `curl -X POST` to the webhook: the status code and the body.
fn post_hook(port: u16, token: Option<&str>, body: &str) -> (u16, String) {
    let mut curl = Command::new("curl");
    curl.args([
        "-s",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "-X",
        "POST",
        "--max-time",
        "20",
    ])
    .args([
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        body,
    ]);
    if let Some(token) = token {
        curl.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    // Not `run`: before the webhook listens, curl fails (and the code is 000).
    let out = curl
        .arg(format!("http://127.0.0.1:{port}/hook/registry"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", out.trim()));
    (code.parse().unwrap_or(0), body.trim_end().to_string())
}

#[tokio::test]
async fn the_webhook_refuses_what_is_not_an_authenticated_push_and_changes_nothing() {
    let registry = Registry::from_env();
    let mut t = TestNs::new("hook-refusals").await;
    registry.pull_secret(&t, "regcred").await;
    let dir = work_dir("hook-token");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "the-token\n").unwrap();
    let port = free_port();
    t.start_operator(&[
        &format!("--webhook-address=127.0.0.1:{port}"),
        &format!("--webhook-token-file={}", token_file.display()),
    ]);
    let image = format!("{}/private/runner:with-secret", registry.addr);
    let mut spec = registry_channel(&image);
    spec["options"]["args"] = json!([write_script(&channel_data(&[("a", "v1")]))]);
    let before = t.create_synced("ch", spec, SYNC).await;
    let push = json!({"image": image}).to_string();
    t.eventually("the webhook to listen", SYNC, || async {
        (post_hook(port, None, "{}").0 != 0).then_some(())
    })
    .await;

    for (token, body, code) in [
        (None, push.as_str(), 401),
        (Some("the-token-not"), push.as_str(), 401),
        (Some("the-token"), "{not json", 400),
        (Some("the-token"), r#"{"what": "else"}"#, 400),
        (Some("the-token"), r#"{"image": "NOT A REFERENCE"}"#, 400),
    ] {
        let (got, answer) = post_hook(port, token, body);
        assert_eq!(got, code, "{token:?} {body}: {answer}");
        assert!(answer.len() < 300 && !answer.contains("\u{1b}"), "{answer}");
    }
    // A push of another tag of the same repository: accepted, nothing requested.
    let (got, answer) = post_hook(
        port,
        Some("the-token"),
        &json!({"image": format!("{}/private/runner:without-secret", registry.addr)}).to_string(),
    );
    assert_eq!(
        (got, answer.as_str()),
        (202, r#"{"channels":0,"pushes":1}"#)
    );
    let ch = t.channel("ch").await;
    assert_eq!(
        ch.annotations()
            .get(rancheros_operator::api::SYNC_REQUESTED_AT_ANNOTATION),
        None,
        "a refused request asked for a sync"
    );
    assert_eq!(attempt_time(&ch), attempt_time(&before));

    // The token file is read per request: a rotated token works at once, the old one not.
    std::fs::write(&token_file, "rotated\n").unwrap();
    assert_eq!(post_hook(port, Some("the-token"), &push).0, 401);
    let (got, answer) = post_hook(port, Some("rotated"), &push);
    assert_eq!(
        (got, answer.as_str()),
        (202, r#"{"channels":1,"pushes":1}"#)
    );
    t.wait_next_attempt("ch", &before, SYNC).await;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
}
