//! The two custom resources, `ManagedOSVersionChannel` and `ManagedOSVersion`
//! (group `rancheros.cattle.io`, version `v1`). The CRDs in `crds/` are generated from
//! these types by `crate::crds`; the test `tests/crds.rs` keeps them in step.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use kube::runtime::reflector::ObjectRef;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod versions;
pub use versions::VersionsPolicy;

/// The field manager of every write the operator makes, as shown in `managedFields`.
pub const FIELD_MANAGER: &str = "rancheros-operator";
/// Label on every version and syncer pod: the name of the channel it belongs to.
pub const CHANNEL_LABEL: &str = "rancheros.cattle.io/channel";
/// Annotation on versions the channel's latest successful sync no longer lists.
pub const NO_LONGER_IN_SYNC_ANNOTATION: &str = "rancheros.cattle.io/channel-no-longer-in-sync";
/// Annotation on a channel: a new value asks for a sync now.
pub const SYNC_REQUESTED_AT_ANNOTATION: &str = "rancheros.cattle.io/sync-requested-at";
/// Finalizer on channels with `versionPolicy.onChannelDelete: Orphan` (and only on those):
/// it holds the channel until its versions are orphaned.
pub const ORPHAN_FINALIZER: &str = "rancheros.cattle.io/orphan-versions";
/// Annotation the operator writes on a version when it orphans it (the uid of the deleted
/// channel): with the channel label, what lets a later channel of that name adopt it.
pub const ORPHANED_FROM_ANNOTATION: &str = "rancheros.cattle.io/orphaned-from-channel";
/// Condition types of a channel (the kstatus conventions): `Ready` says how the last
/// finished sync went, `Reconciling` is True while a sync is under way, `Stalled` is True
/// when a human must act.
pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";
/// Condition of an `oci` channel with `spec.verify`: whether the last image read was
/// verified (True, `Verified`) or refused (False, `VerificationFailed`).
pub const SOURCE_VERIFIED: &str = "SourceVerified";

/// `Ready` reasons, exactly as users and tools see them.
pub mod reason {
    pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";
    pub const SYNCHRONIZING: &str = "Synchronizing";
    pub const SYNCHRONIZED: &str = "Synchronized";
    pub const FAILED_TO_SYNC: &str = "FailedToSync";
    pub const FAILED_TO_CREATE_POD: &str = "FailedToCreatePod";
    pub const CHANNEL_DISABLED: &str = "ChannelDisabled";
    pub const SUSPENDED: &str = "Suspended";
    /// `Reconciling` while a failed sync waits for its retry (as Flux's controllers say it).
    pub const PROGRESSING_WITH_RETRY: &str = "ProgressingWithRetry";
    /// `SourceVerified` True: the image's cosign signature verified.
    pub const VERIFIED: &str = "Verified";
    /// `SourceVerified` False: no signature of the image verified against the key.
    pub const VERIFICATION_FAILED: &str = "VerificationFailed";
}

