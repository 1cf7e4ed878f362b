//! The all-or-nothing writer against a fake API server (a `tower-test` mock service): what
//! the writer sends, in which order, and how it reads the answers. What the real API server
//! decides (admission, quotas, preconditions) is tested on the local cluster.

use std::sync::{Arc, Mutex};

use super::*;
use crate::api::{ManagedOSVersion, ManagedOSVersionSpec};
use crate::controller::versions::writer::Writes;
use crate::metrics::Metrics;
use kube::Api;
use serde_json::{Value, json};

/// One request the writer sent.
#[derive(Clone, Debug)]
struct Call {
    method: String,
    /// The object's name (last path segment).
    name: String,
    dry_run: bool,
    body: Value,
}

impl Call {
    fn is(&self, method: &str, name: &str, dry_run: bool) -> bool {
        self.method == method && self.name == name && self.dry_run == dry_run
    }
}

/// A fake API server: answers each request with `answer` (status code, body), or with the
/// object it was sent (plus a uid and resourceVersion), and records the calls.
fn fake_api(
    answer: impl Fn(&Call) -> Option<(u16, Value)> + Send + 'static,
) -> (Api<ManagedOSVersion>, Arc<Mutex<Vec<Call>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let record = calls.clone();
    let client = crate::client::fake_api::client("ns", move |head, body| {
        let method = head.method.to_string();
        // A create names the object in its body, every other request in its path.
        let name = match body["metadata"]["name"].as_str() {
            Some(n) if method == "POST" => n.to_string(),
            _ => head
                .uri
                .path()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .into(),
        };
        let call = Call {
            method,
            name,
            // Writes ask in the query, deletes in their body (DeleteOptions).
            dry_run: head.uri.query().unwrap_or_default().contains("dryRun=All")
                || body["dryRun"] == json!(["All"]),
            body: body.clone(),
        };
        record.lock().unwrap().push(call.clone());
        Some(answer(&call).unwrap_or_else(|| (200, echo(&call))))
    });
    (Api::namespaced(client, "ns"), calls)
}

/// The object written, as the API server would answer (a version of that name).
fn echo(call: &Call) -> Value {
    json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersion",
        "metadata": {"name": call.name, "namespace": "ns",
                     "uid": format!("uid-{}", call.name), "resourceVersion": "100"},
        "spec": call.body.get("spec").cloned().unwrap_or(json!({}))
    })
}

