//! What GitOps tools see of live channels, and versions that outlive their channel.
//!
//! Health: every state a channel goes through is read by the code Flux and Argo CD use:
//! kstatus (`sigs.k8s.io/cli-utils`, `status.Compute`) and the chart's Argo CD health check
//! (`files/health.lua`, run by gopher-lua as Argo CD runs it), both through `gitopscheck`
//! (scripts/lib/gitopscheck, built by `scripts/helm install`).
//!
//! Prune: `versionPolicy.onChannelDelete: Orphan` leaves the versions of a deleted channel
//! in place (also when the operator was down at the time), a channel of the same name
//! adopts them, and a namespace with such a channel is still deleted.
//!
//! The channels are json channels served by the test (no pods: fast), from loopback.

use crate::chart_support;
use crate::common;

use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use rancheros_operator::api::{
    CHANNEL_LABEL, ManagedOSVersion, ManagedOSVersionChannel, NO_LONGER_IN_SYNC_ANNOTATION,
    ORPHAN_FINALIZER, ORPHANED_FROM_ANNOTATION, RECONCILING, STALLED,
};
use serde_json::{Value, json};

const SYNC: Duration = Duration::from_secs(60);
const ALLOW_LOOPBACK: &str = "--egress-allow-cidr=127.0.0.0/8";

// --- a channel source the test steers -------------------------------------------------

const OK: u8 = 0;
const FAIL: u8 = 1;

struct Source {
    mode: AtomicU8,
    data: Mutex<Value>,
}

impl Source {
    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    fn serve(&self, data: Value) {
        *self.data.lock().unwrap() = data;
    }
}

async fn channel_json(State(s): State<Arc<Source>>) -> Response {
    match s.mode.load(Ordering::SeqCst) {
        OK => s.data.lock().unwrap().to_string().into_response(),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "down for maintenance").into_response(),
    }
}

/// A source serving `data`, the operator, and channel "ch" of it with the Orphan policy,
/// synchronized.
async fn orphan_channel(test: &str, data: Value) -> (TestNs, ManagedOSVersionChannel, Served) {
    let served = serve(OK, data).await;
    let t = TestNs::started(test, &[ALLOW_LOOPBACK]).await;
    let ch = t.create_synced("ch", orphan_spec(&served.0), SYNC).await;
    (t, ch, served)
}

/// A source's URI, and the source.
type Served = (String, Arc<Source>);

