//! A release: one version for the crate, the chart and the image (no tools needed), and
//! `scripts/release`'s directory (docs/install.md, "Install from a release directory"): the
//! OCI layout's image is the one the packaged chart pins, runs the binary of that version,
//! the checksums hold, and `--push` puts both in a registry under that digest.
//!
//! The directory test needs `helm` and `oras` (`scripts/helm install`), the operator image's
//! archive (`scripts/images operator`: scripts/test builds it before the tests, so the
//! release converts that archive and builds nothing) and the local cluster's test registry
//! (`eval "$(scripts/cluster env)"`).

use crate::chart_support;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use chart_support::*;
use serde_json::Value;

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

/// `key = "value"` in a TOML section (`[package]`), or `key: value` at the top of YAML:
/// enough for the few lines this test reads.
fn field(text: &str, section: Option<&str>, key: &str) -> Option<String> {
    let mut inside = section.is_none();
    for line in text.lines() {
        if let Some(s) = section
            && line.starts_with('[')
        {
            inside = line == format!("[{s}]");
            continue;
        }
        let rest = line.strip_prefix(key).and_then(|r| {
            r.trim_start()
                .strip_prefix(if section.is_some() { "=" } else { ":" })
        });
        if inside && let Some(value) = rest {
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// Cargo.toml's version, checked against Cargo.lock.
fn crate_version() -> String {
    let version = field(&read("Cargo.toml"), Some("package"), "version").expect("version");
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let lock = read("Cargo.lock");
    assert!(
        lock.contains(&format!(
            "name = \"rancheros-operator\"\nversion = \"{version}\"\n"
        )),
        "Cargo.lock's rancheros-operator is not {version}: run `cargo update -w`"
    );
    version
}

#[test]
fn crate_chart_and_image_share_one_version() {
    let version = crate_version();
    let chart = read(&format!("{CHART}/Chart.yaml"));
    assert_eq!(
        field(&chart, None, "version").as_deref(),
        Some(version.as_str()),
        "Chart.yaml's version is not Cargo.toml's {version}: one version moves the crate, the chart and the image"
    );
    assert_eq!(
        field(&chart, None, "appVersion").as_deref(),
        Some(version.as_str()),
        "Chart.yaml's appVersion is not Cargo.toml's {version}"
    );
    // The image: its tag defaults to appVersion, and only a release pins a digest (the one
    // of the image it builds); the annotation lists what the chart runs.
    let values = &yaml_docs(&read(&format!("{CHART}/values.yaml")))[0]["image"];
    assert_eq!(
        values["tag"], "",
        "values.yaml's image.tag must default to appVersion"
    );
    assert_eq!(
        values["digest"], "",
        "values.yaml's image.digest is set by scripts/release only"
    );
    let annotation = &yaml_docs(&chart)[0]["annotations"]["artifacthub.io/images"];
    assert!(
        annotation
            .as_str()
            .unwrap()
            .contains(&format!("image: rancheros-operator:{version}\n")),
        "artifacthub.io/images does not list rancheros-operator:{version}: {annotation}"
    );
    // The install docs name this version wherever they name one (the file names of a
    // release directory, the image tag the chart runs): a bump that forgets them fails here,
    // not at a user's `helm install`.
    for doc in ["README.md", "docs/install.md"] {
        let text = read(doc);
        let named = versions_named(&text);
        assert!(
            doc != "README.md" || !named.is_empty(),
            "{doc} names no version"
        );
        for v in named {
            assert_eq!(
                v, version,
                "{doc} names rancheros-operator {v}, the release is {version}"
            );
        }
    }
}

/// The versions `rancheros-operator-X.Y.Z` and `rancheros-operator:X.Y.Z` in `text`.
fn versions_named(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for sep in ["rancheros-operator-", "rancheros-operator:"] {
        for (i, _) in text.match_indices(sep) {
            let rest = &text[i + sep.len()..];
            let v: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let v = v.trim_end_matches('.');
            if v.split('.').count() == 3 && v.split('.').all(|p| !p.is_empty()) {
                out.push(v.to_string());
            }
        }
    }
    out
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every entry of a tar file by path (regular files only).
fn tar_files(data: impl Read) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in tar::Archive::new(data).entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_file() {
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut buf = Vec::new();
            entry.read_to_end(&mut buf).unwrap();
            files.insert(path, buf);
        }
    }
    files
}

/// The blob a descriptor names, checked against its digest and size.
fn blob<'a>(layout: &'a BTreeMap<String, Vec<u8>>, desc: &Value) -> &'a [u8] {
    let digest = desc["digest"].as_str().unwrap();
    let hex = digest.strip_prefix("sha256:").unwrap();
    let data = layout
        .get(&format!("blobs/sha256/{hex}"))
        .unwrap_or_else(|| panic!("no blob {digest} in the layout"));
    assert_eq!(
        sha256_hex(data),
        hex,
        "blob {digest} does not hash to its name"
    );
    assert_eq!(desc["size"], data.len(), "size of {digest}");
    data
}

