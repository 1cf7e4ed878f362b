//! The objects each scenario creates, as JSON manifests (the same the earlier script
//! created, so that figures stay comparable). Pure, unit-tested in tests/bench_operator.rs.

use serde_json::{Value, json};

pub const GROUP_VERSION: &str = "rancheros.cattle.io/v1";
pub const SYNC_REQUESTED_AT: &str = "rancheros.cattle.io/sync-requested-at";

/// A runner script (bash, in the runner image) that prints `n` versions named
/// `{prefix}-1` .. `{prefix}-n` into the display log's file.
pub fn generator(prefix: &str, n: usize) -> String {
    let item = format!(
        r#"{{"metadata":{{"name":"{prefix}-%d"}},"spec":{{"version":"v%d","type":"container","minVersion":"0.0.0","metadata":{{"upgradeImage":"registry.example/os:v%d","displayName":"OS %d","created":"2026-11-30"}}}}}}"#
    );
    format!(
        "{{ printf '['; for i in $(seq 1 {n}); do [ $i -gt 1 ] && printf ','; printf '{item}' $i $i $i $i; done; printf ']'; }} > /data/output"
    )
}

/// A custom channel running `script` in the runner image. `pull_policy`: builds before
/// `options.imagePullPolicy` existed refuse the key (and did not pull Always).
pub fn channel(name: &str, ns: &str, runner_image: &str, script: &str, pull_policy: bool) -> Value {
    let mut options = json!({
        "image": runner_image,
        "command": ["/bin/bash", "-c", "--"],
        "args": [script],
        "timeout": "10m",
    });
    if pull_policy {
        // The runner image is imported, not pulled.
        options["imagePullPolicy"] = json!("IfNotPresent");
    }
    json!({
        "apiVersion": GROUP_VERSION, "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "custom", "options": options},
    })
}

/// The same channel, suspended (no pod, no sync: only what watching it costs).
pub fn suspended(name: &str, ns: &str, runner_image: &str) -> Value {
    let mut c = channel(name, ns, runner_image, "true", true);
    c["spec"]["suspend"] = json!(true);
    c
}

/// Version `i` as `generator` prints it, as an object of namespace `ns` named `{prefix}-{i}`.
pub fn version(prefix: &str, ns: &str, i: usize) -> Value {
    json!({
        "apiVersion": GROUP_VERSION, "kind": "ManagedOSVersion",
        "metadata": {"name": format!("{prefix}-{i}"), "namespace": ns},
        "spec": {"version": format!("v{i}"), "type": "container", "minVersion": "0.0.0",
                 "metadata": {"upgradeImage": format!("registry.example/os:v{i}"),
                              "displayName": format!("OS {i}"), "created": "2026-11-30"}},
    })
}

/// Version `i` as the operator would have written it for channel `owner` (uid `uid`): its
/// label, content hash and owner reference (what the RSS per cached version measures).
pub fn owned_version(ns: &str, owner: &str, uid: &str, i: usize) -> Value {
    json!({
        "apiVersion": GROUP_VERSION, "kind": "ManagedOSVersion",
        "metadata": {"name": format!("{owner}-v{i}"), "namespace": ns,
                     "labels": {"rancheros.cattle.io/channel": owner},
                     "annotations": {"rancheros.cattle.io/content-hash": format!("{i:032x}")},
                     "ownerReferences": [{"apiVersion": GROUP_VERSION,
                                          "kind": "ManagedOSVersionChannel", "name": owner,
                                          "uid": uid, "controller": true,
                                          "blockOwnerDeletion": true}]},
        "spec": {"version": format!("v{i}"), "type": "container", "minVersion": "0.0.0",
                 "metadata": {"upgradeImage": format!("registry.example/os:v{i}"),
                              "displayName": format!("OS {i}"), "created": "2026-11-30"}},
    })
}

/// `n` versions shaped as Elemental publishes them (free-form `spec.metadata`), named
/// `{prefix}-{i}{suffix}`.
pub fn elemental(prefix: &str, suffix: &str, n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                json!({
                    "metadata": {"name": format!("{prefix}-{i}{suffix}")},
                    "spec": {"version": format!("v2.2.0-{i}"), "type": "container", "minVersion": "0.0.0",
                             "metadata": {"upgradeImage": format!("registry.suse.com/suse/sl-micro/6.0/baremetal-os-container:2.2.0-{i}"),
                                          "displayName": format!("SL Micro 6.0 build {i}"),
                                          "platforms": ["linux/x86_64", "linux/aarch64"],
                                          "created": "2024-11-05T10:11:12Z"}},
                })
            })
            .collect(),
    )
}

/// A `kind: List` of `items`, as `kubectl create -f` takes them.
pub fn list(items: &[Value]) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// The items of writer `w` of `writers`: every `writers`-th item from the `w`-th.
pub fn share(items: &[Value], w: usize, writers: usize) -> Vec<Value> {
    items.iter().skip(w).step_by(writers).cloned().collect()
}

/// A shell word of `s` (single quotes, as Python's `shlex.quote`).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r#"'"'"'"#))
}

/// The pull Secret of the test registry.
pub fn pull_secret(ns: &str, registry: &str, user: &str, password: &str) -> Value {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = json!({"auths": {registry: {"auth": auth}}});
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pull", "namespace": ns},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()},
    })
}

/// An oci channel `name` of `image` in the test registry (plain HTTP, the pull Secret above).
pub fn oci_channel(name: &str, ns: &str, image: &str) -> Value {
    json!({
        "apiVersion": GROUP_VERSION, "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "oci", "options": {"image": image, "insecure": true,
                                            "imagePullSecrets": [{"name": "pull"}]}},
    })
}

