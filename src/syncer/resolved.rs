//! A channel's spec resolved under the operator's settings: done once per attempt, and what
//! the decision, the pod builder, the fetches and the status all read. The rules that turn
//! a spec and the flags into numbers (the interval and its default, how long a sync may
//! take, the wait after a failure) live here and in `config`, nowhere else.

use std::time::Duration;

use super::{Settings, timing};
use crate::api::ManagedOSVersionChannel;
use crate::config::{self, ChannelConfig, Source};

/// A channel's spec under the operator's settings, for one attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// What the spec configures (its interval with the channel's share of the jitter), or
    /// the one-line reason it cannot be acted on (`InvalidConfiguration`).
    pub config: Result<ChannelConfig, String>,
    sync_interval: Duration,
    sync_timeout: Duration,
    retry_delay: Duration,
}

impl Settings {
    /// The channel's spec under these settings.
    pub fn resolve_channel(&self, ch: &ManagedOSVersionChannel) -> Resolved {
        let config = config::resolve(&ch.spec, &self.limits()).map(|mut config| {
            let stretched = timing::jittered(
                config.sync_interval,
                self.interval_jitter_percent,
                ch.metadata.uid.as_deref().unwrap_or_default(),
            );
            // Never past a year (every time the operator computes is at most a year away).
            config.sync_interval = stretched
                .min(config::MAX_DURATION)
                .max(config.sync_interval);
            config
        });
        let sync_interval = config.as_ref().map_or_else(
            |_| self.limits().default_sync_interval(),
            |c| c.sync_interval,
        );
        let sync_timeout = match config.as_ref().map(|c| &c.source) {
            Ok(Source::Custom(options)) => options.timeout.unwrap_or(self.sync_timeout),
            Ok(Source::Json(options)) => options.timeout,
            Ok(Source::Oci(options)) => options.timeout,
            Err(_) => self.sync_timeout,
        };
        Resolved {
            config,
            sync_interval,
            sync_timeout: sync_timeout.min(config::MAX_DURATION),
            retry_delay: self.retry_delay,
        }
    }
}

impl Resolved {
    /// How often the channel syncs: its interval (jittered), or the default one when its
    /// spec is invalid (a failed attempt backs off within it all the same).
    pub fn sync_interval(&self) -> Duration {
        self.sync_interval
    }

    /// How long one sync may take: the channel's `options.timeout`, else `--sync-timeout`
    /// (custom) or the fetch default (json, oci); never more than a year.
    pub fn sync_timeout(&self) -> Duration {
        self.sync_timeout
    }

    /// The wait after `failures` failed attempts in a row (none: the interval), by the
    /// one backoff policy (`syncer::backoff`).
    pub fn retry_wait(&self, failures: i64) -> Duration {
        timing::backoff(self.retry_delay, failures, self.sync_interval)
    }
}
