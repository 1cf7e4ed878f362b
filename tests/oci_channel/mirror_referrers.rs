//! OCI 1.1 referrers through `mirror`: an SBOM attached (by `oras attach`) to an upgrade
//! image in a registry that has the referrers API (go-containerregistry's registry,
//! `ocireg`, on loopback), mirrored into a directory, from it into the test registry (no
//! API: the referrers tag) and into a second registry with the API; `oras discover` at
//! each DEST lists the SBOM, a second run sends nothing, and an SBOM attached later is
//! drift to `--check`.

use super::*;

/// An `ocireg` of this test's own, on a loopback port, killed when dropped.
struct Ocireg {
    child: std::process::Child,
    host: String,
}

impl Ocireg {
    fn start() -> Ocireg {
        use std::io::BufRead;
        let mut child = Command::new(helm_tool("ocireg"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("ocireg starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let host = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("ocireg said {line:?}"))
            .to_string();
        Ocireg { child, host }
    }
}

impl Drop for Ocireg {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `oras ARGS` (the real CLI), its stdout.
fn oras(args: &[&str]) -> Vec<u8> {
    run_ok(Command::new(helm_tool("oras")).args(args), "oras")
}

/// The digests `oras discover` lists for `reference` (plain HTTP; the test
/// registry's credentials where it is the test registry; `api`: the referrers API only;
/// a path: an OCI layout).
fn discovered(reference: &str, api: bool) -> Vec<String> {
    let (u, p) = creds();
    let mut args = vec!["discover", "--format", "json", reference];
    if reference.starts_with('/') {
        args.push("--oci-layout");
    } else {
        args.push("--plain-http");
    }
    if reference.starts_with(&registry()) {
        args.extend(["-u", &u, "-p", &p]);
    }
    if api {
        args.extend(["--distribution-spec", "v1.1-referrers-api"]);
    }
    let out: Value = serde_json::from_slice(&oras(&args)).unwrap();
    out["referrers"]
        .as_array()
        .or_else(|| out["manifests"].as_array())
        .unwrap_or_else(|| panic!("oras discover said {out:#}"))
        .iter()
        .map(|d| d["digest"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn referrers_cross_the_air_gap_by_api_and_by_tag() {
    let t = TestNs::new("mirror-referrers").await;
    let ns = t.ns.clone();
    let source = Ocireg::start();
    let src = &source.host;
    // The upgrade image, in the registry with the API; its SBOM attached by the API only.
    let l = Layout::new(&format!("{ns}-img"));
    let top = l.image(&[gz_layer(&rootfs())], "amd64");
    let digest = top["digest"].as_str().unwrap().to_string();
    let mut named = top.clone();
    named["annotations"] = json!({"org.opencontainers.image.ref.name": "1.0"});
    std::fs::write(
        l.dir.join("index.json"),
        json!({"schemaVersion": 2, "manifests": [named]}).to_string(),
    )
    .unwrap();
    run_ok(
        Command::new("skopeo")
            .args(["copy", "--dest-tls-verify=false"])
            .arg(format!("oci:{}:1.0", l.dir.display()))
            .arg(format!("docker://{src}/{ns}/os:1.0")),
        "skopeo copy",
    );
    let sbom = l.dir.join("sbom.spdx.json");
    std::fs::write(&sbom, r#"{"spdxVersion":"SPDX-2.3","name":"os"}"#).unwrap();
    // (the referrer's digest, from oras' own report)
    let attach = |file: &std::path::Path, kind: &str| -> String {
        let dir = file.parent().unwrap();
        let out = run_ok(
            Command::new(helm_tool("oras"))
                .current_dir(dir)
                .args(["attach", "--plain-http", "--distribution-spec"])
                .args(["v1.1-referrers-api", "--artifact-type", kind])
                .args(["--format", "json"])
                .arg(format!("{src}/{ns}/os@{digest}"))
                .arg(file.file_name().unwrap()),
            "oras attach",
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        v["digest"].as_str().unwrap().to_string()
    };
    let sbom = attach(&sbom, "application/spdx+json");
    let image = format!("{src}/{ns}/os@{digest}");
    assert_eq!(discovered(&image, true), std::slice::from_ref(&sbom));

    let data = upgrading_to("one", &format!("{src}/{ns}/os:1.0"));
    let file = l.dir.join("channel.json");
    std::fs::write(&file, data.to_string()).unwrap();
    let file = file.display().to_string();
    let insecure = ["--insecure-registry", src.as_str()];

    // Into a directory: the SBOM goes under the referrers tag.
    let (bundle, to_dir) = fresh_bundle(&format!("mirror-bundle-{ns}"));
    let args = |extra: &[&str]| {
        let mut a = vec![file.as_str(), "--to", to_dir.as_str()];
        a.extend(insecure);
        a.extend(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |a: &[String], code| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        mirror_json(&t, &a, code)
    };
    let first = run(&args(&[]), 0);
    assert_eq!(first["images"][0]["state"], "copied", "{first:#}");
    let index: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("index.json")).unwrap()).unwrap();
    let tag = digest.replacen(':', "-", 1);
    assert!(
        index["manifests"].as_array().unwrap().iter().any(|m| {
            m["annotations"]["org.opencontainers.image.ref.name"]
                .as_str()
                .is_some_and(|n| n.ends_with(&format!(":{tag}")))
        }),
        "no referrers tag in the layout: {index:#}"
    );
    let again = run(&args(&[]), 0);
    assert_eq!(again["blobs_sent"], 0, "{again:#}");
    assert_eq!(again["images"][0]["state"], "present", "{again:#}");

    // From the directory into a registry without the API (the tag) and one with it.
    let site = Ocireg::start();
    let tag_dest = format!("{}/{ns}-site", registry());
    let api_dest = format!("{}/{ns}-site", site.host);
    for (dest, api) in [(&tag_dest, false), (&api_dest, true)] {
        let a = [
            to_dir.as_str(),
            "--to",
            dest.as_str(),
            "--insecure-registry",
            site.host.as_str(),
        ];
        let pushed = mirror_json(&t, &a, 0);
        let at = pushed["images"][0]["dest"].as_str().unwrap().to_string();
        assert!(at.ends_with(&digest), "{pushed:#}");
        assert_eq!(discovered(&at, api), std::slice::from_ref(&sbom), "{dest}");
        let again = mirror_json(&t, &a, 0);
        assert_eq!(again["blobs_sent"], 0, "{dest}: {again:#}");
        let mut check = a.to_vec();
        check.push("--check");
        mirror_json(&t, &check, 0);
    }

    // A second SBOM at the source is drift until it is copied.
    let more = l.dir.join("vex.json");
    std::fs::write(&more, r#"{"@context":"https://openvex.dev/ns"}"#).unwrap();
    let vex = attach(&more, "application/vnd.openvex+json");
    let drift = run(&args(&["--check"]), 2);
    assert!(
        drift["drift"].to_string().contains(&format!("{ns}/os")),
        "{drift:#}"
    );
    run(&args(&[]), 0);
    run(&args(&["--check"]), 0);
    // oras reads the layout's referrers as the tag's index lists them.
    let mut found = discovered(&format!("{}@{digest}", bundle.display()), false);
    found.sort();
    let mut both = [sbom, vex];
    both.sort();
    assert_eq!(found, both);
    t.cleanup().await;
}

/// A referrers tag anyone with push rights could have written: the test registry (no
/// referrers API) lists, under one image's referrers tag, an SBOM attached to another
/// image. `mirror` reads each referrer's manifest, finds its `subject` is not the image,
/// and copies none of it (a `warning:` line says so).
#[tokio::test]
async fn a_referrer_whose_subject_is_another_image_is_not_copied() {
    let t = TestNs::new("mirror-subject").await;
    let ns = t.ns.clone();
    let r = registry();
    let (u, p) = creds();
    let l = Layout::new(&format!("{ns}-os"));
    let mine = l.image(&[gz_layer(&rootfs())], "amd64");
    l.push(mine.clone(), &format!("{ns}/os"), "1.0");
    let other = l.image(&[gz_layer(&tar_of(&[("etc/other", b"2")]))], "amd64");
    l.push(other.clone(), &format!("{ns}/os"), "2.0");
    let (mine, other) = (
        mine["digest"].as_str().unwrap().to_string(),
        other["digest"].as_str().unwrap().to_string(),
    );
    let sbom = l.dir.join("sbom.spdx.json");
    std::fs::write(&sbom, r#"{"spdxVersion":"SPDX-2.3","name":"other"}"#).unwrap();
    let login = ["--plain-http", "-u", u.as_str(), "-p", p.as_str()];
    let attached = run_ok(
        Command::new(helm_tool("oras"))
            .current_dir(&l.dir)
            .arg("attach")
            .args(login)
            .args(["--distribution-spec", "v1.1-referrers-tag"])
            .args([
                "--artifact-type",
                "application/spdx+json",
                "--format",
                "json",
            ])
            .arg(format!("{r}/{ns}/os@{other}"))
            .arg("sbom.spdx.json"),
        "oras attach",
    );
    let attached: Value = serde_json::from_slice(&attached).unwrap();
    let sbom_digest = attached["digest"].as_str().unwrap().to_string();
    // The other image's referrers tag, pushed again as this image's.
    let tag_of = |d: &str| d.replacen(':', "-", 1);
    let listing = oras(
        &[
            &["manifest", "fetch"][..],
            &login,
            &[&format!("{r}/{ns}/os:{}", tag_of(&other))],
        ]
        .concat(),
    );
    let forged = l.dir.join("forged-referrers.json");
    std::fs::write(&forged, &listing).unwrap();
    oras(
        &[
            &["manifest", "push"][..],
            &login,
            &["--media-type", "application/vnd.oci.image.index.v1+json"],
            &[
                &format!("{r}/{ns}/os:{}", tag_of(&mine)),
                &forged.display().to_string(),
            ],
        ]
        .concat(),
    );

    let data = upgrading_to("one", &format!("{r}/{ns}/os:1.0"));
    let file = l.dir.join("channel.json");
    std::fs::write(&file, data.to_string()).unwrap();
    let (bundle, to_dir) = fresh_bundle(&format!("mirror-subject-{ns}"));
    let o = mirror(&t, &[&file.display().to_string(), "--to", &to_dir]);
    assert!(o.status.success(), "{}", said(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("{sbom_digest} of "))
            && stderr.contains(&format!(
                "is not copied: its subject is {other}, not the image"
            )),
        "{}",
        said(&o)
    );
    let index = std::fs::read_to_string(bundle.join("index.json")).unwrap();
    assert!(!index.contains(&tag_of(&mine)), "{index}");
    let sbom_hex = sbom_digest.strip_prefix("sha256:").unwrap();
    assert!(!bundle.join("blobs/sha256").join(sbom_hex).exists());
    t.cleanup().await;
}
