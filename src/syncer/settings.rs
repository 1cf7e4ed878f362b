//! Operator-wide settings the decisions depend on (the operator's flags).

use std::time::Duration;

use crate::api::ManagedOSVersionChannel;
use crate::config::{self, ChannelConfig, CustomOptions};

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

    /// The configuration of a channel's spec under these settings (see `config::resolve`).
    pub fn resolve(
        &self,
        spec: &crate::api::ManagedOSVersionChannelSpec,
    ) -> Result<ChannelConfig, String> {
        config::resolve(spec, &self.limits())
    }

    /// The configuration of a channel under these settings, its interval with the
    /// channel's share of the jitter.
    pub fn resolve_channel(&self, ch: &ManagedOSVersionChannel) -> Result<ChannelConfig, String> {
        let mut config = self.resolve(&ch.spec)?;
        let stretched = super::timing::jittered(
            config.sync_interval,
            self.interval_jitter_percent,
            ch.metadata.uid.as_deref().unwrap_or_default(),
        );
        // Never past a year (every time the operator computes is at most a year away).
        config.sync_interval = stretched
            .min(config::MAX_DURATION)
            .max(config.sync_interval);
        Ok(config)
    }

    /// A channel's sync interval (jittered), or the default one when its spec is invalid.
    pub fn sync_interval(&self, ch: &ManagedOSVersionChannel) -> Duration {
        self.resolve_channel(ch).map_or_else(
            |_| self.limits().default_sync_interval(),
            |c| c.sync_interval,
        )
    }

    /// How long one sync of these options may take: the channel's `options.timeout`, else
    /// `--sync-timeout`; never more than a year, whatever the settings.
    pub fn sync_timeout_of(&self, options: &CustomOptions) -> Duration {
        options
            .timeout
            .unwrap_or(self.sync_timeout)
            .min(config::MAX_DURATION)
    }
}
