//! Registries of a private CA, with token auth, and one that stalls mid-layer.

use super::*;

// ---------------------------------------------------------------------------------------
// The TLS registries of `scripts/cluster` (certificates of a test CA of their own): one
// with basic auth, one with the token flow (the distribution project's token server).

pub(super) fn env_of(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: eval \"$(scripts/cluster env)\" (a cluster brought up before \
             the TLS registries existed gets them with scripts/cluster registries)"
        )
    })
}

/// The test CA of the TLS registries (PEM).
fn registry_ca() -> String {
    let path = env_of("RANCHEROS_TEST_REGISTRY_CA");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A directory holding the test CA only: skopeo takes every `*.crt` there for a root (and
/// a `*.key` for a client key, so not the CA's own directory).
pub(crate) fn ca_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("registry-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), registry_ca()).unwrap();
        dir
    })
    .clone()
}

/// A CA that signed nothing the registries serve.
fn other_ca() -> String {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("other-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    run_ok(
        Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=another-ca",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ])
            .current_dir(&dir),
        "openssl",
    );
    std::fs::read_to_string(dir.join("ca.crt")).unwrap()
}

async fn ca_secret(t: &TestNs, name: &str, pem: &str) {
    t.create_secret(name, None, json!({"ca.crt": pem})).await;
}

/// An oci channel of a TLS registry (`extra` adds to or replaces its options).
fn tls_oci(image: &str, extra: Value) -> Value {
    let mut options = json!({"insecure": false, "caSecretRef": {"name": "registry-ca"}});
    options
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    oci(image, options)
}

/// Waits for the sync that `request_sync` asks for; its channel.
/// The channel's Ready reason, that its message holds `part`, and its sourceRevision.
fn assert_outcome(
    ch: rancheros_operator::api::ManagedOSVersionChannel,
    reason: &str,
    part: &str,
    revision: &str,
) {
    let message = ready_message(&ch);
    assert_eq!(ready_reason(&ch).as_deref(), Some(reason), "{message}");
    assert!(message.contains(part), "{message}\nwant: {part}");
    assert_eq!(ch.status.unwrap().source_revision.unwrap(), revision);
}

async fn resync(
    t: &TestNs,
    name: &str,
    why: &str,
) -> rancheros_operator::api::ManagedOSVersionChannel {
    let before = t.channel(name).await;
    t.sync_again(name, why, &before, SYNC).await
}

#[tokio::test]
async fn a_registry_of_a_private_ca_is_trusted_through_ca_secret_ref_only() {
    let mut t = TestNs::new("oci-tls").await;
    let reg = env_of("RANCHEROS_TEST_REGISTRY_TLS");
    let repo = format!("{}/channel", t.ns);
    let first = push_channel_to(&reg, &repo, "v1", &elemental(&["tls-a", "tls-b"]));
    let (u, p) = creds();
    pull_secret_for(&t, "pull", &reg, &u, &p).await;
    ca_secret(&t, "registry-ca", &registry_ca()).await;
    ca_secret(&t, "other-ca", &other_ca()).await;
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
    let image = format!("{reg}/{repo}:v1");
    t.create_channel("private", tls_oci(&image, json!({})))
        .await;
    t.create_channel(
        "system-roots",
        tls_oci(&image, json!({"caSecretRef": null})),
    )
    .await;
    t.create_channel(
        "other-ca",
        tls_oci(&image, json!({"caSecretRef": {"name": "other-ca"}})),
    )
    .await;
    let ch = t.wait_ready("private", "Synchronized", SYNC).await;
    assert_eq!(
        ch.status.unwrap().source_revision.unwrap(),
        format!("v1@{first}")
    );
    let untrusted =
        format!("pulling {image}: TLS with {reg} failed: invalid peer certificate: UnknownIssuer");
    for name in ["system-roots", "other-ca"] {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        let got = ready_message(&ch);
        assert!(got.contains(&untrusted), "{name}: {got}\nwant: {untrusted}");
    }
    assert_eq!(t.version_names().await, ["tls-a", "tls-b"]);

    // The tag moves on, and the channel's CA Secret now holds another CA: refused, nothing
    // changed (the revision neither).
    let second = push_channel_to(&reg, &repo, "v1", &elemental(&["tls-a", "tls-b", "tls-c"]));
    t.patch_secret("registry-ca", json!({"ca.crt": other_ca()}))
        .await;
    let ch = resync(&t, "private", "other-ca").await;
    assert_outcome(ch, "FailedToSync", &untrusted, &format!("v1@{first}"));
    assert_eq!(t.version_names().await, ["tls-a", "tls-b"]);
    // The right CA again: the new data is read.
    t.patch_secret("registry-ca", json!({"ca.crt": registry_ca()}))
        .await;
    let ch = resync(&t, "private", "registry-ca").await;
    assert_outcome(ch, "Synchronized", "", &format!("v1@{second}"));
    assert_eq!(t.version_names().await, ["tls-a", "tls-b", "tls-c"]);
    cleanup_podless(t).await;
}

