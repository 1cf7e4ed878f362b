//! json and oci channels: a sync is a fetch (or a pull), its body the channel data.

use super::*;
use crate::api::SOURCE_VERIFIED;

impl Decider<'_> {
    pub(super) fn json_sync(&self, config: &ChannelConfig, options: &JsonOptions) -> Decision {
        let fetch = || Needs {
            fetch: Some(options.clone()),
            ..Default::default()
        };
        self.remote_sync(config, fetch, "the source answered: not modified")
    }

    /// An oci channel: the data of the image's file (or artifact layer); an unchanged
    /// digest answers with the data read before, so drift is still repaired.
    pub(super) fn oci_sync(&self, config: &ChannelConfig, options: &OciOptions) -> Decision {
        let pull = || Needs {
            pull: Some(options.clone()),
            ..Default::default()
        };
        self.remote_sync(config, pull, "the image's digest is unchanged")
    }

    /// Applies the data of a fetch or pull, once it and the versions are observed (until
    /// then, needs them: `read`, the fetch or the pull); `unchanged` is said when the
    /// source confirmed the data kept from before.
    fn remote_sync(
        &self,
        config: &ChannelConfig,
        read: impl FnOnce() -> Needs,
        unchanged: &str,
    ) -> Decision {
        let (Some(fetched), Some(_)) = (self.obs.fetched, self.obs.versions) else {
            return needs(Needs {
                versions: true,
                ..read()
            });
        };
        let verify = match &config.source {
            Source::Oci(o) => o.verify_secret.as_deref(),
            _ => None,
        };
        let d = match fetched {
            Fetched::Failed(message) => {
                return self.failure(SyncFailure::Fetch(message.clone()), None);
            }
            Fetched::Unverified(message) => {
                let d = self.failure(SyncFailure::Unverified(message.clone()), None);
                let verdict = (Truth::False, reason::VERIFICATION_FAILED, message.clone());
                return self.source_verified(d, Some(verdict));
            }
            Fetched::Body {
                data,
                validators,
                not_modified,
                changelogs,
            } => {
                let revision = validators
                    .etag
                    .clone()
                    .or_else(|| validators.last_modified.clone());
                // The body is the source's, not the tenant's: no byte of it in a message.
                let mut d = self.apply_data(data, config, None, revision, Redact::Values);
                if *not_modified
                    && d.outcome == Some(Outcome::Synchronized)
                    && let Some(status) = d.status.as_mut()
                    && let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == READY)
                {
                    c.message.push_str(&format!(" ({unchanged})"));
                }
                if d.outcome == Some(Outcome::Synchronized)
                    && let Some(found) = changelogs
                {
                    self.store_changelogs(&mut d, found);
                }
                d
            }
        };
        let verdict = verify.map(|secret| {
            let revision = match fetched {
                Fetched::Body { validators, .. } => validators.etag.clone().unwrap_or_default(),
                _ => String::new(),
            };
            (
                Truth::True,
                reason::VERIFIED,
                format!(
                    "the cosign signature of {revision} verified with the key of Secret {secret}"
                ),
            )
        });
        // The data came: its signature verified, whatever the data then holds.
        self.source_verified(d, verdict)
    }

    /// The image's changelogs, stored after the versions (none found: the ConfigMap is emptied);
    /// files left out are said in an Event.
    fn store_changelogs(
        &self,
        d: &mut Decision,
        found: &Arc<crate::channel::changelogs::Changelogs>,
    ) {
        use crate::channel::changelogs::{self, MAX_FILE_BYTES, MAX_TOTAL_BYTES};
        d.effects.push(Effect::Changelogs {
            name: changelogs::configmap_name(&self.ch.name_any()),
            files: (!found.files.is_empty()).then(|| Arc::clone(found)),
        });
        if found.left_out > 0 {
            d.events.push(Note {
                warning: true,
                reason: "ChangelogsLeftOut",
                message: format!(
                    "{} changelogs of the image were left out: over {} KiB each, {} KiB in all, or not named after a version",
                    found.left_out,
                    MAX_FILE_BYTES >> 10,
                    MAX_TOTAL_BYTES >> 10
                ),
            });
        }
    }

    /// `SourceVerified` set to the verdict (left out without one: the channel is not
    /// verified).
    fn source_verified(&self, mut d: Decision, verdict: Option<(Truth, &str, String)>) -> Decision {
        let now = self.timestamp();
        if let Some(status) = d.status.as_mut() {
            match verdict {
                Some((truth, why, message)) => status::set(
                    &mut status.conditions,
                    SOURCE_VERIFIED,
                    truth,
                    why,
                    crate::text::head(&message, 1024),
                    self.generation,
                    &now,
                ),
                None => status::clear(&mut status.conditions, SOURCE_VERIFIED),
            }
        }
        d
    }
}
