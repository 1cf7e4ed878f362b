//! The admission contract of a channel: the typed schema of `spec.options` and of
//! `upgradeContainer`, and the rules the CRDs carry beyond what the types say. Every field
//! has a description (what `kubectl explain` shows) and a size bound; nothing is free-form,
//! so the API server prunes unknown keys (kubectl's strict field validation refuses them at
//! apply) and no object can be nested deep enough to break a client's decoding.
//!
//! In Rust `options` and `upgradeContainer` stay JSON maps: `config` reads `options` per
//! channel type, and [`upgrade_container_problem`] checks an `upgradeContainer` against the
//! same type that gives its schema.

use k8s_openapi::api::core::v1::{
    EnvFromSource, EnvVar, LocalObjectReference, ResourceRequirements, SecurityContext, Toleration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The largest `upgradeContainer` (serialised JSON) a channel or a version may carry: it is
/// copied into every version, so it multiplies by the number of versions.
const MAX_UPGRADE_CONTAINER_BYTES: usize = 64 * 1024;
/// The longest `spec.registry`.
pub const MAX_REGISTRY_BYTES: usize = 512;
/// The longest channel name: it becomes the value of a label (at most 63 characters).
const MAX_CHANNEL_NAME: usize = 63;

/// Bounds put on every field of the Kubernetes types below that has none of its own.
const STRING_MAX: u64 = 32 * 1024;
const ITEMS_MAX: u64 = 256;
const PROPERTIES_MAX: u64 = 256;

/// `spec.options`: the options of every channel type in one schema (the API server knows
/// one schema per field); the rules of [`spec_rules`] refuse an option of another type.
#[derive(Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
#[schemars(extend("maxProperties" = 32))]
struct ChannelOptions {
    /// custom: the image of the runner, which writes the channel data to `outputFile`
    /// (required). oci: the image or artifact holding the channel data, `repo:tag` or
    /// `repo@sha256:...` (required).
    #[schemars(length(max = 4096))]
    image: Option<String>,
    /// custom: the runner's command (the image's entrypoint when unset).
    #[schemars(length(max = 256), inner(length(max = 65536)))]
    command: Option<Vec<String>>,
    /// custom: the runner's arguments.
    #[schemars(length(max = 256), inner(length(max = 65536)))]
    args: Option<Vec<String>>,
    /// custom: the runner's environment, as in a Kubernetes container.
    #[schemars(length(max = 256))]
    env: Option<Vec<EnvVar>>,
    /// custom: environment from ConfigMaps and Secrets of the channel's namespace, as in a
    /// Kubernetes container.
    #[schemars(length(max = 64))]
    env_from: Option<Vec<EnvFromSource>>,
    /// custom: the runner's security context, laid over a restricted default (privileged
    /// settings are refused unless the operator allows them).
    security_context: Option<SecurityContext>,
    /// custom: the runner's resource requests and limits.
    resources: Option<ResourceRequirements>,
    /// custom: Secrets to pull the runner image. oci: dockerconfigjson Secrets of the
    /// channel's namespace to pull the image (anonymous without).
    #[schemars(length(max = 16))]
    image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// custom: when the runner image is pulled; default `Always` (channel images are
    /// published under mutable tags).
    #[schemars(schema_with = "pull_policy")]
    image_pull_policy: Option<String>,
    /// custom: node labels the syncer pod must run on.
    #[schemars(extend("maxProperties" = 64))]
    node_selector: Option<BTreeMap<String, String>>,
    /// custom: tolerations of the syncer pod.
    #[schemars(length(max = 64))]
    tolerations: Option<Vec<Toleration>>,
    /// custom: where the output volume is mounted in the runner; default `/data`. Not `/`,
    /// a system directory or the directory of the operator's `display` binary.
    #[schemars(length(max = 4096))]
    mount_path: Option<String>,
    /// custom: the file the runner writes the channel data to; default `<mountPath>/output`.
    /// Must lie inside `mountPath`.
    #[schemars(length(max = 4096))]
    output_file: Option<String>,
    /// How long one sync may take, as a duration (`30s`, `5m`); custom: default the
    /// operator's `--sync-timeout`; json and oci: default `30s`. At most the operator's
    /// `--max-sync-timeout`.
    #[schemars(length(max = 64))]
    timeout: Option<String>,
    /// json: the http or https URL of the channel data (required).
    #[schemars(length(max = 8192))]
    uri: Option<String>,
    /// oci: the file in the image's filesystem that holds the channel data; default
    /// `/channel.json`.
    #[schemars(length(max = 4096))]
    path: Option<String>,
    /// oci: a Secret of the channel's namespace with `ca.crt`, for a registry with a
    /// private certificate authority.
    ca_secret_ref: Option<LocalObjectReference>,
    /// oci: plain HTTP to the registry; refused unless the operator allows insecure
    /// registries.
    insecure: Option<bool>,
    /// oci: the platform to read from an image index, `os/arch[/variant]`; default
    /// `linux/<the operator's architecture>`.
    #[schemars(length(max = 64))]
    platform: Option<String>,
}

/// `upgradeContainer`: the container a version's upgrade runs, copied from the channel into
/// every version. It is the system-upgrade-controller's `ContainerSpec` (a Plan's
/// `spec.upgrade`) field for field, with its JSON names (`envs`, not `env`), so a Plan built
/// from a version takes it as it is; [`OLD_ENV`] is the one addition.
#[derive(Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct UpgradeContainer {
    /// The image of the upgrade container.
    #[schemars(length(max = 4096))]
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<String>,
    /// The container's command.
    #[schemars(length(max = 256), inner(length(max = 65536)))]
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<Vec<String>>,
    /// The container's arguments.
    #[schemars(length(max = 256), inner(length(max = 65536)))]
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Vec<String>>,
    /// The container's environment variables, as in a Kubernetes container's `env` (the
    /// system-upgrade-controller spells this field `envs`).
    #[schemars(length(max = 256))]
    #[serde(skip_serializing_if = "Option::is_none")]
    envs: Option<Vec<EnvVar>>,
    /// The old spelling of `envs`, still accepted: the operator writes it as `envs`. Not
    /// together with `envs`.
    #[schemars(length(max = 256))]
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<Vec<EnvVar>>,
    /// Environment from ConfigMaps and Secrets, as in a Kubernetes container.
    #[schemars(length(max = 64))]
    #[serde(skip_serializing_if = "Option::is_none")]
    env_from: Option<Vec<EnvFromSource>>,
    /// Host paths mounted into the upgrade container.
    #[schemars(length(max = 64))]
    #[serde(skip_serializing_if = "Option::is_none")]
    volumes: Option<Vec<UpgradeVolume>>,
    /// The container's security context.
    #[serde(skip_serializing_if = "Option::is_none")]
    security_context: Option<SecurityContext>,
}