/// A ValidatingAdmissionPolicy on the versions of namespace `ns` and its binding (a
/// `kind: List` for `kubectl apply`): it may refuse a version (named `refused-by-bench`), so
/// an operator cannot know that none will be refused without asking.
pub fn admission_policy(ns: &str) -> Value {
    let name = format!("bench-admission-{ns}");
    list(&[
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"failurePolicy": "Fail",
                     "matchConstraints": {"resourceRules": [{
                         "apiGroups": ["rancheros.cattle.io"], "apiVersions": ["*"],
                         "operations": ["CREATE", "UPDATE"], "resources": ["managedosversions"]}]},
                     "validations": [{"expression": "object.metadata.name != 'refused-by-bench'",
                                      "message": "refused by the benchmark's admission policy"}]},
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": {"matchLabels": {
                         "kubernetes.io/metadata.name": ns}}}},
        }),
    ])
}

/// Json channel `i` of the scale scenario: the `i % namespaces`-th namespace, its data at
/// the local server's `/c/ch-{i}.json`.
pub fn scale_channel(i: usize, namespaces: &[String], run_id: &str, port: u16) -> Value {
    json!({
        "apiVersion": GROUP_VERSION, "kind": "ManagedOSVersionChannel",
        "metadata": {"name": format!("ch-{i}"), "namespace": namespaces[i % namespaces.len()],
                     "labels": {"bench-scale": run_id}},
        "spec": {"type": "json", "syncInterval": "6h",
                 "options": {"uri": format!("http://127.0.0.1:{port}/c/ch-{i}.json")}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_prints_the_versions_kubectl_creates() {
        let script = generator("big", 2);
        assert!(script.starts_with("{ printf '['; for i in $(seq 1 2); do [ $i -gt 1 ] && printf ','; printf '{\"metadata\":{\"name\":\"big-%d\"}"));
        assert!(script.ends_with("' $i $i $i $i; done; printf ']'; } > /data/output"));
        // What bash prints for i = 7 is what version() makes.
        let (_, item) = script.split_once("printf '{").unwrap();
        let item = format!("{{{}", item.split_once("' $i").unwrap().0).replace("%d", "7");
        let printed: Value = serde_json::from_str(&item).unwrap();
        let mut expected = version("big", "ns", 7);
        for k in ["apiVersion", "kind"] {
            expected.as_object_mut().unwrap().remove(k);
        }
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        assert_eq!(printed, expected);
    }

    #[test]
    fn channels() {
        let c = channel("big", "ns", "runner:test", "true", true);
        assert_eq!(c["spec"]["options"]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["spec"]["options"]["command"][0], "/bin/bash");
        let old = channel("big", "ns", "runner:test", "true", false);
        assert!(old["spec"]["options"].get("imagePullPolicy").is_none());
        assert_eq!(suspended("s", "ns", "r")["spec"]["suspend"], true);
        let names = ["a".to_string(), "b".to_string()];
        let s = scale_channel(3, &names, "120000", 8080);
        assert_eq!(s["metadata"]["namespace"], "b");
        assert_eq!(
            s["spec"]["options"]["uri"],
            "http://127.0.0.1:8080/c/ch-3.json"
        );
    }

    #[test]
    fn versions() {
        let v = owned_version("ns", "rss-1", "uid-1", 255);
        assert_eq!(v["metadata"]["name"], "rss-1-v255");
        assert_eq!(
            v["metadata"]["annotations"]["rancheros.cattle.io/content-hash"],
            "000000000000000000000000000000ff"
        );
        let e = elemental("sl-micro-6-0", "--oci", 3);
        assert_eq!(e.as_array().unwrap().len(), 3);
        assert_eq!(e[2]["metadata"]["name"], "sl-micro-6-0-2--oci");
        assert_eq!(e[0]["spec"]["version"], "v2.2.0-0");
    }

    #[test]
    fn the_admission_policy_binds_to_its_namespace_only() {
        let l = admission_policy("ns-1");
        let (policy, binding) = (&l["items"][0], &l["items"][1]);
        assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
        assert_eq!(
            binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "ns-1"
        );
        let rule = &policy["spec"]["matchConstraints"]["resourceRules"][0];
        assert_eq!(rule["resources"][0], "managedosversions");
        let o = oci_channel("ch-1", "ns", "reg/x:v1");
        assert_eq!(o["metadata"]["name"], "ch-1");
        assert_eq!(o["spec"]["options"]["image"], "reg/x:v1");
    }

    #[test]
    fn writers_share_every_item_once() {
        let items: Vec<Value> = (0..35).map(|i| json!(i)).collect();
        let mut seen: Vec<Value> = (0..16).flat_map(|w| share(&items, w, 16)).collect();
        assert_eq!(share(&items, 2, 16), [json!(2), json!(18), json!(34)]);
        seen.sort_by_key(|v| v.as_i64());
        assert_eq!(seen, items);
    }

    #[test]
    fn shell_words() {
        assert_eq!(shell_quote("abc"), "abc");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote(r#"[{"a":"it's"}]"#), r#"'[{"a":"it'"'"'s"}]'"#);
    }

    #[test]
    fn the_pull_secret() {
        let s = pull_secret("ns", "127.0.0.1:5050", "u", "p");
        let config: Value =
            serde_json::from_str(s["stringData"][".dockerconfigjson"].as_str().unwrap()).unwrap();
        assert_eq!(config["auths"]["127.0.0.1:5050"]["auth"], "dTpw");
    }
}
