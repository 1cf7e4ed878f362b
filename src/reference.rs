//! Image references (`[host[:port]/]path[:tag][@sha256:hex]`), read the way container
//! runtimes read them: a first component with a `.` or `:`, or `localhost`, is the
//! registry; otherwise the registry is Docker Hub and a one-part path is under `library/`.
//! Two spellings of one image (`busybox` and `docker.io/library/busybox:latest`) compare
//! equal once parsed. The one parser of image references: the webhook matches pushes with
//! it and `oci` channels (`config::ImageRef`) connect with it.

use std::fmt;

/// Docker Hub, however it is spelled.
pub const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_ALIASES: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];
/// Longest reference accepted (what the CRD allows an image field, with room).
const MAX_REFERENCE: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The registry host, with its port if any, lowercase; Docker Hub as `docker.io`.
    pub registry: String,
    /// The repository path inside the registry (`library/busybox`, `rancher/channel`).
    pub repository: String,
    /// The tag; `latest` when the reference names neither a tag nor a digest.
    pub tag: Option<String>,
    /// `sha256:<hex>` when the reference pins a digest.
    pub digest: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("an image reference may not be empty")]
    Empty,
    #[error("an image reference is at most {MAX_REFERENCE} bytes")]
    TooLong,
    #[error("{0:?} is not an image reference ([host[:port]/]path[:tag][@sha256:hex])")]
    Malformed(String),
    #[error("{0:?} names no tag or digest; write repo:tag or repo@sha256:...")]
    Unpinned(String),
}

impl Reference {
    /// Parses a reference as a container runtime does: one naming neither a tag nor a
    /// digest means `:latest`.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let mut r = Self::parse_parts(text)?;
        if r.tag.is_none() && r.digest.is_none() {
            r.tag = Some("latest".to_string());
        }
        Ok(r)
    }

    /// Parses a reference that must write down what it follows: a tag or a digest (no
    /// implicit `latest`).
    pub fn parse_explicit(text: &str) -> Result<Self, ReferenceError> {
        let r = Self::parse_parts(text)?;
        if r.tag.is_none() && r.digest.is_none() {
            return Err(ReferenceError::Unpinned(crate::text::head(text, 200)));
        }
        Ok(r)
    }

    fn parse_parts(text: &str) -> Result<Self, ReferenceError> {
        if text.is_empty() {
            return Err(ReferenceError::Empty);
        }
        if text.len() > MAX_REFERENCE {
            return Err(ReferenceError::TooLong);
        }
        let malformed = || ReferenceError::Malformed(crate::text::head(text, 200));
        let (name, digest) = match text.split_once('@') {
            Some((name, digest)) => {
                let hex = digest.strip_prefix("sha256:").ok_or_else(malformed)?;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(malformed());
                }
                (name, Some(digest.to_ascii_lowercase()))
            }
            None => (text, None),
        };
        // A tag follows the last `:` after the last `/` (a `:` before it is a port).
        let last_part = name.rsplit('/').next().unwrap_or(name);
        let (path, tag) = match last_part.rsplit_once(':') {
            Some((_, tag)) => {
                let cut = name.len().saturating_sub(tag.len()).saturating_sub(1);
                (name.get(..cut).unwrap_or(name), Some(tag.to_string()))
            }
            None => (name, None),
        };
        let (registry, repository) = match path.split_once('/') {
            Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
                (first.to_ascii_lowercase(), rest.to_string())
            }
            _ => (DOCKER_HUB.to_string(), path.to_string()),
        };
        let registry = if DOCKER_HUB_ALIASES.contains(&registry.as_str()) {
            DOCKER_HUB.to_string()
        } else {
            registry
        };
        let repository = if registry == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        if !host_ok(&registry) || !repository_ok(&repository) {
            return Err(malformed());
        }
        if tag.as_deref().is_some_and(|t| !tag_ok(t)) {
            return Err(malformed());
        }
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// Whether a push of `registry/repository:tag` changes what this reference names: the
    /// same repository and tag (a reference pinned by digest alone never moves).
    pub fn moved_by(&self, registry: &str, repository: &str, tag: &str) -> bool {
        let registry = registry.to_ascii_lowercase();
        let registry = if DOCKER_HUB_ALIASES.contains(&registry.as_str()) {
            DOCKER_HUB
        } else {
            registry.as_str()
        };
        self.digest.is_none()
            && self.registry == registry
            && self.repository == repository
            && self.tag.as_deref() == Some(tag)
    }
}

/// A repository path: `/`-separated components of lowercase letters, digits and `.`, `_`,
/// `-`, each beginning and ending with a letter or digit (so never `.` or `..`).
pub fn repository_ok(path: &str) -> bool {
    let component_ok = |c: &str| {
        c.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        }) && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && c.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
    };
    path.split('/').all(component_ok)
}

/// A tag: up to 128 letters, digits, `.`, `_`, `-`, not beginning with `.` or `-`.
pub fn tag_ok(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 128
        && !tag.starts_with(['.', '-'])
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A registry host (`[host|[v6]][:port]`): dot-separated labels of letters, digits, `-`
/// and `_`, none empty (so never `.` or `..`), or a bracketed IPv6 address.
fn host_ok(registry: &str) -> bool {
    let port_ok = |p: &str| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = registry.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        let v6_ok = !v6.is_empty()
            && v6
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'));
        return v6_ok && (after.is_empty() || after.strip_prefix(':').is_some_and(port_ok));
    }
    let (host, port) = match registry.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (registry, None),
    };
    port.is_none_or(port_ok)
        && !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        })
}

