//! The report: each scenario's typed result, the goals and figures made of them, and the
//! tables printed and written to docs/benchmarks.md (in the format the earlier Python
//! script printed, so that figures of both read alike). Pure, unit-tested in
//! tests/bench_operator.rs.

use std::fmt::Write as _;

pub const MIB: f64 = 1024.0 * 1024.0;

/// A figure's value, printed as the earlier script printed it: a float with 3 decimals, a
/// count as an integer, a breakdown as `{'kind': n, ...}`.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
    Text(String),
    /// Counts by kind; floats are API server counters, integers log lines.
    Map(Vec<(String, Value)>),
    List(Vec<i64>),
}

impl Value {
    fn inner(&self) -> String {
        match self {
            // As Python's repr: 2.0, 151.0, 0.5.
            Value::Float(v) => format!("{v:?}"),
            Value::Text(s) => format!("'{s}'"),
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v:.3}"),
            Value::Text(s) => f.write_str(s),
            Value::Map(entries) => {
                let items: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("'{k}': {}", v.inner()))
                    .collect();
                write!(f, "{{{}}}", items.join(", "))
            }
            Value::List(items) => {
                let items: Vec<String> = items.iter().map(i64::to_string).collect();
                write!(f, "[{}]", items.join(", "))
            }
        }
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

/// A goal: its name, what was measured, the target as text, and whether it was met.
pub struct Goal {
    pub name: &'static str,
    pub measured: Value,
    pub target: &'static str,
    pub met: bool,
}

fn goal(name: &'static str, measured: impl Into<Value>, target: &'static str, met: bool) -> Goal {
    Goal {
        name,
        measured: measured.into(),
        target,
        met,
    }
}

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
    pub resync: f64,
    pub resync_writes: f64,
    pub resync_message: String,
    pub rss: u64,
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
            resync: 0.0,
            resync_writes: 0.0,
            resync_message: String::new(),
            rss: 0,
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

fn map<V: Clone + Into<Value>>(entries: &[(String, V)]) -> Value {
    Value::Map(
        entries
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect(),
    )
}

/// `a / b`, with b kept off zero as the earlier script did (a skipped scenario's zeros).
fn ratio(a: f64, b: f64) -> f64 {
    a / b.max(1e-9)
}

pub fn goals(big: &Big, many: &Many, requests: &Requests, oci: Option<&Oci>) -> Vec<Goal> {
    let mut goals = vec![
        goal(
            "big channel: sync time / kubectl create time",
            big.first / big.kubectl,
            "<= 1.0",
            big.first / big.kubectl <= 1.0,
        ),
        goal(
            "big channel: sync time / 16 kubectl writers' create time",
            big.first / big.kubectl16,
            "<= 1.5",
            big.first / big.kubectl16 <= 1.5,
        ),
        goal(
            "unchanged resync: version write requests",
            big.resync_writes,
            "0",
            big.resync_writes == 0.0,
        ),
        goal(
            "unchanged resync: time / first sync's time",
            ratio(big.resync, big.first),
            "< 0.10",
            big.resync <= 0.10 * big.first,
        ),
        goal(
            "many channels: operator peak RSS (MiB)",
            many.rss as f64 / MIB,
            "< 64",
            (many.rss as f64) < 64.0 * MIB,
        ),
        goal(
            "many channels: LISTs of managedosversions",
            many.lists,
            "<= 3 (the watch's own)",
            many.lists <= 3.0,
        ),
        goal(
            "operator's requests per channel sync, first sync (besides version writes and the pod's own)",
            requests.own_first,
            "<= 5",
            requests.own_first <= 5.0,
        ),
        goal(
            "operator's requests per channel sync, on-demand resync",
            requests.own_resync,
            "<= 5",
            requests.own_resync <= 5.0,
        ),
    ];
    if let Some(oci) = oci {
        let (c, o) = (&oci.custom, &oci.oci);
        let last_pull = o.registry.last().copied().unwrap_or(0);
        let quiet = o.resync_pods as f64 + o.resync_writes;
        goals.extend([
            goal(
                "oci vs custom: oci first sync time / custom's",
                ratio(o.first, c.first),
                "<= 0.2",
                o.first <= 0.2 * c.first,
            ),
            goal(
                "oci unchanged resync: registry requests",
                last_pull,
                "1",
                last_pull == 1,
            ),
            goal(
                "oci unchanged resync: pods created, version writes",
                quiet,
                "0",
                quiet == 0.0,
            ),
        ]);
    }
    goals
}