fn json(data: &[u8]) -> Value {
    serde_json::from_slice(data).unwrap()
}

/// `scripts/release` with the chart tools on PATH; its stdout (the digest).
fn release(args: &[&str]) -> String {
    let helm = tool("helm");
    let mut path = vec![helm.parent().unwrap().to_path_buf()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut cmd = Command::new(root().join("scripts/release"));
    cmd.args(args)
        .env("PATH", std::env::join_paths(path).unwrap())
        .env(
            "REGISTRY_CREDS",
            format!(
                "{}:{}",
                env("RANCHEROS_TEST_REGISTRY_USER"),
                env("RANCHEROS_TEST_REGISTRY_PASSWORD")
            ),
        );
    run(&mut cmd).trim().to_string()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set; this test needs the local cluster's test registry: eval \"$(scripts/cluster env)\"")
    })
}

/// The checks of the OCI layout: its one tag names `digest`, every blob hashes to its name,
/// the image is the operator's for linux/amd64, and its binary is `version`'s.
fn check_layout(path: &Path, digest: &str, version: &str, dir: &Path) {
    let layout = tar_files(std::fs::File::open(path).unwrap());
    assert_eq!(
        json(&layout["oci-layout"])["imageLayoutVersion"],
        "1.0.0",
        "oci-layout"
    );
    let top = json(&layout["index.json"]);
    let named: Vec<&Value> = top["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["annotations"]["org.opencontainers.image.ref.name"].is_string())
        .collect();
    assert_eq!(named.len(), 1, "one tag in index.json: {top}");
    assert_eq!(
        named[0]["annotations"]["org.opencontainers.image.ref.name"],
        version
    );
    assert_eq!(
        named[0]["digest"], digest,
        "the tagged image is the pinned one"
    );
    // (the other entry is the same image without a name: `ctr import --digests` names it)
    for m in top["manifests"].as_array().unwrap() {
        assert_eq!(m["digest"], digest, "index.json: {top}");
    }
    let index = json(blob(&layout, named[0]));
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    assert_eq!(
        index["annotations"]["org.opencontainers.image.version"],
        version
    );
    let manifests = index["manifests"].as_array().unwrap();
    let platforms: Vec<String> = manifests
        .iter()
        .map(|m| format!("{}/{}", m["platform"]["os"], m["platform"]["architecture"]))
        .collect();
    assert_eq!(platforms, ["\"linux\"/\"amd64\""]);
    let manifest = json(blob(&layout, &manifests[0]));
    let config = json(blob(&layout, &manifest["config"]));
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["config"]["User"], "65532:65532");
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(blob(&layout, &layers[0]))
        .read_to_end(&mut tar)
        .unwrap();
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        format!("sha256:{}", sha256_hex(&tar)),
        "the layer is not the config's diff_id"
    );
    let files = tar_files(tar.as_slice());
    let bin = dir.join("rancheros-operator");
    std::fs::write(&bin, &files["usr/local/bin/rancheros-operator"]).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        run(Command::new(&bin).arg("--version")).trim(),
        format!("rancheros-operator {version}"),
        "the image's binary"
    );
}

