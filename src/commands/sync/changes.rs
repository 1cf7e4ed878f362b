//! What a sync changed, by version name: the channel's versions before the request
//! compared with its versions after the outcome. The operator records only counts (in the
//! `Ready` message); the names come from the versions themselves, which a user may list.
//!
//! Everything that happened to the channel's versions between the two reads counts, so a
//! sync that was already under way when the request came is included too.

use std::collections::BTreeMap;

use kube::ResourceExt;
use serde_json::Value;

use crate::api::{ManagedOSVersion, NO_LONGER_IN_SYNC_ANNOTATION};

/// What of a version a sync may change.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    uid: Option<String>,
    flagged: bool,
    /// Spec, labels and annotations (but the flag), as JSON.
    content: Value,
}

impl Seen {
    pub fn of(v: &ManagedOSVersion) -> Self {
        let mut annotations = v.annotations().clone();
        let flagged = annotations
            .remove(NO_LONGER_IN_SYNC_ANNOTATION)
            .is_some_and(|a| a == "true");
        let content = serde_json::json!({
            "spec": v.spec,
            "labels": v.labels(),
            "annotations": annotations,
        });
        Seen {
            uid: v.uid(),
            flagged,
            content,
        }
    }
}

/// The channel's versions at one moment, by name.
pub type Snapshot = BTreeMap<String, Seen>;

pub fn snapshot<'a>(versions: impl IntoIterator<Item = &'a ManagedOSVersion>) -> Snapshot {
    versions
        .into_iter()
        .map(|v| (v.name_any(), Seen::of(v)))
        .collect()
}

/// Names by what happened to them, each list sorted (also the `changes` of `sync -o
/// json|yaml`: the field names are part of its contract).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Changes {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    /// Flagged as no longer in sync: the channel no longer lists them.
    pub flagged: Vec<String>,
    /// Listed again: the flag was taken off.
    pub unflagged: Vec<String>,
    pub deleted: Vec<String>,
}

impl Changes {
    pub fn between(before: &Snapshot, after: &Snapshot) -> Self {
        let mut c = Changes::default();
        for (name, now) in after {
            match before.get(name) {
                None => c.created.push(name.clone()),
                Some(was) => {
                    // Deleted and created again under the same name: changed, as far as
                    // its users can tell.
                    if was.content != now.content || was.uid != now.uid {
                        c.updated.push(name.clone());
                    }
                    match (was.flagged, now.flagged) {
                        (false, true) => c.flagged.push(name.clone()),
                        (true, false) => c.unflagged.push(name.clone()),
                        _ => {}
                    }
                }
            }
        }
        c.deleted = before
            .keys()
            .filter(|name| !after.contains_key(*name))
            .cloned()
            .collect();
        c
    }

    pub fn is_empty(&self) -> bool {
        self.lines().is_empty()
    }

    /// `created: a, b` and so on, one line per kind that happened, every name given.
    pub fn lines(&self) -> Vec<String> {
        [
            ("created", &self.created),
            ("updated", &self.updated),
            ("flagged as no longer in sync", &self.flagged),
            ("listed again (flag removed)", &self.unflagged),
            ("deleted", &self.deleted),
        ]
        .into_iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what}: {}", names.join(", ")))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn version(name: &str, uid: &str, v: &str, flagged: bool) -> ManagedOSVersion {
        let mut annotations = serde_json::Map::new();
        if flagged {
            annotations.insert(NO_LONGER_IN_SYNC_ANNOTATION.into(), json!("true"));
        }
        serde_json::from_value(json!({
            "apiVersion": "rancheros.cattle.io/v1",
            "kind": "ManagedOSVersion",
            "metadata": {"name": name, "uid": uid, "resourceVersion": "1",
                         "annotations": annotations},
            "spec": {"version": v, "type": "container"},
        }))
        .unwrap()
    }

    #[test]
    fn every_kind_of_change_by_name() {
        // Each version before the sync and after it: (uid, spec.version, flagged), or
        // `None` where it is not there.
        let history = [
            ("kept", Some(("1", "v1", false)), Some(("1", "v1", false))),
            ("bumped", Some(("2", "v1", false)), Some(("2", "v2", false))),
            ("dropped", Some(("3", "v1", false)), Some(("3", "v1", true))),
            ("gone", Some(("4", "v1", true)), None),
            ("back", Some(("5", "v1", true)), Some(("5", "v1", false))),
            (
                "recreated",
                Some(("6", "v1", false)),
                Some(("7", "v1", false)),
            ),
            ("new-b", None, Some(("8", "v1", false))),
            ("new-a", None, Some(("9", "v1", false))),
        ];
        let at = |moment: usize| -> Vec<ManagedOSVersion> {
            history
                .iter()
                .filter_map(|&(name, before, after)| {
                    [before, after][moment].map(|(uid, v, flagged)| version(name, uid, v, flagged))
                })
                .collect()
        };
        let (before, mut after) = (at(0), at(1));
        // The resource version alone changes nothing a user sees.
        after[0].metadata.resource_version = Some("2".into());
        let c = Changes::between(&snapshot(&before), &snapshot(&after));
        assert_eq!(
            c,
            Changes {
                created: vec!["new-a".into(), "new-b".into()],
                updated: vec!["bumped".into(), "recreated".into()],
                flagged: vec!["dropped".into()],
                unflagged: vec!["back".into()],
                deleted: vec!["gone".into()],
            }
        );
        assert_eq!(
            c.lines(),
            [
                "created: new-a, new-b",
                "updated: bumped, recreated",
                "flagged as no longer in sync: dropped",
                "listed again (flag removed): back",
                "deleted: gone",
            ]
        );
    }

    #[test]
    fn no_changes() {
        let v = [version("a", "1", "v1", false)];
        let c = Changes::between(&snapshot(&v), &snapshot(&v));
        assert!(c.is_empty());
        assert!(c.lines().is_empty());
    }
}
