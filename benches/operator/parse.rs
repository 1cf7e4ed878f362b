//! What the benchmark reads back: the API server's `/metrics` text, the operator's log
//! (kube-client's "requesting" lines), `/proc` and `scripts/cluster env`. Pure functions,
//! unit-tested in tests/bench_operator.rs.

use std::collections::HashMap;
use std::ops::{Add, Sub};

/// Counts by key, in the order the keys were first seen (so that the report lists them as
/// the metrics or the log did).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally<K, V> {
    entries: Vec<(K, V)>,
}

impl<K: PartialEq + Clone, V: Copy + Default + Add<Output = V> + Sub<Output = V> + PartialEq>
    Tally<K, V>
{
    pub fn add(&mut self, key: K, v: V) {
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, total)) => *total = *total + v,
            None => self.entries.push((key, v)),
        }
    }

    pub fn get(&self, key: &K) -> V {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
            .unwrap_or_default()
    }

    pub fn iter(&self) -> impl Iterator<Item = &(K, V)> {
        self.entries.iter()
    }

    pub fn total(&self) -> V {
        self.entries.iter().fold(V::default(), |a, (_, v)| a + *v)
    }

    /// `self - before`, for every key of `self` (a counter's growth over a step).
    pub fn since(&self, before: &Self) -> Self {
        Self {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| (k.clone(), *v - before.get(k)))
                .collect(),
        }
    }

    /// The entries that are not zero.
    pub fn nonzero(&self) -> Vec<(K, V)> {
        self.entries
            .iter()
            .filter(|(_, v)| *v != V::default())
            .cloned()
            .collect()
    }
}

/// One sample of a Prometheus text exposition: `name{labels} value`.
pub struct Sample<'a> {
    pub labels: HashMap<&'a str, &'a str>,
    pub value: f64,
}

/// The sample of metric `name` on `line`, if it is one (labelled, as the API server's are).
pub fn sample<'a>(line: &'a str, name: &str) -> Option<Sample<'a>> {
    let rest = line.strip_prefix(name)?.strip_prefix('{')?;
    let (labels, value) = rest.rsplit_once("} ")?;
    let value = value.trim().parse().ok()?;
    let mut out = HashMap::new();
    let mut rest = labels;
    while let Some((key, after)) = rest.split_once("=\"") {
        let (value, after) = after.split_once('"')?;
        out.insert(key.trim_start_matches(',').trim(), value);
        rest = after;
    }
    Some(Sample { labels: out, value })
}

/// (resource, subresource, verb).
pub type Kind3 = (String, String, String);

/// The counted requests that are neither version writes nor the syncer pod's create, log
/// read and delete, by (resource, subresource, verb), from the API server's counters.
pub fn overhead_requests(metrics: &str) -> Tally<Kind3, f64> {
    const COUNTED: [(&str, &str, &str); 8] = [
        ("managedosversionchannels", "", "GET"),
        ("managedosversionchannels", "status", "PATCH"),
        ("managedosversionchannels", "status", "GET"),
        ("managedosversions", "", "LIST"),
        ("pods", "", "GET"),
        ("pods", "", "LIST"),
        ("events", "", "POST"),
        ("events", "", "PATCH"),
    ];
    let mut out = Tally::default();
    for s in metrics
        .lines()
        .filter_map(|l| sample(l, "apiserver_request_total"))
    {
        let label = |k| s.labels.get(k).copied().unwrap_or("");
        let key = (label("resource"), label("subresource"), label("verb"));
        if COUNTED.contains(&key) {
            out.add(
                (key.0.to_string(), key.1.to_string(), key.2.to_string()),
                s.value,
            );
        }
    }
    out
}

/// Requests to the operator's two resources by (resource, verb, dry_run), and the bytes of
/// the LIST responses of versions, from the API server's counters.
pub fn api_metrics(metrics: &str) -> (Tally<Kind3, f64>, f64) {
    let mut requests = Tally::default();
    let mut list_bytes = 0.0;
    for line in metrics.lines() {
        if let Some(s) = sample(line, "apiserver_request_total") {
            let label = |k| s.labels.get(k).copied().unwrap_or("");
            let resource = label("resource");
            if resource == "managedosversions" || resource == "managedosversionchannels" {
                let key = (
                    resource.into(),
                    label("verb").into(),
                    label("dry_run").into(),
                );
                requests.add(key, s.value);
            }
        } else if let Some(s) = sample(line, "apiserver_response_sizes_sum")
            && s.labels.get("resource") == Some(&"managedosversions")
            && s.labels.get("verb") == Some(&"LIST")
        {
            list_bytes += s.value;
        }
    }
    (requests, list_bytes)
}

