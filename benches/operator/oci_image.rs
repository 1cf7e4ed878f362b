//! An OCI image layout as elemental-channels builds its channel images: a busybox rootfs
//! layer, then a `/channel.json` layer (gzip'd tars), for `skopeo copy` to push.

use std::io::Write as _;
use std::path::Path;

use serde_json::{Value, json};

fn sha256_hex(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A tar of `files` (mode 0755), and its gzip (level 6, no timestamp).
pub fn layer(files: &[(&str, &[u8])]) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o755);
        header.set_mtime(0);
        tar.append_data(&mut header, name, *content)?;
    }
    let raw = tar.into_inner()?;
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::new(6));
    gz.write_all(&raw)?;
    Ok((raw.clone(), gz.finish()?))
}

/// The blobs of an image of `layers` (raw, gzip'd) whose command copies the channel file
/// to the display log's: `(digest hex, bytes)` each, and the manifest's descriptor.
pub fn image(layers: &[(Vec<u8>, Vec<u8>)]) -> (Vec<(String, Vec<u8>)>, Value) {
    let mut blobs = Vec::new();
    let mut blob = |data: Vec<u8>| {
        let digest = sha256_hex(&data);
        let desc = json!({"digest": format!("sha256:{digest}"), "size": data.len()});
        blobs.push((digest, data));
        desc
    };
    let diff_ids: Vec<String> = layers
        .iter()
        .map(|(raw, _)| format!("sha256:{}", sha256_hex(raw)))
        .collect();
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["/bin/busybox", "cp", "/channel.json", "/data/output"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let mut config_desc = blob(config.to_string().into_bytes());
    config_desc["mediaType"] = json!("application/vnd.oci.image.config.v1+json");
    let layer_descs: Vec<Value> = layers
        .iter()
        .map(|(_, gz)| {
            let mut d = blob(gz.clone());
            d["mediaType"] = json!("application/vnd.oci.image.layer.v1.tar+gzip");
            d
        })
        .collect();
    let manifest = json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc, "layers": layer_descs,
    });
    let mut desc = blob(manifest.to_string().into_bytes());
    desc["mediaType"] = json!("application/vnd.oci.image.manifest.v1+json");
    desc["annotations"] = json!({"org.opencontainers.image.ref.name": "v1"});
    (blobs, desc)
}

/// Writes the layout of the channel image holding `data` to `dir` (tag `v1`).
pub fn write_layout(dir: &Path, busybox: &[u8], data: &Value) -> std::io::Result<()> {
    let channel = data.to_string();
    let layers = [
        layer(&[("bin/busybox", busybox)])?,
        layer(&[("channel.json", channel.as_bytes())])?,
    ];
    let (blobs, desc) = image(&layers);
    let dir_blobs = dir.join("blobs").join("sha256");
    std::fs::create_dir_all(&dir_blobs)?;
    for (digest, data) in blobs {
        std::fs::write(dir_blobs.join(digest), data)?;
    }
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let index = json!({"schemaVersion": 2, "manifests": [desc]});
    std::fs::write(dir.join("index.json"), index.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_holds_what_its_manifest_names() {
        let dir = std::env::temp_dir().join(format!("bench-oci-{}", std::process::id()));
        let data = json!([{"metadata": {"name": "v1"}}]);
        write_layout(&dir, b"#!busybox", &data).unwrap();
        let read = |p: &Path| std::fs::read(p).unwrap();
        let index: Value = serde_json::from_slice(&read(&dir.join("index.json"))).unwrap();
        let desc = &index["manifests"][0];
        assert_eq!(
            desc["annotations"]["org.opencontainers.image.ref.name"],
            "v1"
        );
        let blob = |d: &Value| {
            let hex = d["digest"]
                .as_str()
                .unwrap()
                .strip_prefix("sha256:")
                .unwrap();
            let bytes = read(&dir.join("blobs/sha256").join(hex));
            assert_eq!(sha256_hex(&bytes), hex, "a blob is named by its digest");
            assert_eq!(bytes.len() as u64, d["size"].as_u64().unwrap());
            bytes
        };
        let manifest: Value = serde_json::from_slice(&blob(desc)).unwrap();
        let config: Value = serde_json::from_slice(&blob(&manifest["config"])).unwrap();
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 2);
        // The top layer's tar holds /channel.json, and its diff_id is the raw tar's digest.
        let gz = blob(&layers[1]);
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
        assert_eq!(
            config["rootfs"]["diff_ids"][1],
            format!("sha256:{}", sha256_hex(&raw))
        );
        let mut tar = tar::Archive::new(&raw[..]);
        let mut entry = tar.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap().to_str(), Some("channel.json"));
        let mut content = String::new();
        std::io::Read::read_to_string(&mut entry, &mut content).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&content).unwrap(), data);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
