//! The read-only watches of what could refuse a version write (webhook configurations,
//! admission policies and their bindings, ResourceQuotas), and the question a sync asks of
//! them: dry-run first, or write directly? Until a watch holds its first list, or while the
//! operator may not watch (RBAC left out, forbidden: the watch keeps retrying), the answer
//! is "dry-run", as if something could refuse.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tracing::{debug, info};

use super::{Observed, refusers};

/// What a sync does before its writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing can refuse: write directly.
    Direct,
    /// Dry-run every write first; why (for the sync's log line).
    DryRun(String),
}

/// The stores the watches fill; each sync reads them.
#[derive(Clone)]
pub struct Admission {
    validating: Store<ValidatingWebhookConfiguration>,
    mutating: Store<MutatingWebhookConfiguration>,
    policies: Store<ValidatingAdmissionPolicy>,
    bindings: Store<ValidatingAdmissionPolicyBinding>,
    /// One store per watched scope (a namespace, or all: `None`).
    quotas: Vec<(Option<String>, Store<ResourceQuota>)>,
    /// `--dry-run-versions=always`: every sync dry-runs, whatever the watches hold.
    always: bool,
}

impl Admission {
    /// The stores, and the watches that fill them (quotas in each of `scopes`), which run
    /// until dropped. With `always`, nothing is watched and every sync dry-runs.
    pub fn watch(
        client: &Client,
        scopes: &[Option<String>],
        always: bool,
    ) -> (Self, impl Future<Output = ()> + Send + use<>) {
        let (validating, w1) = reflector::store();
        let (mutating, w2) = reflector::store();
        let (policies, w3) = reflector::store();
        let (bindings, w4) = reflector::store();
        let mut feeds: Vec<futures::future::BoxFuture<'static, ()>> = Vec::new();
        let mut quotas = Vec::new();
        if !always {
            feeds.push(feed(
                Api::all(client.clone()),
                w1,
                |c: &mut ValidatingWebhookConfiguration| {
                    drop_ca_bundles(&mut c.webhooks, |w| &mut w.client_config)
                },
            ));
            feeds.push(feed(
                Api::all(client.clone()),
                w2,
                |c: &mut MutatingWebhookConfiguration| {
                    drop_ca_bundles(&mut c.webhooks, |w| &mut w.client_config)
                },
            ));
            feeds.push(feed(Api::all(client.clone()), w3, |_: &mut _| {}));
            feeds.push(feed(Api::all(client.clone()), w4, |_: &mut _| {}));
            for scope in scopes {
                let (store, writer) = reflector::store();
                let api: Api<ResourceQuota> = match scope {
                    Some(ns) => Api::namespaced(client.clone(), ns),
                    None => Api::all(client.clone()),
                };
                // Only what decides: which keys a quota counts.
                feeds.push(feed(api, writer, |q: &mut ResourceQuota| {
                    q.status = None;
                    q.metadata.managed_fields = None;
                }));
                quotas.push((scope.clone(), store));
            }
        }
        let admission = Admission {
            validating,
            mutating,
            policies,
            bindings,
            quotas,
            always,
        };
        if !always {
            feeds.push(admission.clone().listed().boxed());
        }
        let run = futures::future::join_all(feeds).map(drop);
        (admission, run)
    }

    /// Says (info) once every watch holds its first list; never ends.
    async fn listed(self) {
        let _ = self.validating.wait_until_ready().await;
        let _ = self.mutating.wait_until_ready().await;
        let _ = self.policies.wait_until_ready().await;
        let _ = self.bindings.wait_until_ready().await;
        for (_, store) in &self.quotas {
            let _ = store.wait_until_ready().await;
        }
        info!(
            "admission watches listed: syncs dry-run their version writes only where something could refuse them"
        );
        futures::future::pending::<()>().await;
    }