fn refusal(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn version(name: &str, uid: Option<&str>) -> ManagedOSVersion {
    let mut v = ManagedOSVersion::new(name, ManagedOSVersionSpec::default());
    v.metadata.namespace = Some("ns".into());
    v.metadata.uid = uid.map(str::to_string);
    v
}

async fn write(
    api: &Api<ManagedOSVersion>,
    effects: &[Effect],
) -> Result<Vec<(String, Option<String>)>, Error> {
    write_keeping(api, effects, 32 << 20).await
}

async fn write_keeping(
    api: &Api<ManagedOSVersion>,
    effects: &[Effect],
    max_undo: usize,
) -> Result<Vec<(String, Option<String>)>, Error> {
    let metrics = Metrics::default();
    let writes = Writes::new(crate::pace::Rates::UNLIMITED);
    let to = VersionWriter::new(api.clone(), "ns", &writes, &metrics, 32 << 20);
    write_all(&to, effects, max_undo, true).await
}

fn marks(names: &[&str]) -> Vec<Effect> {
    names
        .iter()
        .map(|n| Effect::MarkVersion {
            name: n.to_string(),
            uid: format!("uid-{n}"),
            no_longer_in_sync: true,
        })
        .collect()
}

fn creates(names: &[&str]) -> Vec<Effect> {
    names
        .iter()
        .map(|n| Effect::ApplyVersion {
            want: Box::new(version(n, None)),
            replaces: None,
        })
        .collect()
}

#[tokio::test]
async fn a_refused_write_undoes_the_earlier_writes_newest_first() {
    // The third real write meets a quota; the first two are taken back.
    let (api, calls) = fake_api(|c| {
        (c.is("POST", "c", false)).then(|| refusal(403, "Forbidden", "exceeded quota"))
    });
    let mut effects = creates(&["a", "b", "c"]);
    effects.push(Effect::DeleteVersion {
        name: "old".into(),
        uid: "uid-old".into(),
        before: Arc::new(version("old", Some("uid-old"))),
    });
    let err = write(&api, &effects).await.unwrap_err();
    let Error::Write { what, undo, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(what, "apply version c");
    assert_eq!(
        undo,
        "the sync's 2 earlier writes were undone, so nothing was changed"
    );
    let calls = calls.lock().unwrap().clone();
    // Every write was a dry run first (a create's is a create), in the sync's order; the
    // delete was never made for real.
    assert!(calls[..4].iter().all(|c| c.dry_run), "{calls:#?}");
    assert!(calls[0].is("POST", "a", true), "{calls:#?}");
    assert!(calls[3].is("DELETE", "old", true), "{calls:#?}");
    assert!(calls[4..].iter().all(|c| !c.dry_run), "{calls:#?}");
    assert!(!calls.iter().any(|c| c.is("DELETE", "old", false)));
    // The undo came after the three real writes, newest first, each by uid.
    let undo: Vec<(&str, &str)> = calls[7..]
        .iter()
        .map(|c| (c.method.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(undo, [("DELETE", "b"), ("DELETE", "a")]);
    assert_eq!(calls[7].body["preconditions"]["uid"], "uid-b");
}

#[tokio::test]
async fn a_write_to_an_existing_version_the_dry_run_refuses_changes_nothing() {
    let (api, calls) = fake_api(|c| {
        (c.name == "b" && c.dry_run).then(|| refusal(422, "Invalid", "metadata: Forbidden"))
    });
    let mut effects = creates(&["new"]);
    effects.extend(marks(&["a", "b", "c"]));
    let err = write(&api, &effects).await.unwrap_err();
    assert!(
        matches!(&err, Error::DryRun { what, .. } if what.ends_with("version b")),
        "{err:?}"
    );
    assert_eq!(err.class(), crate::failure::ErrorClass::Refused);
    assert!(
        err.to_string()
            .contains("(found by a dry run; nothing was changed): metadata: Forbidden"),
        "{err}"
    );
    // Not even the create was made.
    assert!(calls.lock().unwrap().iter().all(|c| c.dry_run));
}

#[tokio::test]
async fn a_create_its_dry_run_admits_but_the_write_refuses_is_undone_before_any_write_to_an_existing_version()
 {
    let (api, calls) = fake_api(|c| {
        (c.is("POST", "b", false)).then(|| refusal(422, "Invalid", "spec.type: Unsupported"))
    });
    let mut effects = marks(&["old"]);
    effects.extend(creates(&["a", "b"]));
    let err = write(&api, &effects).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "apply version b: spec.type: Unsupported; the sync's 1 earlier writes were undone, so nothing was changed"
    );
    let calls = calls.lock().unwrap().clone();
    // The flag of the existing version was only a dry run; the create of a was taken back.
    assert!(calls[0].is("POST", "a", true), "{calls:#?}");
    assert!(
        calls.iter().any(|c| c.is("PATCH", "old", true)),
        "{calls:#?}"
    );
    assert!(
        !calls.iter().any(|c| c.is("PATCH", "old", false)),
        "{calls:#?}"
    );
    assert!(calls.last().unwrap().is("DELETE", "a", false), "{calls:#?}");
}

#[tokio::test]
async fn a_refusal_early_in_a_large_batch_does_not_cost_the_rest_of_it() {
    let names: Vec<String> = (0..200).map(|i| format!("v{i:03}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (api, calls) = fake_api(|c| {
        (c.is("POST", "v000", false)).then(|| refusal(403, "Forbidden", "exceeded quota"))
    });
    write(&api, &creates(&names)).await.unwrap_err();
    let calls = calls.lock().unwrap().clone();
    let created = calls
        .iter()
        .filter(|c| c.method == "POST" && !c.dry_run)
        .count();
    let undone = calls.iter().filter(|c| c.method == "DELETE").count();
    // What was in flight when the refusal came, and its undo; not the other 150 or so.
    assert!(created <= 2 * PARALLEL_WRITES, "{created} creates sent");
    assert_eq!(undone, created - 1);
}

#[tokio::test]
async fn every_write_of_a_sync_and_of_its_undo_is_counted_and_paced() {
    let (api, _) = fake_api(|c| {
        (c.is("POST", "c", false)).then(|| refusal(403, "Forbidden", "exceeded quota"))
    });
    let metrics = Metrics::default();
    // 20 writes a second after a burst of 2, the namespace alone.
    let rates = crate::pace::Rates {
        namespace_qps: 5,
        burst: 2,
        total_qps: 20,
    };
    let writes = Writes::new(rates);
    let to = VersionWriter::new(api, "ns", &writes, &metrics, 32 << 20);
    let start = std::time::Instant::now();
    let mut effects = creates(&["a", "b", "c"]);
    effects.extend(marks(&["old"]));
    write_all(&to, &effects, 32 << 20, true).await.unwrap_err();
    // Four dry runs, three creates (two made), two undos: 9 turns, the last 7 of them
    // paced 50 ms apart.
    assert!(start.elapsed() >= std::time::Duration::from_millis(340));
    let count = |op: &'static str| {
        metrics
            .writes
            .get_or_create(&crate::metrics::WriteLabel { operation: op })
            .get()
    };
    assert_eq!(count("dry_run_version"), 4);
    assert_eq!(count("apply_version"), 2);
    assert_eq!(count("undo_version"), 2);
    assert_eq!(metrics.pacing.delayed.get(), 7);
    assert!(metrics.write_bytes.get() > 0);
}

#[tokio::test]
async fn a_version_created_meanwhile_is_reported_as_such_and_not_taken_over() {
    // A create is refused where the version exists (409); the API server's words are
    // reworded to say who holds it (read once) and when it came.
    let (api, calls) = fake_api(|c| {
        (c.is("POST", "a", false)).then(|| {
            refusal(
                409,
                "AlreadyExists",
                "managedosversions.rancheros.cattle.io \"a\" already exists",
            )
        })
    });
    let err = write(&api, &creates(&["a"])).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "apply version a: version \"a\" already exists and is not controlled by any channel; the sync had not seen it; nothing was changed"
    );
    let calls = calls.lock().unwrap().clone();
    assert!(calls[0].is("POST", "a", true), "{calls:#?}");
    assert!(calls[1].is("POST", "a", false), "{calls:#?}");
    assert!(calls[2].is("GET", "a", false), "{calls:#?}");
    assert_eq!(calls.len(), 3, "nothing to undo: {calls:#?}");
}

#[tokio::test]
async fn updates_and_flags_carry_the_uid_and_deletes_go_last() {
    let (api, calls) = fake_api(|_| None);
    let kept = Arc::new(version("kept", Some("uid-kept")));
    let effects = vec![
        Effect::DeleteVersion {
            name: "gone".into(),
            uid: "uid-gone".into(),
            before: Arc::new(version("gone", Some("uid-gone"))),
        },
        Effect::ApplyVersion {
            want: Box::new(version("kept", Some("uid-kept"))),
            replaces: Some(kept),
        },
        Effect::MarkVersion {
            name: "kept".into(),
            uid: "uid-kept".into(),
            no_longer_in_sync: false,
        },
    ];
    let written = write(&api, &effects).await.unwrap();
    assert_eq!(written.len(), 3);
    let calls = calls.lock().unwrap().clone();
    let real: Vec<&Call> = calls.iter().filter(|c| !c.dry_run).collect();
    assert_eq!(real.last().map(|c| c.method.as_str()), Some("DELETE"));
    let update = real
        .iter()
        .find(|c| c.method == "PATCH" && c.body.get("spec").is_some());
    assert_eq!(update.unwrap().body["metadata"]["uid"], "uid-kept");
    let mark = real
        .iter()
        .find(|c| c.body["metadata"].get("annotations").is_some())
        .unwrap();
    assert_eq!(mark.body["metadata"]["uid"], "uid-kept");
}

#[tokio::test]
async fn a_failed_undo_says_which_versions_it_could_not_take_back() {
    let (api, _) = fake_api(|c| {
        if c.is("POST", "b", false) {
            Some(refusal(403, "Forbidden", "exceeded quota"))
        } else if c.is("DELETE", "a", false) {
            Some(refusal(503, "ServiceUnavailable", "etcd is down"))
        } else {
            None
        }
    });
    let err = write(&api, &creates(&["a", "b"])).await.unwrap_err();
    assert!(
        err.to_string()
            .ends_with("undoing the sync's earlier writes failed for a: etcd is down"),
        "{err}"
    );
}

#[tokio::test]
async fn what_a_sync_keeps_to_undo_its_writes_is_bounded_and_over_it_nothing_stays_changed() {
    // Two versions to delete, each about 2 KiB as the API server returns them in full;
    // room to keep one of them for the undo.
    let big = "x".repeat(2048);
    let (api, calls) = fake_api(move |c| {
        (c.method == "GET").then(|| {
            (
                200,
                json!({
                    "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersion",
                    "metadata": {"name": c.name, "namespace": "ns",
                                 "uid": format!("uid-{}", c.name), "resourceVersion": "7"},
                    "spec": {"version": big}
                }),
            )
        })
    });
    let delete = |n: &str| Effect::DeleteVersion {
        name: n.into(),
        uid: format!("uid-{n}"),
        before: Arc::new(version(n, Some(&format!("uid-{n}")))),
    };
    let err = write_keeping(&api, &[delete("a"), delete("b")], 3000)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("more than 3000 bytes to keep for undoing it (--max-sync-write-bytes)"),
        "{err}"
    );
    let calls = calls.lock().unwrap().clone();
    // One delete was refused before it was sent; the other, made, was undone (created again).
    let deleted: Vec<&Call> = calls
        .iter()
        .filter(|c| c.method == "DELETE" && !c.dry_run)
        .collect();
    assert_eq!(deleted.len(), 1, "{calls:#?}");
    let recreated = calls
        .iter()
        .filter(|c| c.method == "POST" && !c.dry_run && c.name == deleted[0].name)
        .count();
    assert_eq!(recreated, 1, "{calls:#?}");
}

