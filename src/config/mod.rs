//! A channel's configuration: its `spec` turned into typed settings, or the one-line
//! reason it cannot be acted on (`InvalidConfiguration`).

use std::time::Duration;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvFromSource, EnvVar, LocalObjectReference, ResourceRequirements, SecurityContext, Toleration,
};
use serde_json::{Map, Value};

mod oci;
mod paths;
mod privilege;
pub use oci::{DEFAULT_PATH, ImageRef, OciOptions, Platform, Reference};
pub use paths::DISPLAY_BIN_DIR;
use paths::{QUOTE_BYTES, clean_path, mount_path_problem, quote};
pub use privilege::runner_privilege;

use crate::api::ManagedOSVersionChannelSpec;
use crate::{duration, schema};

const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(3600);
const DEFAULT_MOUNT_PATH: &str = "/data";
/// How long a json fetch or an oci pull may take when `options.timeout` is not set.
const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `syncInterval` and `options.timeout` that any operator accepts, whatever its
/// flags (the CRD rules refuse more at `kubectl apply`): a year of 365 days. It keeps every
/// time the operator computes from them (requeues, deadlines, `nextSyncTime`) far from
/// where the arithmetic could overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(8760 * 3600);
/// `MAX_DURATION` as the CRD rules and messages write it.
pub const MAX_DURATION_TEXT: &str = "8760h";
/// `--max-sync-timeout`'s default.
pub const DEFAULT_MAX_SYNC_TIMEOUT: Duration = Duration::from_secs(3600);
/// `--min-sync-interval`'s default.
pub const DEFAULT_MIN_SYNC_INTERVAL: Duration = Duration::from_secs(60);
/// The shortest `options.timeout` (and the shortest value the duration flags take).
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);

/// What the operator's flags allow a channel's spec; the bounds that no flag lifts are
/// constants here and rules of the CRD.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// `--max-sync-timeout`: the longest `options.timeout`.
    pub max_sync_timeout: Duration,
    /// `--min-sync-interval`: the shortest `syncInterval`.
    pub min_sync_interval: Duration,
    /// `--allow-privileged-runners`: runner security contexts that grant more than a
    /// restricted container (see [`runner_privilege`]) are accepted.
    pub allow_privileged_runners: bool,
    /// `--allow-insecure-registries`: oci channels may set `insecure` (plain HTTP).
    pub allow_insecure_registries: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sync_timeout: DEFAULT_MAX_SYNC_TIMEOUT,
            min_sync_interval: DEFAULT_MIN_SYNC_INTERVAL,
            allow_privileged_runners: false,
            allow_insecure_registries: false,
        }
    }
}

impl Limits {
    /// The interval of a channel that sets none: the default, or the operator's minimum
    /// when that is longer (the channel's author chose nothing that could be refused).
    pub fn default_sync_interval(&self) -> Duration {
        DEFAULT_SYNC_INTERVAL
            .max(self.min_sync_interval)
            .min(MAX_DURATION)
    }