/// The old spelling of `envs` in an `upgradeContainer`: read as `envs`, never written.
pub const OLD_ENV: &str = "env";
/// What `validate` says about [`OLD_ENV`] in channel data.
pub const OLD_ENV_NOTE: &str =
    "the old spelling of `envs` (the system-upgrade-controller's name): written as `envs`";
/// Why an `upgradeContainer` with both spellings is refused (in the CRD's rule too).
const BOTH_ENVS: &str = "has both `envs` and `env`, its old spelling: give only `envs`";

/// A host path mounted into the upgrade container.
#[derive(Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UpgradeVolume {
    /// The volume's name.
    #[schemars(length(max = 253))]
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// The path on the host.
    #[schemars(length(max = 4096))]
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    /// Where it is mounted in the container.
    #[schemars(length(max = 4096))]
    #[serde(skip_serializing_if = "Option::is_none")]
    destination: Option<String>,
}

fn pull_policy(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["Always", "IfNotPresent", "Never"],
    })
}

/// The schema of `spec.options` (see [`ChannelOptions`]).
pub fn channel_options(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    bounded(generator.subschema_for::<ChannelOptions>())
}

/// The schema of `upgradeContainer` (see [`UpgradeContainer`]).
pub fn upgrade_container(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    bounded(generator.subschema_for::<UpgradeContainer>())
}

fn bounded(schema: schemars::Schema) -> schemars::Schema {
    let mut value = schema.to_value();
    bound(&mut value);
    schemars::Schema::try_from(value).unwrap_or_default()
}

/// Gives every string, list and map below `v` a size bound when it has none.
fn bound(v: &mut Value) {
    let Value::Object(m) = v else { return };
    let default = match m.get("type").and_then(Value::as_str) {
        Some("string") => Some(("maxLength", STRING_MAX)),
        Some("array") => Some(("maxItems", ITEMS_MAX)),
        Some("object") if m.contains_key("additionalProperties") => {
            Some(("maxProperties", PROPERTIES_MAX))
        }
        _ => None,
    };
    if let Some((key, max)) = default {
        m.entry(key).or_insert(json!(max));
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(bound);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = m.get_mut(key) {
            bound(sub);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(subs)) = m.get_mut(key) {
            subs.iter_mut().for_each(bound);
        }
    }
}

