//! Big layers streamed with flat memory, and `validate --image` reading a channel image.

use super::*;

/// A writer that hashes (SHA-256) and counts what passes through it.
struct Hashing<W>(W, ring::digest::Context, u64);

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(b)?;
        self.1.update(&b[..n]);
        self.2 += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A tar of one file, `name`, of `mib` MiB of zeros, written to `out` as it is made; returns
/// `out`, the hex digest of what was written and its size.
fn zeros_tar<W: Write>(out: W, name: &str, mib: u64) -> (W, String, u64) {
    let mut tar = tar::Builder::new(Hashing(
        out,
        ring::digest::Context::new(&ring::digest::SHA256),
        0,
    ));
    let mut h = tar::Header::new_gnu();
    h.set_size(mib << 20);
    h.set_mode(0o644);
    tar.append_data(&mut h, name, std::io::repeat(0).take(mib << 20))
        .unwrap();
    let Hashing(out, hash, size) = tar.into_inner().unwrap();
    let hex = hash
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (out, hex, size)
}

/// A layer of `mib` MiB of zeros (gzip'd, written as it is made: the test holds none of it).
fn zeros_layer(l: &Layout, mib: u64) -> Layer {
    let path = l.dir.join("zeros.gz");
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    // The digest a layer's diff_id names is the uncompressed tar's.
    let (gz, hex, _) = zeros_tar(gz, "var/zeros", mib);
    gz.finish().unwrap();
    let blob = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    Layer(GZIP, Blob::Bytes(blob), format!("sha256:{hex}"))
}

/// An uncompressed tar layer of `mib` MiB of zeros, written straight into the layout: what
/// crosses the network is the whole size (nothing held in the test's memory).
fn plain_zeros_layer(l: &Layout, mib: u64) -> Layer {
    let path = l.dir.join("zeros.tar");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let (mut file, hex, size) = zeros_tar(file, "var/plain-zeros", mib);
    file.flush().unwrap();
    std::fs::rename(&path, l.dir.join("blobs/sha256").join(&hex)).unwrap();
    let digest = format!("sha256:{hex}");
    Layer(PLAIN, Blob::Written(digest.clone(), size as usize), digest)
}

use std::io::Read as _;

#[tokio::test]
async fn a_big_layer_before_the_file_is_streamed_with_flat_memory_and_bounded() {
    let mut t = TestNs::new("oci-big-layer").await;
    let ns = t.ns.clone();
    let l = Layout::new(&format!("{ns}-big"));
    let file = channel_tar(&elemental(&["after-the-zeros"]));
    // Top down, a 1 GiB uncompressed layer (1 GiB crosses the network) and 200 MiB of
    // gzip'd zeros (a small blob that inflates) are read before the one with the file.
    let desc = l.image(
        &[
            gz_layer(&rootfs()),
            gz_layer(&file),
            zeros_layer(&l, 200),
            plain_zeros_layer(&l, 1024),
        ],
        "amd64",
    );
    l.push(desc, &format!("{ns}/big"), "v1");
    // The layout's 1.2 GiB are in the registry now.
    let _ = std::fs::remove_dir_all(&l.dir);
    let mut flags = FLAGS.to_vec();
    flags.push("--max-layer-bytes=2Gi");
    start_pulling(&mut t, &flags).await;
    let image = format!("{}/{ns}/big:v1", registry());
    t.create_channel("big", oci(&image, json!({"timeout": "10m"})))
        .await;
    t.wait_ready("big", "Synchronized", Duration::from_secs(300))
        .await;
    assert_eq!(t.version_names().await, ["after-the-zeros"]);
    let (_, peak) = rss_kib(operator_pid(&ns));
    assert!(
        peak < 96 << 10,
        "the operator's peak RSS was {peak} KiB after reading 1.2 GiB of layers"
    );
    t.kill_operator();
    // Under a bound smaller than the layer: refused, naming the flag.
    let mut flags = FLAGS.to_vec();
    flags.push("--max-layer-bytes=64Mi");
    install_crds(&t.client).await;
    t.start_operator(&flags);
    t.patch_spec("big", json!({"options": {"timeout": "31s"}}))
        .await;
    let ch = t.wait_ready("big", "FailedToSync", SYNC).await;
    assert!(ready_message(&ch).contains(&format!("pulling {image}: the layers read to find /channel.json are more than 67108864 bytes (--max-layer-bytes)")), "{}", ready_message(&ch));
    assert_eq!(
        t.version_names().await,
        ["after-the-zeros"],
        "nothing changed"
    );
    t.cleanup().await;
}

#[tokio::test]
async fn validate_image_reads_a_channel_image_with_the_operator_rules() {
    let t = TestNs::new("oci-validate").await;
    let ns = t.ns.clone();
    let r = registry();
    push_channel(
        &format!("{ns}/good"),
        "v1",
        &elemental(&["good-a", "good-b"]),
    );
    let bad = json!([{"metadata": {"name": "Bad_Name"}, "spec": {"type": "container"}}]);
    push_channel(&format!("{ns}/bad"), "v1", &bad);
    let (u, p) = creds();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
    let auth_file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}-auth.json"));
    std::fs::write(
        &auth_file,
        json!({"auths": {r.clone(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let validate = |image: String, with_auth: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rancheros-operator"));
        c.args([
            "validate",
            "--insecure",
            "--format",
            "json",
            "--image",
            &image,
        ]);
        c.env_remove("DOCKER_CONFIG")
            .env("HOME", "/nonexistent")
            .env_remove("XDG_RUNTIME_DIR");
        if with_auth {
            c.env("REGISTRY_AUTH_FILE", &auth_file);
        } else {
            c.env_remove("REGISTRY_AUTH_FILE");
        }
        let o = c.output().unwrap();
        let doc: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|_| json!({"stderr": String::from_utf8_lossy(&o.stderr)}));
        (o.status.code(), doc)
    };
    let (code, doc) = validate(format!("{r}/{ns}/good:v1"), true);
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(doc["files"][0]["versions"], 2, "{doc}");
    assert!(
        doc["files"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with(":/channel.json"),
        "{doc}"
    );
    let (code, doc) = validate(format!("{r}/{ns}/bad:v1"), true);
    assert_eq!(code, Some(1), "{doc}");
    let paths: Vec<&str> = doc["files"][0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["path"].as_str())
        .collect();
    assert!(paths.contains(&"[0].metadata.name"), "{doc}");
    let (code, doc) = validate(format!("{r}/{ns}/good:v1"), false);
    assert_eq!(code, Some(1), "{doc}");
    let why = doc["files"][0]["read_error"].as_str().unwrap();
    assert!(
        why.contains(&format!("401 unauthorized for {r}/{ns}/good")),
        "{why}"
    );
    let (code, doc) = validate(format!("{r}/{ns}/good:nope"), true);
    assert_eq!(code, Some(1));
    let why = doc["files"][0]["read_error"].as_str().unwrap();
    assert!(
        why.ends_with(&format!("manifest unknown {r}/{ns}/good:nope")),
        "{why}"
    );
    t.cleanup().await;
}
