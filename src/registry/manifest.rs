//! Manifests and image indexes (OCI and Docker v2), and the choices made from them: which
//! manifest of an index serves the platform, which layers hold the data.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::config::Platform;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// The `Accept` header of manifest requests: every kind this client reads.
pub const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

/// Layer media types that are the channel data itself (an artifact).
pub const DATA_TYPES: [&str; 2] = [
    "application/json",
    "application/vnd.rancheros.channel.v1+json",
];

/// The largest manifest read (as containerd bounds them).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// Annotations, as the OCI spec has them: a map of strings.
pub type Annotations = BTreeMap<String, String>;

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<DescPlatform>,
    /// The type of the artifact it names (OCI 1.1: a referrers index lists it).
    #[serde(default, deserialize_with = "passed_on")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    #[serde(default, deserialize_with = "passed_on")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// What else it carries, kept so that an index written again (a referrers tag
    /// extended) loses nothing.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct DescPlatform {
    pub os: String,
    pub architecture: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A field the client only carries along (an artifact's type, annotations): a value not of
/// its type reads as absent, never a reason to refuse the manifest that carries it.
fn passed_on<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    Ok(serde_json::from_value(Value::deserialize(d)?).ok())
}

/// An image index as it is written (a referrers tag): its manifests, and what else it
/// carries, kept.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Absent or `null`: none.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub manifests: Vec<Descriptor>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Index {
    /// A new OCI index of `manifests`.
    pub fn new(manifests: Vec<Descriptor>) -> Index {
        Index {
            schema_version: Some(2),
            media_type: Some(OCI_INDEX.into()),
            manifests,
            other: Map::new(),
        }
    }
}

fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Descriptor>, D::Error> {
    Ok(Option::deserialize(d)?.unwrap_or_default())
}

/// What a manifest says of itself (OCI 1.1), beyond what it names: the image it refers to
/// (`subject`), its artifact type, its config, its annotations (as sent: whoever acts on
/// them checks they are strings).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Head {
    pub subject: Option<Descriptor>,
    #[serde(default, deserialize_with = "passed_on")]
    pub artifact_type: Option<String>,
    #[serde(default, deserialize_with = "passed_on")]
    pub config: Option<Descriptor>,
    pub annotations: Option<Map<String, Value>>,
}

/// A manifest or an index: which one is told by `mediaType` (the body's, else the
/// response's `Content-Type`), or by which list it has.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Any {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
}

#[derive(Debug, PartialEq)]
pub enum Manifest {
    Index(Vec<Descriptor>),
    /// The layers, bottom first.
    Image(Vec<Descriptor>),
}

/// Parses a manifest body; `Err` says what is wrong, in words of its own.
pub fn parse(body: &[u8], content_type: Option<&str>) -> Result<Manifest, String> {
    // serde's text can quote the body: where it failed is enough.
    let any: Any = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the manifest is not valid JSON or not shaped as one (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    let kind = any
        .media_type
        .as_deref()
        .or(content_type)
        .map(|t| t.split(';').next().unwrap_or_default().trim().to_string());
    match (kind.as_deref(), any.manifests, any.layers) {
        (Some(OCI_INDEX | DOCKER_LIST), Some(m), _) | (None, Some(m), None) => {
            Ok(Manifest::Index(m))
        }
        (Some(OCI_MANIFEST | DOCKER_MANIFEST), _, Some(l)) | (None, None, Some(l)) => {
            Ok(Manifest::Image(l))
        }
        (Some(other), _, _)
            if ![OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST].contains(&other) =>
        {
            Err(format!(
                "the manifest has media type {}, which is not an image or an index",
                word(other)
            ))
        }
        _ => Err("the manifest lists neither layers nor manifests".into()),
    }
}

/// A descriptor's digest and size, checked: what a copy fetches, and what bounds its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sized {
    pub digest: String,
    pub size: u64,
}

/// What a manifest or an index names, for copying it whole (`mirror`): an index's
/// manifests, an image's config and layers (an artifact's too, whatever their types).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Contents {
    pub manifests: Vec<Sized>,
    pub blobs: Vec<Sized>,
}