/// A source of available OS versions. The operator keeps one `ManagedOSVersion` per
/// version the channel lists, in the channel's namespace.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "rancheros.cattle.io",
    version = "v1",
    kind = "ManagedOSVersionChannel",
    namespaced,
    derive = "PartialEq",
    status = "ManagedOSVersionChannelStatus",
    shortname = "mosvc",
    category = "rancheros",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Versions","type":"integer","jsonPath":".status.syncedVersions"}"#,
    printcolumn = r#"{"name":"Latest","type":"string","jsonPath":".status.latestVersion"}"#,
    printcolumn = r#"{"name":"Last Sync","type":"date","jsonPath":".status.lastSyncedTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","priority":1,"jsonPath":".spec.suspend"}"#,
    // A time, but not `date`: kubectl shows a date in the future as `<invalid>`.
    printcolumn = r#"{"name":"Next Sync","type":"string","priority":1,"jsonPath":".status.nextSyncTime"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","priority":1,"jsonPath":".status.sourceRevision"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#
)]
#[serde(rename_all = "camelCase")]
// What the schema can check is refused by the API server at once (servers with CRD
// validation rules); the operator checks it all again and reports the rest in the status.
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.type) && self.type in ['custom', 'json', 'oci']",
        "message": "spec.type must be \"custom\", \"json\" or \"oci\"",
        "fieldPath": ".type",
    },
    {
        "rule": DURATION_RULE_SYNC_INTERVAL,
        "message": "spec.syncInterval must be a duration like 90s, 10m or 1h30m",
        "fieldPath": ".syncInterval",
    },
    {
        "rule": DURATION_RULE_TIMEOUT,
        "message": "spec.options.timeout must be a duration like 30s, 5m or 1h",
        "fieldPath": ".options.timeout",
    },
    {
        "rule": BOUND_RULE_SYNC_INTERVAL,
        "message": "spec.syncInterval must be more than 0 and at most 8760h (a year)",
        "fieldPath": ".syncInterval",
    },
    {
        "rule": BOUND_RULE_TIMEOUT,
        "message": "spec.options.timeout must be more than 0 and at most 8760h (a year)",
        "fieldPath": ".options.timeout",
    },
    {
        "rule": OUTPUT_FILE_RULE,
        "message": "spec.options.outputFile must be a file inside spec.options.mountPath (default /data)",
        "fieldPath": ".options.outputFile",
    },
    {
        "rule": URI_RULE,
        "message": "spec.options.uri must be an http:// or https:// URL",
        "fieldPath": ".options.uri",
    },
]))]
pub struct ManagedOSVersionChannelSpec {
    /// `custom` (a container prints the channel data), `json` (the operator fetches a URL)
    /// or `oci` (the operator reads a file of an image or artifact in its registry).
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 16))]
    pub type_: String,
    /// Time between syncs, as a duration string (`90s`, `10m`, `1h30m`). Default `1h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub sync_interval: Option<String>,
    /// `false` stops syncing and flags (or deletes) every version of the channel. Default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `true` pauses the channel: no syncs, no syncer pods, no version flagged or deleted;
    /// `Ready` keeps the last outcome with the reason `Suspended`. Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Delete, instead of only flagging, versions the channel no longer lists. Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_no_longer_in_sync_versions: Option<bool>,
    /// Prefix put before `metadata.upgradeImage` (container) or `metadata.uri` (iso) of
    /// every version, with exactly one `/` between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub registry: Option<String>,
    /// Options of the channel type (see the README).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::channel_options")]
    pub options: Option<Map<String, Value>>,
    /// When set, copied to every version's `spec.upgradeContainer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::upgrade_container")]
    pub upgrade_container: Option<Map<String, Value>>,
    /// What becomes of the channel's versions when the channel is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_policy: Option<VersionPolicy>,
    /// Signature verification of an `oci` channel's image: its data is used only when the
    /// digest's cosign signature verifies against the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
    /// Which of the listed versions the channel publishes: platforms, include and exclude
    /// patterns, a minimum age, and how many newest to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<VersionsPolicy>,
    /// `true` publishes the channel on the operator's channel server (when it runs, see
    /// `--channel-server-address`): its published versions as channel data at
    /// `/v1/channels/<namespace>/<name>`, and the newest one's image tag at `.../latest`.
    /// Default `false`: not served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<bool>,
}

/// `spec.verify`: how an `oci` channel's image is verified.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verify {
    /// `cosign`: the signature stored beside the image (the `sha256-<hex>.sig` tag), checked
    /// against a public key.
    #[schemars(schema_with = "verify_provider")]
    pub provider: String,
    /// The Secret of the channel's namespace whose `cosign.pub` holds the public key (PEM).
    pub secret_ref: SecretRef,
}

/// A Secret of the channel's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// What becomes of a channel's versions.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionPolicy {
    /// `Delete` (default): deleting the channel deletes its versions (owner references).
    /// `Orphan`: they stay, flagged no longer in sync, without the owner reference, and a
    /// channel of the same name created later adopts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "on_channel_delete")]
    pub on_channel_delete: Option<OnChannelDelete>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnChannelDelete {
    #[default]
    Delete,
    Orphan,
}

