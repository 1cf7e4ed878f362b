//! Reconcile tests over the in-memory fake (`fake`): what the controller does between
//! the decision core and the API server, run in milliseconds. What only the API server can
//! tell (dry runs, admission, quotas, watches, pods that run) stays with the cluster tests.

use std::time::Duration;

use serde_json::{Value, json};

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::api::{CHANNEL_LABEL, FIELD_MANAGER};
use crate::controller::context::Reporter;
use crate::controller::io::PodIo;
use crate::fetch::{Response, Validators};
use crate::syncer::Settings;
use crate::syncer::tests::{framed, ready_pod_status, settings};
use fake::FakeIo;

struct Harness {
    ctx: Arc<Context<FakeIo>>,
    serial: u32,
}

fn key(ns: &str, name: &str) -> Key {
    ObjectRef::new(name).within(ns)
}

fn custom() -> Value {
    json!({"type": "custom", "options": {"image": "runner:1"}})
}

fn json_channel() -> Value {
    json!({"type": "json", "options": {"uri": "https://example.com/c.json"}})
}

const DATA: &str = r#"[{"metadata":{"name":"v1"},"spec":{"version":"v1","type":"container","metadata":{"upgradeImage":"r/i:v1"}}}]"#;

impl Harness {
    fn new(settings: Settings) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: "test".into(),
        };
        Harness {
            ctx: Arc::new(Context::new(
                FakeIo::default(),
                settings,
                Arc::default(),
                reporter,
            )),
            serial: 0,
        }
    }

    fn slots(max: usize) -> Self {
        Harness::new(Settings {
            max_concurrent_syncs: max,
            ..settings()
        })
    }

    /// Creates a channel (a new uid each time) as the API server would.
    fn create(&mut self, ns: &str, name: &str, spec: Value) -> Key {
        self.serial += 1;
        let mut ch = ManagedOSVersionChannel::new(name, serde_json::from_value(spec).unwrap());
        ch.metadata.namespace = Some(ns.into());
        ch.metadata.uid = Some(format!("uid-{name}-{}", self.serial));
        ch.metadata.generation = Some(1);
        let key = key(ns, name);
        self.ctx.io.world().channels.insert(key.clone(), ch);
        key
    }

    /// Deletes a channel; its pod goes with it (owner references). The watch reports it.
    fn delete(&self, key: &Key) {
        let gone = {
            let mut world = self.ctx.io.world();
            world.pods.remove(key);
            world.channels.remove(key).unwrap()
        };
        self.ctx.forget(key, gone.uid().as_deref());
    }

    /// One reconciliation of the channel as the cache shows it.
    async fn reconcile(&self, key: &Key) -> Result<(Action, pipeline::Counts), Error> {
        let ch = self.ctx.io.world().channels.get(key).cloned().unwrap();
        let result = reconcile_counted(Arc::new(ch), &self.ctx).await;
        if let Ok((_, counts)) = &result {
            assert!(
                counts.decisions <= counts.observations,
                "{counts:?}: a decision without a new observation"
            );
        }
        result
    }

    async fn ok(&self, key: &Key) -> pipeline::Counts {
        self.reconcile(key).await.unwrap().1
    }

    /// The channel's spec changes (a new generation).
    fn bump(&self, key: &Key) {
        let mut world = self.ctx.io.world();
        let ch = world.channels.get_mut(key).unwrap();
        ch.metadata.generation = ch.metadata.generation.map(|g| g + 1);
    }

    /// Changes the channel as the API server has it.
    fn edit(&self, key: &Key, change: impl FnOnce(&mut ManagedOSVersionChannel)) {
        change(self.ctx.io.world().channels.get_mut(key).unwrap());
    }

    /// The channel is deleted: the API server keeps it while a finalizer is there.
    fn mark_deleted(&self, key: &Key) {
        self.edit(key, |ch| {
            ch.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ))
        });
    }

    fn channel(&self, key: &Key) -> ManagedOSVersionChannel {
        self.ctx.io.world().channels.get(key).cloned().unwrap()
    }

    fn ready_reason(&self, key: &Key) -> String {
        let ch = self.channel(key);
        let status = ch.status.unwrap_or_default();
        status
            .condition("Ready")
            .map(|c| c.reason.clone())
            .unwrap_or_default()
    }

    fn queued(&self, key: &Key) -> bool {
        let status = self.channel(key).status.unwrap_or_default();
        status
            .condition("Reconciling")
            .is_some_and(|c| c.message.starts_with("queued"))
    }

    fn has_pod(&self, key: &Key) -> bool {
        self.ctx.io.world().pods.contains_key(key)
    }

    /// The channel's pod turns to this status.
    fn pod_status(&self, key: &Key, status: Value) {
        let mut world = self.ctx.io.world();
        let pod = world.pods.get_mut(key).unwrap();
        pod.status = Some(serde_json::from_value(status).unwrap());
    }

    fn evict(&self, key: &Key) {
        self.pod_status(key, json!({"phase": "Failed", "reason": "Evicted"}));
    }

    fn calls(&self, what: &str) -> usize {
        let world = self.ctx.io.world();
        world.calls.iter().filter(|c| c.starts_with(what)).count()
    }
}

