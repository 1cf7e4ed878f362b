//! `mirror`, the two-step air gap on the test registry: a channel image listing a cosign
//! signed multi-arch upgrade image (an index of two) and a single-arch one, mirrored into a
//! directory (the connected side), from it into another prefix of the registry (the site),
//! applied as printed and synced; then a second run that sends nothing, `--check`,
//! `--dry-run`, and a corrupt blob in the directory.

use super::signatures::Signer;
use super::*;

#[path = "mirror_bundle.rs"]
mod bundle;
#[path = "mirror_referrers.rs"]
mod referrers;
#[path = "mirror_verify.rs"]
mod verify;

/// A docker config directory with the test registries' credentials (the plain HTTP one
/// and the token one).
fn docker_config(t: &TestNs) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("mirror-docker-{}", t.ns));
    std::fs::create_dir_all(&dir).unwrap();
    let (u, p) = creds();
    let auth =
        json!({"auth": base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))});
    let token = super::registries::env_of("RANCHEROS_TEST_REGISTRY_TOKEN");
    std::fs::write(
        dir.join("config.json"),
        json!({"auths": {registry(): auth, token: auth}}).to_string(),
    )
    .unwrap();
    dir
}

/// `rancheros-operator mirror ARGS`, as a user with the test registries' credentials.
fn mirror_command(t: &TestNs, args: &[&str]) -> Command {
    let config = docker_config(t);
    let mut c = Command::new(env!("CARGO_BIN_EXE_rancheros-operator"));
    c.arg("mirror")
        .args(args)
        .args(["--insecure-registry", &registry()])
        .env("DOCKER_CONFIG", &config)
        .env("HOME", &config);
    c
}

fn mirror(t: &TestNs, args: &[&str]) -> std::process::Output {
    mirror_command(t, args).output().unwrap()
}