    /// Why these limits cannot serve (a flag out of range), if they cannot.
    pub fn problem(&self) -> Option<String> {
        let range = |d: Duration| (MIN_TIMEOUT..=MAX_DURATION).contains(&d);
        if !range(self.max_sync_timeout) {
            return Some(format!(
                "--max-sync-timeout {} must lie between 1s and {MAX_DURATION_TEXT}",
                duration::format(self.max_sync_timeout)
            ));
        }
        if !range(self.min_sync_interval) {
            return Some(format!(
                "--min-sync-interval {} must lie between 1s and {MAX_DURATION_TEXT}",
                duration::format(self.min_sync_interval)
            ));
        }
        None
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChannelConfig {
    pub source: Source,
    pub sync_interval: Duration,
    pub delete_no_longer_in_sync: bool,
    pub registry: Option<String>,
    pub upgrade_container: Option<Map<String, Value>>,
    /// `spec.versions`, checked.
    pub policy: crate::policy::Policy,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    Custom(Box<CustomOptions>),
    Json(JsonOptions),
    Oci(Box<OciOptions>),
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

/// Whether syncing is on; read apart from the rest so a disabled channel with an invalid
/// spec is still handled as disabled.
pub fn enabled(spec: &ManagedOSVersionChannelSpec) -> bool {
    spec.enabled.unwrap_or(true)
}

/// Checks a channel's spec against the operator's limits. The error names the field and
/// says why (and, for a bound that a flag sets, the bound and the flag).
pub fn resolve(
    spec: &ManagedOSVersionChannelSpec,
    limits: &Limits,
) -> Result<ChannelConfig, String> {
    let sync_interval = match &spec.sync_interval {
        None => limits.default_sync_interval(),
        Some(text) => sync_interval(text, limits)?,
    };
    let empty = Map::new();
    let options = spec.options.as_ref().unwrap_or(&empty);
    let source = match spec.type_.as_str() {
        "custom" => Source::Custom(Box::new(custom_options(options, limits)?)),
        "json" => Source::Json(json_options(options, limits)?),
        "oci" => {
            let mut oci = oci::oci_options(options, limits)?;
            oci.verify_secret = spec.verify.as_ref().map(|v| v.secret_ref.name.clone());
            Source::Oci(Box::new(oci))
        }
        "" => return Err("spec.type: required; use \"custom\", \"json\" or \"oci\"".into()),
        other => {
            return Err(format!(
                "spec.type: {} is not a channel type; use \"custom\", \"json\" or \"oci\"",
                quote(other)
            ));
        }
    };
    if let Some(v) = &spec.verify {
        if !matches!(source, Source::Oci(_)) {
            return Err(format!(
                "spec.verify: only oci channels are verified (this one is {})",
                spec.type_
            ));
        }
        if v.provider != "cosign" {
            return Err(format!(
                "spec.verify.provider: {:?} is not a provider; use \"cosign\"",
                crate::text::head(&v.provider, 64)
            ));
        }
        if v.secret_ref.name.is_empty() {
            return Err(
                "spec.verify.secretRef.name: required: the Secret holding cosign.pub".into(),
            );
        }
    }
    let registry = spec
        .registry
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    if let Some(r) = &registry
        && r.len() > schema::MAX_REGISTRY_BYTES
    {
        return Err(format!(
            "spec.registry: {} bytes, more than the {} a registry may have",
            r.len(),
            schema::MAX_REGISTRY_BYTES
        ));
    }
    let upgrade_container = spec
        .upgrade_container
        .as_ref()
        .map(schema::typed_upgrade_container)
        .transpose()
        .map_err(|why| format!("spec.upgradeContainer: {why}"))?;
    let policy = spec
        .versions
        .as_ref()
        .map(crate::policy::Policy::compile)
        .transpose()?
        .unwrap_or_default();
    Ok(ChannelConfig {
        source,
        sync_interval,
        delete_no_longer_in_sync: spec.delete_no_longer_in_sync_versions.unwrap_or(false),
        registry,
        upgrade_container,
        policy,
    })
}

/// The sync interval, of at least `--min-sync-interval` and at most a year.
fn sync_interval(text: &str, limits: &Limits) -> Result<Duration, String> {
    let d = duration::parse(text).map_err(|e| format!("spec.syncInterval: {e}"))?;
    if d > MAX_DURATION {
        return Err(format!(
            "spec.syncInterval: {text:?} is longer than a year; use at most {MAX_DURATION_TEXT}"
        ));
    }
    // Zero is refused whatever the flag says (the CRD rules refuse it too).
    let min = limits.min_sync_interval.max(MIN_TIMEOUT);
    if d < min {
        return Err(format!(
            "spec.syncInterval: {text:?} is shorter than this operator's minimum of {} (--min-sync-interval)",
            duration::format(min)
        ));
    }
    Ok(d)
}

fn unknown_keys(options: &Map<String, Value>, known: &[&str], type_: &str) -> Result<(), String> {
    match options.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(format!(
            "spec.options.{}: not an option of a {type_} channel (known: {})",
            crate::text::clean(k, QUOTE_BYTES),
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
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| {
            let e = crate::text::clean(&e.to_string(), QUOTE_BYTES);
            format!("spec.options.{key}: must be {what}: {e}")
        }),
    }
}

/// `options.timeout`: at least 1s, at most `--max-sync-timeout` (itself at most a year).
fn timeout(options: &Map<String, Value>, limits: &Limits) -> Result<Option<Duration>, String> {
    let Some(t) = string(options, "timeout")? else {
        return Ok(None);
    };
    let d = duration::parse(&t).map_err(|e| format!("spec.options.timeout: {e}"))?;
    if d < MIN_TIMEOUT {
        return Err(format!(
            "spec.options.timeout: {t:?} is too short; use at least 1s"
        ));
    }
    // The flag is itself at most a year (checked at start); `min` keeps that promise for
    // limits made elsewhere.
    let max = limits.max_sync_timeout.min(MAX_DURATION);
    if d > max {
        return Err(format!(
            "spec.options.timeout: {t:?} is longer than this operator's maximum of {} (--max-sync-timeout)",
            duration::format(max)
        ));
    }
    Ok(Some(d))
}

fn security_context(
    options: &Map<String, Value>,
    limits: &Limits,
) -> Result<Option<SecurityContext>, String> {
    let sc: Option<SecurityContext> =
        typed(options, "securityContext", "a container securityContext")?;
    if !limits.allow_privileged_runners
        && let Some((field, why)) = sc.as_ref().and_then(runner_privilege)
    {
        return Err(format!(
            "spec.options.securityContext.{field}: {why}; this operator refuses privileged runners (its admin can allow them with --allow-privileged-runners)"
        ));
    }
    Ok(sc)
}

fn custom_options(options: &Map<String, Value>, limits: &Limits) -> Result<CustomOptions, String> {
    unknown_keys(options, schema::options_of("custom"), "custom")?;
    let image = string(options, "image")?
        .filter(|i| !i.trim().is_empty())
        .ok_or("spec.options.image: required for a custom channel: the image that prints the channel data")?;
    let mount_path = string(options, "mountPath")?.unwrap_or_else(|| DEFAULT_MOUNT_PATH.into());
    let mount_path = clean_path(&mount_path)
        .filter(|p| p != "/")
        .ok_or_else(|| {
            format!("spec.options.mountPath: {mount_path:?} must be an absolute path below /")
        })?;
    if let Some(why) = mount_path_problem(&mount_path) {
        return Err(format!(
            "spec.options.mountPath: {}: {why}",
            quote(&mount_path)
        ));
    }
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
        security_context: security_context(options, limits)?,
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
        timeout: timeout(options, limits)?,
    })
}

fn pull_policy(options: &Map<String, Value>) -> Result<Option<String>, String> {
    match string(options, "imagePullPolicy")? {
        None => Ok(None),
        Some(p) if ["Always", "IfNotPresent", "Never"].contains(&p.as_str()) => Ok(Some(p)),
        Some(p) => Err(format!(
            "spec.options.imagePullPolicy: {} is not a pull policy; use Always, IfNotPresent or Never",
            quote(&p)
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

fn json_options(options: &Map<String, Value>, limits: &Limits) -> Result<JsonOptions, String> {
    unknown_keys(options, schema::options_of("json"), "json")?;
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
        timeout: fetch_timeout(options, limits)?,
    })
}

/// `options.timeout` of a json or oci channel, else the default (within `--max-sync-timeout`).
fn fetch_timeout(options: &Map<String, Value>, limits: &Limits) -> Result<Duration, String> {
    Ok(timeout(options, limits)?.unwrap_or(DEFAULT_FETCH_TIMEOUT.min(limits.max_sync_timeout)))
}

#[cfg(test)]
mod tests;
