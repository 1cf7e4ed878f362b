//! The report: each scenario's typed result, the goals and figures made of them, and the
//! tables printed and written to docs/benchmarks.md (in the format the earlier Python
//! script printed, so that figures of both read alike). Pure, unit-tested in
//! tests/bench_operator.rs.

use std::fmt::Write as _;

use crate::results::{Big, FirstSync, Many, Oci, OciScale, Requests};
use crate::value::{Value, map};

pub use crate::value::MIB;

/// A goal: its name, what was measured, the target as text, and whether it was met.
pub struct Goal {
    pub name: &'static str,
    pub measured: Value,
    pub target: String,
    pub met: bool,
}

/// A goal's bound, written once as the target shows it: the check parses the same text.
#[derive(Clone, Copy)]
enum Bound {
    AtMost(&'static str),
    Below(&'static str),
    Exactly(&'static str),
}

impl Bound {
    fn holds(self, x: f64) -> bool {
        let number = |b: &str| b.parse::<f64>().unwrap_or(f64::NAN);
        match self {
            Bound::AtMost(b) => x <= number(b),
            Bound::Below(b) => x < number(b),
            Bound::Exactly(b) => x == number(b),
        }
    }

    fn text(self) -> String {
        match self {
            Bound::AtMost(b) => format!("<= {b}"),
            Bound::Below(b) => format!("< {b}"),
            Bound::Exactly(b) => b.to_string(),
        }
    }
}

/// A goal met when `measured` is within `bound`.
fn goal(name: &'static str, measured: impl Into<Value>, bound: Bound) -> Goal {
    let measured = measured.into();
    let met = measured.number().is_some_and(|x| bound.holds(x));
    Goal {
        name,
        measured,
        target: bound.text(),
        met,
    }
}

impl Goal {
    /// Says after the bound what it stands for.
    fn noting(mut self, note: &str) -> Self {
        self.target.push_str(note);
        self
    }
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
            Bound::AtMost("1.0"),
        ),
        goal(
            "big channel: version write requests per version, first sync (dry runs included, no admission)",
            big.first_writes.per(big.versions),
            Bound::AtMost("1.05"),
        ),
        goal(
            "big channel: operator peak RSS, first sync and resync (MiB)",
            big.rss as f64 / MIB,
            Bound::Below("48"),
        ),
        goal(
            "unchanged resync: version write requests",
            big.resync_writes,
            Bound::Exactly("0"),
        ),
        goal(
            "unchanged resync: time / first sync's time",
            ratio(big.resync, big.first),
            Bound::Below("0.10"),
        ),
        goal(
            "many channels: operator peak RSS (MiB)",
            many.rss as f64 / MIB,
            Bound::Below("64"),
        ),
        goal(
            "many channels: LISTs of managedosversions",
            many.lists,
            Bound::AtMost("3"),
        )
        .noting(" (the watch's own)"),
        goal(
            "operator's requests per channel sync, first sync (besides version writes and the pod's own)",
            requests.own_first,
            Bound::AtMost("5"),
        ),
        goal(
            "operator's requests per channel sync, on-demand resync",
            requests.own_resync,
            Bound::AtMost("5"),
        ),
    ];
    if let Some(u) = &big.unpaced {
        goals.extend([
            goal(
                "big channel, --write-qps 0: sync time / 16 kubectl writers' create time",
                u.seconds / big.kubectl16,
                Bound::AtMost("0.9"),
            ),
            goal(
                "big channel, --write-qps 0: operator peak RSS (MiB)",
                u.rss as f64 / MIB,
                Bound::Below("48"),
            ),
        ]);
    }
    if let Some(a) = &big.admitted {
        goals.push(
            goal(
                "under an admission policy: version write requests per version, first sync",
                a.writes.per(a.versions),
                Bound::AtMost("2.05"),
            )
            .noting(" (a dry run and the write)"),
        );
    }
    if let Some(oci) = oci {
        let (c, o) = (&oci.custom, &oci.oci);
        let last_pull = o.registry.last().copied().unwrap_or(0);
        let quiet = o.resync_pods as f64 + o.resync_writes;
        goals.extend([
            goal(
                "oci vs custom: oci first sync time / custom's",
                ratio(o.first, c.first),
                Bound::AtMost("0.2"),
            ),
            goal(
                "oci unchanged resync: registry requests",
                last_pull,
                Bound::Exactly("1"),
            ),
            goal(
                "oci unchanged resync: pods created, version writes",
                quiet,
                Bound::Exactly("0"),
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
            "big channel: 16 kubectl writers' create time / sequential create time".into(),
            ratio(big.kubectl16, big.kubectl).into(),
        ),
        (
            "big channel: first sync / 16 kubectl writers (default pacing)".into(),
            ratio(big.first, big.kubectl16).into(),
        ),
        (
            "big channel: version write requests, first sync (all / dry runs)".into(),
            format!("{} / {}", big.first_writes.requests, big.first_writes.dry_runs).into(),
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
            "big channel: operator peak RSS at the end of the first sync, before the resync (MiB)"
                .into(),
            (big.first_rss as f64 / MIB).into(),
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
    for (label, run) in [
        ("big channel, --write-qps 0", &big.unpaced),
        ("under an admission policy", &big.admitted),
        ("baseline build, --write-qps 0", &big.baseline),
    ] {
        if let Some(r) = run {
            rows.extend(first_sync_rows(label, r, big.kubectl, big.kubectl16));
        }
    }
    if let (Some(u), Some(b)) = (&big.unpaced, &big.baseline) {
        rows.push((
            "--write-qps 0: first sync time now / baseline build's".into(),
            ratio(u.seconds, b.seconds).into(),
        ));
        rows.push((
            "--write-qps 0: peak RSS now / baseline build's".into(),
            ratio(u.rss as f64, b.rss as f64).into(),
        ));
    }
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

/// The figures of one first sync beside the same run's kubectl baselines.
fn first_sync_rows(
    label: &str,
    r: &FirstSync,
    kubectl: f64,
    kubectl16: f64,
) -> Vec<(String, Value)> {
    vec![
        (
            format!(
                "{label}: data in the log -> Synchronized (s), {} versions",
                r.versions
            ),
            r.seconds.into(),
        ),
        (
            format!("{label}: / sequential kubectl, / 16 kubectl writers"),
            format!(
                "{:.3} / {:.3}",
                ratio(r.seconds, kubectl),
                ratio(r.seconds, kubectl16)
            )
            .into(),
        ),
        (
            format!("{label}: version write requests per version (all / dry runs)"),
            format!(
                "{:.3} ({} / {})",
                r.writes.per(r.versions),
                r.writes.requests,
                r.writes.dry_runs
            )
            .into(),
        ),
        (
            format!("{label}: operator CPU seconds, peak RSS (MiB)"),
            format!("{:.2}, {:.1}", r.cpu, r.rss as f64 / MIB).into(),
        ),
        (format!("{label}: Ready message"), r.message.as_str().into()),
    ]
}

/// Flux's published figures for 1,000 OCIRepositories (1 CPU): ready in 85 s at 67 MiB.
pub const FLUX_SECONDS: &str = "85";
pub const FLUX_MIB: &str = "67";

/// The oci-scale rows' goals: Flux's published figures for the one-version row (the same
/// shape), and one version write request per version for every row.
pub fn oci_scale_goals(runs: &[OciScale]) -> Vec<Goal> {
    let mut goals = Vec::new();
    for r in runs {
        if r.per_channel == 1 {
            goals.extend([
                goal(
                    "oci scale (1 version each): first create -> all Synchronized (s)",
                    r.after_first,
                    Bound::Below(FLUX_SECONDS),
                )
                .noting(" (Flux's, 1,000 OCIRepositories)"),
                goal(
                    "oci scale (1 version each): operator peak RSS (MiB)",
                    r.rss as f64 / MIB,
                    Bound::Below(FLUX_MIB),
                )
                .noting(" (Flux's)"),
            ]);
        }
        goals.push(goal(
            if r.per_channel == 1 {
                "oci scale (1 version each): version write requests per version"
            } else {
                "oci scale (10 versions each): version write requests per version"
            },
            r.writes.per(r.versions),
            Bound::AtMost("1.05"),
        ));
    }
    goals
}

pub fn oci_scale_rows(runs: &[OciScale]) -> Vec<(String, Value)> {
    let mut rows = Vec::new();
    for r in runs {
        let label = format!("oci scale {} x {}", r.channels, r.per_channel);
        rows.extend([
            (
                format!("{label}: pushing the artifacts (s, left out)"),
                r.push_seconds.into(),
            ),
            (
                format!("{label}: first -> last create (s)"),
                r.create_seconds.into(),
            ),
            (
                format!("{label}: last create -> all Synchronized (s)"),
                r.after_last.into(),
            ),
            (
                format!("{label}: first create -> all Synchronized (s)"),
                r.after_first.into(),
            ),
            (
                format!("{label}: operator peak RSS (MiB), CPU seconds"),
                format!("{:.1}, {:.2}", r.rss as f64 / MIB, r.cpu).into(),
            ),
            (
                format!("{label}: version write requests (all / dry runs), per version"),
                format!(
                    "{} / {}, {:.3}",
                    r.writes.requests,
                    r.writes.dry_runs,
                    r.writes.per(r.versions)
                )
                .into(),
            ),
            (
                format!("{label}: registry requests per channel"),
                ratio(r.registry_requests as f64, r.channels as f64).into(),
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
        let _ = writeln!(
            out,
            "| {} | {} | {} | {met} |",
            g.name, g.measured, g.target
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Writes;

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
    fn every_bound_is_a_number_its_check_can_read() {
        for b in [
            Bound::AtMost("1.05"),
            Bound::Below(FLUX_SECONDS),
            Bound::Exactly("0"),
        ] {
            let text = b.text();
            let n: f64 = text.trim_start_matches(['<', '=', ' ']).parse().unwrap();
            assert!(b.holds(n) != matches!(b, Bound::Below(_)), "{text}");
        }
        let g = goals(
            &big(1.0, 1.0, 1.0),
            &Many::default(),
            &Requests::default(),
            None,
        );
        for g in g {
            let bound = g.target.trim_start_matches(['<', '=', ' ']);
            let number = bound.split(' ').next().unwrap();
            assert!(number.parse::<f64>().is_ok(), "{}: {}", g.name, g.target);
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
        assert_eq!(g.len(), 9);
        assert_eq!(g[0].measured.to_string(), "1.410");
        assert!(!g[0].met, "1.41x sequential kubectl misses <= 1.0");
        let g = goals(&big(14.0, 18.3, 9.7), &many, &r, None);
        assert!(g.iter().all(|g| g.met), "0.77x, and nothing else measured");
        let heavy = Many {
            rss: 64 * 1024 * 1024,
            lists: 4.0,
            ..many
        };
        let g = goals(&big(14.0, 18.3, 9.7), &heavy, &r, None);
        assert!(!g[5].met && !g[6].met);
    }

    #[test]
    fn the_write_path_is_measured_by_requests_and_memory() {
        let mut b = big(14.0, 18.3, 9.7);
        b.first_writes = Writes {
            requests: 10_000,
            dry_runs: 5_000,
        };
        b.rss = 64 * 1024 * 1024;
        let unpaced = FirstSync {
            versions: 5000,
            seconds: 8.0,
            rss: 47 * 1024 * 1024,
            writes: Writes {
                requests: 5000,
                dry_runs: 0,
            },
            ..FirstSync::default()
        };
        b.unpaced = Some(unpaced.clone());
        b.admitted = Some(FirstSync {
            versions: 1000,
            writes: Writes {
                requests: 2000,
                dry_runs: 1000,
            },
            ..unpaced.clone()
        });
        let g = goals(&b, &Many::default(), &Requests::default(), None);
        let by_name = |n: &str| g.iter().find(|g| g.name.starts_with(n)).unwrap();
        let requests = by_name("big channel: version write requests per version");
        assert_eq!(requests.measured.to_string(), "2.000");
        assert!(!requests.met, "a dry run of every version misses <= 1.05");
        assert!(!by_name("big channel: operator peak RSS").met, "64 MiB");
        let free = by_name("big channel, --write-qps 0: sync time");
        assert_eq!(free.measured.to_string(), "0.825");
        assert!(free.met);
        assert!(by_name("big channel, --write-qps 0: operator peak RSS").met);
        assert!(by_name("under an admission policy").met, "2 per version");
        b.unpaced.as_mut().unwrap().seconds = 9.0;
        let g = goals(&b, &Many::default(), &Requests::default(), None);
        assert!(
            !g.iter()
                .find(|g| g.name.contains("qps 0: sync"))
                .unwrap()
                .met
        );
        let rows = rows(&b, &Many::default(), &Requests::default(), None, None);
        let row = |n: &str| rows.iter().find(|(k, _)| k == n).unwrap().1.to_string();
        assert_eq!(
            row("under an admission policy: version write requests per version (all / dry runs)"),
            "2.000 (2000 / 1000)"
        );
        assert_eq!(
            row("big channel, --write-qps 0: / sequential kubectl, / 16 kubectl writers"),
            "0.492 / 0.928"
        );
    }

    #[test]
    fn oci_scale_goals_are_flux_s_figures_and_one_request_per_version() {
        let row = OciScale {
            channels: 1000,
            per_channel: 1,
            after_first: 24.1,
            after_last: 5.6,
            versions: 1000,
            rss: 34 * 1024 * 1024,
            writes: Writes {
                requests: 1000,
                dry_runs: 0,
            },
            registry_requests: 3000,
            ..OciScale::default()
        };
        let ten = OciScale {
            per_channel: 10,
            versions: 10_000,
            writes: Writes {
                requests: 20_000,
                dry_runs: 10_000,
            },
            ..row.clone()
        };
        let g = oci_scale_goals(&[row.clone(), ten]);
        let met: Vec<bool> = g.iter().map(|g| g.met).collect();
        assert_eq!(met, [true, true, true, false]);
        let slow = OciScale {
            after_first: 85.0,
            rss: 67 * 1024 * 1024,
            ..row.clone()
        };
        assert!(oci_scale_goals(&[slow]).iter().take(2).all(|g| !g.met));
        let rows = oci_scale_rows(&[row]);
        assert!(rows.iter().any(|(k, v)| {
            k == "oci scale 1000 x 1: registry requests per channel" && v.to_string() == "3.000"
        }));
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
        let names: Vec<_> = g[9..]
            .iter()
            .map(|g| (g.measured.to_string(), g.met))
            .collect();
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
        assert!(!g[10].met && !g[11].met);
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
        assert_eq!(lines[11], "");
        assert_eq!(lines[12], "| figure | value |");
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
        let head = docs_head(
            "2 cores, 23 GiB",
            "v1.37.2",
            "2026-12-03 12:00 UTC",
            "cmd",
            "|t|",
        );
        let new = replace_docs_head(page, &head);
        assert!(new.starts_with("# Operator benchmarks\n\nWritten by `scripts/bench-operator`"));
        assert!(new.contains("- command: `cmd`\n\n|t|\n\nscripts/bench-operator [--versions N]"));
        assert!(new.ends_with("\n\n## By hand\n\nkept\n"));
        assert!(!new.contains("old figures"));
    }
}
