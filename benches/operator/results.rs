//! Each scenario's typed result, as the report reads it.

use crate::audit::Writes;

/// 1 and 2: the big channel, its first sync and an unchanged resync.
#[derive(Clone, Debug)]
pub struct Big {
    pub versions: i64,
    /// Data in the display log -> Synchronized (s).
    pub first: f64,
    pub first_cpu: f64,
    /// Sequential `kubectl create -f` of the same objects (s).
    pub kubectl: f64,
    /// 16 kubectl writers' `create -f` of the same objects (s).
    pub kubectl16: f64,
    pub message: String,
    /// Version write requests of the first sync (the audit log, its namespace).
    pub first_writes: Writes,
    pub resync: f64,
    /// Version write requests of the unchanged resync (the audit log, its namespace).
    pub resync_writes: f64,
    pub resync_message: String,
    /// Peak RSS at the end of the first sync, and at the end (after the resync).
    pub first_rss: u64,
    pub rss: u64,
    /// The same first sync by another operator with `--write-qps 0` (no pacing).
    pub unpaced: Option<FirstSync>,
    /// A first sync in a namespace where an admission policy may refuse versions.
    pub admitted: Option<FirstSync>,
    /// The unpaced first sync by the `--baseline-binary` build, in the same run.
    pub baseline: Option<FirstSync>,
}

/// One first sync of a custom channel, by an operator of its own.
#[derive(Clone, Debug, Default)]
pub struct FirstSync {
    pub versions: i64,
    /// Data in the display log -> Synchronized (s).
    pub seconds: f64,
    pub cpu: f64,
    /// The operator's peak RSS (from its start: this sync and what came before it).
    pub rss: u64,
    pub writes: Writes,
    pub message: String,
}

impl Big {
    /// What the report shows when the scenario did not run (`--only` another).
    pub fn skipped() -> Self {
        Self {
            versions: 0,
            first: 0.0,
            first_cpu: 0.0,
            kubectl: 1.0,
            kubectl16: 1.0,
            message: String::new(),
            first_writes: Writes::default(),
            resync: 0.0,
            resync_writes: 0.0,
            resync_message: String::new(),
            first_rss: 0,
            rss: 0,
            unpaced: None,
            admitted: None,
            baseline: None,
        }
    }
}

/// 3 and 4: many channels, then idle.
#[derive(Clone, Debug, Default)]
pub struct Many {
    pub channels: i64,
    pub per_channel: i64,
    pub seconds: f64,
    pub rss: u64,
    pub lists: f64,
    pub list_bytes: f64,
    pub idle_cpu: f64,
    pub idle_requests: f64,
}

/// 5: API requests per channel sync.
#[derive(Clone, Debug, Default)]
pub struct Requests {
    /// The operator's own, from its log, per channel sync.
    pub own_first: f64,
    pub own_resync: f64,
    pub own_first_detail: Vec<(String, i64)>,
    pub own_resync_detail: Vec<(String, i64)>,
    /// All clients', from the API server's counters, per channel sync.
    pub first: f64,
    pub resync: f64,
    pub first_detail: Vec<(String, f64)>,
    pub resync_detail: Vec<(String, f64)>,
}

/// 6: one side (custom or oci) of the same channel.
#[derive(Clone, Debug, Default)]
pub struct OciSide {
    pub first: f64,
    pub resync: f64,
    pub first_requests: i64,
    pub resync_requests: i64,
    pub first_pods: i64,
    pub resync_pods: i64,
    pub resync_writes: f64,
    pub registry: Vec<i64>,
    pub message: String,
}

#[derive(Clone, Debug, Default)]
pub struct Oci {
    pub versions: i64,
    pub custom: OciSide,
    pub oci: OciSide,
    pub rss: u64,
}

/// 9: many oci channels created at once, each its own artifact in the local registry.
#[derive(Clone, Debug, Default)]
pub struct OciScale {
    pub channels: i64,
    pub per_channel: i64,
    /// Pushing the artifacts (left out of every other figure).
    pub push_seconds: f64,
    /// The first create -> the last create answered.
    pub create_seconds: f64,
    /// The last create answered -> every channel Synchronized.
    pub after_last: f64,
    /// The first create -> every channel Synchronized.
    pub after_first: f64,
    pub versions: i64,
    pub rss: u64,
    /// Operator CPU seconds from the first create to every channel Synchronized.
    pub cpu: f64,
    pub writes: Writes,
    /// Registry requests of all pulls (the operator's log).
    pub registry_requests: i64,
}