#[tokio::test]
async fn a_token_auth_registry_is_read_with_the_token_flow() {
    let mut t = TestNs::new("oci-token").await;
    let reg = env_of("RANCHEROS_TEST_REGISTRY_TOKEN");
    let (u, p) = creds();
    // The token server grants a user the repositories under its own name only.
    let repo = format!("{u}/{}/channel", t.ns);
    let first = push_channel_to(&reg, &repo, "v1", &elemental(&["token-a"]));
    pull_secret_for(&t, "pull", &reg, &u, &p).await;
    ca_secret(&t, "registry-ca", &registry_ca()).await;
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
    let image = format!("{reg}/{repo}:v1");
    let elsewhere = format!("{reg}/{}/channel:v1", t.ns);
    t.create_channel("token", tls_oci(&image, json!({}))).await;
    t.create_channel(
        "anonymous",
        tls_oci(&image, json!({"imagePullSecrets": []})),
    )
    .await;
    t.create_channel("not-granted", tls_oci(&elsewhere, json!({})))
        .await;
    let ch = t.wait_ready("token", "Synchronized", SYNC).await;
    assert_eq!(
        ch.status.unwrap().source_revision.unwrap(),
        format!("v1@{first}")
    );
    let cases = [
        (
            "anonymous",
            format!(
                "pulling {image}: 401 unauthorized for {reg}/{repo} (no credentials for it in imagePullSecrets)"
            ),
        ),
        (
            "not-granted",
            format!(
                "pulling {elsewhere}: 401 unauthorized for {reg}/{}/channel (the registry's token for the credentials of imagePullSecrets does not grant pulling it)",
                t.ns
            ),
        ),
    ];
    for (name, want) in &cases {
        let ch = t.wait_ready(name, "FailedToSync", SYNC).await;
        let got = ready_message(&ch);
        assert!(got.contains(want.as_str()), "{name}: {got}\nwant: {want}");
    }
    assert_eq!(t.version_names().await, ["token-a"]);

    // The tag moves on, and the pull Secret now holds a wrong password: the token server
    // refuses it, nothing changed.
    push_channel_to(&reg, &repo, "v1", &elemental(&["token-a", "token-b"]));
    let wrong = json!({"auths": {&reg: {"username": u, "password": "not-the-password"}}});
    t.patch_secret("pull", json!({".dockerconfigjson": wrong.to_string()}))
        .await;
    let ch = resync(&t, "token", "wrong-password").await;
    let want = format!(
        "pulling {image}: 401 unauthorized for {reg}/{repo} (the registry refused the credentials of imagePullSecrets)"
    );
    assert_outcome(ch, "FailedToSync", &want, &format!("v1@{first}"));
    assert_eq!(t.version_names().await, ["token-a"]);
    cleanup_podless(t).await;
}

/// A TCP proxy in front of the test registry that passes requests whole and answers
/// until `after` bytes of a connection's answers have passed; then it sends nothing more
/// and holds the connection open: a registry that stalls mid-layer. `stalled` is set when
/// it does.
async fn stalling_proxy(
    after: usize,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let stalled = stalled.clone();
            tokio::spawn(async move {
                let Ok(upstream) = tokio::net::TcpStream::connect(registry()).await else {
                    return;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_registry, mut to_registry) = upstream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_client, &mut to_registry).await;
                });
                let (mut sent, mut buf) = (0usize, vec![0u8; 16 << 10]);
                loop {
                    let n = match from_registry.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n.min(after - sent),
                    };
                    if n == 0 {
                        stalled.store(true, std::sync::atomic::Ordering::SeqCst);
                        // Held open and silent (for the rest of the test binary).
                        std::future::pending::<()>().await;
                    }
                    if to_client.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    sent += n;
                }
            });
        }
    });
    address
}

/// `n` bytes that do not compress (xorshift), so a gzip'd layer of them is `n` on the wire.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn a_registry_that_stalls_mid_layer_fails_that_pull_alone_after_the_idle_bound() {
    let mut t = TestNs::new("oci-stall").await;
    let ns = t.ns.clone();
    let l = Layout::new(&format!("{ns}-stall"));
    let file = tar_of(&[("channel.json", elemental(&["never"]).to_string().as_bytes())]);
    let noisy = tar_of(&[("var/noise", &noise(2 << 20))]);
    // Top down, the 2 MiB layer of noise is read first: the proxy stalls inside it.
    let desc = l.image(
        &[gz_layer(&rootfs()), gz_layer(&file), gz_layer(&noisy)],
        "amd64",
    );
    l.push(desc, &format!("{ns}/stall"), "v1");
    push_channel(&format!("{ns}/good"), "v1", &elemental(&["good"]));
    let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let proxy = stalling_proxy(256 << 10, stalled.clone()).await;
    // One Secret with the registry's credentials under both addresses.
    let (u, p) = creds();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
    let config = json!({"auths": {registry(): {"auth": auth}, proxy.clone(): {"auth": auth}}});
    t.create_pull_secret("pull", config).await;
    install_crds(&t.client).await;
    t.start_operator(&FLAGS);
    // A long timeout, as a big layer on a slow link needs: the idle bound still applies.
    let started = std::time::Instant::now();
    let stalled_image = format!("{proxy}/{ns}/stall:v1");
    t.create_channel("stall", oci(&stalled_image, json!({"timeout": "10m"})))
        .await;
    while !stalled.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            started.elapsed() < SYNC,
            "the operator never read the layer through the proxy"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // While that pull hangs, another channel's pull is not held up by it.
    let good = format!("{}/{ns}/good:v1", registry());
    t.create_synced("good", oci(&good, json!({})), SYNC).await;
    assert_ne!(
        ready_reason(&t.channel("stall").await).as_deref(),
        Some("FailedToSync"),
        "the stalled pull ended before the other channel synced; the test proves nothing"
    );
    // Well inside the channel's 10 minutes.
    let ch = t.wait_ready("stall", "FailedToSync", SYNC).await;
    let message = ready_message(&ch);
    assert!(
        message.contains(&format!("{proxy}: nothing arrived for 30s")),
        "{message}"
    );
    assert_eq!(
        t.version_names().await,
        ["good"],
        "nothing of the stalled image was written"
    );
    t.cleanup().await;
}