#[tokio::test]
async fn a_channel_created_again_under_the_same_name_starts_clean() {
    let mut h = Harness::slots(1);
    let old = h.create("a", "c", custom());
    h.ok(&old).await;
    let old_uid = h.channel(&old).uid();
    // Deleted and created again while the watch was down: the re-list shows the new one
    // first, and reports the old one gone only after the new one's first reconciliation.
    {
        let mut world = h.ctx.io.world();
        world.pods.remove(&old);
        world.channels.remove(&old);
    }
    let new = h.create("a", "c", custom());
    h.ok(&new).await;
    assert!(
        h.has_pod(&new),
        "the new channel inherited a held slot or lost it"
    );
    let other = h.create("a", "other", custom());
    h.ok(&other).await;
    assert!(h.queued(&other));
    // The old one's late "gone" must not free the new one's slot (held from the start of
    // its sync, also before the pod cache shows its pod).
    h.ctx.io.world().pods_unseen = true;
    h.ctx.forget(&old, old_uid.as_deref());
    h.ok(&other).await;
    assert!(
        !h.has_pod(&other),
        "two syncs run with one slot: the old channel's gone freed the new one's slot"
    );
}

#[tokio::test]
async fn a_cache_that_lags_makes_the_next_attempt_read_fresh_once() {
    let mut h = Harness::slots(1);
    let c = h.create("a", "c", custom());
    h.ctx.io.world().caches_lag = true;
    h.ok(&c).await;
    h.ctx.io.world().caches_lag = false;
    assert_eq!(h.calls("read_channel"), 0);
    h.ok(&c).await;
    assert_eq!((h.calls("read_channel"), h.calls("read_pod")), (1, 1));
    h.ok(&c).await;
    assert_eq!(
        h.calls("read_channel"),
        1,
        "read fresh again with the cache caught up"
    );
}

