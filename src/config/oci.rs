//! `options` of an `oci` channel: the image reference, the file to read in it, and how to
//! reach its registry.

use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{Limits, clean_path, fetch_timeout, string, typed, unknown_keys};
pub use crate::platform::Platform;

/// The file read from an image when `options.path` is not set (where Elemental's channel
/// images keep it).
pub const DEFAULT_PATH: &str = "/channel.json";
/// The registry an image without a registry host names (as `docker pull` does).
pub const DOCKER_HUB: &str = "registry-1.docker.io";

/// `options` of an `oci` channel.
#[derive(Clone, Debug, PartialEq)]
pub struct OciOptions {
    pub image: ImageRef,
    /// An absolute, normalised path in the image's filesystem.
    pub path: String,
    /// Secrets of the channel's namespace, of type `kubernetes.io/dockerconfigjson`.
    pub image_pull_secrets: Vec<String>,
    /// A Secret of the channel's namespace whose `ca.crt` the registry's certificate must
    /// chain to (besides the system's roots).
    pub ca_secret: Option<String>,
    /// Plain HTTP (only with `--allow-insecure-registries`).
    pub insecure: bool,
    pub platform: Platform,
    pub timeout: Duration,
    /// `spec.verify.secretRef.name`: the Secret whose `cosign.pub` must have signed the
    /// image's digest.
    pub verify_secret: Option<String>,
}

impl OciOptions {
    /// The options of a channel that names only `image` and `timeout`: the default path,
    /// the host's platform, TLS, no secrets, no signature to verify.
    pub fn of_image(image: ImageRef, timeout: Duration) -> Self {
        OciOptions {
            image,
            path: DEFAULT_PATH.into(),
            image_pull_secrets: Vec::new(),
            ca_secret: None,
            insecure: false,
            platform: Platform::host(),
            timeout,
            verify_secret: None,
        }
    }
}

/// An image reference: `[host[:port]/]repository(:tag|@sha256:hex)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// `host[:port]`, as connected to.
    pub registry: String,
    pub repository: String,
    /// A tag or `sha256:<64 hex>`.
    pub reference: Reference,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reference {
    Tag(String),
    Digest(String),
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        match &self.reference {
            Reference::Tag(t) => write!(f, ":{t}"),
            Reference::Digest(d) => write!(f, "@{d}"),
        }
    }
}

