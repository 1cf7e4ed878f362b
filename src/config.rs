//! A channel's configuration: its `spec` turned into typed settings, or the one-line
//! reason it cannot be acted on (`InvalidConfiguration`).

use std::time::Duration;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvFromSource, EnvVar, LocalObjectReference, ResourceRequirements, SecurityContext, Toleration,
};
use serde_json::{Map, Value};

use crate::api::ManagedOSVersionChannelSpec;
use crate::duration;

pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(3600);
pub const DEFAULT_MOUNT_PATH: &str = "/data";
pub const DEFAULT_JSON_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug, PartialEq)]
pub struct ChannelConfig {
    pub source: Source,
    pub sync_interval: Duration,
    pub delete_no_longer_in_sync: bool,
    pub registry: Option<String>,
    pub upgrade_container: Option<Map<String, Value>>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    Custom(Box<CustomOptions>),
    Json(JsonOptions),
}

/// `options` of a `custom` channel.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomOptions {
    pub image: String,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub env: Option<Vec<EnvVar>>,
    pub env_from: Option<Vec<EnvFromSource>>,
    /// The runner's; laid over the hardened default (see `syncer::pod`).
    pub security_context: Option<SecurityContext>,
    pub resources: Option<ResourceRequirements>,
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// The runner's; `None`: `Always` (channel images are published under mutable tags).
    pub image_pull_policy: Option<String>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<Toleration>>,
    pub mount_path: String,
    pub output_file: String,
    /// `None`: the operator's `--sync-timeout`.
    pub timeout: Option<Duration>,
}

/// `options` of a `json` channel.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonOptions {
    pub uri: String,
    pub timeout: Duration,
}

const CUSTOM_KEYS: [&str; 14] = [
    "image",
    "command",
    "args",
    "env",
    "envFrom",
    "securityContext",
    "resources",
    "imagePullSecrets",
    "imagePullPolicy",
    "nodeSelector",
    "tolerations",
    "mountPath",
    "outputFile",
    "timeout",
];
const JSON_KEYS: [&str; 2] = ["uri", "timeout"];

/// Whether syncing is on; read apart from the rest so a disabled channel with an invalid
/// spec is still handled as disabled.
pub fn enabled(spec: &ManagedOSVersionChannelSpec) -> bool {
    spec.enabled.unwrap_or(true)
}

/// Checks a channel's spec. The error names the field and says why.
pub fn resolve(spec: &ManagedOSVersionChannelSpec) -> Result<ChannelConfig, String> {
    let sync_interval = match &spec.sync_interval {
        None => DEFAULT_SYNC_INTERVAL,
        Some(text) => {
            let d = duration::parse(text).map_err(|e| format!("spec.syncInterval: {e}"))?;
            if d < Duration::from_secs(1) {
                return Err(format!(
                    "spec.syncInterval: {text:?} is too short; use at least 1s"
                ));
            }
            d
        }
    };
    let empty = Map::new();
    let options = spec.options.as_ref().unwrap_or(&empty);
    let source = match spec.type_.as_str() {
        "custom" => Source::Custom(Box::new(custom_options(options)?)),
        "json" => Source::Json(json_options(options)?),
        "" => return Err("spec.type: required; use \"custom\" or \"json\"".into()),
        other => {
            return Err(format!(
                "spec.type: {other:?} is not a channel type; use \"custom\" or \"json\""
            ));
        }
    };
    let registry = spec
        .registry
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    Ok(ChannelConfig {
        source,
        sync_interval,
        delete_no_longer_in_sync: spec.delete_no_longer_in_sync_versions.unwrap_or(false),
        registry,
        upgrade_container: spec.upgrade_container.clone(),
    })
}

fn unknown_keys(options: &Map<String, Value>, known: &[&str], type_: &str) -> Result<(), String> {
    match options.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(format!(
            "spec.options.{k}: not an option of a {type_} channel (known: {})",
            known.join(", ")
        )),
    }
}

fn string(options: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("spec.options.{key}: must be a string")),
    }
}

fn typed<T: serde::de::DeserializeOwned>(
    options: &Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<Option<T>, String> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| format!("spec.options.{key}: must be {what}: {e}")),
    }
}

