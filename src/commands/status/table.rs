//! The `status` table: one row per channel, columns padded like `kubectl get`.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::ManagedOSVersionChannel;
use crate::commands::status::view::ChannelView;
use crate::text;

/// The most of a message a row shows.
const MESSAGE_MAX: usize = 72;
/// The most of a revision that is not a digest (an ETag, a date) a row shows.
const REVISION_MAX: usize = 24;
/// Hex digits of a digest a row shows (as `docker images` does).
const DIGEST_HEX: usize = 12;

/// A column's cell of a channel's view, as of a time.
type Cell = fn(&ChannelView, Timestamp) -> String;

/// Each column: its header and its cell.
const COLUMNS: [(&str, Cell); 9] = [
    ("NAMESPACE", |v, _| v.namespace.clone()),
    ("NAME", |v, _| v.name.clone()),
    ("READY", |v, _| v.ready.clone()),
    ("REASON", |v, _| v.reason.clone().unwrap_or_else(dash)),
    ("VERSIONS", |v, _| {
        v.versions.map_or_else(dash, |n| n.to_string())
    }),
    ("REVISION", |v, _| {
        v.revision.as_deref().map_or_else(dash, short_revision)
    }),
    ("LAST SYNC", |v, now| {
        v.last_sync_time.map_or_else(dash, |t| {
            format!("{} ago", human(since(now, t).unwrap_or_default()))
        })
    }),
    ("NEXT SYNC", next_sync),
    ("MESSAGE", |v, _| {
        v.message
            .as_deref()
            .map_or_else(dash, |m| text::clean(m, MESSAGE_MAX))
    }),
];

/// An empty cell.
fn dash() -> String {
    "-".to_string()
}

fn next_sync(v: &ChannelView, now: Timestamp) -> String {
    if v.syncing {
        return "syncing".to_string();
    }
    v.next_sync_time.map_or_else(dash, |t| match since(now, t) {
        Some(late) if !late.is_zero() => "due".into(),
        _ => format!("in {}", human(until(now, t))),
    })
}

/// The row of one channel, as of `now`.
pub fn row(ch: &ManagedOSVersionChannel, now: Timestamp) -> [String; 9] {
    row_of(&ChannelView::of(ch), now)
}

/// The row of one channel's view, as of `now`.
fn row_of(v: &ChannelView, now: Timestamp) -> [String; 9] {
    COLUMNS.map(|(_, cell)| cell(v, now))
}

/// The table of these channels, sorted by namespace and name, header first.
pub fn render(channels: &[ManagedOSVersionChannel], now: Timestamp) -> String {
    render_views(&crate::commands::status::view::views(channels), now)
}