#[tokio::test]
async fn an_api_error_is_a_failed_sync_and_a_status_that_cannot_be_written_backs_off() {
    let mut h = Harness::new(settings());
    let c = h.create("a", "c", json_channel());
    h.ctx.io.world().source = Some(Box::new(|_: &Validators| Response::Body {
        data: DATA.as_bytes().to_vec(),
        validators: Validators::default(),
        changelogs: None,
    }));
    h.ctx.io.world().failing.insert("versions", 429);
    h.ok(&c).await;
    let status = h.channel(&c).status.unwrap();
    assert_eq!(status.failed_synchronization_attempts, 1);
    let ready = status.condition("Ready").unwrap();
    assert_eq!(ready.reason, "FailedToSync");
    assert!(
        ready
            .message
            .starts_with("listing ManagedOSVersions in a: "),
        "{}",
        ready.message
    );
    assert_eq!(h.ctx.io.world().events.len(), 1);
    // Even the status cannot be written: error_policy, by the one backoff policy.
    h.ctx.io.world().failing.insert("patch_status", 503);
    let ch = Arc::new(h.channel(&c));
    let mut waits = Vec::new();
    for _ in 0..5 {
        // A spec change: a sync at once, whose status cannot be written.
        h.bump(&c);
        let e = h.reconcile(&c).await.unwrap_err();
        assert!(
            e.to_string().starts_with("writing the status of channel c"),
            "{e}"
        );
        waits.push(error_policy(ch.clone(), &e, h.ctx.clone()));
    }
    let policy: Vec<Action> = (1..=5)
        .map(|n| {
            let wait =
                crate::syncer::backoff(h.ctx.settings.retry_delay, n, Duration::from_secs(3600));
            Action::requeue(wait)
        })
        .collect();
    assert_eq!(waits, policy);
    // A reconciliation that succeeds starts the count again.
    h.ctx.io.world().failing.clear();
    h.ok(&c).await;
    h.ctx.io.world().failing.insert("patch_status", 503);
    h.bump(&c);
    let e = h.reconcile(&c).await.unwrap_err();
    assert_eq!(
        error_policy(ch, &e, h.ctx.clone()),
        Action::requeue(h.ctx.settings.retry_delay)
    );
}

#[test]
fn error_policy_and_failed_syncs_back_off_alike() {
    let s = settings();
    let interval = Duration::from_secs(3600);
    let policy: Vec<Duration> = (1..=5)
        .map(|n| crate::syncer::backoff(s.retry_delay, n, interval))
        .collect();
    let secs = |d: &[Duration]| d.iter().map(Duration::as_secs).collect::<Vec<_>>();
    assert_eq!(secs(&policy), [10, 20, 40, 3600, 3600]);
}

#[tokio::test]
async fn a_repeated_failure_is_one_event_with_a_count_and_a_namesake_gets_its_own() {
    let mut h = Harness::new(Settings {
        retry_delay: Duration::ZERO,
        ..settings()
    });
    let c = h.create("a", "c", json_channel());
    h.ctx.io.world().source = Some(Box::new(|_: &Validators| {
        Response::Failed("fetching https://example.com/c.json: HTTP 500".into())
    }));
    for _ in 0..3 {
        h.ok(&c).await;
    }
    {
        let world = h.ctx.io.world();
        assert_eq!(world.events.len(), 1, "{:?}", world.calls);
        assert_eq!(world.events[0].series.as_ref().map(|s| s.count), Some(3));
    }
    let old_uid = h.channel(&c).uid();
    h.ctx.io.world().channels.remove(&c);
    let again = h.create("a", "c", json_channel());
    h.ok(&again).await;
    // The old one's late "gone" leaves the new one's series alone.
    h.ctx.forget(&c, old_uid.as_deref());
    h.ok(&again).await;
    let world = h.ctx.io.world();
    assert_eq!(
        world.events.len(),
        2,
        "the namesake added to the old channel's series"
    );
    assert_eq!(world.events[1].series.as_ref().map(|s| s.count), Some(2));
}

#[tokio::test]
async fn decide_runs_once_per_observation() {
    let mut h = Harness::slots(1);
    let c = h.create("a", "c", custom());
    let first = h.ok(&c).await;
    assert_eq!((first.decisions, first.observations), (1, 1));
    // Queued: the slot is asked for before deciding, so there is one decision.
    let w = h.create("a", "w", custom());
    let queued = h.ok(&w).await;
    assert!(h.queued(&w));
    assert_eq!((queued.decisions, queued.observations), (1, 1));
    // The output is ready: the pod, then the display log and the versions, read at once.
    h.pod_status(&c, ready_pod_status());
    h.ctx
        .io
        .world()
        .display_logs
        .insert(c.clone(), framed(DATA));
    let synced = h.ok(&c).await;
    assert_eq!(h.ready_reason(&c), "Synchronized");
    assert_eq!((synced.decisions, synced.observations), (2, 3));
    assert!(h.ctx.io.world().versions.contains_key(&key("a", "v1")));
}