impl ManagedOSVersionChannelSpec {
    /// `versionPolicy.onChannelDelete`, with its default.
    pub fn on_channel_delete(&self) -> OnChannelDelete {
        self.version_policy
            .as_ref()
            .and_then(|p| p.on_channel_delete)
            .unwrap_or_default()
    }
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// The API server shows a channel the operator has not seen yet with observedGeneration -1,
// so that kstatus (Flux, `kubectl wait`) reads it as InProgress, not Current.
#[schemars(extend("default" = {"observedGeneration": -1}))]
pub struct ManagedOSVersionChannelStatus {
    /// The `metadata.generation` this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (the last finished sync), `Reconciling` (a sync is under way), `Stalled` (a
    /// human must act: the spec is invalid, or syncs keep failing past the quick retries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the last successful sync finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_synced_time: Option<Time>,
    /// The `metadata.generation` the last successful sync used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_generation: Option<i64>,
    /// How many versions the last successful sync listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_versions: Option<i64>,
    /// Consecutive failed syncs; reset by a success.
    #[serde(default)]
    pub failed_synchronization_attempts: i64,
    /// When the last sync, successful or not, finished: the next one is timed from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_attempt_time: Option<Time>,
    /// The value of the `rancheros.cattle.io/sync-requested-at` annotation that was last
    /// acted on; a different value asks for a sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_requested_at: Option<String>,
    /// What the last successful sync read: the digest of the runner image that ran
    /// (custom channels), the `ETag` (else `Last-Modified`) of the response (json), or
    /// `tag@sha256:...` of the image read (oci).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_revision: Option<String>,
    /// When the next sync is due, as of the last finished sync (an on-demand request or a
    /// spec change comes sooner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_sync_time: Option<Time>,
    /// The uid of the last syncer pod the operator created for this channel. Only a pod
    /// with this uid holds a sync slot or is read: names, labels and owner references are
    /// anyone's to write, the status only the operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syncer_pod_uid: Option<String>,
    /// The name of the newest version (by semver) the last successful sync published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_version: Option<String>,
    /// How many listed versions `spec.versions` held back in the last successful sync, by
    /// rule (`platforms`, `include`, `exclude`, `minAge`, `keep`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub held_back: std::collections::BTreeMap<String, i64>,
    /// When a sync first saw each listed version that `spec.versions.minAge` still holds
    /// back (at most 512: a version past that waits for room, never less than its age).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 512))]
    pub first_seen: std::collections::BTreeMap<String, Time>,
}

impl ManagedOSVersionChannelStatus {
    /// The condition of this type, if the status has one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// `Reconciling` while a sync is under way (started, or queued for a slot); not while a
    /// failed one waits for its retry (`ProgressingWithRetry`).
    pub fn sync_under_way(&self) -> Option<&Condition> {
        self.condition(RECONCILING)
            .filter(|c| c.status == "True" && c.reason != reason::PROGRESSING_WITH_RETRY)
    }
}

/// A channel's identity in the operator's caches, queue and metrics: namespace and name.
pub type ChannelKey = ObjectRef<ManagedOSVersionChannel>;

/// One OS version available for upgrade.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "rancheros.cattle.io",
    version = "v1",
    kind = "ManagedOSVersion",
    namespaced,
    derive = "PartialEq",
    status = "ManagedOSVersionStatus",
    shortname = "mosv",
    category = "rancheros",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Channel","type":"string","jsonPath":".metadata.ownerReferences[?(@.controller==true)].name"}"#,
    printcolumn = r#"{"name":"No Longer In Sync","type":"string","jsonPath":".metadata.annotations.rancheros\\.cattle\\.io/channel-no-longer-in-sync"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedOSVersionSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `container` or `iso`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<String>,
    /// `upgradeImage` (container), `uri` (iso), `displayName`, `created` and any other keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub metadata: Option<Map<String, Value>>,
    /// The container that runs the upgrade (the system-upgrade-controller container spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::upgrade_container")]
    pub upgrade_container: Option<Map<String, Value>>,
}

