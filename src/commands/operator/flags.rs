//! The `operator` subcommand's flags, and the checks they get before anything starts.
//! `egress_flags`: the egress flags, each under its new and its old name.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::duration;
use crate::egress::{self, Cidr};

mod egress_flags;
use egress_flags::EgressFlags;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    /// The operator's own image, run as the `display` container of every syncer pod.
    #[arg(long, env = "OPERATOR_IMAGE")]
    pub operator_image: String,
    /// Watch only this namespace (repeatable; default: all namespaces).
    #[arg(long = "namespace", env = "SYNC_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// How long one syncer pod may take, unless the channel sets options.timeout.
    #[arg(long, env = "SYNC_TIMEOUT", default_value = "5m", value_parser = duration::parse)]
    pub sync_timeout: Duration,
    /// The most channel data accepted from one sync (bytes; K, Ki, M, Mi, G, Gi suffixes).
    #[arg(long, env = "MAX_OUTPUT_BYTES", default_value = "16Mi", value_parser = parse_bytes)]
    pub max_output_bytes: u64,
    /// At most this many syncs (syncer pods and json fetches) run at once; the rest queue.
    #[arg(long, env = "MAX_CONCURRENT_SYNCS", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_syncs: u16,
    /// The most bytes of json channel bodies kept for conditional requests (304 answers),
    /// all channels together; the least recently used go first.
    #[arg(long, env = "JSON_CACHE_BYTES", default_value = "16Mi", value_parser = parse_bytes)]
    pub json_cache_bytes: u64,
    /// The most versions one channel may list; more fails the sync.
    #[arg(long, env = "MAX_VERSIONS_PER_CHANNEL", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_versions_per_channel: u32,
    /// The most bytes of version objects one sync may write (created and updated
    /// versions, serialised); a larger plan fails the sync with nothing written.
    #[arg(long, env = "MAX_SYNC_WRITE_BYTES", default_value = "32Mi", value_parser = parse_bytes)]
    pub max_sync_write_bytes: u64,
    /// When a sync dry-runs its version writes before the first real one: `auto` where a
    /// webhook, admission policy or ResourceQuota could refuse them (or where the operator
    /// cannot watch those), `always` in every namespace.
    #[arg(long, env = "DRY_RUN_VERSIONS", default_value = "auto", value_parser = ["auto", "always"])]
    pub dry_run_versions: String,
    /// A Secret added to every syncer pod's imagePullSecrets, so that the display
    /// container can pull a private operator image (repeatable; it must exist in each
    /// channel's namespace).
    #[arg(
        long = "syncer-image-pull-secret",
        env = "SYNCER_IMAGE_PULL_SECRETS",
        value_delimiter = ','
    )]
    pub syncer_image_pull_secrets: Vec<String>,
    /// The longest options.timeout a channel may ask; more is InvalidConfiguration
    /// (1s to 8760h; at least --sync-timeout).
    #[arg(long, env = "MAX_SYNC_TIMEOUT", default_value = "1h", value_parser = duration::parse)]
    pub max_sync_timeout: Duration,
    /// The shortest syncInterval a channel may ask; less is InvalidConfiguration (1s to
    /// 8760h).
    #[arg(long, env = "MIN_SYNC_INTERVAL", default_value = "1m", value_parser = duration::parse)]
    pub min_sync_interval: Duration,
    /// On-demand requests of one channel start at most one sync per this long after its
    /// last one; a request inside the window is served when it ends (0s to 8760h).
    #[arg(long, env = "MIN_REQUEST_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    pub min_request_interval: Duration,
    /// Version writes per second of one namespace while other namespaces have writes
    /// waiting (dry runs included; 0: only the equal share of --write-qps), so that one
    /// namespace's large sync cannot throttle another's; a namespace alone may use all of
    /// --write-qps.
    #[arg(long, env = "NAMESPACE_WRITE_QPS", default_value_t = crate::pace::DEFAULT_NAMESPACE_QPS)]
    pub namespace_write_qps: u32,
    /// Version writes one namespace may make at once before --namespace-write-qps applies.
    #[arg(long, env = "NAMESPACE_WRITE_BURST", default_value_t = crate::pace::DEFAULT_BURST, value_parser = clap::value_parser!(u32).range(1..))]
    pub namespace_write_burst: u32,
    /// Version writes per second of all namespaces together, and of one namespace alone
    /// (0: no cap); while several namespaces have writes waiting, each gets an equal share
    /// when that is less than --namespace-write-qps.
    #[arg(long, env = "WRITE_QPS", default_value_t = crate::pace::DEFAULT_TOTAL_QPS)]
    pub write_qps: u32,
    /// At most this many channels get per-channel metric series; the others are counted
    /// together (rancheros_operator_channels_unlisted).
    #[arg(long, env = "MAX_CHANNEL_SERIES", default_value_t = crate::metrics::DEFAULT_MAX_CHANNEL_SERIES)]
    pub max_channel_series: usize,
    /// Accept runner securityContexts that grant more than a restricted container
    /// (privileged, allowPrivilegeEscalation, added capabilities, runAsUser 0, ...).
    #[arg(long, env = "ALLOW_PRIVILEGED_RUNNERS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_privileged_runners: bool,
    /// Accept oci channels that set `insecure: true` (their registry is reached over plain
    /// HTTP, credentials included).
    #[arg(long, env = "ALLOW_INSECURE_REGISTRIES", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_insecure_registries: bool,
    /// The most bytes an oci channel's sync reads from image layers (decompressed, all
    /// layers together) to find its file (K, Ki, M, Mi, G, Gi suffixes).
    #[arg(long, env = "MAX_LAYER_BYTES", default_value = "512Mi", value_parser = parse_bytes)]
    pub max_layer_bytes: u64,
    /// First retry delay after a failed sync; it doubles on each failure.
    #[arg(long, env = "RETRY_DELAY", default_value = "10s", value_parser = duration::parse)]
    pub retry_delay: Duration,
    /// How often a sync that waits for a slot looks again, should the wake-up when its turn
    /// comes be missed (a look costs no API request).
    #[arg(long, env = "QUEUE_POLL", default_value = "30s", value_parser = duration::parse)]
    pub queue_poll: Duration,
    /// Each channel's sync interval is stretched by its own share (fixed per channel) of at
    /// most this much, so that channels created together drift apart (`10%`, `0`..`100%`).
    #[arg(long, env = "INTERVAL_JITTER", default_value = "10%", value_parser = parse_percent)]
    pub interval_jitter: u8,
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,
    /// Serve /metrics to every caller. Without it, /metrics answers only callers whose
    /// bearer token the cluster authenticates (TokenReview) and allows `get` on the
    /// non-resource URL /metrics (SubjectAccessReview); /healthz and /readyz stay open.
    #[arg(long, env = "METRICS_INSECURE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub metrics_insecure: bool,
    /// Where to serve the registry webhook (`POST /hook/registry`): a push of an image
    /// tag requests a sync of the custom and oci channels whose image names it. Off unless
    /// given; needs --webhook-token-file.
    #[arg(long, env = "WEBHOOK_ADDRESS", requires = "webhook_token_file")]
    pub webhook_address: Option<SocketAddr>,
    /// Where to serve the channel server (read-only HTTP): the channels with
    /// `spec.serve: true`, as channel data at /v1/channels/NS/NAME and their newest image
    /// tag at /v1/channels/NS/NAME/latest. Off unless given.
    #[arg(long, env = "CHANNEL_SERVER_ADDRESS")]
    pub channel_server_address: Option<SocketAddr>,
    /// The most memory the channel server's data may hold, all served channels together
    /// (one namespace at most half of it); a channel whose data does not fit is answered
    /// 503 until it does.
    #[arg(long, env = "CHANNEL_SERVER_MAX_BYTES", default_value = "32Mi", value_parser = parse_bytes)]
    pub channel_server_max_bytes: u64,
    /// File holding the bearer token the webhook's callers must send (read on every
    /// request, so a rotated Secret needs no restart).
    #[arg(long, env = "WEBHOOK_TOKEN_FILE", value_name = "PATH")]
    pub webhook_token_file: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Act only while holding the leader Lease, so that several replicas can run.
    #[arg(long, env = "LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Namespace of the leader Lease (default: in a cluster the pod's namespace, outside
    /// one the kubeconfig context's, `default` when it names none).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_LEASE",
        default_value = "rancheros-operator"
    )]
    pub leader_election_lease: String,
    /// Serve only the channels this label selector matches (and their pods and versions),
    /// so that several operator Deployments can share a cluster's channels, one shard
    /// each; the leader Lease is then one of this selector's own.
    #[arg(long, env = "WATCH_LABEL_SELECTOR", value_name = "SELECTOR")]
    pub watch_label_selector: Option<String>,
    // The egress policy's flags, each also under its old name (in `egress_flags`).
    #[command(flatten)]
    egress: EgressFlags,
    /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