/// The [`Contents`] of a manifest body: a digest not well-formed (one a path could be made
/// of), or a descriptor without a size, is refused.
pub fn contents(body: &[u8]) -> Result<Contents, String> {
    #[derive(Deserialize)]
    struct Raw {
        #[serde(default)]
        manifests: Vec<RawDescriptor>,
        #[serde(default)]
        config: Option<RawDescriptor>,
        #[serde(default)]
        layers: Vec<RawDescriptor>,
    }
    #[derive(Deserialize)]
    struct RawDescriptor {
        digest: Option<String>,
        size: Option<u64>,
    }
    let checked = |d: RawDescriptor| -> Result<Sized, String> {
        let digest = d.digest.ok_or("a descriptor without a digest")?;
        if crate::digest::Algorithm::checked(&digest).is_none() {
            return Err(format!(
                "a descriptor names the digest {:?}",
                crate::text::head(&digest, 140)
            ));
        }
        let size = d
            .size
            .ok_or_else(|| format!("the descriptor of {digest} has no size"))?;
        Ok(Sized { digest, size })
    };
    let raw: Raw = serde_json::from_slice(body)
        .map_err(|_| "a manifest is not JSON, or not shaped as one".to_string())?;
    Ok(Contents {
        manifests: raw
            .manifests
            .into_iter()
            .map(checked)
            .collect::<Result<_, _>>()?,
        blobs: raw
            .config
            .into_iter()
            .chain(raw.layers)
            .map(checked)
            .collect::<Result<_, _>>()?,
    })
}

/// A word the registry sent (a media type, a platform's part), for a message: shown only
/// when it is short and made of the characters such names use, so that a message never
/// carries free text of what answered.
pub fn word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-/=; ".contains(&b));
    if plain {
        s.to_string()
    } else {
        "(a name not shown: too long or not plain)".into()
    }
}

/// The index entry for `platform` (a variant is matched only when one is asked for).
pub fn choose<'a>(entries: &'a [Descriptor], platform: &Platform) -> Option<&'a Descriptor> {
    entries.iter().find(|d| {
        d.platform.as_ref().is_some_and(|p| {
            p.os == platform.os
                && p.architecture == platform.architecture
                && platform
                    .variant
                    .as_ref()
                    .is_none_or(|v| p.variant.as_ref() == Some(v))
        })
    })
}

/// The platforms an index offers, for a message.
pub fn platforms(entries: &[Descriptor]) -> String {
    let names: Vec<String> = entries
        .iter()
        .filter_map(|d| d.platform.as_ref())
        .map(|p| match &p.variant {
            Some(v) => word(&format!("{}/{}/{v}", p.os, p.architecture)),
            None => word(&format!("{}/{}", p.os, p.architecture)),
        })
        .collect();
    crate::text::list(&names, ", ")
}

/// How a layer is compressed, from its media type; `None`: not a filesystem layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

