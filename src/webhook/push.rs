//! What a push notification says, and which channels it moves: pure, so that every shape
//! of body and every matching rule is unit-tested without a server.
//!
//! Two bodies are understood: the CNCF distribution registry's `notifications` envelope
//! (`{"events": [{"action": "push", "target": {"repository", "tag", "url"}, "request":
//! {"host"}}]}`), of which only manifest pushes by tag count (blob pushes, pulls and
//! deletes are ignored), and a generic `{"image": "registry/repository:tag"}`.

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::reference::Reference;

/// A tag that now names new content: `registry/repository:tag`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Push {
    /// `None` when the notification does not say which registry (then any registry's
    /// repository of that name matches: the registry that sent it is the one configured).
    pub registry: Option<String>,
    pub repository: String,
    pub tag: String,
}

/// The most pushes one request may name; a registry batches far fewer.
const MAX_PUSHES: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error(
        "the body is neither a registry notification ({{\"events\": [...]}}) nor {{\"image\": \"repository:tag\"}}"
    )]
    UnknownShape,
    #[error("image: {0}")]
    Image(String),
    #[error("the image names no tag (a push moves a tag; a digest never moves)")]
    NoTag,
    #[error("more than {MAX_PUSHES} pushes in one request")]
    TooMany,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Body {
    Envelope { events: Vec<Event> },
    Generic { image: String },
}

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    action: String,
    #[serde(default)]
    target: Target,
    #[serde(default)]
    request: Request,
}

#[derive(Deserialize, Default)]
struct Target {
    #[serde(default)]
    repository: String,
    #[serde(default)]
    tag: String,
    #[serde(default)]
    url: String,
}

#[derive(Deserialize, Default)]
struct Request {
    #[serde(default)]
    host: String,
}

/// The pushes a body names, without repeats.
pub fn parse(body: &[u8]) -> Result<Vec<Push>, PushError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| PushError::NotJson(e.to_string()))?;
    let body: Body = serde_json::from_value(value).map_err(|_| PushError::UnknownShape)?;
    let pushes: BTreeSet<Push> = match body {
        Body::Generic { image } => {
            let r = Reference::parse(&image).map_err(|e| PushError::Image(e.to_string()))?;
            let tag = match (&r.tag, &r.digest) {
                (Some(tag), None) => tag.clone(),
                _ => return Err(PushError::NoTag),
            };
            // `latest` is what a reference without a tag means; a generic body that
            // leaves it out asks for exactly that, as `docker push` would.
            BTreeSet::from([Push {
                registry: Some(r.registry),
                repository: r.repository,
                tag,
            }])
        }
        Body::Envelope { events } => {
            if events.len() > MAX_PUSHES {
                return Err(PushError::TooMany);
            }
            events
                .into_iter()
                .filter(|e| e.action == "push" && !e.target.tag.is_empty())
                .filter(|e| !e.target.repository.is_empty())
                .map(|e| Push {
                    registry: registry_of(&e.request.host, &e.target.url),
                    repository: e.target.repository,
                    tag: e.target.tag,
                })
                .collect()
        }
    };
    Ok(pushes.into_iter().collect())
}