impl OperatorArgs {
    /// The label selector of this operator's shard; `None` (or empty): every channel.
    pub fn shard(&self) -> Option<&str> {
        self.watch_label_selector
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }

    /// The networks channels may not connect to.
    pub fn deny_cidrs(&self) -> Vec<Cidr> {
        self.egress.deny_cidrs()
    }

    /// The exceptions to [`Self::deny_cidrs`].
    pub fn allow_cidrs(&self) -> Vec<Cidr> {
        self.egress.allow_cidrs()
    }

    /// The egress policy of json and oci channels these flags set.
    pub fn egress_policy(&self) -> egress::Policy {
        self.egress.policy()
    }

    /// The leader Lease's name: `--leader-election-lease`, and for a shard a suffix derived
    /// from its selector, so that each shard elects its own leader.
    pub fn lease_name(&self) -> String {
        shard_lease(&self.leader_election_lease, self.shard())
    }

    /// What the flags cannot mean together or alone, said as a usage error: the bounds a
    /// channel's durations are checked against, and the operator's own timeouts, lie
    /// between 1s and a year (see `config::MAX_DURATION`).
    pub fn check(&self) -> Result<(), String> {
        let limits = crate::config::Limits {
            max_sync_timeout: self.max_sync_timeout,
            min_sync_interval: self.min_sync_interval,
            allow_privileged_runners: self.allow_privileged_runners,
            allow_insecure_registries: self.allow_insecure_registries,
        };
        if let Some(problem) = limits.problem() {
            return Err(problem);
        }
        if self.sync_timeout < crate::config::MIN_TIMEOUT
            || self.sync_timeout > self.max_sync_timeout
        {
            return Err(format!(
                "--sync-timeout {} must lie between 1s and --max-sync-timeout ({})",
                duration::format(self.sync_timeout),
                duration::format(self.max_sync_timeout)
            ));
        }
        for (flag, value) in [
            ("--retry-delay", self.retry_delay),
            ("--queue-poll", self.queue_poll),
        ] {
            if value > crate::config::MAX_DURATION {
                return Err(format!(
                    "{flag} {} must be at most {}",
                    duration::format(value),
                    crate::config::MAX_DURATION_TEXT
                ));
            }
        }
        Ok(())
    }
}