/// The table of these views, in their order, header first.
pub fn render_views(views: &[ChannelView], now: Timestamp) -> String {
    let rows: Vec<[String; 9]> = views.iter().map(|v| row_of(v, now)).collect();
    let header = COLUMNS.map(|(name, _)| name.to_string());
    let mut widths = [0usize; 9];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (cell, w)) in r.iter().zip(widths).enumerate() {
            line.push_str(cell);
            if i.saturating_add(1) < r.len() {
                let pad = w.saturating_sub(cell.chars().count()).saturating_add(3);
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `sha256:` and the first hex digits of a digest (an image ID such as
/// `registry/image@sha256:...`); other revisions (an ETag, a date) cut to a few characters.
fn short_revision(revision: &str) -> String {
    if let Some(at) = revision.find("sha256:") {
        let hex: String = revision
            .get(at.saturating_add("sha256:".len())..)
            .unwrap_or_default()
            .chars()
            .take(DIGEST_HEX)
            .collect();
        return format!("sha256:{hex}");
    }
    text::clean(revision.trim_matches('"'), REVISION_MAX)
}

/// How long ago `t` was, if it is in the past.
fn since(now: Timestamp, t: Timestamp) -> Option<Duration> {
    Duration::try_from(now.duration_since(t)).ok()
}

fn until(now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(now)).unwrap_or_default()
}

/// A duration as people read it in a table: `42s`, `5m`, `3h20m`, `12d`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 if (s % 3600) / 60 == 0 => format!("{}h", s / 3600),
        3600..86_400 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn channel(ns: &str, name: &str, status: serde_json::Value) -> ManagedOSVersionChannel {
        serde_json::from_value(json!({
            "apiVersion": "rancheros.cattle.io/v1",
            "kind": "ManagedOSVersionChannel",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "custom"},
            "status": status,
        }))
        .unwrap()
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2025-01-01T00:00:00Z"})
    }

    const NOW: i64 = 1_750_000_000;

    fn time(secs: i64) -> String {
        at(secs).to_string()
    }

    #[test]
    fn rows_and_columns() {
        let synced = channel(
            "fleet-default",
            "stable",
            json!({
                "conditions": [cond("Ready", "True", "Synchronized", "synchronized 2 versions (no changes)")],
                "syncedVersions": 2,
                "sourceRevision": "registry.example/channel@sha256:0123456789abcdef0123",
                "lastSyncedTime": time(NOW - 300),
                "nextSyncTime": time(NOW + 3300),
            }),
        );
        let failing = channel(
            "a-team",
            "broken",
            json!({
                "conditions": [
                    cond("Ready", "False", "FailedToSync", "the runner exited with code 1:\nno such file"),
                    cond("Reconciling", "True", "Synchronizing", "syncer pod broken started"),
                ],
                "nextSyncTime": time(NOW - 10),
            }),
        );
        let fresh = channel("a-team", "new", json!(null));
        let table = render(&[synced, failing, fresh], at(NOW));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines,
            [
                "NAMESPACE       NAME     READY     REASON         VERSIONS   REVISION              LAST SYNC   NEXT SYNC   MESSAGE",
                "a-team          broken   False     FailedToSync   -          -                     -           syncing     syncing: syncer pod broken started; last outcome: the runner exited w…",
                "a-team          new      Unknown   -              -          -                     -           -           -",
                "fleet-default   stable   True      Synchronized   2          sha256:0123456789ab   5m ago      in 55m      synchronized 2 versions (no changes)",
            ]
        );
    }

    #[test]
    fn revisions_are_short() {
        assert_eq!(
            short_revision("docker.io/library/x@sha256:abcdefabcdefabcdef"),
            "sha256:abcdefabcdef"
        );
        assert_eq!(short_revision("sha256:abc"), "sha256:abc");
        assert_eq!(short_revision("\"33a64df5\""), "33a64df5");
        assert_eq!(
            short_revision("Wed, 21 Oct 2015 07:28:00 GMT"),
            "Wed, 21 Oct 2015 07:2…"
        );
    }

    #[test]
    fn durations_for_people() {
        for (secs, shown) in [
            (0, "0s"),
            (59, "59s"),
            (60, "1m"),
            (3599, "59m"),
            (3600, "1h"),
            (5400, "1h30m"),
            (86_400 * 3 + 5, "3d"),
        ] {
            assert_eq!(human(Duration::from_secs(secs)), shown);
        }
    }

    #[test]
    fn a_first_sync_says_only_what_it_does() {
        let ch = channel(
            "n",
            "c",
            json!({"conditions": [
                cond("Ready", "Unknown", "Synchronizing", "the first sync of this spec is under way"),
                cond("Reconciling", "True", "Synchronizing", "syncer pod c started"),
            ]}),
        );
        let r = row(&ch, at(NOW));
        assert_eq!(
            [r[2].as_str(), r[3].as_str(), r[7].as_str(), r[8].as_str()],
            [
                "Unknown",
                "Synchronizing",
                "syncing",
                "syncing: syncer pod c started"
            ]
        );
    }

    #[test]
    fn an_overdue_sync_is_due() {
        let ch = channel(
            "n",
            "c",
            json!({"nextSyncTime": time(NOW - 1), "lastSyncedTime": time(NOW - 7200)}),
        );
        let r = row(&ch, at(NOW));
        assert_eq!((r[6].as_str(), r[7].as_str()), ("2h ago", "due"));
    }
}