/// The registry a notification names: the host its client pushed to, else the host of
/// the target's URL.
fn registry_of(host: &str, url: &str) -> Option<String> {
    if !host.is_empty() {
        return Some(host.to_ascii_lowercase());
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let host = rest.split('/').next().filter(|h| !h.is_empty())?;
    Some(host.to_ascii_lowercase())
}

/// Whether one of `pushes` moves the tag `image` names.
pub fn moves(pushes: &[Push], image: &str) -> bool {
    let Ok(r) = Reference::parse(image) else {
        return false;
    };
    pushes.iter().any(|p| match &p.registry {
        Some(registry) => r.moved_by(registry, &p.repository, &p.tag),
        None => r.moved_by(&r.registry, &p.repository, &p.tag),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest push as Debian's docker-registry 2.8 sends it (trimmed of ids).
    const DISTRIBUTION_PUSH: &str = r#"{"events":[
      {"id":"1","timestamp":"2026-12-01T22:00:00Z","action":"push",
       "target":{"mediaType":"application/octet-stream","size":2,"digest":"sha256:aa","length":2,
                 "repository":"hook/channel","url":"http://127.0.0.1:5050/v2/hook/channel/blobs/sha256:aa"},
       "request":{"id":"r","addr":"127.0.0.1:40000","host":"127.0.0.1:5050","method":"PUT","useragent":"skopeo"},
       "actor":{"name":"rancheros"},"source":{"addr":"host:5050","instanceID":"i"}},
      {"id":"2","timestamp":"2026-12-01T22:00:01Z","action":"push",
       "target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":400,"digest":"sha256:bb","length":400,
                 "repository":"hook/channel","url":"http://127.0.0.1:5050/v2/hook/channel/manifests/sha256:bb","tag":"v1"},
       "request":{"id":"r","addr":"127.0.0.1:40000","host":"127.0.0.1:5050","method":"PUT","useragent":"skopeo"},
       "actor":{"name":"rancheros"},"source":{"addr":"host:5050","instanceID":"i"}},
      {"id":"3","action":"pull","target":{"repository":"hook/other","tag":"v1"},"request":{"host":"127.0.0.1:5050"}}
    ]}"#;

    fn push(registry: &str, repository: &str, tag: &str) -> Push {
        Push {
            registry: Some(registry.into()),
            repository: repository.into(),
            tag: tag.into(),
        }
    }

    #[test]
    fn a_registry_notification_names_its_manifest_pushes_by_tag_only() {
        assert_eq!(
            parse(DISTRIBUTION_PUSH.as_bytes()).unwrap(),
            vec![push("127.0.0.1:5050", "hook/channel", "v1")]
        );
    }

    #[test]
    fn without_a_request_host_the_target_url_names_the_registry() {
        let body = r#"{"events":[{"action":"push","target":{"repository":"a/b","tag":"t","url":"https://Reg.Example.com:443/v2/a/b/manifests/t"}}]}"#;
        assert_eq!(
            parse(body.as_bytes()).unwrap(),
            vec![push("reg.example.com:443", "a/b", "t")]
        );
        let body = r#"{"events":[{"action":"push","target":{"repository":"a/b","tag":"t"}}]}"#;
        let pushes = parse(body.as_bytes()).unwrap();
        assert_eq!(pushes[0].registry, None);
        assert!(moves(&pushes, "any.registry/a/b:t"));
    }

    #[test]
    fn a_generic_body_names_one_image_by_tag() {
        assert_eq!(
            parse(br#"{"image": "127.0.0.1:5050/hook/channel:v2"}"#).unwrap(),
            vec![push("127.0.0.1:5050", "hook/channel", "v2")]
        );
        assert_eq!(
            parse(br#"{"image": "busybox"}"#).unwrap(),
            vec![push("docker.io", "library/busybox", "latest")]
        );
        let digest = format!(r#"{{"image": "reg.io/x@sha256:{}"}}"#, "a".repeat(64));
        assert_eq!(parse(digest.as_bytes()), Err(PushError::NoTag));
    }

    #[test]
    fn bodies_of_other_shapes_are_refused_and_say_why() {
        assert!(matches!(parse(b"{not json"), Err(PushError::NotJson(_))));
        assert_eq!(parse(br#"{"foo": 1}"#), Err(PushError::UnknownShape));
        assert_eq!(parse(br#"{"events": 3}"#), Err(PushError::UnknownShape));
        assert_eq!(parse(br#"{"image": 3}"#), Err(PushError::UnknownShape));
        assert!(matches!(
            parse(br#"{"image": "UP/x:1"}"#),
            Err(PushError::Image(_))
        ));
        let many = format!(
            r#"{{"events": [{}]}}"#,
            vec![r#"{"action":"pull"}"#; MAX_PUSHES + 1].join(",")
        );
        assert_eq!(parse(many.as_bytes()), Err(PushError::TooMany));
        // Deeper than serde_json's limit: an error, not a crash.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(parse(deep.as_bytes()), Err(PushError::NotJson(_))));
    }

    #[test]
    fn a_push_moves_the_channels_whose_image_names_that_tag() {
        let pushes = parse(DISTRIBUTION_PUSH.as_bytes()).unwrap();
        assert!(moves(&pushes, "127.0.0.1:5050/hook/channel:v1"));
        assert!(!moves(&pushes, "127.0.0.1:5050/hook/channel:v2"));
        assert!(
            !moves(&pushes, "127.0.0.1:5050/hook/other:v1"),
            "a pull moves nothing"
        );
        assert!(
            !moves(&pushes, "example.com/hook/channel:v1"),
            "another registry"
        );
        assert!(!moves(&pushes, "not a reference"));
    }
}