/// A name written `path:tag` with no registry (how a layout names the channel it holds):
/// the path and the tag, each checked as a reference's are.
pub fn path_and_tag(text: &str) -> Result<(&str, &str), ReferenceError> {
    let malformed = || ReferenceError::Malformed(crate::text::head(text, 200));
    let (path, tag) = text.rsplit_once(':').ok_or_else(malformed)?;
    if text.len() > MAX_REFERENCE || !repository_ok(path) || !tag_ok(tag) {
        return Err(malformed());
    }
    Ok((path, tag))
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Reference {
        Reference::parse(text).unwrap()
    }

    #[test]
    fn docker_hub_names_are_completed_as_runtimes_complete_them() {
        for (short, full) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            (
                "rancher/elemental-channel:v1",
                "docker.io/rancher/elemental-channel:v1",
            ),
        ] {
            assert_eq!(parse(short).to_string(), full);
        }
        assert_eq!(parse("index.docker.io/library/busybox"), parse("busybox"));
    }

    #[test]
    fn a_first_component_with_a_dot_a_port_or_localhost_is_the_registry() {
        let r = parse("127.0.0.1:5050/hook/channel:v2");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5050", "hook/channel", Some("v2"))
        );
        let r = parse("registry.example.com/a/b/c");
        assert_eq!(
            (r.registry.as_str(), r.tag.as_deref()),
            ("registry.example.com", Some("latest"))
        );
        assert_eq!(parse("localhost/x").registry, "localhost");
        // A port without a tag: the `:` belongs to the host.
        let r = parse("localhost:5000/x");
        assert_eq!(
            (r.registry.as_str(), r.tag.as_deref()),
            ("localhost:5000", Some("latest"))
        );
    }

    #[test]
    fn digests_pin_and_are_never_moved_by_a_push() {
        let hex = "a".repeat(64);
        let r = parse(&format!("reg.io/x@sha256:{hex}"));
        assert_eq!(
            (r.tag, r.digest.as_deref()),
            (None, Some(format!("sha256:{hex}").as_str()))
        );
        assert!(!parse(&format!("reg.io/x:v1@sha256:{hex}")).moved_by("reg.io", "x", "v1"));
        assert!(Reference::parse("reg.io/x@sha256:abc").is_err());
        assert!(Reference::parse("reg.io/x@md5:abc").is_err());
    }

    #[test]
    fn an_explicit_reference_must_name_a_tag_or_a_digest() {
        for unpinned in ["reg.io/x", "host:5000/repo", "busybox"] {
            let e = Reference::parse_explicit(unpinned).unwrap_err();
            assert!(e.to_string().contains("names no tag or digest"), "{e}");
        }
        let hex = "b".repeat(64);
        let r = Reference::parse_explicit(&format!("reg.io/x:v1@sha256:{hex}")).unwrap();
        assert_eq!(r.digest, Some(format!("sha256:{hex}")));
        let r = Reference::parse_explicit("[::1]:5000/x:v2").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.tag.as_deref()),
            ("[::1]:5000", Some("v2"))
        );
        for bad in ["reg.io/x:-1", "reg.io/-x:1", "reg.io/x.:1"] {
            assert!(Reference::parse_explicit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pushes_move_the_same_repository_and_tag_only() {
        let r = parse("127.0.0.1:5050/hook/channel:v1");
        assert!(r.moved_by("127.0.0.1:5050", "hook/channel", "v1"));
        assert!(!r.moved_by("127.0.0.1:5050", "hook/channel", "v2"));
        assert!(!r.moved_by("127.0.0.1:5051", "hook/channel", "v1"));
        assert!(!r.moved_by("127.0.0.1:5050", "hook/other", "v1"));
        assert!(parse("busybox").moved_by("registry-1.docker.io", "library/busybox", "latest"));
        assert!(parse("Reg.IO/x:v1").moved_by("reg.io", "x", "v1"));
    }

    #[test]
    fn dot_segments_and_bad_hosts_are_no_reference_and_no_layout_name() {
        for bad in [
            "../victim/app:latest",
            "./x/app:1",
            "reg.io/../victim:1",
            "reg.io/a/./b:1",
            "reg..io/x:1",
            "reg.io:/x:1",
            "reg.io:5000x/x:1",
            "[::1/x:1",
            "reg.io/x:..",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?}");
        }
        for good in [
            "reg.io:5000/x:1",
            "[::1]/x:1",
            "localhost/x",
            "my_host.lan/x:1",
        ] {
            assert!(Reference::parse(good).is_ok(), "{good:?}");
        }
        assert_eq!(path_and_tag("os/channel:v1").unwrap(), ("os/channel", "v1"));
        for bad in [
            "../victim/app:latest",
            "os/../../victim:v1",
            "os/./channel:v1",
            "/abs/channel:v1",
            "os/channel",
            "os/channel:",
            "os/channel:../x",
            "reg.io:5000/os:v1",
            "os//channel:v1",
        ] {
            assert!(path_and_tag(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn malformed_references_are_refused_with_the_text_cut() {
        for bad in [
            "",
            "UPPER/case",
            "a//b",
            "x:",
            "x:t@g",
            "reg.io/",
            &"a".repeat(5000),
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?}");
        }
        let long = format!("{}\u{1b}[31m", "é".repeat(300));
        let message = Reference::parse(&long).unwrap_err().to_string();
        assert!(
            message.len() < 400 && !message.contains('\u{1b}'),
            "{message}"
        );
    }
}
