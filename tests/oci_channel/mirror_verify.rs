//! `mirror --verify-key` and `--sign-key`'s rule, on the test registry with the real
//! `cosign`: a signed channel mirrored into a directory carries its signature, which the
//! site checks; a bundle whose channel was replaced (new data and manifest, its entry
//! repointed, the signed channel still beside it) is refused and nothing is published;
//! `--sign-key` refuses a SOURCE nothing verified unless `--sign-unverified` says so.

use super::*;

/// An upgrade image pushed to `<ns>/os:1.0`, and a channel of one version upgrading to it.
fn channel_of(ns: &str) -> Value {
    push_os_image(&format!("{ns}/os"), &[gz_layer(&rootfs())]);
    upgrading_to("v1", &format!("{}/{ns}/os:1.0", registry()))
}

/// Whether the test registry has `reference`.
fn exists(reference: &str) -> bool {
    let (u, p) = creds();
    Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false", "--creds"])
        .arg(format!("{u}:{p}"))
        .arg(format!("docker://{reference}"))
        .output()
        .unwrap()
        .status
        .success()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Asserts that the run was refused with exit code `code`, in one `error:` line saying
/// each of `says`.
fn refused(o: &std::process::Output, code: i32, says: &[&str]) {
    assert_eq!(o.status.code(), Some(code), "{}", said(o));
    let text = stderr(o);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{}", said(o));
    for part in says {
        assert!(errors[0].contains(part), "{part:?} missing: {}", said(o));
    }
}

#[tokio::test]
async fn a_signed_channel_verifies_across_a_bundle_and_an_edited_bundle_publishes_nothing() {
    let t = TestNs::new("mirror-verify").await;
    let ns = t.ns.clone();
    let r = registry();
    let data = channel_of(&ns);
    let channel_digest = push_channel(&format!("{ns}/channel"), "v1", &data);
    let publisher = Signer::new(&format!("{ns}-publisher"));
    publisher.sign(&format!("{ns}/channel"), &channel_digest);
    let key = publisher.public_key_file();
    let source = format!("{r}/{ns}/channel:v1");
    let source_repo = format!("{r}/{ns}/channel");
    let (bundle, to_dir) = fresh_bundle(&format!("mirror-verify-{ns}"));
    let site = format!("{r}/{ns}-site");

    // The connected side: verified as it is read, and the signature kept in the bundle.
    let o = mirror(&t, &[&source, "--to", &to_dir, "--verify-key", &key]);
    assert!(o.status.success(), "{}", said(&o));
    assert!(
        stderr(&o).contains(&format!(
            "{source}@{channel_digest} verified with --verify-key"
        )),
        "{}",
        said(&o)
    );
    // The site: the bundle's channel is the signed one, pinned (a dry run: nothing written).
    let o = mirror(
        &t,
        &[&to_dir, "--to", &site, "--verify-key", &key, "--dry-run"],
    );
    assert!(o.status.success(), "{}", said(&o));
    assert!(
        stderr(&o).contains(&format!("it is {source_repo}@{channel_digest}, signed")),
        "{}",
        said(&o)
    );
    // Another key does not vouch for it.
    let other = Signer::new(&format!("{ns}-other"));
    let o = mirror(
        &t,
        &[
            &to_dir,
            "--to",
            &site,
            "--verify-key",
            &other.public_key_file(),
        ],
    );
    refused(&o, 1, &["does not match the key"]);
    assert!(!exists(&format!("{site}/{ns}/channel:v1")), "{}", said(&o));

    // The edit: another channel, naming an image of the editor's, mirrored into the same
    // bundle under the channel's name: new data and manifest, the entry repointed; the
    // signed channel and its signature are still beside it.
    push_os_image(
        &format!("{ns}/evil"),
        &[gz_layer(&tar_of(&[("etc/evil", b"1")]))],
    );
    let mut edited = data.clone();
    edited[0]["spec"]["metadata"]["upgradeImage"] = json!(format!("{r}/{ns}/evil:1.0"));
    push_channel(&format!("{ns}/channel"), "v1", &edited);
    let o = mirror(&t, &[&source, "--to", &to_dir]);
    assert!(o.status.success(), "{}", said(&o));

    // At the site: refused in one line, exit 1, nothing published.
    let o = mirror(&t, &[&to_dir, "--to", &site, "--verify-key", &key]);
    refused(&o, 1, &["--verify-key", "is not the signed channel's"]);
    assert!(!exists(&format!("{site}/{ns}/channel:v1")), "{}", said(&o));
    assert!(!exists(&format!("{site}/{ns}/evil:1.0")), "{}", said(&o));
    let evil_digest = raw_digest(&format!("{r}/{ns}/evil:1.0"));
    assert!(
        !exists(&format!("{site}/{ns}/evil@{evil_digest}")),
        "{}",
        said(&o)
    );
    // Signing it anyway needs the user's word; it is not given here.
    let site_key = site_key(&bundle);
    let o = mirror(&t, &[&to_dir, "--to", &site, "--sign-key", &site_key]);
    assert_eq!(o.status.code(), Some(2), "{}", said(&o));
    assert!(!exists(&format!("{site}/{ns}/channel:v1")), "{}", said(&o));

    // The replaced channel in the registry is unsigned: refused as it is read.
    let other_dir = bundle.with_extension("unsigned");
    let _ = std::fs::remove_dir_all(&other_dir);
    let o = mirror(
        &t,
        &[
            &source,
            "--to",
            &format!("dir:{}", other_dir.display()),
            "--verify-key",
            &key,
        ],
    );
    refused(&o, 1, &["no cosign signature"]);
    assert!(!other_dir.join("index.json").exists(), "{}", said(&o));
    t.cleanup().await;
}

#[tokio::test]
async fn sign_key_refuses_a_source_nothing_verified_unless_told() {
    let t = TestNs::new("mirror-sign-unverified").await;
    let ns = t.ns.clone();
    let r = registry();
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}-channel.json"));
    std::fs::write(&file, channel_of(&ns).to_string()).unwrap();
    let file = file.display().to_string();
    let key = site_key(Path::new(&file));
    let site = format!("{r}/{ns}-site");

    let o = mirror(&t, &[&file, "--to", &site, "--sign-key", &key]);
    refused(&o, 2, &["--verify-key", "--sign-unverified"]);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", said(&o));
    assert!(o.stdout.is_empty(), "{}", said(&o));
    // Told: signed; the channel is copied now, so the refused run published nothing.
    let told = mirror_json(
        &t,
        &[
            &file,
            "--to",
            &site,
            "--sign-key",
            &key,
            "--sign-unverified",
        ],
        0,
    );
    assert_eq!(told["channel_state"], "copied", "{told:#}");
    assert_eq!(told["apply_secret"]["kind"], "Secret", "{told:#}");
    assert!(told["apply"]["spec"]["verify"].is_object(), "{told:#}");
    t.cleanup().await;
}