/// An `upgradeContainer` (of a channel or of channel data) as its type reads it and as the
/// operator writes it: keys below a Kubernetes type that the type lacks are dropped, as the
/// API server prunes them (so a version the operator writes reads back the same), and the
/// old spelling [`OLD_ENV`] becomes `envs`. The error says why it cannot be used: a field
/// the container lacks, a value of the wrong type, both spellings of `envs`, or more than
/// [`MAX_UPGRADE_CONTAINER_BYTES`] serialised.
pub fn typed_upgrade_container(
    container: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let size = serde_json::to_vec(container).map_or(usize::MAX, |b| b.len());
    if size > MAX_UPGRADE_CONTAINER_BYTES {
        return Err(format!(
            "{size} bytes serialised, more than the {} KiB an upgradeContainer may have",
            MAX_UPGRADE_CONTAINER_BYTES / 1024
        ));
    }
    let mut typed: UpgradeContainer =
        serde_json::from_value(Value::Object(container.clone())).map_err(|e| e.to_string())?;
    if let Some(old) = typed.env.take() {
        if typed.envs.is_some() {
            return Err(BOTH_ENVS.into());
        }
        typed.envs = Some(old);
    }
    match serde_json::to_value(typed) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err("cannot be written back as an object".into()),
    }
}

/// Options of each channel type; an option of another type is refused at apply.
const TYPE_OPTIONS: [(&str, &[&str]); 3] = [
    (
        "custom",
        &[
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
        ],
    ),
    ("json", &["uri", "timeout"]),
    (
        "oci",
        &[
            "image",
            "path",
            "imagePullSecrets",
            "caSecretRef",
            "insecure",
            "platform",
            "timeout",
        ],
    ),
];

/// The option keys of a channel type (empty for an unknown type): the one list the CRD's
/// rules and `config` both use.
pub fn options_of(type_: &str) -> &'static [&'static str] {
    TYPE_OPTIONS
        .iter()
        .find(|(t, _)| *t == type_)
        .map_or(&[], |(_, keys)| keys)
}

/// The rules on `spec` that the types cannot say: the options of another channel type.
fn spec_rules() -> Vec<ValidationRule> {
    let all: Vec<&str> = TYPE_OPTIONS
        .iter()
        .flat_map(|(_, keys)| keys.iter().copied())
        .collect();
    TYPE_OPTIONS
        .iter()
        .map(|(type_, keys)| {
            let mut foreign: Vec<&str> =
                all.iter().copied().filter(|k| !keys.contains(k)).collect();
            foreign.sort_unstable();
            foreign.dedup();
            let set: Vec<String> = foreign
                .iter()
                .map(|k| format!("has(self.options.{k})"))
                .collect();
            ValidationRule {
                rule: format!(
                    "self.type != '{type_}' || !has(self.options) || !({})",
                    set.join(" || ")
                ),
                message: Some(format!(
                    "spec.options of {} {type_} channel takes only: {}",
                    if type_.starts_with('o') { "an" } else { "a" },
                    keys.join(", ")
                )),
                field_path: Some(".options".into()),
                ..ValidationRule::default()
            }
        })
        .collect()
}

/// Adds to the channel CRD what its types cannot carry: the name bound at the root (only
/// there may a rule read `metadata.name`), the per-type option rules on `spec`, and one
/// spelling of `envs` in `spec.upgradeContainer`.
pub fn finish_channel_crd(crd: &mut CustomResourceDefinition) {
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        root.x_kubernetes_validations = Some(vec![ValidationRule {
            rule: format!("self.metadata.name.size() <= {MAX_CHANNEL_NAME}"),
            message: Some(format!(
                "a channel name may have at most {MAX_CHANNEL_NAME} characters: it becomes the value of the rancheros.cattle.io/channel label"
            )),
            ..ValidationRule::default()
        }]);
        if let Some(spec) = root.properties.as_mut().and_then(|p| p.get_mut("spec")) {
            spec.x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .extend(spec_rules());
            // Only on the channel: a version that another writer gave `env` must still
            // take the operator's `envs` (server-side apply leaves the other's field).
            if let Some(container) = spec
                .properties
                .as_mut()
                .and_then(|p| p.get_mut("upgradeContainer"))
            {
                container.x_kubernetes_validations = Some(vec![ValidationRule {
                    rule: format!("!(has(self.envs) && has(self.{OLD_ENV}))"),
                    message: Some(format!("spec.upgradeContainer {BOTH_ENVS}")),
                    ..ValidationRule::default()
                }]);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod suc;
#[cfg(test)]
mod tests;
