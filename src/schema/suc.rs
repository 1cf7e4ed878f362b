//! Test-only: the system-upgrade-controller's Plan (`upgrade.cattle.io/v1`, its
//! `pkg/apis/upgrade.cattle.io/v1/types.go`) as far as a version's `upgradeContainer` goes
//! into it, with the JSON names of its Go json tags. The controller itself cannot be
//! installed here, so tests build a Plan from what the operator writes and read it with
//! these types, strictly: a field the controller does not know is an error.

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, SecurityContext};
use serde::{Deserialize, Serialize};

/// `Plan`: only what a test sets.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub api_version: String,
    pub kind: String,
    pub spec: PlanSpec,
}

/// `PlanSpec`: only what a test sets; the container is `upgrade`.
#[derive(Debug, Deserialize, Serialize)]
pub struct PlanSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    pub upgrade: ContainerSpec,
}

/// `ContainerSpec`, every field: `Image string json:"image"` (no omitempty), the lists and
/// `SecurityContext` with omitempty, and the environment spelled `envs`.
#[derive(Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    #[serde(default)]
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(rename = "envs", default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(rename = "envFrom", default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFromSource>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeSpec>,
    #[serde(rename = "securityContext", skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
}

/// `VolumeSpec`: a host path, all three fields required.
#[derive(Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    pub name: String,
    pub source: String,
    pub destination: String,
}

/// The JSON names of `ContainerSpec`'s fields (of a value with every field set).
pub fn container_fields() -> Vec<String> {
    let full = ContainerSpec {
        image: "i".into(),
        command: vec!["c".into()],
        args: vec!["a".into()],
        env: vec![EnvVar::default()],
        env_from: vec![EnvFromSource::default()],
        volumes: vec![VolumeSpec::default()],
        security_context: Some(SecurityContext::default()),
    };
    match serde_json::to_value(full) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// The JSON names of `VolumeSpec`'s fields.
pub fn volume_fields() -> Vec<String> {
    match serde_json::to_value(VolumeSpec::default()) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}
