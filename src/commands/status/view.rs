//! What `status` shows of a channel, once: the table renders it for people (`table`), and
//! `-o json|yaml` prints it as it is, so both always carry the same fields. The field
//! names are part of the command line's contract (docs/cli.md): add, never rename.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::{Serialize, Serializer};

use crate::api::{ManagedOSVersionChannel, READY, reason};
use crate::commands::sync::outcome::one_line;

/// One channel's row, with machine values (times in RFC 3339, the whole revision and
/// message).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelView {
    pub namespace: String,
    pub name: String,
    /// The `Ready` condition's status: `True`, `False` or `Unknown`.
    pub ready: String,
    pub reason: Option<String>,
    /// Versions the last successful sync listed.
    pub versions: Option<i64>,
    pub revision: Option<String>,
    #[serde(serialize_with = "rfc3339")]
    pub last_sync_time: Option<Timestamp>,
    #[serde(serialize_with = "rfc3339")]
    pub next_sync_time: Option<Timestamp>,
    /// A sync is under way (`Reconciling` True).
    pub syncing: bool,
    /// The `Ready` message on one line; while a sync runs, what it does first.
    pub message: Option<String>,
}

fn rfc3339<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.to_string()),
        None => s.serialize_none(),
    }
}

impl ChannelView {
    pub fn of(ch: &ManagedOSVersionChannel) -> Self {
        let status = ch.status.clone().unwrap_or_default();
        let ready = status.condition(READY);
        // A retry waiting its turn (ProgressingWithRetry) is no sync under way.
        let running = status.sync_under_way();
        let mut message = ready.map(|r| one_line(&r.message)).unwrap_or_default();
        if let Some(c) = running {
            let doing = one_line(&c.message);
            // Ready says only that this sync runs (a first sync, a new spec): nothing to add.
            message = match ready {
                Some(r) if r.reason != reason::SYNCHRONIZING => {
                    format!("syncing: {doing}; last outcome: {message}")
                }
                _ => format!("syncing: {doing}"),
            };
        }
        ChannelView {
            namespace: ch.namespace().unwrap_or_default(),
            name: ch.name_any(),
            ready: ready.map_or_else(|| "Unknown".into(), |r| r.status.clone()),
            reason: ready.map(|r| r.reason.clone()),
            versions: status.synced_versions,
            revision: status.source_revision.clone(),
            last_sync_time: status.last_synced_time.as_ref().map(|Time(t)| *t),
            next_sync_time: status.next_sync_time.as_ref().map(|Time(t)| *t),
            syncing: running.is_some(),
            message: (!message.is_empty()).then_some(message),
        }
    }
}

/// The channels, sorted by namespace and name.
pub fn views(channels: &[ManagedOSVersionChannel]) -> Vec<ChannelView> {
    let mut views: Vec<ChannelView> = channels.iter().map(ChannelView::of).collect();
    views.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    views
}

/// `status -o json|yaml`: `{"channels": [...]}`.
#[derive(Serialize)]
pub struct StatusDocument<'a> {
    pub channels: &'a [ChannelView],
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_field_is_there_with_machine_values() {
        let ch: ManagedOSVersionChannel = serde_json::from_value(json!({
            "apiVersion": "rancheros.cattle.io/v1",
            "kind": "ManagedOSVersionChannel",
            "metadata": {"name": "stable", "namespace": "fleet"},
            "spec": {"type": "custom"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "Synchronized",
                                "message": "synchronized 2 versions\n(no changes)",
                                "lastTransitionTime": "2025-01-01T00:00:00Z"}],
                "syncedVersions": 2,
                "sourceRevision": "reg/x@sha256:0123456789abcdef0123",
                "lastSyncedTime": "2025-06-15T14:13:20Z",
            },
        }))
        .unwrap();
        let doc = serde_json::to_value(StatusDocument {
            channels: &views(&[ch]),
        })
        .unwrap();
        assert_eq!(
            doc,
            json!({"channels": [{
                "namespace": "fleet", "name": "stable", "ready": "True",
                "reason": "Synchronized", "versions": 2,
                "revision": "reg/x@sha256:0123456789abcdef0123",
                "lastSyncTime": "2025-06-15T14:13:20Z", "nextSyncTime": null,
                "syncing": false, "message": "synchronized 2 versions (no changes)",
            }]})
        );
    }
}