    /// Whether a sync in `namespace` dry-runs its writes first, and why.
    pub fn plan(&self, namespace: &str) -> Plan {
        if self.always {
            return Plan::DryRun("--dry-run-versions=always".into());
        }
        let quotas = self
            .quotas
            .iter()
            .find(|(scope, _)| scope.as_deref().is_none_or(|s| s == namespace))
            .map(|(_, store)| store);
        let unwatched = [
            (!ready(&self.validating)).then_some("validatingwebhookconfigurations"),
            (!ready(&self.mutating)).then_some("mutatingwebhookconfigurations"),
            (!ready(&self.policies)).then_some("validatingadmissionpolicies"),
            (!ready(&self.bindings)).then_some("validatingadmissionpolicybindings"),
            (!quotas.is_some_and(ready)).then_some("resourcequotas"),
        ];
        let unwatched: Vec<&str> = unwatched.into_iter().flatten().collect();
        if !unwatched.is_empty() {
            return Plan::DryRun(format!(
                "not watched (yet, or not allowed): {}",
                unwatched.join(", ")
            ));
        }
        let observed = Observed {
            validating_webhooks: self.validating.state(),
            mutating_webhooks: self.mutating.state(),
            policies: self.policies.state(),
            bindings: self.bindings.state(),
            quotas: quotas.map(Store::state).unwrap_or_default(),
        };
        let found = refusers(&observed, namespace);
        if found.is_empty() {
            Plan::Direct
        } else {
            Plan::DryRun(format!("may refuse: {}", crate::text::list(&found, ", ")))
        }
    }
}

/// Whether a store holds its first list.
fn ready<K>(store: &Store<K>) -> bool
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .wait_until_ready()
        .now_or_never()
        .is_some_and(|r| r.is_ok())
}

/// Webhooks' CA bundles decide nothing here and can be large: they are not kept.
fn drop_ca_bundles<W>(
    webhooks: &mut Option<Vec<W>>,
    client_config: fn(&mut W) -> &mut WebhookClientConfig,
) {
    for webhook in webhooks.iter_mut().flatten() {
        client_config(webhook).ca_bundle = None;
    }
}

/// One watch filling `writer`, objects trimmed by `lean`; logs (debug) each object that
/// comes and goes, and once (info) when the watch fails, e.g. forbidden.
fn feed<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    lean: fn(&mut K),
) -> futures::future::BoxFuture<'static, ()>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let kind = K::plural(&()).into_owned();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut failed = false;
    watcher(api, watcher::Config::default())
        .modify(lean)
        .backoff(Patient::default())
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let name = shown(o.meta());
                    if seen.insert(name.clone()) {
                        debug!("admission: watching {kind} {name}");
                    }
                }
                Ok(watcher::Event::Delete(o)) => {
                    let name = shown(o.meta());
                    seen.remove(&name);
                    debug!("admission: {kind} {name} gone");
                }
                Ok(_) => {}
                Err(e) if !failed => {
                    failed = true;
                    info!("admission: cannot watch {kind} ({e}); syncs dry-run their writes until it can");
                }
                Err(_) => {}
            }
            futures::future::ready(())
        })
        .boxed()
}

/// Retries of a failed admission watch: 1 s, doubling to 5 min. A watch the operator may not
/// make (RBAC left out) fails every time; kube's default backoff would retry it, and warn,
/// every 30 s for ever.
struct Patient {
    next: Duration,
}

const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(300);

impl Default for Patient {
    fn default() -> Self {
        Patient { next: FIRST_RETRY }
    }
}

impl Iterator for Patient {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = now.saturating_mul(2).min(LAST_RETRY);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for Patient {
    fn reset(&mut self) {
        self.next = FIRST_RETRY;
    }
}

/// An object as the log names it: `NAME`, or `NAMESPACE/NAME`.
fn shown(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    let name = meta.name.clone().unwrap_or_default();
    match &meta.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn a_failing_watch_retries_from_one_second_doubling_to_five_minutes() {
        let mut b = Patient::default();
        let secs: Vec<u64> = b.by_ref().take(11).map(|d| d.as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        b.reset();
        assert_eq!(b.next(), Some(FIRST_RETRY));
    }

    #[test]
    fn always_dry_runs_and_unlisted_watches_dry_run() {
        let client = || {
            let (service, _handle) = tower_test::mock::pair::<
                http::Request<kube::client::Body>,
                http::Response<kube::client::Body>,
            >();
            Client::new(service, "default")
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (always, _) = Admission::watch(&client(), &[None], true);
            assert_eq!(
                always.plan("ns"),
                Plan::DryRun("--dry-run-versions=always".into())
            );
            // Nothing listed yet (the watches are not even polled).
            let (auto, _) = Admission::watch(&client(), &[Some("ns".into())], false);
            let Plan::DryRun(why) = auto.plan("ns") else {
                panic!("writes directly before anything is listed")
            };
            assert!(
                why.starts_with(
                    "not watched (yet, or not allowed): validatingwebhookconfigurations, "
                ),
                "{why}"
            );
            assert!(why.ends_with("resourcequotas"), "{why}");
        });
    }
}
