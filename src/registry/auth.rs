//! Registry credentials: the entry of a `kubernetes.io/dockerconfigjson` Secret for a
//! registry host, and the `WWW-Authenticate` challenge that says how to use it (Basic, or
//! the token flow of the distribution spec).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

// Never printed: a password in a log line is a leak.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, ***)", self.username)
    }
}

impl Credentials {
    pub fn basic(&self) -> String {
        let pair = format!("{}:{}", self.username, self.password);
        format!("Basic {}", STANDARD.encode(pair))
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// Docker Hub's names in config files (`docker login` writes the first).
const HUB_KEYS: [&str; 4] = [
    "index.docker.io",
    "docker.io",
    "registry-1.docker.io",
    "registry.hub.docker.com",
];

/// The host of a config key: `https://index.docker.io/v1/` is `index.docker.io`.
fn host_of(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    k.split('/').next().unwrap_or_default()
}

/// The credentials a `.dockerconfigjson` holds for `registry` (`host[:port]`); `Err`: the
/// document cannot be read (said without quoting it: it holds secrets).
pub fn lookup(config: &[u8], registry: &str) -> Result<Option<Credentials>, String> {
    let config: DockerConfig = serde_json::from_slice(config).map_err(|e| {
        format!(
            "is not a dockerconfigjson document (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    let hub = HUB_KEYS.contains(&registry);
    let entry = config.auths.iter().find(|(k, _)| {
        let h = host_of(k);
        h == registry || (hub && HUB_KEYS.contains(&h))
    });
    let Some((_, entry)) = entry else {
        return Ok(None);
    };
    if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
        return Ok(Some(Credentials {
            username: u.clone(),
            password: p.clone(),
        }));
    }
    let Some(auth) = &entry.auth else {
        return Ok(None);
    };
    let decoded = STANDARD
        .decode(auth.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or("has an auth entry that is not base64 of user:password")?;
    let (u, p) = decoded
        .split_once(':')
        .ok_or("has an auth entry that is not base64 of user:password")?;
    Ok(Some(Credentials {
        username: u.into(),
        password: p.into(),
    }))
}

/// How a registry asks to be authenticated.
#[derive(Debug, PartialEq)]
pub enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// Parses `WWW-Authenticate` (`Bearer realm="...",service="...",scope="..."` or `Basic
/// realm="..."`); `None`: neither.
pub fn challenge(header: &str) -> Option<Challenge> {
    let (scheme, params) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    let mut scope = None;
    for (k, v) in params_of(params) {
        match k.to_ascii_lowercase().as_str() {
            "realm" => realm = Some(v),
            "service" => service = Some(v),
            "scope" => scope = Some(v),
            _ => {}
        }
    }
    Some(Challenge::Bearer {
        realm: realm?,
        service,
        scope,
    })
}

/// `k="v", k2="v,2"`: commas inside quotes belong to the value.
fn params_of(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let after = after.trim_start();
        let (value, next) = match after.strip_prefix('"') {
            Some(q) => match q.split_once('"') {
                Some((v, n)) => (v.to_string(), n),
                None => (q.to_string(), ""),
            },
            None => match after.split_once(',') {
                Some((v, n)) => (v.trim().to_string(), n),
                None => (after.trim().to_string(), ""),
            },
        };
        out.push((key, value));
        rest = next.trim_start().trim_start_matches(',');
    }
    out
}

/// The token endpoint's answer.
#[derive(Deserialize)]
pub struct Token {
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub access_token: Option<String>,
}

/// Where `docker login`, `podman login` and `skopeo login` keep credentials, first found
/// first used.
pub fn login_files() -> Vec<std::path::PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    let mut files = Vec::new();
    files.extend(env("REGISTRY_AUTH_FILE"));
    files.extend(env("XDG_RUNTIME_DIR").map(|d| d.join("containers/auth.json")));
    match env("DOCKER_CONFIG") {
        Some(d) => files.push(d.join("config.json")),
        None => files.extend(env("HOME").map(|h| h.join(".docker/config.json"))),
    }
    files
}

/// The login files of [`login_files`] that can be read, in their order.
pub fn login_configs() -> Vec<Vec<u8>> {
    login_files()
        .into_iter()
        .filter_map(|f| std::fs::read(f).ok())
        .collect()
}

/// The credentials for `registry` in the first of `configs` (docker config files) that
/// has them; one that cannot be read is passed over.
pub fn first_credentials(configs: &[Vec<u8>], registry: &str) -> Option<Credentials> {
    configs
        .iter()
        .find_map(|c| lookup(c, registry).ok().flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_found_by_registry_host() {
        let auth = STANDARD.encode("bob:pa:ss");
        let config = format!(
            r#"{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{auth}"}}, "127.0.0.1:5050": {{"username": "u", "password": "p"}}}}}}"#
        );
        let c = lookup(config.as_bytes(), "127.0.0.1:5050")
            .unwrap()
            .unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p"));
        let c = lookup(config.as_bytes(), "registry-1.docker.io")
            .unwrap()
            .unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("bob", "pa:ss"));
        assert_eq!(lookup(config.as_bytes(), "ghcr.io").unwrap(), None);
        assert!(lookup(b"{", "x").is_err());
        let bad = r#"{"auths": {"x": {"auth": "!!"}}}"#;
        assert!(lookup(bad.as_bytes(), "x").is_err());
        assert_eq!(format!("{c:?}"), "Credentials(bob, ***)");
        assert_eq!(c.basic(), format!("Basic {}", STANDARD.encode("bob:pa:ss")));
    }

    #[test]
    fn challenges_say_basic_or_where_to_get_a_token() {
        assert_eq!(
            challenge(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(
            challenge(
                r#"Bearer realm="https://auth.io/token",service="reg",scope="repository:a/b:pull,push""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.io/token".into(),
                service: Some("reg".into()),
                scope: Some("repository:a/b:pull,push".into()),
            })
        );
        assert_eq!(challenge("Bearer service=x"), None);
        assert_eq!(challenge("Negotiate"), None);
    }
}
