//! Integration tests of the local cluster (`scripts/cluster`, docs/cluster.md): it works the
//! way the operator uses it. A pod whose init container writes into an `emptyDir` and whose
//! main container prints it, its phases, its log read through the API with kube-rs, its
//! deletion; and a pod reaching the API server through the `kubernetes` Service.
//!
//! These tests need `KUBECONFIG` pointing at a running cluster (`scripts/test` sets it up).
//! Without one they FAIL on purpose: a missing cluster must never look like a pass.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    api::{Api, DeleteParams, LogParams, PostParams},
    runtime::wait::{await_condition, conditions},
};
use serde_json::json;

mod common;
use common::{client, runner_image};

const NAMESPACE: &str = "default";

fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{}-{:x}", std::process::id(), nanos)
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "<none>".to_string())
}

fn describe(pod: &Pod) -> String {
    serde_json::to_string(&pod.status).unwrap_or_default()
}

/// Polls the pod until `done` says so; returns the pod and the phases seen on the way.
async fn wait_pod(
    pods: &Api<Pod>,
    name: &str,
    timeout: Duration,
    done: impl Fn(&Pod) -> bool,
) -> (Pod, Vec<String>) {
    let start = Instant::now();
    let mut phases: Vec<String> = Vec::new();
    loop {
        let pod = pods.get(name).await.expect("get pod");
        let p = phase(&pod);
        if phases.last() != Some(&p) {
            phases.push(p.clone());
        }
        if done(&pod) {
            return (pod, phases);
        }
        assert!(
            p != "Failed",
            "pod {name} failed; phases {phases:?}; status {}",
            describe(&pod)
        );
        assert!(
            start.elapsed() < timeout,
            "pod {name} not done after {timeout:?}; phases {phases:?}; status {}",
            describe(&pod)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the pod and waits until it is gone from the API.
async fn delete_and_wait(pods: &Api<Pod>, name: &str, uid: &str) {
    pods.delete(name, &DeleteParams::default())
        .await
        .expect("delete pod");
    tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(pods.clone(), name, conditions::is_deleted(uid)),
    )
    .await
    .unwrap_or_else(|_| panic!("pod {name} still exists 90 s after delete"))
    .expect("watching pod deletion");
}

/// Creates the pod; retries while a fresh cluster has not made the default service account yet.
async fn create_pod(pods: &Api<Pod>, pod: &Pod) -> Pod {
    let start = Instant::now();
    loop {
        match pods.create(&PostParams::default(), pod).await {
            Ok(p) => return p,
            Err(e)
                if start.elapsed() < Duration::from_secs(30)
                    && e.to_string().contains("service account") =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("create pod: {e}"),
        }
    }
}

async fn log_of(pods: &Api<Pod>, name: &str, container: &str) -> String {
    pods.logs(
        name,
        &LogParams {
            container: Some(container.to_string()),
            ..LogParams::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("logs of {name}/{container}: {e}"))
}

/// The syncer-pod shape: init container writes into an emptyDir, the main container prints the
/// file and stays up (like `display`) until the pod is deleted.
#[tokio::test]
async fn init_container_output_reaches_main_container_log() {
    let client = client().await;
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let name = unique_name("cluster-smoke");
    let image = runner_image();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "rancheros-operator-tests"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{
                "name": "runner",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "--"],
                "args": ["echo '[{\"metadata\":{\"name\":\"foo\"}}]' > /output/data && echo written"],
                "volumeMounts": [{"name": "data", "mountPath": "/output"}]
            }],
            "containers": [{
                "name": "display",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/bash", "-c"],
                "args": ["trap 'exit 0' TERM; cat /output/data; echo \"bash ${BASH_VERSION%%.*}\"; while :; do sleep 1; done"],
                "volumeMounts": [{"name": "data", "mountPath": "/output"}]
            }]
        }
    }))
    .unwrap();

    let created = create_pod(&pods, &pod).await;
    let uid = created.metadata.uid.clone().expect("uid");

    let (running, phases) = wait_pod(&pods, &name, Duration::from_secs(120), |p| {
        phase(p) == "Running"
    })
    .await;
    assert_eq!(
        phases.first().map(String::as_str),
        Some("Pending"),
        "{phases:?}"
    );
    let init = &running
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .as_ref()
        .unwrap()[0];
    let terminated = init
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("init container terminated before the pod runs");
    assert_eq!(terminated.exit_code, 0, "init container: {init:?}");
    assert_eq!(log_of(&pods, &name, "runner").await, "written\n");

    // The main container's log, read through the API server (it proxies to the kubelet).
    let start = Instant::now();
    let log = loop {
        let log = log_of(&pods, &name, "display").await;
        if log.contains("bash ") || start.elapsed() > Duration::from_secs(30) {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(log, "[{\"metadata\":{\"name\":\"foo\"}}]\nbash 5\n");

    delete_and_wait(&pods, &name, &uid).await;
}

/// A pod that runs to completion: phase Succeeded, log still readable, deleted quickly.
#[tokio::test]
async fn completed_pod_succeeds_and_keeps_its_log() {
    let client = client().await;
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let name = unique_name("cluster-done");
    let image = runner_image();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{
                "name": "init",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "printf 'line 1\\nline 2\\n' > /data/out"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "cat /data/out"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }]
        }
    }))
    .unwrap();
    let created = create_pod(&pods, &pod).await;
    let uid = created.metadata.uid.clone().expect("uid");
    let (_, phases) = wait_pod(&pods, &name, Duration::from_secs(120), |p| {
        phase(p) == "Succeeded"
    })
    .await;
    assert_eq!(phases.last().map(String::as_str), Some("Succeeded"));
    assert_eq!(log_of(&pods, &name, "main").await, "line 1\nline 2\n");
    delete_and_wait(&pods, &name, &uid).await;
}

