//! `mirror`'s decisions, apart from its I/O: what SOURCE and DEST name, where each image
//! goes, the channel artifact pushed at the end, and the channel printed for the site.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::config::ImageRef;

/// The media type of the channel artifact's config (OCI's empty descriptor) and its bytes.
pub const EMPTY_TYPE: &str = "application/vnd.oci.empty.v1+json";
pub const EMPTY: &[u8] = b"{}";
/// The artifact type (and layer media type) oci channels read as the data itself.
pub const CHANNEL_TYPE: &str = "application/vnd.rancheros.channel.v1+json";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A channel image or artifact in a registry.
    Oci(String),
    /// A json channel's URL.
    Url(String),
    File(PathBuf),
    /// A layout an earlier `mirror --to dir:PATH` wrote.
    Dir(PathBuf),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    /// `host[:port]/path`: images go to `host/path/<their repository>`.
    Registry(String),
    Dir(PathBuf),
}

pub fn source(text: &str) -> Result<Source, String> {
    if let Some(dir) = text.strip_prefix("dir:") {
        return Ok(Source::Dir(PathBuf::from(dir)));
    }
    if text.starts_with("https://") || text.starts_with("http://") {
        return Ok(Source::Url(text.to_string()));
    }
    if std::path::Path::new(text).is_file() {
        return Ok(Source::File(PathBuf::from(text)));
    }
    ImageRef::parse(text)
        .map(|_| Source::Oci(text.to_string()))
        .map_err(|e| format!("SOURCE {text:?} is no file, URL or dir:PATH, nor an image: {e}"))
}

pub fn dest(text: &str) -> Result<Dest, String> {
    if let Some(dir) = text.strip_prefix("dir:") {
        if dir.is_empty() {
            return Err("--to dir: needs a path (dir:PATH)".into());
        }
        return Ok(Dest::Dir(PathBuf::from(dir)));
    }
    let prefix = text.trim_end_matches('/');
    // A prefix is a reference without tag or digest: `host/path` must parse with one.
    let probe = format!("{prefix}/x:t");
    let parsed = crate::reference::Reference::parse_explicit(&probe).map_err(|e| {
        format!("--to {text:?} is not a registry prefix (host/path) or dir:PATH: {e}")
    })?;
    if !prefix.contains('/') && !prefix.contains('.') && !prefix.contains(':') {
        return Err(format!(
            "--to {text:?}: name the registry host (registry.site.lan/os), or dir:PATH"
        ));
    }
    let _ = parsed;
    Ok(Dest::Registry(prefix.to_string()))
}

/// An image as the channel data names it, resolved as a container runtime would (no tag:
/// `latest`).
pub fn image(reference: &str) -> Result<ImageRef, String> {
    let r = crate::reference::Reference::parse(reference).map_err(|e| e.to_string())?;
    let text = match (&r.digest, &r.tag) {
        (Some(d), _) => format!("{}/{}@{d}", r.registry, r.repository),
        (None, Some(t)) => format!("{}/{}:{t}", r.registry, r.repository),
        (None, None) => format!("{}/{}:latest", r.registry, r.repository),
    };
    ImageRef::parse(&text)
}

/// Where an image of `repository` goes in a registry DEST.
pub fn dest_repo(prefix: &str, repository: &str) -> String {
    format!("{prefix}/{repository}")
}

/// The reference the rewritten channel names for `image` copied to the registry prefix
/// `prefix`: its repository under the prefix, pinned by `digest`.
pub fn dest_reference(prefix: &str, image: &ImageRef, digest: &str) -> String {
    format!("{}@{digest}", dest_repo(prefix, &image.repository))
}

/// The name of the channel in DEST (`path:tag`): an oci source keeps its repository path
/// and tag; a file or URL is named by its last path part, tagged by its data (the same data,
/// the same tag).
pub fn channel_name(source: &Source, data: &[u8]) -> String {
    let stem = |s: &str| {
        let last = s.rsplit('/').next().unwrap_or(s);
        let stem = last.split('.').next().unwrap_or(last);
        let clean: String = stem
            .to_ascii_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let clean = clean.trim_matches(|c| c == '-' || c == '_').to_string();
        if clean.is_empty() {
            "channel".to_string()
        } else {
            clean
        }
    };
    let tag = || {
        let digest = crate::registry::sha256(data);
        let hex = digest.strip_prefix("sha256:").unwrap_or(&digest);
        format!("data-{}", hex.get(..12).unwrap_or(hex))
    };
    match source {
        Source::Oci(r) => match ImageRef::parse(r) {
            Ok(i) => match &i.reference {
                crate::config::Reference::Tag(t) => format!("{}:{t}", i.repository),
                crate::config::Reference::Digest(_) => format!("{}:{}", i.repository, tag()),
            },
            Err(_) => format!("channel:{}", tag()),
        },
        Source::Url(u) => format!(
            "{}:{}",
            stem(u.split(['?', '#']).next().unwrap_or(u)),
            tag()
        ),
        Source::File(p) => format!("{}:{}", stem(&p.to_string_lossy()), tag()),
        // (read from the layout's channel entry instead)
        Source::Dir(_) => format!("channel:{}", tag()),
    }
}