/// Parses a byte size: `16777216`, `16Mi`, `500K`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size; use bytes or a value like 16Mi"))?;
    let factor: u64 = match unit {
        "" => 1,
        "K" => 1000,
        "Ki" => 1 << 10,
        "M" => 1_000_000,
        "Mi" => 1 << 20,
        "G" => 1_000_000_000,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "{text:?} has an unknown unit {other:?}; use K, Ki, M, Mi, G or Gi"
            ));
        }
    };
    n.checked_mul(factor)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{text:?} is out of range"))
}

/// `base`, or for a shard `base-shard-XXXXXXXX` (FNV-1a of the selector, stable across
/// builds and replicas), within a Lease name's 253 characters.
pub fn shard_lease(base: &str, selector: Option<&str>) -> String {
    let Some(selector) = selector else {
        return base.to_string();
    };
    let hash = selector.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let base = base.get(..230).unwrap_or(base);
    format!("{base}-shard-{hash:08x}")
}

/// Parses a percentage from 0 to 100: `10%` or `10`.
pub fn parse_percent(text: &str) -> Result<u8, String> {
    let t = text.trim();
    t.strip_suffix('%')
        .unwrap_or(t)
        .trim()
        .parse::<u8>()
        .ok()
        .filter(|p| *p <= 100)
        .ok_or_else(|| format!("{text:?} is not a percentage from 0% to 100%"))
}

/// Names given on the command line (namespaces, secrets): trimmed, empty entries and
/// repeats dropped (`"a, b,,a"` is `a` and `b`). Empty for namespaces: all namespaces.
pub fn distinct_names(given: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for ns in given.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if !out.iter().any(|o| o == ns) {
            out.push(ns.to_string());
        }
    }
    out
}
