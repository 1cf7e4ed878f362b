//! What `sync` reports per channel, once: as lines for people (results on stdout, a
//! failure or warning on stderr), or gathered into one document for scripts (`-o
//! json|yaml`). The field names are part of the command line's contract (docs/cli.md).

use serde::Serialize;

use crate::commands::cluster::{CliError, Target};
use crate::commands::output::{self, Format};
use crate::commands::sync::changes::Changes;
use crate::commands::sync::progress::Progress;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Without `--wait`: the request was written.
    Requested,
    /// A sync that started after the request succeeded.
    Synchronized,
    /// It failed, or no sync will run (suspended, disabled, invalid, deleted).
    Failed,
    /// No outcome came within `--timeout`.
    TimedOut,
}

/// One channel's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncResult {
    pub namespace: String,
    pub name: String,
    pub outcome: Outcome,
    /// The `Ready` reason of the outcome; for `requested`, why no sync will come of it.
    pub reason: Option<String>,
    pub message: Option<String>,
    /// What changed, by version name (`--wait` and synchronized only).
    pub changes: Option<Changes>,
    /// The changes include those of a sync that was under way when the request came.
    pub includes_earlier_sync: bool,
    /// The newest version published (synchronized only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest_version: Option<String>,
    /// How many versions `spec.versions` held back, by rule (synchronized only).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub held_back: std::collections::BTreeMap<String, i64>,
}

impl SyncResult {
    pub fn new(target: &Target, outcome: Outcome) -> Self {
        SyncResult {
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            outcome,
            reason: None,
            message: None,
            changes: None,
            includes_earlier_sync: false,
            latest_version: None,
            held_back: Default::default(),
        }
    }

    pub fn because(mut self, reason: &str, message: &str) -> Self {
        self.reason = Some(reason.into());
        self.message = Some(message.into());
        self
    }

    pub fn ok(&self) -> bool {
        matches!(self.outcome, Outcome::Requested | Outcome::Synchronized)
    }

    /// The lines for people: (stdout, stderr).
    pub fn lines(&self) -> (Vec<String>, Vec<String>) {
        let target = format!("{}/{}", self.namespace, self.name);
        let reason = self.reason.as_deref().unwrap_or_default();
        let message = self.message.as_deref().unwrap_or_default();
        match self.outcome {
            Outcome::Requested => {
                let warning = self
                    .reason
                    .as_ref()
                    .map(|_| format!("warning: {target}: {reason}: {message}"));
                (
                    vec![format!("{target}: sync requested")],
                    warning.into_iter().collect(),
                )
            }
            Outcome::Synchronized => {
                let mut out = vec![format!("{target}: Synchronized: {message}")];
                let changes = self.changes.clone().unwrap_or_default().lines();
                if changes.is_empty() {
                    out.push("  no version was changed".into());
                }
                out.extend(changes.iter().map(|l| format!("  {l}")));
                if self.includes_earlier_sync && !changes.is_empty() {
                    // The names are what changed since the request; the message counts the
                    // requested sync's changes only.
                    out.push(
                        "  (with the changes of a sync that was under way when the request came)"
                            .into(),
                    );
                }
                (out, Vec::new())
            }
            Outcome::Failed => (
                Vec::new(),
                vec![format!("error: {target}: {reason}: {message}")],
            ),
            Outcome::TimedOut => (Vec::new(), vec![format!("error: {target}: {message}")]),
        }
    }
}

/// `sync -o json|yaml`: `{"channels": [...]}`, sorted by namespace and name.
#[derive(Serialize)]
struct SyncDocument {
    pub channels: Vec<SyncResult>,
}

impl SyncDocument {
    pub fn new(mut channels: Vec<SyncResult>) -> Self {
        channels.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        SyncDocument { channels }
    }
}

/// Prints each result as it comes (a table), or all of them at the end (a document).
pub(super) struct Reporter {
    format: Format,
    results: Vec<SyncResult>,
}

impl Reporter {
    pub(super) fn new(format: Format) -> Self {
        Reporter {
            format,
            results: Vec::new(),
        }
    }

    /// A channel's result; its error or warning goes to stderr in every format.
    pub(super) fn report(
        &mut self,
        progress: &mut Progress,
        result: SyncResult,
    ) -> Result<(), CliError> {
        let (out, err) = result.lines();
        if !self.format.is_document() {
            for line in &out {
                progress.out(line).map_err(CliError::Output)?;
            }
        }
        for line in &err {
            progress.err(line);
        }
        self.results.push(result);
        Ok(())
    }

    /// Prints the document, if one; whether every channel's result was good.
    pub(super) fn finish(self, progress: &mut Progress) -> Result<bool, CliError> {
        let ok = self.results.iter().all(SyncResult::ok);
        if self.format.is_document() {
            let doc = output::document(self.format, &SyncDocument::new(self.results), false);
            progress.out(doc.trim_end()).map_err(CliError::Output)?;
        }
        Ok(ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target() -> Target {
        Target {
            namespace: "fleet".into(),
            name: "stable".into(),
        }
    }

    #[test]
    fn a_synchronized_channel_names_what_changed() {
        let mut r = SyncResult::new(&target(), Outcome::Synchronized)
            .because("Synchronized", "synchronized 2 versions (1 created)");
        r.changes = Some(Changes {
            created: vec!["b".into()],
            ..Default::default()
        });
        r.includes_earlier_sync = true;
        assert_eq!(
            r.lines(),
            (
                vec![
                    "fleet/stable: Synchronized: synchronized 2 versions (1 created)".to_string(),
                    "  created: b".into(),
                    "  (with the changes of a sync that was under way when the request came)"
                        .into(),
                ],
                vec![]
            )
        );
        assert_eq!(
            serde_json::to_value(SyncDocument::new(vec![r])).unwrap(),
            json!({"channels": [{
                "namespace": "fleet", "name": "stable", "outcome": "synchronized",
                "reason": "Synchronized", "message": "synchronized 2 versions (1 created)",
                "changes": {"created": ["b"], "updated": [], "flagged": [], "unflagged": [],
                            "deleted": []},
                "includesEarlierSync": true,
            }]})
        );
    }

    #[test]
    fn failures_and_warnings_go_to_stderr() {
        let r = SyncResult::new(&target(), Outcome::Failed).because("FailedToSync", "boom");
        assert!(!r.ok());
        assert_eq!(
            r.lines(),
            (
                vec![],
                vec!["error: fleet/stable: FailedToSync: boom".to_string()]
            )
        );
        let r = SyncResult::new(&target(), Outcome::Requested).because("Suspended", "paused");
        assert!(r.ok());
        assert_eq!(
            r.lines(),
            (
                vec!["fleet/stable: sync requested".to_string()],
                vec!["warning: fleet/stable: Suspended: paused".to_string()]
            )
        );
        let r = SyncResult::new(&target(), Outcome::Synchronized).because("Synchronized", "ok");
        assert_eq!(r.lines().0[1], "  no version was changed");
        assert_eq!(
            serde_json::to_value(&r).unwrap()["outcome"],
            json!("synchronized")
        );
        let t = SyncResult::new(&target(), Outcome::TimedOut);
        assert_eq!(
            serde_json::to_value(&t).unwrap()["outcome"],
            json!("timedOut")
        );
    }
}
