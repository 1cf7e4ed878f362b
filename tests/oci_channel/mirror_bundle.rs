//! A bundle directory trusted for nothing: one whose channel entry an attacker renamed to
//! climb out of the site's prefix is refused before anything is written; one that lost a
//! blob is drift to `--check` and whole again after the next run.

use super::*;

/// The bundle's `index.json` and the channel's entry in it.
fn channel_entry(bundle: &Path) -> (Value, usize) {
    let index: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("index.json")).unwrap()).unwrap();
    let at = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .position(|e| e["annotations"]["io.rancheros.mirror.channel"] == "true")
        .unwrap_or_else(|| panic!("no channel entry in {index:#}"));
    (index, at)
}

#[tokio::test]
async fn a_bundle_renamed_out_of_the_prefix_or_missing_a_blob_is_refused_or_repaired() {
    let t = TestNs::new("mirror-bundle").await;
    let ns = t.ns.clone();
    let r = registry();
    push_os_image(&format!("{ns}/os"), &[gz_layer(&rootfs())]);
    let data = upgrading_to("one", &format!("{r}/{ns}/os:1.0"));
    push_channel(&format!("{ns}/channel"), "v1", &data);
    let source = format!("{r}/{ns}/channel:v1");
    let (bundle, to_dir) = fresh_bundle(&format!("mirror-bundle-{ns}"));
    mirror_json(&t, &[&source, "--to", &to_dir], 0);

    // A blob lost (the channel's 2-byte config, its manifest, the image's layer) or cut
    // short: drift, and the next run puts it back.
    let (index, at) = channel_entry(&bundle);
    let channel_manifest = index["manifests"][at]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let image = raw_manifest(&format!("{r}/{ns}/os:1.0"));
    let layer = image["layers"][0]["digest"].as_str().unwrap().to_string();
    let blob = |d: &str| {
        bundle
            .join("blobs/sha256")
            .join(d.strip_prefix("sha256:").unwrap())
    };
    for (lost, cut) in [
        (sha(b"{}"), false),
        (channel_manifest.clone(), false),
        (layer.clone(), false),
        (layer.clone(), true),
    ] {
        let whole = std::fs::read(blob(&lost)).unwrap();
        if cut {
            std::fs::write(blob(&lost), &whole[..whole.len() / 2]).unwrap();
        } else {
            std::fs::remove_file(blob(&lost)).unwrap();
        }
        let drift = mirror_json(&t, &[&source, "--to", &to_dir, "--check"], 2);
        assert!(
            !drift["drift"].as_array().unwrap().is_empty(),
            "{lost}: {drift:#}"
        );
        mirror_json(&t, &[&source, "--to", &to_dir], 0);
        assert_eq!(
            std::fs::read(blob(&lost)).unwrap(),
            whole,
            "{lost} put back"
        );
        mirror_json(&t, &[&source, "--to", &to_dir, "--check"], 0);
    }

    // The channel's entry renamed to climb out of the site's prefix: refused, in one line,
    // and nothing written anywhere.
    let (mut index, at) = channel_entry(&bundle);
    let victim = format!("{ns}-victim/app");
    index["manifests"][at]["annotations"]["org.opencontainers.image.ref.name"] =
        json!(format!("../{victim}:latest"));
    std::fs::write(bundle.join("index.json"), index.to_string()).unwrap();
    let site = format!("{r}/{ns}-site");
    let o = mirror(&t, &[&to_dir, "--to", &site]);
    assert_eq!(o.status.code(), Some(1), "{}", said(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{}", said(&o));
    assert!(
        err.starts_with("error: ") && err.contains("is not named path:tag"),
        "{}",
        said(&o)
    );
    let (u, p) = creds();
    for repo in [victim.as_str(), &format!("{ns}-site/{ns}/os")] {
        let found = Command::new("skopeo")
            .args(["list-tags", "--tls-verify=false", "--creds"])
            .arg(format!("{u}:{p}"))
            .arg(format!("docker://{r}/{repo}"))
            .output()
            .unwrap();
        assert!(
            !found.status.success(),
            "{repo} was written: {}",
            String::from_utf8_lossy(&found.stdout)
        );
    }
    t.cleanup().await;
}
