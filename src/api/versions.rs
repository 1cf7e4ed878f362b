//! `spec.versions`: which of the versions a source lists the channel publishes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.versions`: a policy over what the source lists (see docs/policy.md). Every rule
/// is optional; a version held back by one is never created, and one that exists already
/// is flagged as no longer in sync, never deleted by the policy.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionsPolicy {
    /// Keep versions whose `spec.metadata.platforms` lists one of these (`linux/arm64`;
    /// `x86_64` is `amd64` and `aarch64` is `arm64`); versions without the key are kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 64)))]
    pub platforms: Vec<String>,
    /// Keep only versions that one of these matches: a semver range (`>=2.1.0 <3`,
    /// alternatives with `||`) over `spec.version`, or a glob (`*`, `?`) over the name or
    /// the version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 256)))]
    pub include: Vec<String>,
    /// Drop versions that one of these matches (ranges and globs as `include`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 256)))]
    pub exclude: Vec<String>,
    /// Publish a version only once the source has listed it this long (`24h`), counted
    /// from the first sync that saw it (kept in `status.firstSeen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub min_age: Option<String>,
    /// Keep at most this many newest versions (by semver) live; older ones are flagged as
    /// no longer in sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub keep: Option<u32>,
}
