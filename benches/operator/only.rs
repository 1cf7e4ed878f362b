//! The reports of `--only scale` and `--only rss`, which print their own lines (no goals
//! table, no docs). Pure, unit-tested in tests/bench_operator.rs.

use std::fmt::Write as _;

use crate::value::{MIB, map};

/// `--only scale`'s result.
#[derive(Clone, Debug, Default)]
pub struct Scale {
    pub channels: i64,
    pub per_channel: i64,
    pub namespaces: i64,
    pub versions: i64,
    pub seconds: f64,
    pub cpu: f64,
    pub writes: Vec<(String, f64)>,
    pub lists: f64,
    pub peak: u64,
    pub settled: u64,
    pub restart: Vec<(String, Restart)>,
}

/// A fresh operator over the scale scenario's versions.
#[derive(Clone, Debug, Default)]
pub struct Restart {
    pub settled: u64,
    pub seconds: f64,
    pub peak: u64,
    pub lists: f64,
    pub writes: f64,
}

/// The chart's default memory limit when the scale goal was set (charts/*/values.yaml then).
pub const SCALE_LIMIT: u64 = 320 * 1024 * 1024;

/// `seconds` taken for `versions`, and the rate: `12.5 (80 versions/s)`.
fn seconds_and_rate(seconds: f64, versions: i64) -> String {
    format!("{seconds:.1} ({:.0} versions/s)", versions as f64 / seconds)
}

pub fn scale_lines(r: &Scale) -> String {
    let mib = |b: u64| b as f64 / MIB;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| channels x versions (namespaces) | {} x {} ({}) |",
        r.channels, r.per_channel, r.namespaces
    );
    let _ = writeln!(out, "| versions synced | {} |", r.versions);
    let _ = writeln!(
        out,
        "| created -> all Synchronized (s) | {} |",
        seconds_and_rate(r.seconds, r.versions)
    );
    let _ = writeln!(out, "| operator CPU seconds | {:.1} |", r.cpu);
    let _ = writeln!(out, "| version writes by verb | {} |", map(&r.writes));
    let _ = writeln!(out, "| LISTs of managedosversions | {:.0} |", r.lists);
    let _ = writeln!(
        out,
        "| peak RSS / settled RSS (MiB) | {:.1} / {:.1} |",
        mib(r.peak),
        mib(r.settled)
    );
    let _ = writeln!(
        out,
        "| peak RSS / chart's default limit (320Mi) | {:.2} |",
        r.peak as f64 / SCALE_LIMIT as f64
    );
    for (label, x) in &r.restart {
        let _ = writeln!(
            out,
            "| {label}: fresh operator over them: settled (s), peak / settled RSS (MiB) | {:.1}, {:.1} / {:.1} |",
            x.seconds,
            mib(x.peak),
            mib(x.settled)
        );
        let _ = writeln!(
            out,
            "| {label}: fresh operator: LISTs of managedosversions (pages), version writes | {:.0}, {:.0} |",
            x.lists, x.writes
        );
    }
    out
}

/// Every version synced and the peak RSS (of the sync and of a fresh operator) within the limit.
pub fn scale_met(r: &Scale) -> bool {
    let restart_peak = r
        .restart
        .iter()
        .find(|(l, _)| l == "now")
        .map_or(0, |(_, x)| x.peak);
    r.versions == r.channels * r.per_channel && r.peak.max(restart_peak) <= SCALE_LIMIT
}

/// `--only rss`: settled RSS with none / with N of something, per binary.
#[derive(Clone, Debug, Default)]
pub struct RssVersions {
    pub versions: i64,
    pub create_seconds: f64,
    /// label -> (settled RSS with none, with the versions, bytes per version)
    pub per_binary: Vec<(String, (u64, u64, f64))>,
    /// label -> (start -> cache filled (s), peak RSS, LISTs of versions)
    pub fill: Vec<(String, (f64, u64, f64))>,
}

pub fn rss_channel_lines(n: i64, none: u64, some: u64) -> String {
    let per = (some as f64 - none as f64) / n as f64;
    format!(
        "| now: settled RSS with no channel / with {n} suspended channels (MiB) | {:.1} / {:.1} |\n\
         | now: RSS per channel (KiB) | {:.2} |\n",
        none as f64 / MIB,
        some as f64 / MIB,
        per / 1024.0
    )
}

pub fn rss_version_lines(r: &RssVersions) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| versions in scope | {} |", r.versions);
    let _ = writeln!(
        out,
        "| 16 kubectl writers: create -f of them (s) | {} |",
        seconds_and_rate(r.create_seconds, r.versions)
    );
    for (label, (none, some, per)) in &r.per_binary {
        let _ = writeln!(
            out,
            "| {label}: settled RSS with none / with {} (MiB) | {:.1} / {:.1} |",
            r.versions,
            *none as f64 / MIB,
            *some as f64 / MIB
        );
        let _ = writeln!(
            out,
            "| {label}: RSS per cached version (KiB) | {:.2} |",
            per / 1024.0
        );
    }
    for (label, (filled, peak, lists)) in &r.fill {
        let _ = writeln!(
            out,
            "| {label}: start -> version cache filled (s), peak RSS (MiB), LISTs of versions \
             (API server, all clients) | {filled:.1}, {:.1}, {lists:.0} |",
            *peak as f64 / MIB
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_report_and_goal() {
        let mut r = Scale {
            channels: 1000,
            per_channel: 100,
            namespaces: 10,
            versions: 100_000,
            seconds: 1159.0,
            writes: vec![("POST".into(), 200_000.0), ("PATCH".into(), 0.0)],
            peak: 95 * 1024 * 1024,
            restart: vec![(
                "now".into(),
                Restart {
                    peak: 62 * 1024 * 1024,
                    ..Restart::default()
                },
            )],
            ..Scale::default()
        };
        let text = scale_lines(&r);
        assert!(text.contains("| created -> all Synchronized (s) | 1159.0 (86 versions/s) |"));
        assert!(text.contains("| version writes by verb | {'POST': 200000.0, 'PATCH': 0.0} |"));
        assert!(text.contains("| peak RSS / chart's default limit (320Mi) | 0.30 |"));
        assert!(scale_met(&r));
        r.restart[0].1.peak = SCALE_LIMIT + 1;
        assert!(!scale_met(&r));
        r.restart[0].1.peak = 0;
        r.versions -= 1;
        assert!(!scale_met(&r));
    }

    #[test]
    fn rss_report() {
        let text = rss_channel_lines(300, 34 * 1024 * 1024, 51 * 1024 * 1024);
        assert!(
            text.contains("| now: RSS per channel (KiB) | 58.03 |"),
            "{text}"
        );
        let r = RssVersions {
            versions: 6000,
            create_seconds: 218.1,
            per_binary: vec![("now".into(), (1, 2, 1013.76))],
            fill: vec![],
        };
        assert!(rss_version_lines(&r).contains("| now: RSS per cached version (KiB) | 0.99 |"));
    }
}
