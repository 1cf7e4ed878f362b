//! Control-plane faults on the local cluster: the API server killed mid-sync and started
//! again 20 s later, etcd killed and started again, the kubelet killed while a syncer pod
//! runs. The operator runs as the chart runs it (leader election on); when it exits (on its
//! lost Lease, by design), the test starts it again as the kubelet would restart its
//! container. Every channel must end Synchronized with exactly its versions, no syncer pod
//! left (each deleted), and a channel created after the fault must sync within a minute.
//!
//! These tests stop parts of the shared cluster, so scripts/lib/run-tests runs this binary
//! alone, and its tests one at a time (`ONE_AT_A_TIME`).

use crate::common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use kube::api::ListParams;

/// How long the channels have to converge once the component is back.
const CONVERGE: Duration = Duration::from_secs(180);
/// How long a channel created after the fault has to sync.
const NEW_CHANNEL: Duration = Duration::from_secs(60);

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `scripts/cluster kill|start COMPONENT`.
fn cluster(verb: &str, component: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cluster");
    let out = Command::new(script)
        .args([verb, component])
        .output()
        .expect("running scripts/cluster");
    assert!(
        out.status.success(),
        "scripts/cluster {verb} {component} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The scheduler and the controller manager started again if they exited, as a node's
/// kubelet restarts its static pods: after an API server outage, kube-scheduler exits on
/// purpose when it finds its cache inconsistent ("Scheduler cache is corrupted"), and a
/// test about the operator must not fail on a scheduler nobody restarted.
fn restart_exited_control_plane() {
    for component in ["kube-scheduler", "kube-controller-manager"] {
        cluster("start", component);
    }
}

/// A component killed for the length of a test step: started again when dropped, also
/// when the test fails, so that the cluster outlives a failed test.
struct Down(&'static str);

impl Down {
    fn kill(component: &'static str) -> Self {
        cluster("kill", component);
        Down(component)
    }

    fn start(self) {
        cluster("start", self.0);
        std::mem::forget(self);
    }
}

impl Drop for Down {
    fn drop(&mut self) {
        cluster("start", self.0);
    }
}

/// The operator as a Deployment runs it: leader election on, restarted whenever it exits.
struct Supervised {
    restarts: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Supervised {
    fn start(t: &mut TestNs) -> Self {
        let args = vec![
            "--leader-election=true".to_string(),
            format!("--leader-election-namespace={}", t.ns),
            "--leader-election-lease=faults".to_string(),
            "--retry-delay=2s".to_string(),
            "--queue-poll=2s".to_string(),
        ];
        let first = spawn(t, &args);
        let restarts = Arc::new(Mutex::new(0));
        // The log paths of later runs are the namespace's: spawning needs the TestNs, so
        // the loop gets a second handle on it.
        let ns = t.ns.clone();
        let counted = restarts.clone();
        let task = tokio::spawn(async move {
            let mut child = first;
            let mut run = 100;
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if child.try_wait().ok().flatten().is_none() {
                    continue;
                }
                // As the kubelet's restart back-off, short: the test waits for convergence.
                tokio::time::sleep(Duration::from_secs(1)).await;
                run += 1;
                *counted.lock().unwrap() += 1;
                child = respawn(&ns, run, &args);
            }
        });
        Supervised { restarts, task }
    }

    fn restarts(&self) -> usize {
        *self.restarts.lock().unwrap()
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // The child is killed with the task's `Spawned` guard.
        self.task.abort();
    }
}

fn spawn(t: &mut TestNs, args: &[String]) -> Spawned {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    t.spawn_operator(&args, &[("POD_NAME", "faults-operator")])
}

/// Another run of the operator (the first came from `TestNs::spawn_operator`), logging next
/// to the test's other logs.
fn respawn(ns: &str, run: usize, args: &[String]) -> Spawned {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    spawn_operator_for(ns, run, &args, &[("POD_NAME", "faults-operator")])
}

/// Every log of the namespace's operator runs, restarts included.
fn all_logs(ns: &str) -> String {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("operator-logs");
    let mut logs: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_else(|_| Vec::new());
    logs.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("{ns}-")))
    });
    logs.sort();
    logs.iter()
        .map(|p| {
            format!(
                "--- {} ---\n{}",
                p.display(),
                std::fs::read_to_string(p).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A runner script printing `count` versions named `v1`... (a channel too large for a
/// command line, made by the runner itself).
fn many_versions_script(count: usize) -> String {
    format!(
        r#"{{ printf '['; for i in $(seq 1 {count}); do [ "$i" -gt 1 ] && printf ','; printf '{{"metadata":{{"name":"v%s"}},"spec":{{"version":"v%s","type":"container","metadata":{{"upgradeImage":"registry.example/os:v%s","displayName":"OS ü %s"}}}}}}' "$i" "$i" "$i" "$i"; done; printf ']'; }} > /output/data"#
    )
}

/// Polls until every channel is Synchronized for its generation with exactly `want`
/// versions, and every syncer pod is deleted; API errors (the control plane settling) are
/// retried, not fatal.
async fn wait_converged(t: &TestNs, want: &[(&str, usize)], timeout: Duration) {
    let start = Instant::now();
    loop {
        restart_exited_control_plane();
        let last = match converged(t, want).await {
            Ok(()) => return,
            Err(why) => why,
        };
        assert!(
            start.elapsed() < timeout,
            "not converged {timeout:?} after the fault: {last}\n{}",
            all_logs(&t.ns)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn converged(t: &TestNs, want: &[(&str, usize)]) -> Result<(), String> {
    let versions = t
        .versions_api()
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    for (name, count) in want {
        let ch = t.channels().get(name).await.map_err(|e| e.to_string())?;
        let synced = ready_reason(&ch).as_deref() == Some("Synchronized")
            && ready(&ch).and_then(|c| c.observed_generation) == ch.metadata.generation
            && !reconciling(&ch);
        if !synced {
            return Err(format!(
                "channel {name}: {:?} {}",
                ready_reason(&ch),
                ready_message(&ch)
            ));
        }
        let have = versions
            .items
            .iter()
            .filter(|v| {
                v.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("rancheros.cattle.io/channel"))
                    == Some(&name.to_string())
            })
            .count();
        if have != *count {
            return Err(format!("channel {name}: {have} versions, want {count}"));
        }
    }
    let pods = t
        .pods()
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    // A pod the operator has deleted is done with; the kubelet confirming the deletion
    // after its own outage (tens of seconds) is not the operator's to wait for.
    let left = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count();
    if left > 0 {
        return Err(format!("{left} syncer pod(s) left"));
    }
    Ok(())
}

/// After the fault: a new channel syncs within a minute, and no run of the operator
/// panicked.
async fn after_the_fault(t: &TestNs) {
    t.create_custom("after", &channel_data(&[("n1", "v1")]))
        .await;
    wait_converged(t, &[("after", 1)], NEW_CHANNEL).await;
    let logs = all_logs(&t.ns);
    assert!(
        !logs.contains("panicked"),
        "an operator run panicked:\n{logs}"
    );
}

/// Waits until the first versions are written (a sync's writes under way).
async fn writes_under_way(t: &TestNs) {
    t.eventually(
        "the big channel's writes to be under way",
        CONVERGE,
        || async {
            let n = t.versions_api().list(&ListParams::default()).await.ok()?;
            (!n.items.is_empty()).then_some(())
        },
    )
    .await;
}

/// A fault test's start: the cluster to itself (the guard), a namespace, and an operator
/// for it, supervised.
async fn fault_test(name: &str) -> (tokio::sync::MutexGuard<'static, ()>, TestNs, Supervised) {
    let one = ONE_AT_A_TIME.lock().await;
    let mut t = TestNs::new(name).await;
    let operator = Supervised::start(&mut t);
    (one, t, operator)
}

/// `component` down for `secs`, then: the channels converge to `want`, a new channel
/// syncs, and the test's namespace goes.
async fn outage(
    t: TestNs,
    operator: Supervised,
    component: &'static str,
    secs: u64,
    want: &[(&str, usize)],
) {
    let down = Down::kill(component);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    down.start();
    wait_converged(&t, want, CONVERGE).await;
    after_the_fault(&t).await;
    eprintln!("operator restarts: {}", operator.restarts());
    drop(operator);
    t.cleanup().await;
}

#[tokio::test]
async fn the_api_server_killed_mid_sync_and_back_20s_later_loses_and_doubles_nothing() {
    let (_one, t, operator) = fault_test("fault-apiserver").await;
    // A large custom channel whose versions are being written when the API server dies, and
    // a slow one whose runner finishes while it is down (its display container then starts
    // with no API server to report to: the case that once stayed Synchronizing for good).
    t.create_channel("big", custom_spec(&many_versions_script(1500)))
        .await;
    let slow = channel_data(&[("s1", "v1"), ("s2", "v2")]);
    t.create_channel("slow", custom_spec(&slow_script(6, &slow)))
        .await;
    writes_under_way(&t).await;
    outage(
        t,
        operator,
        "kube-apiserver",
        20,
        &[("big", 1500), ("slow", 2)],
    )
    .await;
}

#[tokio::test]
async fn etcd_killed_mid_sync_and_back_15s_later_loses_and_doubles_nothing() {
    let (_one, t, operator) = fault_test("fault-etcd").await;
    t.create_channel("big", custom_spec(&many_versions_script(1000)))
        .await;
    writes_under_way(&t).await;
    outage(t, operator, "etcd", 15, &[("big", 1000)]).await;
}

#[tokio::test]
async fn the_kubelet_killed_while_a_syncer_pod_runs_and_back_20s_later_converges() {
    let (_one, t, operator) = fault_test("fault-kubelet").await;
    let data = channel_data(&[("k1", "v1"), ("k2", "v2")]);
    t.create_channel("slow", custom_spec(&slow_script(8, &data)))
        .await;
    t.wait_pod_recorded("slow", CONVERGE).await;
    // The runner sleeps; the node's agent goes away under it and comes back.
    outage(t, operator, "kubelet", 20, &[("slow", 2)]).await;
}
