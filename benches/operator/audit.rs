//! Version write requests of one namespace, as the API server's audit log records them (the
//! local cluster's audit policy logs write requests on ManagedOSVersions and nothing else,
//! dry runs included). Counted per namespace, so other test runs on the shared cluster do
//! not show up in them (the server's request counters are cluster-wide). The parsing is
//! pure, unit-tested in tests/bench_operator.rs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use serde_json::Value;

/// Version write requests of a namespace: all of them, and the dry runs among them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Writes {
    pub requests: u64,
    pub dry_runs: u64,
}

impl Writes {
    /// `self - before`: the requests of one step.
    pub fn since(self, before: Writes) -> Writes {
        Writes {
            requests: self.requests.saturating_sub(before.requests),
            dry_runs: self.dry_runs.saturating_sub(before.dry_runs),
        }
    }

    /// Requests per version written (`versions` 0: none).
    pub fn per(self, versions: i64) -> f64 {
        match versions {
            0 => 0.0,
            n => self.requests as f64 / n as f64,
        }
    }
}

/// The version write requests of namespace `ns` in one audit log's text.
pub fn count(text: &str, ns: &str) -> Writes {
    let needle = format!("\"namespace\":\"{ns}\"");
    let mut out = Writes::default();
    for line in text.lines().filter(|l| l.contains(&needle)) {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue; // a line the server is still writing
        };
        let object = &event["objectRef"];
        if event["stage"] != "ResponseComplete"
            || object["resource"] != "managedosversions"
            || object["namespace"] != ns
        {
            continue;
        }
        out.requests += 1;
        let uri = event["requestURI"].as_str().unwrap_or_default();
        if uri.contains("dryRun=All") {
            out.dry_runs += 1;
        }
    }
    out
}

/// The audit log `scripts/cluster env` names (`RANCHEROS_TEST_AUDIT_LOG`).
fn log_path() -> Result<PathBuf> {
    std::env::var("RANCHEROS_TEST_AUDIT_LOG")
        .ok()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| eyre!("RANCHEROS_TEST_AUDIT_LOG is not set (scripts/cluster env sets it)"))
}

/// [`count`] over the log and its rotated files (`versions-<time>.log`). A log that cannot
/// be read fails the benchmark: counting nothing would meet every goal.
fn read(log: &Path, ns: &str) -> Result<Writes> {
    let (Some(dir), Some(stem)) = (log.parent(), log.file_stem().and_then(|s| s.to_str())) else {
        bail!("{}: not an audit log's path", log.display());
    };
    let mut out = Writes::default();
    for entry in std::fs::read_dir(dir).wrap_err_with(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with(stem) {
            continue;
        }
        let text = std::fs::read(&path).wrap_err_with(|| format!("reading {}", path.display()))?;
        let w = count(&String::from_utf8_lossy(&text), ns);
        out.requests += w.requests;
        out.dry_runs += w.dry_runs;
    }
    Ok(out)
}

/// The version write requests of `ns` so far: read until two reads a moment apart agree
/// (the server logs a request once it has answered it).
pub async fn writes(ns: &str) -> Result<Writes> {
    let log = log_path()?;
    let mut last = read(&log, ns)?;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = read(&log, ns)?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(ns: &str, verb: &str, uri: &str, stage: &str) -> String {
        serde_json::json!({
            "kind": "Event", "stage": stage, "verb": verb, "requestURI": uri,
            "objectRef": {"resource": "managedosversions", "namespace": ns,
                          "apiGroup": "rancheros.cattle.io"},
        })
        .to_string()
    }

    #[test]
    fn counts_one_namespaces_writes_and_their_dry_runs() {
        let base = "/apis/rancheros.cattle.io/v1/namespaces/a/managedosversions";
        let text = [
            line(
                "a",
                "create",
                &format!("{base}?dryRun=All&fieldManager=x"),
                "ResponseComplete",
            ),
            line(
                "a",
                "patch",
                &format!("{base}/v1?fieldManager=x&force=true"),
                "ResponseComplete",
            ),
            line(
                "a",
                "patch",
                &format!("{base}/v1?fieldManager=x"),
                "ResponseStarted",
            ),
            line("ab", "patch", &format!("{base}/v2"), "ResponseComplete"),
            line("b", "create", base, "ResponseComplete"),
            "{\"kind\":\"Event\",\"objectRef\":{\"namespace\":\"a\"".to_string(),
        ]
        .join("\n");
        let w = count(&text, "a");
        assert_eq!(
            w,
            Writes {
                requests: 2,
                dry_runs: 1
            }
        );
        assert_eq!(count(&text, "b").requests, 1);
        assert_eq!(w.per(2), 1.0);
        assert_eq!(w.per(0), 0.0);
        let later = Writes {
            requests: 7,
            dry_runs: 3,
        };
        assert_eq!(
            later.since(w),
            Writes {
                requests: 5,
                dry_runs: 2
            }
        );
    }
}