#[test]
fn release_directory_pins_its_image_and_pushes_it() {
    let version = crate_version();
    let dir = temp_dir("release");
    let out = dir.join("out");
    let registry = env("RANCHEROS_TEST_REGISTRY");
    let repo = format!("{registry}/release-{}", std::process::id());
    let printed = release(&[
        "--out",
        out.to_str().unwrap(),
        "--push",
        &repo,
        "--plain-http",
    ]);
    let digest = printed.lines().last().unwrap_or_default().to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "scripts/release printed {printed:?}, not a digest"
    );
    let layout_name = format!("rancheros-operator-{version}.oci.tar");
    let chart_name = format!("rancheros-operator-{version}.tgz");
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["SHA256SUMS", &layout_name, &chart_name]);

    // SHA256SUMS: sha256sum's format, both files, and they hold.
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    let listed: Vec<(&str, &str)> = sums
        .lines()
        .map(|l| l.split_once("  ").expect("sha256sum line"))
        .collect();
    assert_eq!(listed.len(), 2, "{sums}");
    for (sum, name) in &listed {
        assert_eq!(
            *sum,
            sha256_hex(&std::fs::read(out.join(name)).unwrap()),
            "SHA256SUMS: {name}"
        );
    }
    let mut sum_names: Vec<&str> = listed.iter().map(|(_, n)| *n).collect();
    sum_names.sort();
    assert_eq!(sum_names, [layout_name.as_str(), chart_name.as_str()]);

    check_layout(&out.join(&layout_name), &digest, &version, &dir);

    // The packaged chart runs exactly that image, in the pod and as OPERATOR_IMAGE, and
    // lists it for mirroring tools.
    let chart = out.join(&chart_name);
    let docs = yaml_docs(&run(command("helm")
        .args(["template", "rel"])
        .arg(&chart)
        .args(["--namespace", "ops"])));
    let dep = find(&docs, "Deployment", "rel-rancheros-operator");
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    let pinned = format!("rancheros-operator@{digest}");
    assert_eq!(c["image"], pinned.as_str());
    assert_eq!(
        env_value(c, "OPERATOR_IMAGE"),
        Some(Value::from(pinned.as_str()))
    );
    let meta = &yaml_docs(&run(command("helm").args(["show", "chart"]).arg(&chart)))[0];
    assert_eq!(meta["version"], version.as_str());
    assert_eq!(meta["appVersion"], version.as_str());
    assert_eq!(
        meta["annotations"]["artifacthub.io/images"]
            .as_str()
            .unwrap()
            .trim_end(),
        format!("- name: rancheros-operator\n  image: {pinned}")
    );

    // --push: the registry serves the same index under the tag, and the chart.
    let creds = [
        "--username".to_string(),
        env("RANCHEROS_TEST_REGISTRY_USER"),
        "--password".to_string(),
        env("RANCHEROS_TEST_REGISTRY_PASSWORD"),
    ];
    let pushed = json(
        run(command("oras")
            .args(["manifest", "fetch", "--descriptor", "--plain-http"])
            .args(&creds)
            .arg(format!("{repo}/rancheros-operator:{version}")))
        .as_bytes(),
    );
    assert_eq!(
        pushed["digest"],
        digest.as_str(),
        "the pushed image's digest"
    );
    let values = run(command("helm")
        .args(["show", "values", "--plain-http"])
        .args(&creds)
        .arg(format!("oci://{repo}/charts/rancheros-operator"))
        .args(["--version", &version]));
    assert!(
        values.contains(&format!("digest: \"{digest}\"")),
        "the pushed chart does not pin {digest}:\n{values}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