/// In-cluster API access: a pod with its service-account token reaches the API server through
/// the `kubernetes` Service (kube-proxy, iptables mode) under the DNS name the in-cluster
/// config uses, and the API server authenticates the token.
#[tokio::test]
async fn pod_reaches_the_api_server_through_the_kubernetes_service() {
    let client = client().await;
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let name = unique_name("cluster-api");
    let image = runner_image();
    // busybox's ssl_client speaks TLS over the connection bash opens (no certificate check:
    // that part is the operator's own client's job; here it is the routing and the token).
    let script = r#"
set -eu
sa=/var/run/secrets/kubernetes.io/serviceaccount
test -s $sa/token && test -s $sa/ca.crt && echo "token mounted"
echo "env ${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}"
exec 3<>/dev/tcp/kubernetes.default.svc/443
echo "tcp kubernetes.default.svc:443 ok"
exec 3<&- 3>&-
req="GET /api/v1/namespaces/default/pods?limit=1 HTTP/1.0\r\nHost: kubernetes.default.svc\r\nAuthorization: Bearer $(cat $sa/token)\r\n\r\n"
coproc TLS { /bin/ssl_client -s 3 -n kubernetes.default.svc 3<>/dev/tcp/${KUBERNETES_SERVICE_HOST}/${KUBERNETES_SERVICE_PORT}; }
printf "$req" >&"${TLS[1]}"
head -n 1 <&"${TLS[0]}"
"#;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/bash", "-c", script],
            }]
        }
    }))
    .unwrap();
    let created = create_pod(&pods, &pod).await;
    let uid = created.metadata.uid.clone().expect("uid");
    let (done, phases) = wait_pod(&pods, &name, Duration::from_secs(120), |p| {
        matches!(phase(p).as_str(), "Succeeded" | "Failed")
    })
    .await;
    let log = log_of(&pods, &name, "main").await;
    assert_eq!(
        phase(&done),
        "Succeeded",
        "phases {phases:?}; log:\n{log}\nstatus {}",
        describe(&done)
    );
    assert!(log.contains("token mounted"), "{log}");
    assert!(log.contains("env 10.96.0.1:443"), "{log}");
    assert!(log.contains("tcp kubernetes.default.svc:443 ok"), "{log}");
    // The default service account may not list pods (RBAC): 403 proves the token was
    // authenticated (an unknown token gives 401).
    assert!(
        log.contains("HTTP/1.0 403") || log.contains("HTTP/1.1 403") || log.contains(" 200 "),
        "{log}"
    );
    delete_and_wait(&pods, &name, &uid).await;
}