fn said(o: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `mirror ... -o json`'s document, the run having exited `code`.
fn mirror_json(t: &TestNs, args: &[&str], code: i32) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let o = mirror(t, &all);
    assert_eq!(o.status.code(), Some(code), "{}", said(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", said(&o)))
}

/// A site signing key (PKCS#8 PEM, P-256) made by openssl beside `near`.
fn site_key(near: &Path) -> String {
    let key = near.with_extension("site.key");
    run_ok(
        Command::new("openssl")
            .args(["genpkey", "-algorithm", "EC", "-pkeyopt"])
            .args([
                "ec_paramgen_curve:P-256",
                "-out",
                &key.display().to_string(),
            ]),
        "openssl genpkey",
    );
    key.display().to_string()
}

/// `skopeo inspect` of a reference in the test registry, with `options` (what to print).
fn skopeo_inspect(options: &[&str], reference: &str) -> Vec<u8> {
    let (u, p) = creds();
    run_ok(
        Command::new("skopeo").arg("inspect").args(options).args([
            "--tls-verify=false",
            "--creds",
            &format!("{u}:{p}"),
            &format!("docker://{reference}"),
        ]),
        "skopeo inspect",
    )
}

/// `skopeo inspect --raw` of a reference in the test registry.
fn raw_manifest(reference: &str) -> Value {
    serde_json::from_slice(&skopeo_inspect(&["--raw"], reference)).unwrap()
}

/// The digest of `reference` in the test registry.
fn raw_digest(reference: &str) -> String {
    let out = skopeo_inspect(&["--format", "{{.Digest}}"], reference);
    String::from_utf8_lossy(&out).trim().to_string()
}

/// An empty bundle directory `name` (what an earlier run left removed), and its `dir:`
/// reference.
fn fresh_bundle(name: &str) -> (PathBuf, String) {
    let bundle = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&bundle);
    let to_dir = format!("dir:{}", bundle.display());
    (bundle, to_dir)
}

/// Pushes an amd64 image of `layers` to the test registry as `repo:1.0`, the tag these
/// tests' upgrade images have; the layout it was made in.
fn push_os_image(repo: &str, layers: &[Layer]) -> Layout {
    let l = Layout::new(&repo.replace('/', "-"));
    let desc = l.image(layers, "amd64");
    l.push(desc, repo, "1.0");
    l
}

/// Channel data of one version, `name`, upgrading to `image`.
fn upgrading_to(name: &str, image: &str) -> Value {
    let mut data = elemental(&[name]);
    data[0]["spec"]["metadata"]["upgradeImage"] = json!(image);
    data
}

#[tokio::test]
async fn a_channel_and_its_images_cross_the_air_gap_through_a_directory_and_sync() {
    let mut t = TestNs::new("mirror").await;
    let ns = t.ns.clone();
    let r = registry();
    // The upgrade images: one single-arch, one index of two architectures, signed.
    push_os_image(&format!("{ns}/os-single"), &[gz_layer(&rootfs())]);
    let multi = Layout::new(&format!("{ns}-multi"));
    let amd = multi.image(&[gz_layer(&rootfs())], "amd64");
    let arm = multi.image(&[gz_layer(&tar_of(&[("etc/arch", b"arm64")]))], "arm64");
    let index = multi.index(vec![amd.clone(), arm.clone()]);
    multi.push(index.clone(), &format!("{ns}/os-multi"), "2.0");
    let index_digest = index["digest"].as_str().unwrap().to_string();
    let publisher = Signer::new(&format!("{ns}-publisher"));
    publisher.sign(&format!("{ns}/os-multi"), &index_digest);

    // The channel, as Elemental's look, plus an iso served by URL (not an image: left).
    let mut data = elemental(&["single", "multi"]);
    data[0]["spec"]["metadata"]["upgradeImage"] = json!(format!("{r}/{ns}/os-single:1.0"));
    data[1]["spec"]["metadata"]["upgradeImage"] = json!(format!("{r}/{ns}/os-multi:2.0"));
    data.as_array_mut()
        .unwrap()
        .push(json!({"metadata": {"name": "iso"},
        "spec": {"type": "iso", "metadata": {"uri": "https://download.example/os.iso"}}}));
    // The channel image is signed too: the bundle keeps it, for the site to verify.
    let channel_digest = push_channel(&format!("{ns}/channel"), "v1", &data);
    publisher.sign(&format!("{ns}/channel"), &channel_digest);

    // The connected side: into a directory.
    let (bundle, to_dir) = fresh_bundle(&format!("mirror-bundle-{ns}"));
    let source = format!("{r}/{ns}/channel:v1");
    let first = mirror_json(&t, &[&source, "--to", &to_dir], 0);
    assert_eq!(first["channel_state"], "copied", "{first:#}");
    let notes = first["notes"].to_string();
    assert!(
        notes.contains("is signed") && notes.contains("kept in") && notes.contains("--verify-key"),
        "{first:#}"
    );
    assert_eq!(first["images"].as_array().unwrap().len(), 2, "{first:#}");
    assert!(first["blobs_sent"].as_u64().unwrap() >= 6, "{first:#}");

    // The site: from the directory into another prefix, the channel verified with the
    // publisher's key (the signature the bundle carries), then signed with the site's key
    // (made by openssl); the Secret of its public key and the channel, on stdout.
    let site = format!("{r}/{ns}-site");
    let key = site_key(&bundle);
    // (one image at a time: the blobs the two images share are mounted, not sent again)
    let o = mirror(
        &t,
        &[
            &to_dir,
            "--to",
            &site,
            "--jobs",
            "1",
            "--verify-key",
            &publisher.public_key_file(),
            "--sign-key",
            &key,
        ],
    );
    assert!(o.status.success(), "{}", said(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!(
            "verified with --verify-key: it is {r}/{ns}/channel@{channel_digest}, signed"
        )),
        "{}",
        said(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(", 2 mounted from another of its repositories"),
        "{}",
        said(&o)
    );
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let (secret, printed) = stdout
        .split_once("---\n")
        .unwrap_or_else(|| panic!("{}", said(&o)));
    let secret: Value =
        serde_saphyr::from_str(secret).unwrap_or_else(|e| panic!("{e}: {}", said(&o)));
    let printed: Value =
        serde_saphyr::from_str(printed).unwrap_or_else(|e| panic!("{e}: {}", said(&o)));
    assert_eq!(secret["kind"], "Secret", "{}", said(&o));
    assert_eq!(printed["kind"], "ManagedOSVersionChannel", "{}", said(&o));
    assert_eq!(
        printed["spec"]["verify"]["secretRef"]["name"],
        secret["metadata"]["name"]
    );
    assert_eq!(printed["spec"]["type"], "oci");
    let image = printed["spec"]["options"]["image"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(image, format!("{site}/{ns}/channel:v1"));

    // The index whole, both children, and the signature, at the site.
    let site_index = raw_manifest(&format!("{site}/{ns}/os-multi@{index_digest}"));
    assert_eq!(site_index["manifests"].as_array().unwrap().len(), 2);
    for child in [&amd, &arm] {
        raw_manifest(&format!(
            "{site}/{ns}/os-multi@{}",
            child["digest"].as_str().unwrap()
        ));
    }
    let pubkey = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cosign-{ns}-publisher-{}", std::process::id()))
        .join("cosign.pub");
    publisher.cosign(&[
        "verify",
        "--key",
        &pubkey.display().to_string(),
        "--insecure-ignore-tlog=true",
        "--allow-http-registry",
        &format!("{site}/{ns}/os-multi@{index_digest}"),
    ]);

    // The channel's signature, checked by cosign itself with the printed public key.
    let site_pub = bundle.with_extension("pub");
    std::fs::write(
        &site_pub,
        secret["stringData"]["cosign.pub"].as_str().unwrap(),
    )
    .unwrap();
    publisher.cosign(&[
        "verify",
        "--key",
        &site_pub.display().to_string(),
        "--insecure-ignore-tlog=true",
        "--allow-http-registry",
        &image,
    ]);

    // Applied as printed (with the site's pull Secret): verified, and every version points
    // at the site.
    start_pulling(&mut t, &FLAGS).await;
    t.create_secret(
        secret["metadata"]["name"].as_str().unwrap(),
        None,
        json!({"cosign.pub": secret["stringData"]["cosign.pub"]}),
    )
    .await;
    let mut spec = printed["spec"].clone();
    spec["options"]["imagePullSecrets"] = json!([{"name": "pull"}]);
    let name = printed["metadata"]["name"].as_str().unwrap();
    let ch = t.create_synced(name, spec, SYNC).await;
    let (status, reason, message) =
        super::signatures::source_verified(&ch).expect("a SourceVerified condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Verified"),
        "{message}"
    );
    let mut images: Vec<String> = t
        .versions()
        .await
        .iter()
        .filter_map(|v| {
            v.spec
                .metadata
                .as_ref()?
                .get("upgradeImage")?
                .as_str()
                .map(str::to_string)
        })
        .collect();
    images.sort();
    assert_eq!(images.len(), 2, "{images:?}");
    assert!(
        images[0].starts_with(&format!("{site}/{ns}/os-multi@{index_digest}")),
        "{images:?}"
    );
    assert!(
        images[1].starts_with(&format!("{site}/{ns}/os-single@sha256:")),
        "{images:?}"
    );

    // Again: nothing sent, and said so; complete by --check.
    let again = mirror(&t, &[&to_dir, "--to", &site]);
    assert!(again.status.success(), "{}", said(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("nothing to copy"),
        "{}",
        said(&again)
    );
    assert!(
        !String::from_utf8_lossy(&again.stderr).contains('\r'),
        "a progress line through a pipe: {}",
        said(&again)
    );
    let again = mirror_json(&t, &[&to_dir, "--to", &site], 0);
    assert_eq!(again["blobs_sent"], 0, "{again:#}");
    mirror_json(&t, &[&to_dir, "--to", &site, "--check"], 0);
    // On a terminal (util-linux `script` gives it one), a progress line that redraws.
    let config = docker_config(&t);
    let line = format!(
        "{} mirror {to_dir} --to {site} --insecure-registry {r}",
        env!("CARGO_BIN_EXE_rancheros-operator")
    );
    let tty = run_ok(
        Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env("DOCKER_CONFIG", &config)
            .env("HOME", &config),
        "script",
    );
    let tty = String::from_utf8_lossy(&tty);
    assert!(
        tty.contains("\r\x1b[K") && tty.contains("/2 images, "),
        "{tty:?}"
    );
    assert!(tty.contains("nothing to copy"), "{tty:?}");
    // One image deleted from DEST: drift, until a run puts it back.
    let single_at_site = images[1].clone();
    let (u, p) = creds();
    run_ok(
        Command::new("skopeo").args([
            "delete",
            "--tls-verify=false",
            "--creds",
            &format!("{u}:{p}"),
            &format!("docker://{single_at_site}"),
        ]),
        "skopeo delete",
    );
    let drift = mirror_json(&t, &[&to_dir, "--to", &site, "--check"], 2);
    assert_eq!(drift["drift"].as_array().unwrap().len(), 1, "{drift:#}");
    let back = mirror_json(&t, &[&to_dir, "--to", &site], 0);
    assert_eq!(
        back["blobs_sent"], 0,
        "its blobs were still there: {back:#}"
    );
    mirror_json(&t, &[&to_dir, "--to", &site, "--check"], 0);

    // Only arm64: the index is rebuilt with its one entry, under a digest of its own.
    let arm_only = mirror_json(
        &t,
        &[
            &to_dir,
            "--to",
            &format!("{r}/{ns}-arm"),
            "--platform",
            "linux/arm64",
        ],
        0,
    );
    let multi_arm = arm_only["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["source"].as_str().unwrap().contains("/os-multi@"))
        .unwrap_or_else(|| panic!("{arm_only:#}"));
    assert_eq!(multi_arm["rebuilt"], true, "{arm_only:#}");
    let rebuilt_ref = multi_arm["dest"].as_str().unwrap();
    assert!(!rebuilt_ref.ends_with(&index_digest), "{rebuilt_ref}");
    let rebuilt = raw_manifest(rebuilt_ref);
    assert_eq!(
        rebuilt["manifests"].as_array().unwrap().len(),
        1,
        "{rebuilt:#}"
    );
    assert_eq!(rebuilt["manifests"][0]["digest"], arm["digest"]);

    // A dry run to an empty prefix lists sizes and writes nothing: --check then finds drift.
    let empty = format!("{r}/{ns}-empty");
    let dry = mirror_json(&t, &[&to_dir, "--to", &empty, "--dry-run"], 0);
    assert!(dry["bytes_sent"].as_u64().unwrap() > 0, "{dry:#}");
    let drift = mirror_json(&t, &[&to_dir, "--to", &empty, "--check"], 2);
    assert_eq!(drift["drift"].as_array().unwrap().len(), 3, "{drift:#}");

    // A corrupt blob in the directory: refused, named, and nothing published.
    let arm_manifest = raw_manifest(&format!(
        "{site}/{ns}/os-multi@{}",
        arm["digest"].as_str().unwrap()
    ));
    let layer = arm_manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let blob = bundle
        .join("blobs/sha256")
        .join(layer.strip_prefix("sha256:").unwrap());
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let bad = format!("{r}/{ns}-bad");
    let o = mirror(&t, &[&to_dir, "--to", &bad]);
    assert_eq!(o.status.code(), Some(1), "{}", said(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&layer), "{}", said(&o));
    assert!(
        err.contains("the channel was not published"),
        "{}",
        said(&o)
    );
    mirror_json(&t, &[&to_dir, "--to", &bad, "--check"], 2);
    t.cleanup().await;
}

/// A layer of `mib` MiB that does not compress (a generator's bytes), gzip'd.
fn noise_layer(mib: usize) -> Layer {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut bytes = Vec::with_capacity(mib << 20);
    while bytes.len() < mib << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    gz_layer(&tar_of(&[("var/noise", &bytes)]))
}

/// Killed (SIGKILL) while a big layer is being written into the directory, then run again:
/// the second run finishes, sending only what had not arrived; then into a registry with
/// token auth (TLS, the test CA), where pushes need the token flow's push grant.
#[tokio::test]
async fn a_mirror_killed_mid_copy_resumes_and_pushes_through_token_auth() {
    let t = TestNs::new("mirror-resume").await;
    let ns = t.ns.clone();
    let r = registry();
    let l = push_os_image(
        &format!("{ns}/os-big"),
        &[gz_layer(&rootfs()), noise_layer(64)],
    );
    let _ = std::fs::remove_dir_all(&l.dir);
    let data = upgrading_to("big", &format!("{r}/{ns}/os-big:1.0"));
    push_channel(&format!("{ns}/channel"), "v1", &data);
    let source = format!("{r}/{ns}/channel:v1");

    let (bundle, to_dir) = fresh_bundle(&format!("mirror-bundle-{ns}"));
    // The first run, killed while the big layer is being written.
    let mut child = mirror_command(&t, &[&source, "--to", &to_dir])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let blobs = bundle.join("blobs/sha256");
    // The big layer half written: a partial file of more than 1 MiB.
    let partial = || {
        std::fs::read_dir(&blobs).ok().is_some_and(|d| {
            d.flatten().any(|e| {
                e.file_name().to_string_lossy().contains(".partial-")
                    && e.metadata().is_ok_and(|m| m.len() > 1 << 20)
            })
        })
    };
    let started = std::time::Instant::now();
    while !partial() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no blob was being written within 60 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it was killed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let arrived = std::fs::read_dir(&blobs)
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().contains(".partial-"))
        .count();
    // The config and the small layer came before the big one.
    assert!(arrived >= 1, "nothing had arrived before the kill");
    let resumed = mirror_json(&t, &[&source, "--to", &to_dir], 0);
    let total = 3; // the image: config, two layers
    assert_eq!(
        resumed["images"][0]["blobs"].as_u64().unwrap() as usize,
        total - arrived.min(total - 1),
        "re-sent what had arrived: {resumed:#}"
    );
    let again = mirror_json(&t, &[&source, "--to", &to_dir], 0);
    assert_eq!(again["blobs_sent"], 0, "{again:#}");
    // Within one registry, nothing crosses the network: the registry mounts every blob.
    let direct = mirror_json(&t, &[&source, "--to", &format!("{r}/{ns}-direct")], 0);
    assert_eq!(direct["blobs_mounted"], 3, "{direct:#}");
    assert_eq!(direct["bytes_sent"], 0, "{direct:#}");

    // On to a registry with token auth: the user's own repositories only.
    let token_reg = super::registries::env_of("RANCHEROS_TEST_REGISTRY_TOKEN");
    let (u, _) = creds();
    let ca = super::registries::ca_dir().join("ca.crt");
    let ca = ca.display().to_string();
    let site = format!("{token_reg}/{u}/{ns}");
    let pushed = mirror_json(&t, &[&to_dir, "--to", &site, "--ca-file", &ca], 0);
    assert_eq!(pushed["blobs_sent"], 3, "{pushed:#}");
    assert_eq!(pushed["channel_state"], "copied", "{pushed:#}");
    mirror_json(
        &t,
        &[&to_dir, "--to", &site, "--ca-file", &ca, "--check"],
        0,
    );
    // Outside the user's repositories the token grants no push: named, nothing published.
    let elsewhere = format!("{token_reg}/someone-else/{ns}");
    let o = mirror(&t, &[&to_dir, "--to", &elsewhere, "--ca-file", &ca]);
    assert_eq!(o.status.code(), Some(1), "{}", said(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the channel was not published"),
        "{}",
        said(&o)
    );
    t.cleanup().await;
}
