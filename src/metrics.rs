//! Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints.

use std::sync::atomic::AtomicBool;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use prometheus_client::metrics::info::Info;

use crate::api::ChannelKey as Key;
use crate::api::ManagedOSVersionChannelStatus;
use crate::failure::{ErrorClass, SyncFailure};
use crate::syncer::Outcome;

pub mod auth;
pub mod review;
mod server;
mod verdicts;
pub use server::{Access, serve};
pub mod pacing;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// A channel's series: its namespace and name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabels {
    pub namespace: String,
    pub name: String,
}

impl From<&Key> for ChannelLabels {
    fn from(key: &Key) -> Self {
        ChannelLabels {
            namespace: key.namespace.clone().unwrap_or_default(),
            name: key.name.clone(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// `--max-channel-series` when not given.
pub const DEFAULT_MAX_CHANNEL_SERIES: usize = 1000;

/// Which channels have series of their own, and the Ready of the others.
#[derive(Debug, Default)]
struct Series {
    max: usize,
    listed: std::collections::HashSet<ChannelLabels>,
    unlisted: std::collections::HashMap<ChannelLabels, bool>,
}

/// Per-channel gauges; a deleted channel's series are removed.
#[derive(Default)]
pub struct ChannelGauges {
    pub ready: Family<ChannelLabels, Gauge>,
    pub versions: Family<ChannelLabels, Gauge>,
    pub last_success: Family<ChannelLabels, Gauge>,
    pub consecutive_failures: Family<ChannelLabels, Gauge>,
    pub sync_interval: Family<ChannelLabels, Gauge>,
    pub suspended: Family<ChannelLabels, Gauge>,
}

pub struct Metrics {
    registry: Registry,
    pub reconciliations: Counter,
    pub reconcile_errors: Family<ClassLabel, Counter>,
    pub reconcile_duration: Histogram,
    pub syncs: Family<ResultLabel, Counter>,
    pub sync_failures: Family<KindLabel, Counter>,
    pub writes: Family<WriteLabel, Counter>,
    /// Bytes of the version writes sent (bodies; dry runs included).
    pub write_bytes: Counter,
    pub pacing: pacing::PacingMetrics,
    /// Objects left out of a watch cache because they cannot be decoded, by kind.
    pub undecodable: Family<KindLabel, Counter>,
    pub leader: Gauge,
    pub queue: Gauge,
    pub channels: ChannelGauges,
    pub webhook_requests: Family<ResultLabel, Counter>,
    pub webhook_syncs: Counter,
    /// Channels with series of their own: at most `max_channel_series`, the first seen;
    /// the others are counted in `unlisted` (and `unlisted_not_ready`).
    series: std::sync::Mutex<Series>,
    pub unlisted: Gauge,
    pub unlisted_not_ready: Gauge,
    /// Set while the replica waits for leadership, and once a leader's watch caches hold
    /// their first lists (unset while they fill): `/readyz` answers 200.
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("rancheros_operator");
        let metrics = Metrics {
            registry: Registry::default(),
            reconciliations: Counter::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            syncs: Family::default(),
            sync_failures: Family::default(),
            writes: Family::default(),
            write_bytes: Counter::default(),
            pacing: Default::default(),
            undecodable: Family::default(),
            leader: Gauge::default(),
            queue: Gauge::default(),
            channels: ChannelGauges::default(),
            webhook_requests: Family::default(),
            webhook_syncs: Counter::default(),
            series: std::sync::Mutex::new(Series {
                max: DEFAULT_MAX_CHANNEL_SERIES,
                ..Default::default()
            }),
            unlisted: Gauge::default(),
            unlisted_not_ready: Gauge::default(),
            ready: AtomicBool::new(false),
        };
        registry.register(
            "webhook_requests",
            "Requests to the registry webhook, by result (accepted, unauthorized, bad_request, too_large, unavailable)",
            metrics.webhook_requests.clone(),
        );
        registry.register(
            "webhook_sync_requests",
            "Sync requests (channel annotations) written because a registry push moved a channel's image",
            metrics.webhook_syncs.clone(),
        );
        registry.register(
            "reconciliations",
            "Reconciliations of channels",
            metrics.reconciliations.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed sync attempts and reconciliations, by class of error (retryable, refused, input)",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconciliation took",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "syncs",
            "Finished channel syncs by result (synchronized, failed)",
            metrics.syncs.clone(),
        );
        registry.register(
            "sync_failures",
            "Failed channel syncs by kind of failure",
            metrics.sync_failures.clone(),
        );
        registry.register(
            "writes",
            "Writes to the API server by operation",
            metrics.writes.clone(),
        );
        registry.register(
            "write_bytes",
            "Bytes of the version writes sent to the API server (request bodies, dry runs included)",
            metrics.write_bytes.clone(),
        );
        metrics.pacing.register(&mut registry);
        registry.register(
            "undecodable_objects",
            "Objects a watch returned that cannot be decoded (left out of the cache and logged), by kind",
            metrics.undecodable.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            metrics.leader.clone(),
        );
        registry.register(
            "sync_queue_length",
            "Channels waiting for a free sync slot (--max-concurrent-syncs)",
            metrics.queue.clone(),
        );
        let c = &metrics.channels;
        registry.register(
            "channel_ready",
            "1 when the channel's Ready condition is True",
            c.ready.clone(),
        );
        registry.register(
            "channel_versions",
            "Versions the channel's last successful sync listed",
            c.versions.clone(),
        );
        registry.register(
            "channel_last_success_timestamp_seconds",
            "When the channel's last successful sync finished (unix seconds)",
            c.last_success.clone(),
        );
        registry.register(
            "channel_consecutive_failures",
            "Failed syncs of the channel since its last success",
            c.consecutive_failures.clone(),
        );
        registry.register(
            "channel_sync_interval_seconds",
            "The channel's sync interval",
            c.sync_interval.clone(),
        );
        // Alerts on stale channels leave out the ones that do not sync on purpose.
        registry.register(
            "channel_suspended",
            "1 while the channel does not sync on purpose: spec.suspend is true (reason Suspended) or enabled is false (reason ChannelDisabled)",
            c.suspended.clone(),
        );
        registry.register(
            "channels_unlisted",
            "Channels past --max-channel-series: counted here, without series of their own",
            metrics.unlisted.clone(),
        );
        registry.register(
            "channels_unlisted_not_ready",
            "Of the channels past --max-channel-series, those whose Ready is not True",
            metrics.unlisted_not_ready.clone(),
        );
        registry.register(
            "build",
            "The operator's version",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        Metrics {
            registry,
            ..metrics
        }
    }
}

impl Metrics {
    pub fn sync_finished(&self, outcome: &Outcome) {
        let result = match outcome {
            Outcome::Synchronized => "synchronized",
            Outcome::Failed(_) => "failed",
        };
        self.syncs.get_or_create(&ResultLabel { result }).inc();
    }

    /// A failed sync: counted by its class and by its kind.
    pub fn sync_failed(&self, failure: &SyncFailure) {
        self.reconcile_error(failure.class());
        self.sync_failures
            .get_or_create(&KindLabel {
                kind: failure.kind(),
            })
            .inc();
    }

    pub fn reconcile_error(&self, class: ErrorClass) {
        self.reconcile_errors
            .get_or_create(&ClassLabel {
                class: class.label(),
            })
            .inc();
    }

    /// An object of `kind` a watch could not decode.
    pub fn undecodable(&self, kind: &'static str) {
        self.undecodable.get_or_create(&KindLabel { kind }).inc();
    }

    /// One write request: `create_pod`, `delete_pod`, `apply_configmap`, `apply_version`,
    /// `mark_version`, `delete_version`, `status`.
    pub fn wrote(&self, operation: &'static str) {
        self.writes.get_or_create(&WriteLabel { operation }).inc();
    }

    pub fn wrote_bytes(&self, bytes: usize) {
        self.write_bytes
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    pub fn webhook_request(&self, result: &'static str) {
        self.webhook_requests
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn webhook_syncs_requested(&self, channels: usize) {
        self.webhook_syncs
            .inc_by(u64::try_from(channels).unwrap_or(u64::MAX));
    }

    pub fn status_written(&self) {
        self.wrote("status");
    }

    pub fn queue_length(&self, waiting: usize) {
        self.queue.set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    /// At most this many channels get series of their own (`--max-channel-series`).
    pub fn set_max_channel_series(&self, max: usize) {
        if let Ok(mut series) = self.series.lock() {
            series.max = max;
        }
    }

    /// Whether the channel has series of its own; if not, it is counted with the others.
    fn listed(&self, labels: &ChannelLabels, ready: bool) -> bool {
        let Ok(mut s) = self.series.lock() else {
            return false;
        };
        if s.listed.contains(labels) {
            return true;
        }
        if s.listed.len() < s.max && !s.unlisted.contains_key(labels) {
            s.listed.insert(labels.clone());
            return true;
        }
        s.unlisted.insert(labels.clone(), ready);
        self.count_unlisted(&s);
        false
    }

    fn count_unlisted(&self, s: &Series) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.unlisted.set(count(s.unlisted.len()));
        self.unlisted_not_ready
            .set(count(s.unlisted.values().filter(|r| !**r).count()));
    }

    /// Sets a channel's gauges from its status.
    pub fn observe_channel(
        &self,
        key: &Key,
        status: &ManagedOSVersionChannelStatus,
        interval: std::time::Duration,
    ) {
        let labels = ChannelLabels::from(key);
        let c = &self.channels;
        let ready = status
            .condition(crate::api::READY)
            .is_some_and(|r| r.status == "True");
        if !self.listed(&labels, ready) {
            return;
        }
        c.ready.get_or_create(&labels).set(i64::from(ready));
        let paused = status.condition(crate::api::READY).is_some_and(|r| {
            r.reason == crate::api::reason::SUSPENDED
                || r.reason == crate::api::reason::CHANNEL_DISABLED
        });
        c.suspended.get_or_create(&labels).set(i64::from(paused));
        c.versions
            .get_or_create(&labels)
            .set(status.synced_versions.unwrap_or_default());
        if let Some(t) = &status.last_synced_time {
            c.last_success.get_or_create(&labels).set(t.0.as_second());
        }
        c.consecutive_failures
            .get_or_create(&labels)
            .set(status.failed_synchronization_attempts);
        c.sync_interval
            .get_or_create(&labels)
            .set(i64::try_from(interval.as_secs()).unwrap_or(i64::MAX));
    }

    /// A channel was deleted: its series go.
    pub fn forget_channel(&self, key: &Key) {
        let labels = ChannelLabels::from(key);
        if let Ok(mut s) = self.series.lock() {
            s.listed.remove(&labels);
            if s.unlisted.remove(&labels).is_some() {
                self.count_unlisted(&s);
            }
        }
        let c = &self.channels;
        for family in [
            &c.ready,
            &c.versions,
            &c.last_success,
            &c.consecutive_failures,
            &c.sync_interval,
            &c.suspended,
        ] {
            family.remove(&labels);
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an error would only shorten the page.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests;
