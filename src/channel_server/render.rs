//! A served channel's data, rendered once when its sync publishes (never per request): the
//! body, its ETag, and per entry where it lies in the body and what `/latest` reads of it.

use std::collections::BTreeMap;
use std::ops::Range;

use kube::ResourceExt;
use serde_json::{Map, Value, json};

use crate::api::{
    CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionSpec, NO_LONGER_IN_SYNC_ANNOTATION,
    ORPHANED_FROM_ANNOTATION,
};
use crate::channel::ChannelVersion;
use crate::syncer::versions::CONTENT_HASH_ANNOTATION;

/// What a served entry costs beyond its bytes in the body and its texts (the structs, the
/// map's slot): counted against the server's memory bound.
const ENTRY_OVERHEAD: usize = 256;

/// One channel's published data as served.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The channel data: a JSON array of `{metadata: {name, labels?, annotations?}, spec}`.
    pub body: bytes::Bytes,
    /// A strong ETag of the body (quoted).
    pub etag: String,
    pub items: Vec<Item>,
    /// The memory it holds, as the server's bound counts it (see [`Entry::render`]).
    pub cost: usize,
}

/// One published version in the body.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Its bytes in [`Entry::body`].
    pub range: Range<usize>,
    /// The tag of its `spec.metadata.upgradeImage` (a `container` version's image); `None`:
    /// no such image, or one pinned by digest alone.
    pub tag: Option<String>,
    /// What the policy's order and platform rule read: the name, `spec.version` and
    /// `spec.metadata.platforms`, nothing else.
    pub lean: ChannelVersion,
}

impl Entry {
    /// Renders what a channel published: its versions as written (registry and
    /// upgradeContainer applied), by name, each with only its name, the labels and
    /// annotations the channel data carried (the operator's own bookkeeping left out), and
    /// its spec.
    pub fn render(versions: &[ManagedOSVersion]) -> Entry {
        let mut sorted: Vec<&ManagedOSVersion> = versions.iter().collect();
        sorted.sort_by_key(|v| v.name_any());
        let mut body = Vec::from(&b"["[..]);
        let mut items = Vec::with_capacity(sorted.len());
        for (n, v) in sorted.into_iter().enumerate() {
            if n > 0 {
                body.push(b',');
            }
            let start = body.len();
            // A version serialises; should one not, it is left out rather than half written.
            if serde_json::to_writer(&mut body, &published(v)).is_err() {
                body.truncate(start.saturating_sub(usize::from(n > 0)));
                continue;
            }
            items.push(Item {
                range: start..body.len(),
                tag: image_tag(&v.spec),
                lean: lean(&v.name_any(), &v.spec),
            });
        }
        body.push(b']');
        let etag = etag(&body);
        let cost = cost(body.len(), &items);
        Entry {
            body: body.into(),
            etag,
            items,
            cost,
        }
    }

    /// The entries whose image tag is `tag`, as channel data (an array).
    pub fn tagged(&self, tag: &str) -> Option<Vec<u8>> {
        let mut out = Vec::from(&b"["[..]);
        for item in self.items.iter().filter(|i| i.tag.as_deref() == Some(tag)) {
            if out.len() > 1 {
                out.push(b',');
            }
            out.extend_from_slice(self.body.get(item.range.clone())?);
        }
        out.push(b']');
        (out.len() > 2).then_some(out)
    }

    /// The newest version with an image tag, among those that run on `platform` when one is
    /// given (the policy's order and platform rule); `Err`: `platform` is no `os/arch`.
    pub fn latest(&self, platform: Option<&str>) -> Result<Option<&Item>, BadPlatform> {
        let mut runs = Vec::new();
        for item in self.items.iter().filter(|i| i.tag.is_some()) {
            let kept = match platform {
                None => true,
                Some(p) => crate::policy::runs_on(p, &item.lean).ok_or(BadPlatform)?,
            };
            if kept {
                runs.push(item);
            }
        }
        let newest = crate::policy::newest(runs.iter().map(|i| &i.lean));
        Ok(newest.and_then(|n| runs.into_iter().find(|i| i.lean.name == n.name)))
    }
}

/// The memory an entry holds: its body, and per item its texts and [`ENTRY_OVERHEAD`].
fn cost(body: usize, items: &[Item]) -> usize {
    items.iter().fold(body, |sum, i| {
        let platforms = i
            .lean
            .spec
            .metadata
            .as_ref()
            .map_or(0, |m| m.get("platforms").map_or(0, |p| p.to_string().len()));
        sum.saturating_add(ENTRY_OVERHEAD)
            .saturating_add(i.lean.name.len())
            .saturating_add(i.lean.spec.version.as_ref().map_or(0, String::len))
            .saturating_add(i.tag.as_ref().map_or(0, String::len))
            .saturating_add(platforms)
    })
}

/// A `?platform=` that is not `os/arch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadPlatform;

/// A version as served: the fields channel data has, and no bookkeeping of the operator's.
fn published(v: &ManagedOSVersion) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), Value::String(v.name_any()));
    let labels = without(v.labels(), &[CHANNEL_LABEL]);
    if !labels.is_empty() {
        metadata.insert("labels".into(), json!(labels));
    }
    let annotations = without(
        v.annotations(),
        &[
            CONTENT_HASH_ANNOTATION,
            NO_LONGER_IN_SYNC_ANNOTATION,
            ORPHANED_FROM_ANNOTATION,
        ],
    );
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), json!(annotations));
    }
    json!({"metadata": metadata, "spec": v.spec})
}

fn without<'a>(map: &'a BTreeMap<String, String>, keys: &[&str]) -> BTreeMap<&'a str, &'a str> {
    map.iter()
        .filter(|(k, _)| !keys.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The tag of a `container` version's `spec.metadata.upgradeImage`, read as container
/// runtimes read references (no tag and no digest: `latest`).
pub fn image_tag(spec: &ManagedOSVersionSpec) -> Option<String> {
    if spec.type_ != "container" {
        return None;
    }
    let image = spec.metadata.as_ref()?.get("upgradeImage")?.as_str()?;
    crate::reference::Reference::parse(image).ok()?.tag
}

fn lean(name: &str, spec: &ManagedOSVersionSpec) -> ChannelVersion {
    let platforms = spec.metadata.as_ref().and_then(|m| m.get("platforms"));
    ChannelVersion {
        name: name.to_string(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        spec: ManagedOSVersionSpec {
            version: spec.version.clone(),
            type_: spec.type_.clone(),
            metadata: platforms.map(|p| {
                let mut m = Map::new();
                m.insert("platforms".into(), p.clone());
                m
            }),
            ..Default::default()
        },
    }
}

/// A strong ETag: the first 128 bits of the body's SHA-256, quoted.
pub fn etag(body: &[u8]) -> String {
    format!("\"{}\"", crate::digest::sha256_hex_prefix(body, 16))
}

/// Whether an `If-None-Match` header names `etag` (or is `*`): the answer is `304`. Weak
/// tags compare by their opaque part, as RFC 9110 says for `If-None-Match`.
pub fn not_modified(if_none_match: Option<&str>, etag: &str) -> bool {
    let Some(header) = if_none_match else {
        return false;
    };
    header
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}
