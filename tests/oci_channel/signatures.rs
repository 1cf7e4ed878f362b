//! Verified channels: only images the channel's key signed are used.

use super::*;

// ---------------------------------------------------------------------------------------
// spec.verify: images signed by the real cosign CLI

/// A tool built by `scripts/helm` (cosign, oras), from its bin directory.
pub(crate) fn helm_tool(name: &str) -> PathBuf {
    let bin = Command::new(env!("CARGO_MANIFEST_DIR").to_string() + "/scripts/helm")
        .arg("bin")
        .output()
        .expect("scripts/helm bin");
    let path = PathBuf::from(String::from_utf8_lossy(&bin.stdout).trim()).join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/helm install (scripts/test does)",
        path.display()
    );
    path
}

/// A cosign key pair (no password) in a directory of its own, and a docker config for the
/// test registry: what a publisher's CI has.
pub(super) struct Signer {
    dir: PathBuf,
}

impl Signer {
    pub(super) fn new(name: &str) -> Signer {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cosign-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("docker")).unwrap();
        let (u, p) = creds();
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        std::fs::write(
            dir.join("docker/config.json"),
            json!({"auths": {registry(): {"auth": auth}}}).to_string(),
        )
        .unwrap();
        let signer = Signer { dir };
        signer.cosign(&["generate-key-pair"]);
        signer
    }

    pub(super) fn cosign(&self, args: &[&str]) {
        run_ok(
            Command::new(helm_tool("cosign"))
                .args(args)
                .current_dir(&self.dir)
                .env("COSIGN_PASSWORD", "")
                .env("DOCKER_CONFIG", self.dir.join("docker")),
            &format!("cosign {args:?}"),
        );
    }

    /// Signs `repo@digest` in the test registry, with no transparency log (offline).
    pub(super) fn sign(&self, repo: &str, digest: &str) {
        let image = format!("{}/{repo}@{digest}", registry());
        self.cosign(&[
            "sign",
            "--key",
            "cosign.key",
            "--tlog-upload=false",
            "--allow-http-registry",
            "--yes",
            &image,
        ]);
    }

    /// The file of its public key (`cosign.pub`).
    pub(super) fn public_key_file(&self) -> String {
        self.dir.join("cosign.pub").display().to_string()
    }

    fn public_key(&self) -> String {
        std::fs::read_to_string(self.dir.join("cosign.pub")).unwrap()
    }
}

async fn key_secret(t: &TestNs, name: &str, pem: &str) {
    t.create_secret(name, None, json!({"cosign.pub": pem}))
        .await;
}

pub(super) fn source_verified(
    ch: &rancheros_operator::api::ManagedOSVersionChannel,
) -> Option<(String, String, String)> {
    ch.status
        .as_ref()?
        .condition(rancheros_operator::api::SOURCE_VERIFIED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_verified_channel_uses_only_images_its_key_signed() {
    let mut t = TestNs::new("oci-verify").await;
    let repo = format!("{}/signed-channel", t.ns);
    let publisher = Signer::new("publisher");
    let stranger = Signer::new("stranger");
    let first = push_channel(&repo, "v1", &elemental(&["os-a", "os-b"]));
    publisher.sign(&repo, &first);
    key_secret(&t, "channel-key", &publisher.public_key()).await;
    start_pulling(&mut t, &FLAGS).await;
    let image = format!("{}/{repo}:v1", registry());
    let mut spec = oci(&image, json!({}));
    spec["verify"] = json!({"provider": "cosign", "secretRef": {"name": "channel-key"}});
    let ch = t.create_synced("signed", spec, SYNC).await;
    let (status, reason, message) = source_verified(&ch).expect("a SourceVerified condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Verified"),
        "{message}"
    );
    assert!(message.contains(&first), "{message}");
    assert_eq!(t.version_names().await, ["os-a", "os-b"]);

    // A tampered re-push of the tag, unsigned: refused, nothing changed.
    let tampered = push_channel(&repo, "v1", &elemental(&["os-a", "os-b", "os-evil"]));
    let before = t.channel("signed").await;
    let ch = t.sync_again("signed", "tampered", &before, SYNC).await;
    assert_eq!(ready_reason(&ch).as_deref(), Some("FailedToSync"));
    let (status, reason, message) = source_verified(&ch).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "VerificationFailed")
    );
    assert!(
        message.contains("no cosign signature") && message.contains(&tampered),
        "{message}"
    );
    assert_eq!(
        t.version_names().await,
        ["os-a", "os-b"],
        "unverified data was used"
    );

    // Signed, but by another key: still refused.
    stranger.sign(&repo, &tampered);
    let before = t.channel("signed").await;
    let ch = t.sync_again("signed", "stranger", &before, SYNC).await;
    let message = source_verified(&ch).unwrap().2;
    assert!(message.contains("does not match the key"), "{message}");
    assert_eq!(t.version_names().await, ["os-a", "os-b"]);

    // Signed by the publisher: used.
    publisher.sign(&repo, &tampered);
    let before = t.channel("signed").await;
    let ch = t.sync_again("signed", "signed", &before, SYNC).await;
    assert_reason(&ch, "Synchronized");
    assert_eq!(source_verified(&ch).unwrap().1, "Verified");
    assert_eq!(t.version_names().await, ["os-a", "os-b", "os-evil"]);
    assert_eq!(t.pods_created(), 0);

    // `validate --image --key`: the same check, for the channel's CI.
    let nobody = Signer::new("nobody");
    let validate = |signer: &Signer| {
        Command::new(env!("CARGO_BIN_EXE_rancheros-operator"))
            .args(["validate", "--insecure", "--image", &image, "--key"])
            .arg(signer.dir.join("cosign.pub"))
            .env("REGISTRY_AUTH_FILE", signer.dir.join("docker/config.json"))
            .output()
            .unwrap()
    };
    let out = validate(&publisher);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = validate(&nobody);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("does not match the key"), "{text}");
    t.cleanup().await;
}