pub fn rows(
    big: &Big,
    many: &Many,
    requests: &Requests,
    baseline: Option<&Requests>,
    oci: Option<&Oci>,
) -> Vec<(String, Value)> {
    let mut rows: Vec<(String, Value)> = vec![
        ("big channel: versions".into(), big.versions.into()),
        (
            "big channel: data in the log -> Synchronized (s)".into(),
            big.first.into(),
        ),
        (
            "big channel: kubectl create -f of the same objects (s)".into(),
            big.kubectl.into(),
        ),
        (
            "big channel: 16 kubectl writers, create -f of the same objects (s)".into(),
            big.kubectl16.into(),
        ),
        (
            "big channel: operator CPU seconds during the first sync".into(),
            big.first_cpu.into(),
        ),
        ("big channel: Ready message".into(), big.message.as_str().into()),
        (
            "unchanged resync: data in the log -> Synchronized (s)".into(),
            big.resync.into(),
        ),
        (
            "unchanged resync: Ready message".into(),
            big.resync_message.as_str().into(),
        ),
        (
            "big channel: operator peak RSS (MiB)".into(),
            (big.rss as f64 / MIB).into(),
        ),
        (
            "many channels: channels x versions".into(),
            format!("{} x {}", many.channels, many.per_channel).into(),
        ),
        (
            "many channels: created -> all Synchronized (s)".into(),
            many.seconds.into(),
        ),
        (
            "many channels: LIST bytes of managedosversions".into(),
            many.list_bytes.into(),
        ),
        (
            "idle: operator CPU seconds per minute".into(),
            many.idle_cpu.into(),
        ),
        (
            "idle: API requests per minute (channels, versions)".into(),
            many.idle_requests.into(),
        ),
        (
            "operator's requests, first sync: by kind (all 20 channels, from its log)".into(),
            map(&requests.own_first_detail),
        ),
        (
            "operator's requests, resync: by kind (all 20 channels, from its log)".into(),
            map(&requests.own_resync_detail),
        ),
        (
            "all clients' requests per channel sync, first sync (API server counters; kubelet and scheduler included)".into(),
            requests.first.into(),
        ),
        (
            "all clients' requests per channel sync, resync (API server counters)".into(),
            requests.resync.into(),
        ),
        (
            "all clients, first sync: by kind".into(),
            map(&requests.first_detail),
        ),
        (
            "all clients, resync: by kind".into(),
            map(&requests.resync_detail),
        ),
    ];
    if let Some(b) = baseline {
        rows.extend([
            (
                "baseline build: operator's requests per channel sync, first sync".into(),
                b.own_first.into(),
            ),
            (
                "baseline build: operator's requests per channel sync, resync".into(),
                b.own_resync.into(),
            ),
            (
                "baseline build: operator's first sync by kind".into(),
                map(&b.own_first_detail),
            ),
            (
                "baseline build: operator's resync by kind".into(),
                map(&b.own_resync_detail),
            ),
            (
                "baseline build: all clients' requests per channel sync, first sync / resync"
                    .into(),
                format!("{:.2} / {:.2}", b.first, b.resync).into(),
            ),
            (
                "ratio now / baseline (operator's own), first sync".into(),
                ratio(requests.own_first, b.own_first).into(),
            ),
            (
                "ratio now / baseline (operator's own), resync".into(),
                ratio(requests.own_resync, b.own_resync).into(),
            ),
        ]);
    }
    if let Some(oci) = oci {
        for (name, r) in [("custom", &oci.custom), ("oci", &oci.oci)] {
            rows.extend([
                (
                    format!(
                        "{name} ({} Elemental versions): apply -> Synchronized (s)",
                        oci.versions
                    ),
                    r.first.into(),
                ),
                (
                    format!("{name}: operator's API requests, first sync (besides version writes and the pod's own)"),
                    r.first_requests.into(),
                ),
                (
                    format!("{name}: pods created, first sync / unchanged resync"),
                    format!("{} / {}", r.first_pods, r.resync_pods).into(),
                ),
                (
                    format!("{name}: unchanged resync, annotate -> Synchronized (s)"),
                    r.resync.into(),
                ),
                (
                    format!("{name}: unchanged resync, operator's API requests / version writes"),
                    format!("{} / {:?}", r.resync_requests, r.resync_writes).into(),
                ),
                (
                    format!("{name}: Ready message after the resync"),
                    r.message.as_str().into(),
                ),
            ]);
        }
        rows.extend([
            (
                "oci: registry requests per pull (first sync, resync)".into(),
                Value::List(oci.oci.registry.clone()),
            ),
            (
                "oci vs custom: operator peak RSS (MiB)".into(),
                (oci.rss as f64 / MIB).into(),
            ),
        ]);
    }
    rows
}

