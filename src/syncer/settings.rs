//! Operator-wide settings the decisions depend on (the operator's flags).

use std::time::Duration;

use crate::config;

/// Operator-wide settings the decisions depend on.
#[derive(Clone, Debug)]
pub struct Settings {
    pub operator_image: String,
    pub sync_timeout: Duration,
    pub max_output_bytes: u64,
    /// First delay of the exponential backoff after a failed sync.
    pub retry_delay: Duration,
    /// How often a sync waiting for a slot looks again, should its wake-up be missed.
    pub queue_poll: Duration,
    /// At most this many syncs (syncer pods and json fetches) run at once.
    pub max_concurrent_syncs: usize,
    /// The most bytes of json bodies kept for conditional requests, all channels together.
    pub json_cache_bytes: usize,
    /// The most versions one channel may list (`--max-versions-per-channel`).
    pub max_versions_per_channel: usize,
    /// The most bytes of version objects one sync may write (`--max-sync-write-bytes`).
    pub max_sync_write_bytes: usize,
    /// Secrets added to every syncer pod's `imagePullSecrets` (the operator image's).
    pub syncer_image_pull_secrets: Vec<String>,
    /// The longest `options.timeout` a channel may ask (`--max-sync-timeout`).
    pub max_sync_timeout: Duration,
    /// The shortest `syncInterval` a channel may ask (`--min-sync-interval`).
    pub min_sync_interval: Duration,
    /// Runner security contexts that grant more than a restricted container are accepted
    /// (`--allow-privileged-runners`).
    pub allow_privileged_runners: bool,
    /// oci channels may use plain HTTP (`--allow-insecure-registries`).
    pub allow_insecure_registries: bool,
    /// The most a channel's interval is stretched, in percent (`--interval-jitter`); each
    /// channel has its own share of it.
    pub interval_jitter_percent: u8,
    /// A read (a json fetch, a log) that makes no progress this long fails.
    pub read_idle: Duration,
    /// On-demand requests start at most one sync per this long (`--min-request-interval`).
    pub min_request_interval: Duration,
    /// How fast version writes go, per namespace and in all (`--namespace-write-qps`,
    /// `--namespace-write-burst`, `--write-qps`).
    pub write_rates: crate::pace::Rates,
    /// Every sync dry-runs its version writes, whatever could refuse them
    /// (`--dry-run-versions=always`).
    pub dry_run_versions_always: bool,
}

/// The operator's defaults (its flags' defaults), with no operator image.
impl Default for Settings {
    fn default() -> Self {
        let limits = config::Limits::default();
        Settings {
            operator_image: String::new(),
            sync_timeout: Duration::from_secs(300),
            max_output_bytes: 16 << 20,
            retry_delay: Duration::from_secs(10),
            queue_poll: Duration::from_secs(30),
            max_concurrent_syncs: 10,
            json_cache_bytes: 16 << 20,
            max_versions_per_channel: 10_000,
            max_sync_write_bytes: 32 << 20,
            syncer_image_pull_secrets: Vec::new(),
            max_sync_timeout: limits.max_sync_timeout,
            min_sync_interval: limits.min_sync_interval,
            allow_privileged_runners: limits.allow_privileged_runners,
            allow_insecure_registries: limits.allow_insecure_registries,
            // None, so that decisions are exact to the interval; the flag's default is 10.
            interval_jitter_percent: 0,
            read_idle: crate::budget::IDLE,
            min_request_interval: Duration::from_secs(10),
            write_rates: crate::pace::Rates::default(),
            dry_run_versions_always: false,
        }
    }
}

impl Settings {
    /// What these settings allow a channel's spec.
    pub fn limits(&self) -> config::Limits {
        config::Limits {
            max_sync_timeout: self.max_sync_timeout,
            min_sync_interval: self.min_sync_interval,
            allow_privileged_runners: self.allow_privileged_runners,
            allow_insecure_registries: self.allow_insecure_registries,
        }
    }
}