fn timeout(options: &Map<String, Value>) -> Result<Option<Duration>, String> {
    match string(options, "timeout")? {
        None => Ok(None),
        Some(t) => match duration::parse(&t) {
            Ok(d) if d >= Duration::from_secs(1) => Ok(Some(d)),
            Ok(_) => Err(format!(
                "spec.options.timeout: {t:?} is too short; use at least 1s"
            )),
            Err(e) => Err(format!("spec.options.timeout: {e}")),
        },
    }
}

fn custom_options(options: &Map<String, Value>) -> Result<CustomOptions, String> {
    unknown_keys(options, &CUSTOM_KEYS, "custom")?;
    let image = string(options, "image")?
        .filter(|i| !i.trim().is_empty())
        .ok_or("spec.options.image: required for a custom channel: the image that prints the channel data")?;
    let mount_path = string(options, "mountPath")?.unwrap_or_else(|| DEFAULT_MOUNT_PATH.into());
    let mount_path = clean_path(&mount_path)
        .filter(|p| p != "/")
        .ok_or_else(|| {
            format!("spec.options.mountPath: {mount_path:?} must be an absolute path below /")
        })?;
    let output_file = match string(options, "outputFile")? {
        None => format!("{mount_path}/output"),
        Some(file) => {
            let cleaned = clean_path(&file).filter(|f| f.starts_with(&format!("{mount_path}/")));
            cleaned.ok_or_else(|| {
                format!(
                    "spec.options.outputFile: {file:?} must be a file inside mountPath {mount_path:?}"
                )
            })?
        }
    };
    Ok(CustomOptions {
        image: image.trim().to_string(),
        command: typed(options, "command", "a list of strings")?,
        args: typed(options, "args", "a list of strings")?,
        env: typed(options, "env", "a list of environment variables")?,
        env_from: typed(options, "envFrom", "a list of envFrom sources")?,
        security_context: typed(options, "securityContext", "a container securityContext")?,
        resources: typed(options, "resources", "container resources")?,
        image_pull_secrets: typed(
            options,
            "imagePullSecrets",
            "a list of secret references ({name: ...})",
        )?,
        image_pull_policy: pull_policy(options)?,
        node_selector: typed(options, "nodeSelector", "a map of strings")?,
        tolerations: typed(options, "tolerations", "a list of tolerations")?,
        mount_path,
        output_file,
        timeout: timeout(options)?,
    })
}

fn pull_policy(options: &Map<String, Value>) -> Result<Option<String>, String> {
    match string(options, "imagePullPolicy")? {
        None => Ok(None),
        Some(p) if ["Always", "IfNotPresent", "Never"].contains(&p.as_str()) => Ok(Some(p)),
        Some(p) => Err(format!(
            "spec.options.imagePullPolicy: {p:?} is not a pull policy; use Always, IfNotPresent or Never"
        )),
    }
}

impl CustomOptions {
    /// Whether the runner can read a Secret (`env[].valueFrom.secretKeyRef`,
    /// `envFrom[].secretRef`): then nothing it prints may be copied where others read it.
    pub fn references_secrets(&self) -> bool {
        let env = self.env.iter().flatten().any(|e| {
            e.value_from
                .as_ref()
                .is_some_and(|v| v.secret_key_ref.is_some())
        });
        let env_from = self
            .env_from
            .iter()
            .flatten()
            .any(|e| e.secret_ref.is_some());
        env || env_from
    }
}

fn json_options(options: &Map<String, Value>) -> Result<JsonOptions, String> {
    unknown_keys(options, &JSON_KEYS, "json")?;
    let uri = string(options, "uri")?
        .filter(|u| !u.trim().is_empty())
        .ok_or("spec.options.uri: required for a json channel: the http or https URL of the channel data")?;
    let uri = uri.trim().to_string();
    let scheme_ok = ["http://", "https://"]
        .iter()
        // Compared as bytes: slicing the string could cut a multi-byte character.
        .any(|s| {
            uri.len() > s.len()
                && uri
                    .as_bytes()
                    .get(..s.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(s.as_bytes()))
        });
    if !scheme_ok {
        return Err(format!(
            "spec.options.uri: {uri:?} must be an http:// or https:// URL"
        ));
    }
    Ok(JsonOptions {
        uri,
        timeout: timeout(options)?.unwrap_or(DEFAULT_JSON_TIMEOUT),
    })
}

