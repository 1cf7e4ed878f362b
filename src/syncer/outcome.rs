//! How a sync ends: its data applied (versions written), or a failure counted and backed off.

use super::*;

impl Decider<'_> {
    /// The on-demand request this attempt serves: the one recorded when its pod started
    /// (a request made while the pod ran asks for one more sync), or the current one.
    pub(super) fn served_request(&self, pod: Option<&Pod>) -> Option<String> {
        if pod.is_some() {
            self.status.sync_requested_at.clone()
        } else {
            self.requested_at()
                .or(self.status.sync_requested_at.clone())
        }
    }

    /// Whether the last sync of this spec succeeded and nothing has failed since.
    pub(super) fn was_healthy(&self) -> bool {
        self.status.failed_synchronization_attempts == 0
            && self.ready_condition().is_some_and(|r| {
                r.reason == reason::SYNCHRONIZED && r.observed_generation == Some(self.generation)
            })
    }

    /// Parses the channel data and, when valid, writes the versions.
    pub(super) fn apply_data(
        &self,
        data: &[u8],
        config: &ChannelConfig,
        pod: Option<&Pod>,
        revision: Option<String>,
        redact: Redact,
    ) -> Decision {
        let existing = self.obs.versions.unwrap_or_default();
        let interval = self.resolved.sync_interval();
        let limit = self.settings.max_versions_per_channel;
        let parsed = match channel::parse_at_most(data, limit) {
            Ok(parsed) => parsed,
            Err(e) => {
                let message = match redact {
                    Redact::Nothing => e.to_string(),
                    Redact::Values => e.without_values(),
                };
                return self.failure(SyncFailure::InvalidData(message), pod);
            }
        };
        let items = &parsed.versions;
        if parsed.listed > limit {
            return self.failure(
                SyncFailure::TooManyVersions {
                    count: parsed.listed,
                    limit,
                },
                pod,
            );
        }
        // `spec.versions`: what of the listing is published (the rest held back).
        let exists: std::collections::HashSet<String> = existing
            .iter()
            .filter(|v| versions::controlled_by(&v.metadata, self.ch))
            .map(|v| v.name_any())
            .collect();
        let first_seen = self
            .status
            .first_seen
            .iter()
            .map(|(k, t)| (k.clone(), t.0))
            .collect();
        let mut policy =
            crate::policy::apply(&config.policy, items, &exists, &first_seen, self.obs.now);
        // The policy copied what it publishes: the parsed listing is not needed any more, and
        // what is published becomes the planned versions (moved, not copied), so that a large
        // channel is held once, not three times, at the sync's peak.
        let duplicates = parsed.duplicates;
        drop(parsed.versions);
        // A served channel's versions as the channel server renders them, before the listing
        // moves into the plan (only then is what is published held twice).
        let served = (self.ch.spec.serve == Some(true)).then(|| {
            policy
                .published
                .iter()
                .map(|item| versions::desired(self.ch, config, item))
                .collect()
        });
        let listing = std::mem::take(&mut policy.published);
        let published = listing.len();
        let held: std::collections::HashSet<String> = policy.held.keys().cloned().collect();
        let plan = match versions::plan_from(
            self.ch,
            Some((config, listing)),
            &held,
            existing,
            config.delete_no_longer_in_sync,
        ) {
            Ok(plan) => plan,
            Err(conflict) => {
                return self.failure(SyncFailure::Conflict(conflict), pod);
            }
        };
        let bytes = budget::write_bytes(&plan.effects);
        if bytes > self.settings.max_sync_write_bytes {
            let limit = self.settings.max_sync_write_bytes;
            return self.failure(SyncFailure::TooManyBytes { bytes, limit }, pod);
        }
        let mut summary = format!("synchronized {published} versions ({})", plan.summary());
        if let Some(held) = policy.summary() {
            summary.push_str(&format!("; {held}"));
        }
        let mut events = Vec::new();
        if !duplicates.is_empty() {
            let names = text::list(&duplicates, ", ");
            summary.push_str(&format!(
                "; duplicate names in the channel data, the last entry of each was used: {names}"
            ));
            events.push(Note {
                warning: true,
                reason: "DuplicateVersions",
                message: format!(
                    "the channel data lists these names more than once; the last entry of each was used: {names}"
                ),
            });
        }
        // A sync that changed nothing is in the status already; an Event is for news.
        if !plan.effects.is_empty() || !self.was_healthy() {
            events.push(Note {
                warning: false,
                reason: reason::SYNCHRONIZED,
                message: summary.clone(),
            });
        }
        let mut effects = plan.effects;
        effects.extend(pod.map(Self::delete_pod));
        let mut status = self.status_with(
            Some((Truth::True, reason::SYNCHRONIZED, summary)),
            None,
            None,
        );
        status.last_synced_time = Some(self.timestamp());
        status.last_sync_attempt_time = Some(self.timestamp());
        status.synced_generation = Some(self.generation);
        status.synced_versions = i64::try_from(published).ok();
        status.latest_version = policy.latest.clone();
        status.held_back = policy.counts();
        status.first_seen = policy
            .first_seen
            .iter()
            .map(|(k, t)| (k.clone(), Time(*t)))
            .collect();
        // A version `minAge` holds is published by the sync after it comes of age.
        let interval = policy
            .ripens_in
            .map_or(interval, |r| interval.min(r.max(Duration::from_secs(1))));
        status.failed_synchronization_attempts = 0;
        status.sync_requested_at = self.served_request(pod);
        status.source_revision = revision;
        status.next_sync_time = self.at(interval);
        Decision {
            effects,
            status: Some(status),
            events,
            requeue: Some(interval),
            outcome: Some(Outcome::Synchronized),
            verified: plan.verified,
            published: served,
            ..Default::default()
        }
    }

    /// A failed sync: nothing is written to versions; the pod, if any, goes.
    pub(super) fn failure(&self, failure: SyncFailure, pod: Option<&Pod>) -> Decision {
        let attempts = self
            .status
            .failed_synchronization_attempts
            .saturating_add(1);
        let next = self.resolved.retry_wait(attempts);
        let (retry, stalled) = if attempts >= MAX_QUICK_RETRIES {
            let retry = format!(
                "{attempts} failures in a row; next try in {} (the sync interval)",
                duration::format(next)
            );
            (retry.clone(), Some(retry))
        } else {
            let retry = format!("attempt {attempts}; retrying in {}", duration::format(next));
            (retry, None)
        };
        let reason = failure.reason();
        let message = failure.to_string();
        let ready = (Truth::False, reason, format!("{message} ({retry})"));
        let stalled = stalled.map(|why| (reason, format!("{message} ({why})")));
        let retrying = stalled.is_none().then(|| retry.clone());
        let mut status = self.status_with(Some(ready), None, stalled);
        if let Some(retry) = retrying {
            // Still progressing (kstatus: InProgress), as Flux's controllers say it.
            status::set(
                &mut status.conditions,
                RECONCILING,
                Truth::True,
                reason::PROGRESSING_WITH_RETRY,
                format!("{reason}: {message} ({retry})"),
                self.generation,
                &self.timestamp(),
            );
        }
        status.failed_synchronization_attempts = attempts;
        status.last_sync_attempt_time = Some(self.timestamp());
        status.sync_requested_at = self.served_request(pod);
        status.next_sync_time = self.at(next);
        Decision {
            effects: pod.map(Self::delete_pod).into_iter().collect(),
            status: Some(status),
            events: vec![Note {
                warning: true,
                reason,
                message,
            }],
            requeue: Some(next),
            outcome: Some(Outcome::Failed(failure)),
            ..Default::default()
        }
    }
}