pub fn compression(media_type: &str) -> Option<Compression> {
    let t = media_type.replace(".nondistributable", "").replace(
        "application/vnd.docker.image.rootfs.foreign.diff",
        "application/vnd.docker.image.rootfs.diff",
    );
    match t.as_str() {
        "application/vnd.oci.image.layer.v1.tar"
        | "application/vnd.docker.image.rootfs.diff.tar" => Some(Compression::None),
        "application/vnd.oci.image.layer.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Some(Compression::Gzip),
        "application/vnd.oci.image.layer.v1.tar+zstd"
        | "application/vnd.docker.image.rootfs.diff.tar.zstd" => Some(Compression::Zstd),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn desc(platform: Option<(&str, &str, Option<&str>)>) -> Descriptor {
        Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: "sha256:0".into(),
            size: 1,
            platform: platform.map(|(os, architecture, variant)| DescPlatform {
                os: os.into(),
                architecture: architecture.into(),
                variant: variant.map(str::to_string),
                other: Default::default(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn manifests_and_indexes_are_told_apart() {
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []});
        let body = serde_json::to_vec(&index).unwrap();
        assert_eq!(parse(&body, None), Ok(Manifest::Index(vec![])));
        let image = json!({"schemaVersion": 2, "layers": [{"mediaType": "application/json", "digest": "sha256:1", "size": 2}]});
        let body = serde_json::to_vec(&image).unwrap();
        let Ok(Manifest::Image(layers)) = parse(&body, Some(DOCKER_MANIFEST)) else {
            panic!("an image manifest")
        };
        assert_eq!(layers[0].media_type, "application/json");
        let odd = serde_json::to_vec(&json!({"mediaType": "text/plain", "layers": []})).unwrap();
        assert!(parse(&odd, None).unwrap_err().contains("text/plain"));
        assert!(parse(b"{", None).is_err());
    }

    #[test]
    fn what_a_descriptor_only_passes_on_refuses_nothing() {
        // Fields the client does not act on, sent malformed, read as absent.
        let body = json!({"mediaType": OCI_INDEX, "manifests": [{"mediaType": OCI_MANIFEST,
            "digest": "sha256:0", "size": 1, "artifactType": 5, "annotations": {"a": 1}}]});
        let Ok(Manifest::Index(entries)) = parse(&serde_json::to_vec(&body).unwrap(), None) else {
            panic!("an index")
        };
        assert_eq!(
            (
                entries[0].artifact_type.as_ref(),
                entries[0].annotations.as_ref()
            ),
            (None, None)
        );
    }

    #[test]
    fn the_platform_picks_the_index_entry() {
        let entries = [
            desc(Some(("linux", "arm", Some("v7")))),
            desc(Some(("linux", "amd64", None))),
            desc(None),
        ];
        let p = |t: &str| Platform::parse(t).unwrap();
        assert_eq!(choose(&entries, &p("linux/amd64")), Some(&entries[1]));
        assert_eq!(choose(&entries, &p("linux/arm")), Some(&entries[0]));
        assert_eq!(choose(&entries, &p("linux/arm/v7")), Some(&entries[0]));
        assert_eq!(choose(&entries, &p("linux/arm/v6")), None);
        assert_eq!(platforms(&entries), "linux/arm/v7, linux/amd64");
    }

    #[test]
    fn layer_media_types_say_the_compression() {
        use Compression::*;
        for (t, c) in [
            ("application/vnd.oci.image.layer.v1.tar", Some(None)),
            ("application/vnd.oci.image.layer.v1.tar+gzip", Some(Gzip)),
            (
                "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
                Some(Zstd),
            ),
            (
                "application/vnd.docker.image.rootfs.diff.tar.gzip",
                Some(Gzip),
            ),
            ("application/json", Option::None),
        ] {
            assert_eq!(compression(t), c, "{t}");
        }
    }

    #[test]
    fn a_manifest_names_its_children_and_blobs() {
        let (a, c, l) = ("a".repeat(64), "c".repeat(64), "e".repeat(64));
        let sized = |d: &str, size: u64| Sized {
            digest: format!("sha256:{d}"),
            size,
        };
        let children = |body: &[u8]| contents(body).map(|c| (c.manifests, c.blobs));
        let index = format!(r#"{{"manifests":[{{"digest":"sha256:{a}","size":3}}]}}"#);
        assert_eq!(
            children(index.as_bytes()).unwrap(),
            (vec![sized(&a, 3)], vec![])
        );
        let image = format!(
            r#"{{"config":{{"digest":"sha256:{c}","size":1}},"layers":[{{"digest":"sha256:{l}","size":9}}]}}"#
        );
        assert_eq!(
            children(image.as_bytes()).unwrap(),
            (vec![], vec![sized(&c, 1), sized(&l, 9)])
        );
        assert!(children(br#"{"layers":[{"digest":"md5:00"}]}"#).is_err());
        // Dot segments and short or upper-case hex name nothing; a size is needed.
        for bad in [
            "sha256:../../victim/app/manifests/latest",
            "sha256:aa",
            &format!("sha256:{}", "A".repeat(64)),
        ] {
            let body = format!(r#"{{"layers":[{{"digest":"{bad}","size":1}}]}}"#);
            assert!(children(body.as_bytes()).is_err(), "{bad}");
        }
        let unsized_ = format!(r#"{{"layers":[{{"digest":"sha256:{l}"}}]}}"#);
        let e = children(unsized_.as_bytes()).unwrap_err();
        assert!(e.contains("has no size"), "{e}");
        assert!(children(b"<html>").is_err());
    }
}