/// Normalises an absolute path (`.`, `..`, repeated and trailing `/`); `None` when relative
/// or when `..` climbs above the root.
fn clean_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> ManagedOSVersionChannelSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn sample_custom_channel() {
        let c = resolve(&spec(json!({
            "type": "custom",
            "options": {"image": "opensuse/tumbleweed", "command": ["/bin/bash", "-c", "--"],
                        "args": ["echo"], "mountPath": "/output", "outputFile": "/output/data"},
            "upgradeContainer": {}
        })))
        .unwrap();
        assert_eq!(c.sync_interval, DEFAULT_SYNC_INTERVAL);
        assert!(!c.delete_no_longer_in_sync);
        let Source::Custom(o) = c.source else {
            panic!("custom")
        };
        assert_eq!(o.output_file, "/output/data");
        assert_eq!(o.command.unwrap()[0], "/bin/bash");
        assert_eq!(o.timeout, None);
    }

    #[test]
    fn custom_defaults() {
        let c = resolve(&spec(json!({"type": "custom", "options": {"image": "i"}}))).unwrap();
        let Source::Custom(o) = c.source else {
            panic!("custom")
        };
        assert_eq!(o.mount_path, "/data");
        assert_eq!(o.output_file, "/data/output");
    }

    #[test]
    fn invalid_configurations_name_the_field() {
        let cases = [
            (json!({}), "spec.type: required"),
            (
                json!({"type": "rpm"}),
                "spec.type: \"rpm\" is not a channel type",
            ),
            (json!({"type": "custom"}), "spec.options.image: required"),
            (
                json!({"type": "custom", "options": {"image": " "}}),
                "spec.options.image: required",
            ),
            (
                json!({"type": "custom", "syncInterval": "soon", "options": {"image": "i"}}),
                "spec.syncInterval: \"soon\" is not a duration",
            ),
            (
                json!({"type": "custom", "options": {"image": "i", "mountPath": "/out", "outputFile": "/tmp/x"}}),
                "spec.options.outputFile: \"/tmp/x\" must be a file inside mountPath \"/out\"",
            ),
            (
                json!({"type": "custom", "options": {"image": "i", "mountPath": "/out", "outputFile": "/out/../x"}}),
                "spec.options.outputFile",
            ),
            (
                json!({"type": "custom", "options": {"image": "i", "outputFile": "/data"}}),
                "spec.options.outputFile",
            ),
            (
                json!({"type": "custom", "options": {"image": "i", "mountPath": "rel"}}),
                "spec.options.mountPath",
            ),
            (
                json!({"type": "custom", "options": {"image": "i", "command": "sh"}}),
                "spec.options.command: must be a list of strings",
            ),
            (
                json!({"type": "custom", "options": {"image": "i", "imag": "x"}}),
                "spec.options.imag: not an option",
            ),
            (
                json!({"type": "custom", "options": {"image": "i", "timeout": "0s"}}),
                "spec.options.timeout",
            ),
            (
                json!({"type": "json", "options": {}}),
                "spec.options.uri: required",
            ),
            (
                json!({"type": "json", "options": {"uri": "ftp://x"}}),
                "must be an http:// or https:// URL",
            ),
            // Multi-byte characters where the scheme is compared (a panic, once).
            (
                json!({"type": "json", "options": {"uri": "http:€//x"}}),
                "must be an http:// or https:// URL",
            ),
            (
                json!({"type": "json", "options": {"uri": "€€€€€€€€"}}),
                "must be an http:// or https:// URL",
            ),
        ];
        for (s, want) in cases {
            let err = resolve(&spec(s.clone())).unwrap_err();
            assert!(err.starts_with(want) || err.contains(want), "{s}: {err}");
        }
    }

    #[test]
    fn json_defaults_and_registry() {
        let c = resolve(&spec(json!({
            "type": "json", "registry": " reg.io/ ", "options": {"uri": "https://x/y.json"}
        })))
        .unwrap();
        assert_eq!(c.registry.as_deref(), Some("reg.io/"));
        assert_eq!(
            c.source,
            Source::Json(JsonOptions {
                uri: "https://x/y.json".into(),
                timeout: DEFAULT_JSON_TIMEOUT
            })
        );
    }

    #[test]
    fn enabled_defaults_to_true() {
        assert!(enabled(&spec(json!({}))));
        assert!(!enabled(&spec(json!({"enabled": false}))));
    }
}