impl ImageRef {
    /// `registry/repository`, without tag or digest.
    pub fn repo(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The tag or digest, as the registry's manifest URL takes it.
    pub fn reference(&self) -> &str {
        match &self.reference {
            Reference::Tag(t) | Reference::Digest(t) => t,
        }
    }

    /// Parses `repo:tag` or `repo@sha256:<hex>` with the one reference parser
    /// (`crate::reference`); a reference without either is refused (no implicit `latest`:
    /// what the channel follows is written down). A digest pins even beside a tag.
    pub fn parse(text: &str) -> Result<ImageRef, String> {
        let r =
            crate::reference::Reference::parse_explicit(text.trim()).map_err(|e| e.to_string())?;
        let reference = match (r.digest, r.tag) {
            (Some(digest), _) => Reference::Digest(digest),
            (None, Some(tag)) => Reference::Tag(tag),
            (None, None) => return Err(format!("{:?} names no tag or digest", text.trim())),
        };
        // Docker Hub's canonical name is not the host its API answers on.
        let registry = if r.registry == crate::reference::DOCKER_HUB {
            DOCKER_HUB.to_string()
        } else {
            r.registry
        };
        Ok(ImageRef {
            registry,
            repository: r.repository,
            reference,
        })
    }
}

#[derive(serde::Deserialize)]
struct Named {
    name: String,
}

pub(super) fn oci_options(
    options: &Map<String, Value>,
    limits: &Limits,
) -> Result<OciOptions, String> {
    unknown_keys(options, crate::schema::options_of("oci"), "oci")?;
    let image = string(options, "image")?
        .filter(|i| !i.trim().is_empty())
        .ok_or("spec.options.image: required for an oci channel: repo:tag or repo@sha256:... of the channel image")?;
    let image = ImageRef::parse(&image).map_err(|e| format!("spec.options.image: {e}"))?;
    let path = string(options, "path")?.unwrap_or_else(|| DEFAULT_PATH.into());
    let path = clean_path(&path)
        .filter(|p| p != "/")
        .ok_or_else(|| format!("spec.options.path: {path:?} must be an absolute file path"))?;
    let secrets: Option<Vec<Named>> = typed(
        options,
        "imagePullSecrets",
        "a list of secret references ({name: ...})",
    )?;
    let ca: Option<Named> = typed(options, "caSecretRef", "a secret reference ({name: ...})")?;
    let insecure: Option<bool> = typed(options, "insecure", "true or false")?;
    let insecure = insecure.unwrap_or(false);
    if insecure && !limits.allow_insecure_registries {
        return Err("spec.options.insecure: this operator refuses plain-HTTP registries (its admin can allow them with --allow-insecure-registries)".into());
    }
    let platform = match string(options, "platform")? {
        None => Platform::host(),
        Some(p) => Platform::parse(&p).map_err(|e| format!("spec.options.platform: {e}"))?,
    };
    Ok(OciOptions {
        image,
        path,
        image_pull_secrets: secrets.into_iter().flatten().map(|n| n.name).collect(),
        ca_secret: ca.map(|n| n.name),
        insecure,
        platform,
        timeout: fetch_timeout(options, limits)?,
        verify_secret: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_as_docker_does_and_need_a_tag_or_digest() {
        let r = ImageRef::parse("127.0.0.1:5050/channels/elemental:v1.6").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.reference()),
            ("127.0.0.1:5050", "channels/elemental", "v1.6")
        );
        assert_eq!(r.to_string(), "127.0.0.1:5050/channels/elemental:v1.6");
        let r = ImageRef::parse("busybox:1").unwrap();
        assert_eq!(r.repo(), "registry-1.docker.io/library/busybox");
        let r = ImageRef::parse("rancher/elemental-channel:latest").unwrap();
        assert_eq!(r.repo(), "registry-1.docker.io/rancher/elemental-channel");
        let digest = format!("sha256:{}", "a".repeat(64));
        let r = ImageRef::parse(&format!("ghcr.io/x/y@{digest}")).unwrap();
        assert_eq!(r.reference, Reference::Digest(digest));
        for bad in [
            "ghcr.io/x/y",
            "host:5000/repo",
            "ghcr.io/x/y@sha256:abc",
            "ghcr.io/X/y:1",
            "ghcr.io/x/y:-1",
            "ghcr.io//y:1",
            "ghcr.io/x/y:",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_have_defaults_and_insecure_needs_the_flag() {
        let opts = |v: Value| v.as_object().cloned().unwrap();
        let o = oci_options(
            &opts(serde_json::json!({"image": "r.io/c:v1"})),
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(o.path, "/channel.json");
        assert_eq!(o.timeout, Duration::from_secs(30));
        assert_eq!(o.platform, Platform::host());
        assert!(!o.insecure && o.image_pull_secrets.is_empty() && o.ca_secret.is_none());
        let insecure = opts(serde_json::json!({"image": "r.io/c:v1", "insecure": true}));
        let e = oci_options(&insecure, &Limits::default()).unwrap_err();
        assert!(e.contains("--allow-insecure-registries"), "{e}");
        let allowed = Limits {
            allow_insecure_registries: true,
            ..Limits::default()
        };
        assert!(oci_options(&insecure, &allowed).unwrap().insecure);
        let full = opts(serde_json::json!({
            "image": "r.io/c:v1", "path": "/a/../b.json", "platform": "linux/arm/v7",
            "imagePullSecrets": [{"name": "pull"}], "caSecretRef": {"name": "ca"}, "timeout": "5s"
        }));
        let o = oci_options(&full, &Limits::default()).unwrap();
        assert_eq!(o.path, "/b.json");
        assert_eq!(o.platform.to_string(), "linux/arm/v7");
        assert_eq!(o.image_pull_secrets, vec!["pull".to_string()]);
        assert_eq!(o.ca_secret.as_deref(), Some("ca"));
        for (bad, field) in [
            (serde_json::json!({}), "spec.options.image"),
            (serde_json::json!({"image": "r.io/c"}), "spec.options.image"),
            (
                serde_json::json!({"image": "r.io/c:1", "path": "x"}),
                "spec.options.path",
            ),
            (
                serde_json::json!({"image": "r.io/c:1", "platform": "linux"}),
                "spec.options.platform",
            ),
            (
                serde_json::json!({"image": "r.io/c:1", "uri": "x"}),
                "spec.options.uri",
            ),
        ] {
            let e = oci_options(&opts(bad.clone()), &Limits::default()).unwrap_err();
            assert!(e.starts_with(field), "{bad}: {e}");
        }
    }
}