#[tokio::test]
async fn where_nothing_can_refuse_the_writes_go_without_dry_runs_and_a_refusal_is_still_undone() {
    // Nothing refuses: one request per write, none of them a dry run.
    let (api, calls) = fake_api(|_| None);
    let metrics = Metrics::default();
    let writes = Writes::new(crate::pace::Rates::UNLIMITED);
    let to = VersionWriter::new(api.clone(), "ns", &writes, &metrics, 32 << 20);
    let mut effects = creates(&["a", "b"]);
    effects.extend(marks(&["old"]));
    write_all(&to, &effects, 32 << 20, false).await.unwrap();
    let sent = calls.lock().unwrap().clone();
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert!(sent.iter().all(|c| !c.dry_run), "{sent:#?}");

    // A webhook added a moment ago refuses the second create: the first is taken back.
    let (api, calls) = fake_api(|c| {
        (c.is("POST", "b", false)).then(|| refusal(400, "BadRequest", "admission webhook denied"))
    });
    let to = VersionWriter::new(api.clone(), "ns", &writes, &metrics, 32 << 20);
    let err = write_all(&to, &creates(&["a", "b"]), 32 << 20, false)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "apply version b: admission webhook denied; the sync's 1 earlier writes were undone, so nothing was changed"
    );
    let sent = calls.lock().unwrap().clone();
    assert!(sent.iter().all(|c| !c.dry_run), "{sent:#?}");
    assert!(sent.last().unwrap().is("DELETE", "a", false), "{sent:#?}");
}

mod fields;
mod turns;