/// The channel artifact of `data`: its manifest's bytes (the layer and the config are
/// `data` and [`EMPTY`]).
pub fn artifact(data: &[u8]) -> Vec<u8> {
    json!({
        "schemaVersion": 2,
        "mediaType": crate::registry::manifest::OCI_MANIFEST,
        "artifactType": CHANNEL_TYPE,
        "config": {"mediaType": EMPTY_TYPE, "digest": crate::registry::sha256(EMPTY), "size": EMPTY.len()},
        "layers": [{"mediaType": CHANNEL_TYPE, "digest": crate::registry::sha256(data), "size": data.len(),
            "annotations": {"org.opencontainers.image.title": "channel.json"}}],
    })
    .to_string()
    .into_bytes()
}

/// An image index narrowed to `platforms` (`--platform`): the same index with only the
/// entries serving one of them (in its order, annotations and all); `None` when `body` is
/// not an index or every entry serves one; an error when none does.
pub fn narrow_index(
    body: &[u8],
    content_type: Option<&str>,
    platforms: &[crate::config::Platform],
) -> Result<Option<Vec<u8>>, String> {
    use crate::registry::manifest::{self, Manifest};
    let Ok(Manifest::Index(entries)) = manifest::parse(body, content_type) else {
        return Ok(None);
    };
    let keep: Vec<&str> = platforms
        .iter()
        .filter_map(|p| manifest::choose(&entries, p))
        .map(|d| d.digest.as_str())
        .collect();
    if keep.is_empty() {
        let asked: Vec<String> = platforms.iter().map(ToString::to_string).collect();
        return Err(format!(
            "no platform {} in the index (it has {})",
            asked.join(", "),
            manifest::platforms(&entries)
        ));
    }
    if keep.len() >= entries.len() {
        return Ok(None); // every entry serves one: the index as it is
    }
    // The index rebuilt from its own JSON, not from the types: every field it has, known
    // or not, stays as it was.
    let mut index: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if let Some(list) = index.get_mut("manifests").and_then(Value::as_array_mut) {
        list.retain(|d| d["digest"].as_str().is_some_and(|x| keep.contains(&x)));
    }
    serde_json::to_vec(&index)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The channel to apply at the site: `type: oci`, the mirrored artifact.
pub fn channel_manifest(name: &str, image: &str, insecure: bool, signed: bool) -> Value {
    let mut options = json!({"image": image});
    if insecure {
        options["insecure"] = json!(true);
    }
    let mut channel = json!({
        "apiVersion": "rancheros.cattle.io/v1",
        "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name},
        "spec": {"type": "oci", "options": options},
    });
    if signed {
        channel["spec"]["verify"] =
            json!({"provider": "cosign", "secretRef": {"name": key_secret_name(name)}});
    }
    channel
}

fn key_secret_name(channel: &str) -> String {
    let mut name = format!("{channel}-cosign");
    if name.len() > 63 {
        name = format!("{}-cosign", channel.get(..56).unwrap_or(channel));
    }
    name
}

/// The Secret of the public key a signed channel's `verify` names (`cosign.pub`).
pub fn key_secret(channel: &str, public_pem: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": key_secret_name(channel)},
        "stringData": {"cosign.pub": public_pem},
    })
}

/// A channel's Kubernetes name from its repository path: the last part, as a DNS label.
pub fn object_name(path: &str) -> String {
    let last = path.rsplit('/').next().unwrap_or(path);
    let mut name: String = last
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.truncate(63);
    let name = name.trim_matches('-').to_string();
    if name.is_empty() {
        "channel".into()
    } else {
        name
    }
}

/// Bytes for people (`1.5 MiB`).
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len().saturating_sub(1) {
        value /= 1024.0;
        unit = unit.saturating_add(1);
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS.get(unit).copied().unwrap_or("B"))
    }
}

#[cfg(test)]
mod tests;