/// The write verbs of the API server's counters.
pub const WRITES: &[&str] = &[
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// The sum of `api_metrics` requests of `resource` (any when None) with one of `verbs`
/// (any when None).
pub fn count(requests: &Tally<Kind3, f64>, resource: Option<&str>, verbs: Option<&[&str]>) -> f64 {
    requests
        .iter()
        .filter(|((r, verb, _), _)| {
            resource.is_none_or(|x| x == r) && verbs.is_none_or(|vs| vs.contains(&verb.as_str()))
        })
        .map(|(_, v)| v)
        .sum()
}

/// The operator's log level that makes its API client log each request it sends
/// (kube-client's "requesting", with method and URL).
pub const REQUEST_LOG: &str = "info,kube_client::client::builder=debug";

/// (method, url) of a kube-client "requesting" line.
fn requesting(line: &str) -> Option<(&str, &str)> {
    if !line.contains("requesting") {
        return None;
    }
    let (_, rest) = line.split_once("http.method=")?;
    let (method, rest) = rest.split_once(' ')?;
    let url = rest.strip_prefix("http.url=")?;
    let url = url.split_whitespace().next()?;
    method
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_')
        .then_some((method, url))
}

/// The operator's own requests by kind ("resource/subresource/verb"), from its log: the same
/// exclusions as `overhead_requests` (version writes, the pod's create, log read and
/// delete), and neither the watch caches' long polls nor the CRD read at start.
pub fn own_requests(log: &str) -> Tally<String, i64> {
    let mut out = Tally::default();
    for (method, url) in log.lines().filter_map(requesting) {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        if query.contains("watch=true") {
            continue;
        }
        let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        let kind = if parts.contains(&"managedosversions") {
            if method != "GET" {
                continue; // version writes
            }
            "managedosversions//LIST".to_string()
        } else if parts.contains(&"managedosversionchannels") {
            let sub = if parts.last() == Some(&"status") {
                "status"
            } else {
                ""
            };
            format!("managedosversionchannels/{sub}/{method}")
        } else if let Some(i) = parts.iter().position(|p| *p == "pods") {
            if method == "POST" || method == "DELETE" || parts.last() == Some(&"log") {
                continue; // the pod's create, delete and log read
            }
            let verb = if i == parts.len() - 1 { "LIST" } else { method };
            format!("pods//{verb}")
        } else if parts.contains(&"events") {
            format!("events//{method}")
        } else if parts.contains(&"customresourcedefinitions") {
            continue; // once at start
        } else {
            format!("other//{method}")
        };
        out.add(kind, 1);
    }
    out
}

/// The registry requests of each pull, from the operator's debug log.
pub fn registry_requests(log: &str) -> Vec<i64> {
    log.lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("registry requests of one pull")?;
            let (_, n) = rest.split_once("requests=")?;
            let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// The syncer pods the operator created, from its log.
pub fn pods_created(log: &str) -> i64 {
    log.lines()
        .filter(|l| l.contains("requesting") && l.contains("http.method=POST"))
        .filter(|l| {
            l.match_indices("/pods").any(|(i, m)| {
                matches!(
                    l[i + m.len()..].chars().next(),
                    None | Some('?') | Some(' ' | '\t')
                )
            })
        })
        .count() as i64
}

/// Whether the operator's version cache holds its first list: its own log line or, for a
/// build before that line, the versions' watch starting after the paginated LIST.
pub fn cache_filled(log: &str) -> bool {
    log.lines().any(|l| {
        l.contains("version cache filled")
            || (l.contains("requesting")
                && l.contains("/managedosversions?")
                && l.contains("watch=true")
                && !l.contains("sendInitialEvents"))
    })
}

/// A field of /proc/PID/status in bytes (`VmRSS`, `VmHWM`: kB there).
pub fn proc_status_bytes(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// User plus system CPU ticks of /proc/PID/stat (after the command's closing parenthesis,
/// which the command itself may contain).
pub fn proc_stat_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The variables of `scripts/cluster env` (`export NAME=VALUE` lines; a value may be
/// quoted and refer to variables set before it, as `PATH="...:$PATH"` does).
pub fn cluster_env(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let Some((name, value)) = line.strip_prefix("export ").and_then(|l| l.split_once('='))
        else {
            continue;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let value = value.trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        let known = |n: &str| {
            out.iter()
                .rev()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
                .or_else(|| lookup(n))
        };
        let expanded = expand(unquoted, known);
        out.push((name.to_string(), expanded));
    }
    out
}

/// `$NAME` and `${NAME}` replaced by their values (unknown ones left as they are, as
/// Python's `os.path.expandvars` does).
fn expand(value: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = match after.strip_prefix('{').and_then(|a| a.split_once('}')) {
            Some((n, _)) => (n, n.len() + 2),
            None => {
                let n = after
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..n], n)
            }
        };
        match lookup(name).filter(|_| !name.is_empty()) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[i..i + 1 + len]),
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="rancheros.cattle.io",resource="managedosversions",scope="resource",subresource="",verb="POST",version="v1"} 5000
apiserver_request_total{code="201",component="apiserver",dry_run="",group="rancheros.cattle.io",resource="managedosversions",scope="resource",subresource="",verb="POST",version="v1"} 5000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="rancheros.cattle.io",resource="managedosversions",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="rancheros.cattle.io",resource="managedosversionchannels",scope="resource",subresource="status",verb="PATCH",version="v1"} 50
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 1.51e+02
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 20
apiserver_response_sizes_sum{component="apiserver",group="rancheros.cattle.io",resource="managedosversions",scope="namespace",subresource="",verb="LIST",version="v1"} 203
apiserver_response_sizes_sum{component="apiserver",group="rancheros.cattle.io",resource="managedosversions",scope="resource",subresource="",verb="GET",version="v1"} 99999
"#;

    #[test]
    fn counters_of_the_operators_resources() {
        let (requests, list_bytes) = api_metrics(METRICS);
        assert_eq!(list_bytes, 203.0);
        let writes = count(&requests, Some("managedosversions"), Some(WRITES));
        assert_eq!(writes, 10_000.0, "the dry runs count as writes too");
        assert_eq!(
            count(&requests, Some("managedosversions"), Some(&["LIST"])),
            2.0
        );
        assert_eq!(
            count(&requests, None, None),
            10_052.0,
            "pods are not the operator's"
        );
        let later = api_metrics(&METRICS.replace("} 2\n", "} 5\n")).0;
        let grown = later.since(&requests);
        assert_eq!(
            count(&grown, Some("managedosversions"), Some(&["LIST"])),
            3.0
        );
        assert_eq!(count(&grown, None, None), 3.0);
    }

    #[test]
    fn overhead_leaves_out_version_writes_and_pod_creates() {
        let o = overhead_requests(METRICS);
        let kinds: Vec<String> = o
            .nonzero()
            .into_iter()
            .map(|((r, s, v), n)| format!("{r}/{s}/{v}={n}"))
            .collect();
        assert_eq!(
            kinds,
            [
                "managedosversions//LIST=2",
                "managedosversionchannels/status/PATCH=50",
                "pods//GET=151"
            ]
        );
    }

    #[test]
    fn a_sample_needs_its_name_and_labels() {
        assert!(sample("apiserver_request_total 3", "apiserver_request_total").is_none());
        assert!(
            sample(
                "# HELP apiserver_request_total x",
                "apiserver_request_total"
            )
            .is_none()
        );
        let s = sample(r#"x_total{a="1",b=""} 7"#, "x_total").unwrap();
        assert_eq!((s.labels["a"], s.labels["b"], s.value), ("1", "", 7.0));
    }

    const LOG: &str = "\
2026-12-03T12:00:00Z DEBUG requesting http.method=GET http.url=https://10.0.0.1:6443/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x otel.name=\"get\"
2026-12-03T12:00:00Z DEBUG requesting http.method=GET http.url=https://10.0.0.1:6443/apis/rancheros.cattle.io/v1/namespaces/a/managedosversions?&watch=true&timeoutSeconds=290&sendInitialEvents=true
2026-12-03T12:00:01Z DEBUG requesting http.method=PATCH http.url=https://10.0.0.1:6443/apis/rancheros.cattle.io/v1/namespaces/a/managedosversionchannels/c/status?&fieldManager=x
2026-12-03T12:00:01Z DEBUG requesting http.method=POST http.url=https://10.0.0.1:6443/api/v1/namespaces/a/pods? otel.name=\"create\"
2026-12-03T12:00:02Z DEBUG requesting http.method=GET http.url=https://10.0.0.1:6443/api/v1/namespaces/a/pods/c/log?&container=display
2026-12-03T12:00:02Z DEBUG requesting http.method=GET http.url=https://10.0.0.1:6443/api/v1/namespaces/a/pods/c
2026-12-03T12:00:02Z DEBUG requesting http.method=GET http.url=https://10.0.0.1:6443/api/v1/namespaces/a/pods?labelSelector=x
2026-12-03T12:00:03Z DEBUG requesting http.method=POST http.url=https://10.0.0.1:6443/apis/rancheros.cattle.io/v1/namespaces/a/managedosversions?dryRun=All
2026-12-03T12:00:03Z DEBUG requesting http.method=GET http.url=https://10.0.0.1:6443/apis/rancheros.cattle.io/v1/namespaces/a/managedosversions?labelSelector=y
2026-12-03T12:00:04Z DEBUG requesting http.method=POST http.url=https://10.0.0.1:6443/api/v1/namespaces/a/events?
2026-12-03T12:00:04Z DEBUG requesting http.method=PATCH http.url=https://10.0.0.1:6443/apis/rancheros.cattle.io/v1/namespaces/a/managedosversionchannels/c/status?&fieldManager=x
2026-12-03T12:00:05Z DEBUG rancheros_operator::registry: registry requests of one pull image=r requests=3
2026-12-03T12:00:06Z DEBUG rancheros_operator::registry: registry requests of one pull image=r requests=1
2026-12-03T12:00:07Z INFO rancheros_operator: version cache filled versions=0
";

    #[test]
    fn the_operators_own_requests_from_its_log() {
        let own = own_requests(LOG);
        assert_eq!(
            own.iter().cloned().collect::<Vec<_>>(),
            [
                ("managedosversionchannels/status/PATCH".to_string(), 2),
                ("pods//GET".to_string(), 1),
                ("pods//LIST".to_string(), 1),
                ("managedosversions//LIST".to_string(), 1),
                ("events//POST".to_string(), 1),
            ]
        );
        assert_eq!(own.total(), 6);
        assert_eq!(pods_created(LOG), 1);
        assert_eq!(registry_requests(LOG), [3, 1]);
        assert!(cache_filled(LOG));
        assert!(!cache_filled(&LOG.replace("version cache filled", "x")));
        // A build before that line: its versions' watch starting after the paginated LIST.
        assert!(cache_filled(
            &LOG.replace("version cache filled", "x")
                .replace("&sendInitialEvents=true", "")
        ));
    }

    #[test]
    fn proc_figures() {
        let status = "Name:\trancheros-opera\nVmHWM:\t   72800 kB\nVmRSS:\t   40960 kB\n";
        assert_eq!(proc_status_bytes(status, "VmHWM"), 72_800 * 1024);
        assert_eq!(proc_status_bytes(status, "VmRSS"), 40 * 1024 * 1024);
        assert_eq!(proc_status_bytes(status, "VmSwap"), 0);
        let stat = "42 (rancheros (op)) S 1 42 42 0 -1 4194560 1 0 0 0 250 104 0 0 20 0 4 0";
        assert_eq!(proc_stat_ticks(stat), Some(354));
    }

    #[test]
    fn the_clusters_environment() {
        let text = "export KUBECONFIG=/var/k\nexport PATH=\"/a/bin:/b/bin:$PATH\"\n# x\nexport X=${KUBECONFIG}/y\nexport E=\n";
        let env = cluster_env(text, |n| (n == "PATH").then(|| "/usr/bin".to_string()));
        assert_eq!(
            env,
            [
                ("KUBECONFIG".to_string(), "/var/k".to_string()),
                ("PATH".to_string(), "/a/bin:/b/bin:/usr/bin".to_string()),
                ("X".to_string(), "/var/k/y".to_string()),
                ("E".to_string(), String::new()),
            ]
        );
        assert_eq!(expand("$NOPE/x", |_| None), "$NOPE/x");
    }
}