#[tokio::test]
async fn an_orphan_channel_gets_the_finalizer_and_leaves_its_versions_when_deleted() {
    use crate::api::{NO_LONGER_IN_SYNC_ANNOTATION, ORPHAN_FINALIZER, ORPHANED_FROM_ANNOTATION};
    let mut h = Harness::new(settings());
    let mut spec = json_channel();
    spec["versionPolicy"] = json!({"onChannelDelete": "Orphan"});
    let c = h.create("a", "c", spec);
    h.ctx.io.world().source = Some(Box::new(|_: &Validators| Response::Body {
        data: DATA.as_bytes().to_vec(),
        validators: Validators::default(),
        changelogs: None,
    }));
    h.ok(&c).await;
    assert_eq!(h.channel(&c).finalizers(), [ORPHAN_FINALIZER]);
    let v1 = key("a", "v1");
    let uid = h.channel(&c).uid().unwrap();
    let owned = |h: &Harness| h.ctx.io.world().versions[&v1].owner_references().to_vec();
    assert_eq!(owned(&h)[0].uid, uid, "the sync wrote v1");
    // Deleted: the API server keeps it while the finalizer is there.
    h.mark_deleted(&c);
    h.ok(&c).await;
    assert!(owned(&h).is_empty(), "v1 still owned: the GC would take it");
    let annotations = h.ctx.io.world().versions[&v1].annotations().clone();
    assert_eq!(annotations[NO_LONGER_IN_SYNC_ANNOTATION], "true");
    assert_eq!(annotations[ORPHANED_FROM_ANNOTATION], uid);
    assert!(
        h.channel(&c).finalizers().is_empty(),
        "the channel is let go"
    );
    let reasons: Vec<_> = h
        .ctx
        .io
        .world()
        .events
        .iter()
        .map(|e| e.reason.clone())
        .collect();
    assert!(
        reasons.contains(&Some("VersionsOrphaned".into())),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn the_operators_own_pod_is_known_also_when_its_status_lost_the_record() {
    let mut h = Harness::slots(2);
    let k = h.create("a", "own", custom());
    h.ok(&k).await;
    assert!(h.has_pod(&k));
    // A CRD without the field (an older one) prunes it from the status.
    if let Some(status) = h
        .ctx
        .io
        .world()
        .channels
        .get_mut(&k)
        .unwrap()
        .status
        .as_mut()
    {
        status.syncer_pod_uid = None;
    }
    h.ok(&k).await;
    assert!(h.has_pod(&k), "the operator replaced its own pod");
    assert_eq!(h.calls("delete_pod"), 0);
}

mod fake;
mod oci;

mod drift;

mod slots;

#[tokio::test]
async fn a_version_of_another_channel_is_a_conflict_though_the_cache_gives_each_sync_its_own() {
    let mut h = Harness::new(settings());
    let c = h.create("a", "c", json_channel());
    let d = h.create("a", "d", json_channel());
    h.ctx.io.world().source = Some(Box::new(|_: &Validators| Response::Body {
        data: DATA.as_bytes().to_vec(),
        validators: Validators::default(),
        changelogs: None,
    }));
    h.ok(&c).await;
    let owner = |h: &Harness| {
        h.ctx.io.world().versions[&key("a", "v1")].owner_references()[0]
            .name
            .clone()
    };
    assert_eq!(owner(&h), "c");
    // d lists the same name: it is c's, so d's sync fails and writes nothing.
    h.ok(&d).await;
    assert_eq!(owner(&h), "c", "d took over c's version");
    let status = h.channel(&d).status.unwrap_or_default();
    let message = &status.condition("Ready").unwrap().message;
    assert!(
        message.contains("already exists and is controlled by"),
        "{message}"
    );
}

mod owned_objects;

mod serving;