/// The goals' table, a blank line, the figures' table.
pub fn table(goals: &[Goal], rows: &[(String, Value)]) -> String {
    let mut out = String::from("| goal | measured | target | met |\n|---|---|---|---|\n");
    for g in goals {
        let met = if g.met { "yes" } else { "NO" };
        let _ = writeln!(out, "| {} | {} | {} | {met} |", g.name, g.measured, g.target);
    }
    out.push_str("\n| figure | value |\n|---|---|\n");
    for (name, v) in rows {
        let _ = writeln!(out, "| {name} | {v} |");
    }
    out.pop();
    out
}

/// The scenarios as docs/benchmarks.md describes them under the first table (the earlier
/// script's own description, kept word for word).
pub const SCENARIOS: &str = include_str!("scenarios.md");

/// The head of docs/benchmarks.md for a full run: what measured it, where, and the tables.
pub fn docs_head(machine: &str, k8s: &str, date: &str, command: &str, table: &str) -> String {
    format!(
        "# Operator benchmarks\n\n\
         Written by `scripts/bench-operator` (the command that measured these numbers; run it \
         again to refresh this page). Each ratio compares two figures measured side by side in \
         the same run.\n\n\
         - machine: {machine}, Kubernetes {k8s} (the local cluster of `scripts/cluster`), \
         operator release build as a local process\n\
         - date: {date}\n\
         - command: `{command}`\n\n\
         {table}\n\n{}\n",
        SCENARIOS.trim()
    )
}

/// docs/benchmarks.md with its head (everything before the first `## ` section) replaced:
/// the sections written by hand below it stay.
pub fn replace_docs_head(page: &str, head: &str) -> String {
    match page.find("\n## ") {
        Some(i) => format!("{head}{}", &page[i..]),
        None => head.to_string(),
    }
}

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
        "| created -> all Synchronized (s) | {:.1} ({:.0} versions/s) |",
        r.seconds,
        r.versions as f64 / r.seconds
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
        "| 16 kubectl writers: create -f of them (s) | {:.1} ({:.0} versions/s) |",
        r.create_seconds,
        r.versions as f64 / r.create_seconds
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