async fn serve(mode: u8, data: Value) -> (String, Arc<Source>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let source = Arc::new(Source {
        mode: AtomicU8::new(mode),
        data: Mutex::new(data),
    });
    let app = Router::new()
        .route("/channel.json", get(channel_json))
        .with_state(source.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/channel.json"), source)
}

fn json_spec(uri: &str) -> Value {
    json!({"type": "json", "options": {"uri": uri, "timeout": "3s"}})
}

fn orphan_spec(uri: &str) -> Value {
    let mut spec = json_spec(uri);
    spec["versionPolicy"] = json!({"onChannelDelete": "Orphan"});
    spec
}

// --- the verdicts of kstatus and Argo CD ------------------------------------------------

/// `gitopscheck ARGS` on the object: its verdict, `(status, message)`.
fn gitopscheck(args: &[&str], object: &Value) -> (String, String) {
    let mut cmd = chart_support::command("gitopscheck");
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("running gitopscheck");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(object.to_string().as_bytes())
        .unwrap();
    let verdict: Value =
        serde_json::from_slice(&success_stdout(child, &format!("gitopscheck {args:?}"))).unwrap();
    (
        verdict["status"].as_str().unwrap().to_string(),
        verdict["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// What Flux (kstatus) and Argo CD (the chart's health check) say of the channel.
fn health(ch: &ManagedOSVersionChannel) -> (String, String) {
    let mut object = serde_json::to_value(ch).unwrap();
    // As the API server sends it (the typed object may leave the type out).
    object["apiVersion"] = json!("rancheros.cattle.io/v1");
    object["kind"] = json!("ManagedOSVersionChannel");
    let lua = chart_support::chart_dir().join("files/health.lua");
    let (kstatus, _) = gitopscheck(&["kstatus", "-"], &object);
    let (argo, _) = gitopscheck(&["argocd", lua.to_str().unwrap(), "-"], &object);
    (kstatus, argo)
}

#[track_caller]
fn assert_health(ch: &ManagedOSVersionChannel, kstatus: &str, argo: &str, state: &str) {
    let got = health(ch);
    assert_eq!(
        (got.0.as_str(), got.1.as_str()),
        (kstatus, argo),
        "{state}: kstatus and Argo CD verdicts of\n{}",
        serde_json::to_string_pretty(&ch.status).unwrap()
    );
}

/// `kubectl get ARGS -n NS`: the table the API server's printer columns make.
fn kubectl_get(t: &TestNs, args: &[&str]) -> String {
    let mut cmd = chart_support::command("kubectl");
    cmd.arg("get").args(args).args(["-n", &t.ns]);
    chart_support::run(&mut cmd)
}

/// The cell of `column` in the row of `name`, in a table kubectl printed (cells are at
/// least two spaces apart, headers are upper case).
fn cell(table: &str, name: &str, column: &str) -> String {
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    let start = header
        .find(column)
        .unwrap_or_else(|| panic!("no column {column} in\n{table}"));
    let row = lines
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"));
    row.get(start..)
        .unwrap_or_default()
        .split("  ")
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn condition(ch: &ManagedOSVersionChannel, type_: &str) -> Option<(String, String)> {
    ch.status
        .as_ref()?
        .condition(type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn flux_and_argo_cd_read_every_state_of_a_live_channel() {
    let (uri, source) = serve(OK, channel_data(&[("h-a", "v1")])).await;
    let mut t = TestNs::new("gitops-health").await;
    t.create_channel("ch", json_spec(&uri)).await;
    // No operator has seen it: the CRD's status default says so (observedGeneration -1).
    let ch = t.channel("ch").await;
    assert_eq!(ch.status.as_ref().unwrap().observed_generation, Some(-1));
    assert_health(&ch, "InProgress", "Progressing", "not seen yet");

    // A first sync under way (a custom channel: its pod runs a few seconds, and the status
    // says so meanwhile).
    let slow = slow_script(4, &channel_data(&[("h-p", "v1")]));
    t.create_channel("pod", custom_spec(&slow)).await;
    t.start_operator(&[ALLOW_LOOPBACK]);
    let first = t
        .eventually("the first sync to be under way", SYNC, || async {
            let ch = t.channel("pod").await;
            reconciling(&ch).then_some(ch)
        })
        .await;
    assert_health(&first, "InProgress", "Progressing", "first sync under way");
    let first = t.wait_ready("pod", "Synchronized", SYNC).await;
    assert_health(&first, "Current", "Healthy", "synced (custom)");

    let ch = t.wait_ready("ch", "Synchronized", SYNC).await;
    assert_health(&ch, "Current", "Healthy", "synced");
    let wide = kubectl_get(&t, &["mosvc", "-o", "wide"]);
    assert_eq!(cell(&wide, "ch", "SUSPENDED"), "", "{wide}");
    assert!(cell(&wide, "ch", "NEXT SYNC").starts_with("20"), "{wide}");
    assert_eq!(cell(&wide, "ch", "REVISION"), "", "no ETag: {wide}");

    t.patch_spec("ch", json!({"suspend": true})).await;
    let ch = t.wait_ready("ch", "Suspended", SYNC).await;
    assert_health(&ch, "Current", "Suspended", "suspended");
    let wide = kubectl_get(&t, &["mosvc", "-o", "wide"]);
    assert_eq!(cell(&wide, "ch", "SUSPENDED"), "true", "{wide}");

    t.patch_spec("ch", json!({"suspend": null, "enabled": false}))
        .await;
    let ch = t.wait_ready("ch", "ChannelDisabled", SYNC).await;
    assert_health(&ch, "Current", "Suspended", "disabled");

    // Enabled again while the source fails: retried (the tests' retry delay is a minute).
    source.set(FAIL);
    t.patch_spec("ch", json!({"enabled": null})).await;
    let ch = t.wait_ready("ch", "FailedToSync", SYNC).await;
    assert_eq!(
        condition(&ch, RECONCILING),
        Some(("True".into(), "ProgressingWithRetry".into())),
        "a failure being retried"
    );
    assert_eq!(condition(&ch, STALLED), None);
    assert_health(&ch, "InProgress", "Progressing", "failing and retrying");
    t.cleanup().await;
}

#[tokio::test]
async fn failures_past_the_retry_budget_are_failed_and_never_current() {
    let (uri, _source) = serve(FAIL, json!([])).await;
    let mut t = TestNs::new("gitops-stalled").await;
    // Every state the channel goes through, as a watch delivers them.
    let states = {
        let api = t.channels();
        let seen = Arc::new(Mutex::new(Vec::<ManagedOSVersionChannel>::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let config = watcher::Config::default().fields("metadata.name=ch");
            let mut stream = watcher(api, config).applied_objects().boxed();
            while let Some(Ok(ch)) = stream.next().await {
                record.lock().unwrap().push(ch);
            }
        });
        (seen, task)
    };
    t.start_operator(&[ALLOW_LOOPBACK, "--retry-delay=1s"]);
    t.create_channel("ch", json_spec(&uri)).await;
    let stalled = t
        .eventually("the channel to stall", SYNC, || async {
            let ch = t.channel("ch").await;
            (condition(&ch, STALLED).is_some_and(|(s, _)| s == "True")).then_some(ch)
        })
        .await;
    assert_eq!(
        stalled
            .status
            .as_ref()
            .unwrap()
            .failed_synchronization_attempts,
        4
    );
    assert_eq!(condition(&stalled, RECONCILING), None);
    assert_health(&stalled, "Failed", "Degraded", "stalled");

    states.1.abort();
    let seen = states.0.lock().unwrap().clone();
    let mut retrying = 0;
    for ch in &seen {
        let failed = ch
            .status
            .as_ref()
            .is_some_and(|s| s.failed_synchronization_attempts > 0);
        if !failed {
            continue;
        }
        let (kstatus, argo) = health(ch);
        assert!(
            kstatus != "Current" && argo != "Healthy",
            "{kstatus}/{argo} while the last sync failed:\n{}",
            serde_json::to_string_pretty(&ch.status).unwrap()
        );
        if condition(ch, RECONCILING) == Some(("True".into(), "ProgressingWithRetry".into())) {
            assert_eq!(
                (kstatus.as_str(), argo.as_str()),
                ("InProgress", "Progressing")
            );
            retrying += 1;
        }
    }
    assert!(
        retrying >= 1,
        "no state of the retries was seen ({} states)",
        seen.len()
    );

    // A spec the operator cannot act on needs a human too.
    t.create_channel(
        "invalid",
        json!({"type": "json", "syncInterval": "30s", "options": {"uri": uri}}),
    )
    .await;
    let invalid = t.wait_ready("invalid", "InvalidConfiguration", SYNC).await;
    assert_health(&invalid, "Failed", "Degraded", "invalid configuration");
    t.cleanup().await;
}

// --- versions that outlive their channel ------------------------------------------------

fn controller_uid(v: &ManagedOSVersion) -> Option<String> {
    v.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

fn annotation<'a>(v: &'a ManagedOSVersion, key: &str) -> Option<&'a str> {
    v.annotations().get(key).map(String::as_str)
}

/// Checks that the version was orphaned from the channel with this uid.
#[track_caller]
fn assert_orphaned(v: &ManagedOSVersion, uid: &str) {
    assert!(
        v.owner_references().is_empty(),
        "{}: {:?}",
        v.name_any(),
        v.owner_references()
    );
    assert_eq!(annotation(v, NO_LONGER_IN_SYNC_ANNOTATION), Some("true"));
    assert_eq!(annotation(v, ORPHANED_FROM_ANNOTATION), Some(uid));
    assert_eq!(
        v.labels().get(CHANNEL_LABEL).map(String::as_str),
        Some("ch")
    );
}

async fn wait_gone(t: &TestNs, name: &str) {
    t.wait_gone(
        &t.channels(),
        name,
        &format!("channel {name} to be gone"),
        SYNC,
    )
    .await;
}

async fn delete_channel(t: &TestNs, name: &str) {
    t.channels()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// Deletes the namespace and waits until it is gone (an `Orphan` channel's finalizer must
/// not hold it), with the operator running.
async fn delete_namespace(t: &TestNs) {
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    namespaces
        .delete(&t.ns, &DeleteParams::default())
        .await
        .unwrap();
    t.wait_gone(&namespaces, &t.ns, "the namespace to be gone", 2 * SYNC)
        .await;
}

#[tokio::test]
async fn orphaned_versions_stay_and_a_channel_of_the_same_name_adopts_them() {
    let (t, ch, (uri, source)) = orphan_channel(
        "gitops-orphan",
        channel_data(&[("o-a", "v1"), ("o-b", "v1")]),
    )
    .await;
    assert_eq!(ch.finalizers(), [ORPHAN_FINALIZER]);
    let old_uid = ch.uid().unwrap();

    delete_channel(&t, "ch").await;
    wait_gone(&t, "ch").await;
    let versions = t.versions().await;
    assert_eq!(versions.len(), 2, "the versions went with the channel");
    for v in &versions {
        assert_orphaned(v, &old_uid);
    }
    let table = kubectl_get(&t, &["mosv"]);
    assert_eq!(cell(&table, "o-a", "NO LONGER IN SYNC"), "true", "{table}");
    assert_eq!(cell(&table, "o-a", "CHANNEL"), "", "{table}");

    // A version that merely carries the channel label is not taken: a conflict, and
    // nothing changes.
    let mut labelled = ManagedOSVersion::new("o-c", Default::default());
    labelled.metadata.labels = Some([(CHANNEL_LABEL.to_string(), "ch".to_string())].into());
    t.versions_api()
        .create(&PostParams::default(), &labelled)
        .await
        .unwrap();
    source.serve(channel_data(&[("o-a", "v2"), ("o-c", "v1")]));
    t.create_channel("ch", json_spec(&uri)).await;
    let ch = t.wait_ready("ch", "FailedToSync", SYNC).await;
    assert_message_contains(
        &ch,
        "\"o-c\" already exists and is not controlled by any channel",
    );
    assert_eq!(
        ch.finalizers(),
        [] as [String; 0],
        "no finalizer on a Delete channel"
    );
    assert_orphaned(&t.versions_api().get("o-a").await.unwrap(), &old_uid);

    // Listing the orphans again adopts them; what it does not list stays an orphan.
    source.serve(channel_data(&[("o-a", "v2")]));
    let ch = t.sync_again("ch", "adopt", &ch, SYNC).await;
    assert!(
        ready_message(&ch).starts_with("synchronized 1 versions (1 adopted)"),
        "{}",
        ready_message(&ch)
    );
    let a = t.versions_api().get("o-a").await.unwrap();
    assert_eq!(controller_uid(&a), ch.uid());
    assert_eq!(a.spec.version.as_deref(), Some("v2"));
    assert_eq!(annotation(&a, NO_LONGER_IN_SYNC_ANNOTATION), None);
    assert_eq!(annotation(&a, ORPHANED_FROM_ANNOTATION), None);
    let table = kubectl_get(&t, &["mosv"]);
    assert_eq!(cell(&table, "o-a", "NO LONGER IN SYNC"), "", "{table}");
    assert_eq!(cell(&table, "o-a", "CHANNEL"), "ch", "{table}");
    assert_orphaned(&t.versions_api().get("o-b").await.unwrap(), &old_uid);

    // The finalizer follows the policy both ways.
    t.patch_spec(
        "ch",
        json!({"versionPolicy": {"onChannelDelete": "Orphan"}}),
    )
    .await;
    t.eventually("the finalizer to be added", SYNC, || async {
        (t.channel("ch").await.finalizers() == [ORPHAN_FINALIZER]).then_some(())
    })
    .await;
    t.patch_spec(
        "ch",
        json!({"versionPolicy": {"onChannelDelete": "Delete"}}),
    )
    .await;
    t.eventually("the finalizer to be removed", SYNC, || async {
        t.channel("ch").await.finalizers().is_empty().then_some(())
    })
    .await;

    // Deleted with Delete: the adopted version goes with it, the orphan stays.
    delete_channel(&t, "ch").await;
    wait_gone(&t, "ch").await;
    t.eventually("the adopted version to be collected", SYNC, || async {
        let names = t.version_names().await;
        (names == ["o-b", "o-c"]).then_some(())
    })
    .await;
    t.cleanup().await;
}

#[tokio::test]
async fn a_channel_deleted_while_the_operator_is_down_is_finished_when_it_comes_back() {
    let (mut t, ch, _served) = orphan_channel("gitops-down", channel_data(&[("d-a", "v1")])).await;
    t.kill_operator();

    delete_channel(&t, "ch").await;
    let held = t.channel("ch").await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(
        held.finalizers(),
        [ORPHAN_FINALIZER],
        "held by the finalizer"
    );

    t.start_operator(&[ALLOW_LOOPBACK]);
    wait_gone(&t, "ch").await;
    assert_orphaned(
        &t.versions_api().get("d-a").await.unwrap(),
        &ch.uid().unwrap(),
    );
    t.cleanup().await;
}

#[tokio::test]
async fn a_namespace_with_an_orphan_channel_is_deleted() {
    let (t, ch, _served) =
        orphan_channel("gitops-ns", channel_data(&[("n-a", "v1"), ("n-b", "v1")])).await;
    assert_eq!(ch.finalizers(), [ORPHAN_FINALIZER]);
    delete_namespace(&t).await;
    t.cleanup().await;
}

#[test]
fn the_docs_show_the_argo_cd_health_check_the_chart_ships() {
    let lua = std::fs::read_to_string(chart_support::chart_dir().join("files/health.lua")).unwrap();
    let doc = std::fs::read_to_string(chart_support::root().join("docs/gitops.md")).unwrap();
    let indented: String = lua
        .lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("    {l}\n")
            }
        })
        .collect();
    assert!(
        doc.contains(&indented),
        "the argocd-cm snippet of docs/gitops.md is not charts/rancheros-operator/files/health.lua (indented by 4)"
    );
}

/// States a live test cannot hold still (deletion) or that only another operator writes
/// (Stalled with Reconciling), read by both tools from a written object.
#[test]
fn both_tools_agree_on_written_states() {
    let cond =
        |t: &str, s: &str, r: &str| json!({"type": t, "status": s, "reason": r, "message": r});
    let cases = [
        (
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
            json!({"observedGeneration": 1}),
            "Terminating",
            "Progressing",
        ),
        (
            json!({}),
            json!({"observedGeneration": 1, "conditions": [cond("Ready", "True", "Synchronized")]}),
            "Current",
            "Healthy",
        ),
        (
            json!({}),
            json!({"observedGeneration": 1, "conditions": [cond("Ready", "True", "Synchronized"), cond("Reconciling", "True", "Synchronizing")]}),
            "InProgress",
            "Progressing",
        ),
        (
            json!({}),
            json!({"observedGeneration": 1, "conditions": [cond("Ready", "False", "InvalidConfiguration"), cond("Stalled", "True", "InvalidConfiguration")]}),
            "Failed",
            "Degraded",
        ),
        (
            json!({}),
            json!({"observedGeneration": 1, "conditions": [cond("Ready", "Unknown", "Synchronizing")]}),
            "InProgress",
            "Progressing",
        ),
    ];
    let lua = chart_support::chart_dir().join("files/health.lua");
    for (meta, status, kstatus, argo) in cases {
        let mut metadata = json!({"name": "ch", "namespace": "ns", "generation": 1});
        metadata
            .as_object_mut()
            .unwrap()
            .extend(meta.as_object().unwrap().clone());
        let object = json!({"apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
                            "metadata": metadata, "spec": {}, "status": status});
        let got = (
            gitopscheck(&["kstatus", "-"], &object).0,
            gitopscheck(&["argocd", lua.to_str().unwrap(), "-"], &object).0,
        );
        assert_eq!(
            (got.0.as_str(), got.1.as_str()),
            (kstatus, argo),
            "{object}"
        );
    }
}
