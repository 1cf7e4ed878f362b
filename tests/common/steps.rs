//! The steps the test files repeat: a namespace with its operator, a channel whose runner
//! prints given versions, a sync asked for and waited on, the assertions on the Ready
//! condition, Secrets, and objects waited away.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Resource};
use rancheros_operator::api::ManagedOSVersionChannel;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{TestNs, custom_spec, ready_message, ready_reason, write_script};

impl TestNs {
    /// [`TestNs::new`], with the operator started (`extra`: its flags).
    pub async fn started(test: &str, extra: &[&str]) -> Self {
        let mut t = Self::new(test).await;
        t.start_operator(extra);
        t
    }

    /// [`TestNs::new`] with the ResourceQuota `quota` of `hard` counted, then the operator
    /// started: its watches see the quota from the start.
    pub async fn started_under_quota(test: &str, quota: &str, hard: Value) -> Self {
        let mut t = Self::new(test).await;
        super::create_quota(&t, quota, hard).await;
        t.start_operator(&[]);
        t
    }

    /// A custom channel whose runner prints `data` (as [`super::channel_data`] makes it).
    pub async fn create_custom(&self, name: &str, data: &Value) -> ManagedOSVersionChannel {
        self.create_channel(name, custom_spec(&write_script(data)))
            .await
    }

    /// Creates the channel and waits until it is Synchronized.
    pub async fn create_synced(
        &self,
        name: &str,
        spec: Value,
        timeout: Duration,
    ) -> ManagedOSVersionChannel {
        self.create_channel(name, spec).await;
        self.wait_ready(name, "Synchronized", timeout).await
    }

    /// [`TestNs::create_custom`], waited on until Synchronized.
    pub async fn synced_custom(
        &self,
        name: &str,
        data: &Value,
        timeout: Duration,
    ) -> ManagedOSVersionChannel {
        self.create_synced(name, custom_spec(&write_script(data)), timeout)
            .await
    }

    /// Asks for a sync of `name` (the request's value: `why`) and waits for the attempt that
    /// follows the one recorded in `before`.
    pub async fn sync_again(
        &self,
        name: &str,
        why: &str,
        before: &ManagedOSVersionChannel,
        timeout: Duration,
    ) -> ManagedOSVersionChannel {
        self.request_sync(name, why).await;
        self.wait_next_attempt(name, before, timeout).await
    }

    /// Waits until the operator's log says its admission watches hold their first lists
    /// and `object` (`KIND NAME`, the kind plural; `NS/NAME` for a ResourceQuota; `None`:
    /// just the lists): from then on its syncs know what could refuse a version write.
    pub async fn wait_admission_watched(&self, object: Option<&str>) {
        let listed = "admission watches listed";
        let line = object.map(|o| format!("admission: watching {o}"));
        self.eventually(
            &format!("the operator's admission watches ({listed}, {line:?})"),
            Duration::from_secs(90),
            || async {
                let log = self.operator_log();
                let seen = log.contains(listed) && line.as_ref().is_none_or(|l| log.contains(l));
                seen.then_some(())
            },
        )
        .await;
    }

    /// A Role `op` with `rules` in the test's namespace, bound to its ServiceAccount `sa`.
    pub async fn grant_role(&self, sa: &str, rules: Vec<Value>) {
        use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
        let role: Role =
            serde_json::from_value(json!({"metadata": {"name": "op"}, "rules": rules})).unwrap();
        Api::<Role>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "op"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": self.ns}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "op"}
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }

    /// Waits until `api` has no object `name` (`what` names it in the failure).
    pub async fn wait_gone<K>(&self, api: &Api<K>, name: &str, what: &str, timeout: Duration)
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        self.eventually(what, timeout, || async {
            api.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await
    }

    /// The namespace's Secrets.
    pub fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates the Secret `name` of `type_` (None: Opaque) with `string_data`.
    pub async fn create_secret(&self, name: &str, type_: Option<&str>, string_data: Value) {
        let mut secret = json!({"metadata": {"name": name}, "stringData": string_data});
        if let Some(type_) = type_ {
            secret["type"] = json!(type_);
        }
        let secret: Secret = serde_json::from_value(secret).unwrap();
        self.secrets()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("creating Secret {name}: {e}"));
    }

    /// A `kubernetes.io/dockerconfigjson` Secret of `config` (`{"auths": {...}}`).
    pub async fn create_pull_secret(&self, name: &str, config: Value) {
        let data = json!({".dockerconfigjson": config.to_string()});
        self.create_secret(name, Some("kubernetes.io/dockerconfigjson"), data)
            .await
    }

    /// Merge-patches the Secret's `stringData`.
    pub async fn patch_secret(&self, name: &str, string_data: Value) {
        super::merge_patch(&self.secrets(), name, json!({ "stringData": string_data })).await;
    }
}

/// Asserts the channel's Ready reason, showing its message when it is another.
#[track_caller]
pub fn assert_reason(ch: &ManagedOSVersionChannel, reason: &str) {
    assert_eq!(
        ready_reason(ch).as_deref(),
        Some(reason),
        "{}",
        ready_message(ch)
    );
}

/// Asserts that the channel's Ready message contains `text`.
#[track_caller]
pub fn assert_message_contains(ch: &ManagedOSVersionChannel, text: &str) {
    let message = ready_message(ch);
    assert!(message.contains(text), "{message}");
}

/// Asserts that the channel's sync failed pulling `image`: a Ready message that starts
/// with `start` and names the image and the kubelet's pull error. Returns the message.
#[track_caller]
pub fn assert_pull_failed(ch: &ManagedOSVersionChannel, start: &str, image: &str) -> String {
    let message = ready_message(ch);
    assert!(message.starts_with(start), "{message}");
    assert!(
        message.contains("ErrImagePull") || message.contains("ImagePullBackOff"),
        "{message}"
    );
    assert!(message.contains(image), "{message}");
    message
}

/// The lines of `text` that start with `prefix`.
pub fn lines_starting(text: &str, prefix: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(String::from)
        .collect()
}

/// Runs `cmd` (`what` names it, and where it comes from) and returns its stdout; it must
/// succeed.
pub fn run_ok(cmd: &mut std::process::Command, what: &str) -> Vec<u8> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {what}: {e}"));
    succeeded(out, what)
}

/// The stdout of a finished child process, which must have succeeded (`what` names it).
pub fn success_stdout(child: std::process::Child, what: &str) -> Vec<u8> {
    succeeded(child.wait_with_output().unwrap(), what)
}

/// The stdout of a process that must have succeeded (`what` names it).
fn succeeded(out: std::process::Output, what: &str) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Creates `object` (JSON) in `api`; a refusal fails the test, naming `what`.
pub async fn create_json<K>(api: &Api<K>, object: Value, what: &str) -> K
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("creating {what}: {e}"))
}