/// A calendar date and time (UTC) from seconds since the epoch: `(y, m, d, H, M, S)`.
pub fn civil(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days_from_civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s) = ((rem / 3600) as u32, (rem / 60 % 60) as u32, (rem % 60) as u32);
    (y, m, d, h, mi, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_as_the_earlier_script_printed_them() {
        assert_eq!(Value::Float(0.6969).to_string(), "0.697");
        assert_eq!(Value::Float(0.0).to_string(), "0.000");
        assert_eq!(Value::Int(5000).to_string(), "5000");
        let own = map(&[("events//POST".to_string(), 20i64)]);
        assert_eq!(own.to_string(), "{'events//POST': 20}");
        let all = map(&[
            ("pods//LIST".to_string(), 2.0f64),
            ("pods//GET".to_string(), 151.0),
            ("x".to_string(), 0.5),
        ]);
        assert_eq!(
            all.to_string(),
            "{'pods//LIST': 2.0, 'pods//GET': 151.0, 'x': 0.5}"
        );
        assert_eq!(Value::List(vec![3, 1]).to_string(), "[3, 1]");
        assert_eq!(Value::List(vec![]).to_string(), "[]");
    }

    fn big(first: f64, kubectl: f64, kubectl16: f64) -> Big {
        Big {
            versions: 5000,
            first,
            kubectl,
            kubectl16,
            resync: 0.2,
            message: "synchronized 5000 versions (5000 created)".into(),
            resync_message: "synchronized 5000 versions (no changes)".into(),
            ..Big::skipped()
        }
    }

    #[test]
    fn goals_are_ratios_of_figures_of_the_same_run() {
        let many = Many {
            rss: 57 * 1024 * 1024,
            lists: 2.0,
            ..Many::default()
        };
        let r = Requests {
            own_first: 3.5,
            own_resync: 2.5,
            ..Requests::default()
        };
        let g = goals(&big(25.8, 18.3, 9.7), &many, &r, None);
        assert_eq!(g.len(), 8);
        assert_eq!(g[0].measured.to_string(), "1.410");
        assert!(!g[0].met, "1.41x sequential kubectl misses <= 1.0");
        assert_eq!(g[1].measured.to_string(), "2.660");
        assert!(!g[1].met);
        let g = goals(&big(14.0, 18.3, 9.7), &many, &r, None);
        assert!(g[0].met && g[1].met, "0.77x and 1.44x");
        assert!(g[2].met && g[3].met && g[4].met && g[5].met && g[6].met && g[7].met);
        let heavy = Many {
            rss: 64 * 1024 * 1024,
            lists: 4.0,
            ..many
        };
        let g = goals(&big(14.0, 18.3, 9.7), &heavy, &r, None);
        assert!(!g[4].met && !g[5].met);
    }

    #[test]
    fn oci_goals() {
        let mut oci = Oci {
            versions: 50,
            ..Oci::default()
        };
        oci.custom.first = 2.5;
        oci.oci.first = 0.45;
        oci.oci.registry = vec![3, 1];
        let skipped = Big::skipped();
        let g = goals(&skipped, &Many::default(), &Requests::default(), Some(&oci));
        let names: Vec<_> = g[8..].iter().map(|g| (g.measured.to_string(), g.met)).collect();
        assert_eq!(
            names,
            [
                ("0.180".to_string(), true),
                ("1".to_string(), true),
                ("0.000".to_string(), true)
            ]
        );
        oci.oci.resync_pods = 1;
        oci.oci.registry = vec![3, 3];
        let g = goals(&skipped, &Many::default(), &Requests::default(), Some(&oci));
        assert!(!g[9].met && !g[10].met);
    }

    #[test]
    fn the_tables() {
        let g = goals(
            &big(20.488, 29.401, 10.0),
            &Many::default(),
            &Requests::default(),
            None,
        );
        let r = rows(
            &big(20.488, 29.401, 10.0),
            &Many {
                channels: 200,
                per_channel: 50,
                ..Many::default()
            },
            &Requests::default(),
            None,
            None,
        );
        let t = table(&g, &r);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| goal | measured | target | met |");
        assert_eq!(
            lines[2],
            "| big channel: sync time / kubectl create time | 0.697 | <= 1.0 | yes |"
        );
        assert_eq!(lines[10], "");
        assert_eq!(lines[11], "| figure | value |");
        assert!(lines.contains(&"| big channel: versions | 5000 |"));
        assert!(lines.contains(&"| many channels: channels x versions | 200 x 50 |"));
        assert!(lines.contains(
            &"| big channel: Ready message | synchronized 5000 versions (5000 created) |"
        ));
        assert!(!t.ends_with('\n'));
    }

    #[test]
    fn the_docs_head_keeps_the_sections_written_by_hand() {
        let page = "# Operator benchmarks\n\nold figures\n\n## By hand\n\nkept\n";
        let head = docs_head("2 cores, 23 GiB", "v1.37.2", "2026-12-03 12:00 UTC", "cmd", "|t|");
        let new = replace_docs_head(page, &head);
        assert!(new.starts_with("# Operator benchmarks\n\nWritten by `scripts/bench-operator`"));
        assert!(new.contains("- command: `cmd`\n\n|t|\n\nscripts/bench-operator [--versions N]"));
        assert!(new.ends_with("\n\n## By hand\n\nkept\n"));
        assert!(!new.contains("old figures"));
    }

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
        assert!(text.contains("| now: RSS per channel (KiB) | 58.03 |"), "{text}");
        let r = RssVersions {
            versions: 6000,
            create_seconds: 218.1,
            per_binary: vec![("now".into(), (1, 2, 1013.76))],
            fill: vec![],
        };
        assert!(rss_version_lines(&r).contains("| now: RSS per cached version (KiB) | 0.99 |"));
    }

    #[test]
    fn dates() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        // 2026-12-03 12:09:55 UTC
        assert_eq!(civil(1_796_299_795), (2026, 12, 3, 12, 9, 55));
        assert_eq!(civil(951_782_400), (2000, 2, 29, 0, 0, 0));
    }
}