/// Versions have a status subresource for tools built on top; the operator writes none.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ManagedOSVersionStatus {}

/// Go duration syntax (`0`, `90s`, `1h30m`, `1.5h`, `500ms`), as `duration::parse` reads it.
macro_rules! duration_rule {
    ($guard:literal, $field:literal) => {
        concat!(
            $guard,
            "!has(self.",
            $field,
            ") || self.",
            $field,
            ".trim().matches('^(0|(([0-9]+[.]?[0-9]*|[.][0-9]+)(ns|us|µs|ms|s|m|h))+)$')"
        )
    };
}
const DURATION_RULE_SYNC_INTERVAL: &str = duration_rule!("", "syncInterval");
const DURATION_RULE_TIMEOUT: &str = duration_rule!("!has(self.options) || ", "options.timeout");

/// The bounds no operator flag lifts (see `config::MAX_DURATION`): more than zero, at most a
/// year. Checked only on a duration (the rule above reports the rest). CEL's `duration()`
/// fails on a value past what Go's durations hold (about 292 years); a term too large for
/// a year, whatever its unit, is refused first, so `duration()` only ever sees values it
/// holds: each term left is below 100000h, and the 64 characters a field may have leave
/// room for at most ten such terms.
macro_rules! bound_rule {
    ($guard:literal, $field:literal) => {
        concat!(
            $guard,
            "!has(self.",
            $field,
            ") || !self.",
            $field,
            ".trim().matches('^(0|(([0-9]+[.]?[0-9]*|[.][0-9]+)(ns|us|µs|ms|s|m|h))+)$') || (!self.",
            $field,
            ".trim().matches('(^|[a-zµ])0*[1-9]([0-9]{5,}[.]?[0-9]*h|[0-9]{6,}[.]?[0-9]*m($|[^s])|[0-9]{8,}[.]?[0-9]*s|[0-9]{11,}[.]?[0-9]*ms|[0-9]{14,}[.]?[0-9]*(us|µs)|[0-9]{17,}[.]?[0-9]*ns)') && duration(self.",
            $field,
            ".trim()) > duration('0s') && duration(self.",
            $field,
            ".trim()) <= duration('8760h'))"
        )
    };
}
const BOUND_RULE_SYNC_INTERVAL: &str = bound_rule!("", "syncInterval");
const BOUND_RULE_TIMEOUT: &str = bound_rule!("!has(self.options) || ", "options.timeout");
const OUTPUT_FILE_RULE: &str = "self.type != 'custom' || !has(self.options) || !has(self.options.outputFile) || \
    self.options.outputFile.startsWith(has(self.options.mountPath) ? \
    (self.options.mountPath.endsWith('/') ? self.options.mountPath : self.options.mountPath + '/') : '/data/')";
const URI_RULE: &str = "self.type != 'json' || !has(self.options) || !has(self.options.uri) || \
    self.options.uri.trim().matches('^(?i)https?://.+')";

/// The two values, without the `null` a generated `Option` enum would list.
fn on_channel_delete(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["Delete", "Orphan"],
        "description": "`Delete` (default): deleting the channel deletes its versions (owner references). `Orphan`: they stay, flagged no longer in sync, without the owner reference, and a channel of the same name created later adopts them."
    })
}

fn verify_provider(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["cosign"],
        "description": "`cosign`: the signature stored beside the image (the `sha256-<hex>.sig` tag), checked against a public key."
    })
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_spec_accepts_the_sample_manifest() {
        let spec: ManagedOSVersionChannelSpec = serde_json::from_value(serde_json::json!({
            "type": "custom",
            "options": {"image": "opensuse/tumbleweed", "mountPath": "/output"},
            "upgradeContainer": {}
        }))
        .unwrap();
        assert_eq!(spec.type_, "custom");
        assert_eq!(spec.upgrade_container, Some(Map::new()));
        assert_eq!(spec.enabled, None);
    }
}
