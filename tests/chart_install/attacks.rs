//! The tenant attacks of tests/hardening.rs, tests/tenancy.rs and tests/bounds.rs against
//! the operator as the chart deploys it (its memory limit, its RBAC, its image), one
//! install for all of them, each attack in a namespace of its own at the same time. An
//! OOM kill counts as a crash: at the end the operator pod is the same pod, never
//! restarted; deleted, the pod that replaces it serves a new channel with the deep objects
//! still there.

use std::io::{BufRead, BufReader, Write as _};
use std::net::TcpListener;

use serde_json::json;

use super::*;

const SYNC: Duration = Duration::from_secs(180);

fn runner_image() -> String {
    std::env::var("RANCHEROS_RUNNER_IMAGE").unwrap_or_else(|_| "rancheros-runner:test".into())
}

/// A custom channel (JSON, which kubectl takes as YAML) whose runner runs `script`.
fn custom_channel(ns: &str, name: &str, script: &str) -> Value {
    json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "custom", "options": {
            "image": runner_image(), "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/bash", "-c", "--"], "args": [script],
            "mountPath": "/output", "outputFile": "/output/data"}}
    })
}

/// Channel data listing versions `names` (v1 each).
fn versions_json(names: &[String]) -> String {
    let data: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({"metadata": {"name": n}, "spec": {"version": "v1", "type": "container",
            "minVersion": "0.0.0", "metadata": {"upgradeImage": format!("registry.com/os:{n}")}}})
        })
        .collect();
    Value::Array(data).to_string()
}

/// A runner script that writes versions `names`.
fn versions_script(names: &[String]) -> String {
    format!("echo '{}' > /output/data", versions_json(names))
}

fn json_channel(ns: &str, name: &str, uri: &str) -> Value {
    json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "json", "options": {"uri": uri, "timeout": "10m"}}
    })
}

fn reason(ns: &str, name: &str) -> Option<String> {
    ready_condition(&channel_json(ns, name)).map(|(_, reason, _)| reason)
}

fn version_names(ns: &str) -> Vec<String> {
    item_names(&versions_list(ns))
}

/// JSON objects nested `depth` deep (serde_json's default limit is 128).
fn nested(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

/// `kubectl create -f -` of raw JSON text; whether the API server took it.
fn create_raw(text: &str) -> bool {
    let mut cmd = kubectl();
    cmd.args(["create", "-o", "name", "-f", "-"]);
    let out = run_with_stdin(cmd, text);
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        eprintln!("refused: {}", why.chars().take(500).collect::<String>());
    }
    out.status.success()
}

/// The node's InternalIP: where a pod reaches a server of this test.
fn node_ip() -> String {
    let nodes = kubectl_json(&["get", "nodes"]);
    nodes["items"][0]["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .expect("the node has an InternalIP")
        .to_string()
}

/// Serves `/trickle.json` (headers, then one byte every 2 s for 10 minutes) and
/// `/channel.json` (`body`) on the node's address; returns the base URL.
fn serve(body: String) -> String {
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let mut reader = BufReader::new(&stream);
                let _ = reader.read_line(&mut line);
                let mut stream = &stream;
                if line.contains("/trickle.json") {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[",
                    );
                    for _ in 0..300 {
                        std::thread::sleep(Duration::from_secs(2));
                        if stream.write_all(b" ").is_err() {
                            return;
                        }
                    }
                } else {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    format!("http://{}:{port}", node_ip())
}

/// An oci channel on the hostile registry (plain HTTP).
fn oci_channel(ns: &str, name: &str, image: &str, timeout: &str) -> Value {
    json!({
        "apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "oci", "options": {"image": image, "insecure": true, "timeout": timeout}}
    })
}

/// The operator pod's address.
fn pod_ip(rel: &Release) -> String {
    rel.operator_pods()["items"][0]["status"]["podIP"]
        .as_str()
        .expect("the operator pod has an IP")
        .to_string()
}

/// Connections to the metrics port that each send 300 KiB of a request head that never
/// ends, one byte block at a time, as any pod in the cluster could.
struct Slowloris {
    threads: Vec<std::thread::JoinHandle<bool>>,
}

impl Slowloris {
    fn start(ip: &str, count: usize) -> Self {
        let address = format!("{ip}:8080");
        let threads = (0..count)
            .map(|_| {
                let address = address.clone();
                std::thread::spawn(move || {
                    let Ok(mut stream) = std::net::TcpStream::connect(&address) else {
                        // Refused at once: the connection cap at work.
                        return true;
                    };
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
                    let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
                    let line = format!("X-Pad: {}\r\n", "a".repeat(1000));
                    for _ in 0..300 {
                        if stream.write_all(line.as_bytes()).is_err() {
                            return true;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    // Sent it all without the end of the head: closed by the server since?
                    let mut buf = [0u8; 1024];
                    matches!(std::io::Read::read(&mut stream, &mut buf), Ok(0) | Err(_))
                        || String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 4")
                })
            })
            .collect();
        Slowloris { threads }
    }

    /// How many connections the operator ended (refused, closed or answered 4xx).
    fn finish(self) -> usize {
        self.threads
            .into_iter()
            .filter_map(|t| t.join().ok())
            .filter(|ended| *ended)
            .count()
    }
}

/// The one operator pod: its name, restart count and last termination reason.
fn operator_pod(rel: &Release) -> (String, u64, Option<String>) {
    let pods = rel.operator_pods();
    let pod = &pods["items"][0];
    let status = &pod["status"]["containerStatuses"][0];
    (
        pod["metadata"]["name"].as_str().unwrap().to_string(),
        status["restartCount"].as_u64().unwrap_or_default(),
        status["lastState"]["terminated"]["reason"]
            .as_str()
            .map(str::to_string),
    )
}

/// The operator's pod is `pod`, never restarted (an OOM kill is a restart).
fn assert_operator_pod(rel: &Release, pod: &str) {
    let (now, restarts, last) = operator_pod(rel);
    assert_eq!(
        (now.as_str(), restarts, last),
        (pod, 0, None),
        "{}",
        rel.diagnostics()
    );
}

fn forged_pod(ns: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"rancheros.cattle.io/channel": name},
            "ownerReferences": [{"apiVersion": "rancheros.cattle.io/v1",
                "kind": "ManagedOSVersionChannel", "name": name, "uid": uid, "controller": true}]},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "sleep", "image": runner_image(),
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
                "securityContext": {"allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}}}]
        }
    })
}

fn apply(object: &Value) {
    kubectl_apply(&object.to_string());
}

#[test]
fn tenant_attacks_leave_the_chart_deployed_operator_pod_running_and_serving() {
    let started = Instant::now();
    let rel = Release::new("chart-attacks", 7);
    let [deep, good, big, trickle, forged, esc, oci] =
        <[String; 7]>::try_from(rel.namespaces.clone()).unwrap();
    let diag = || rel.diagnostics();
    // Three slots: two forged pods holding slots, and the trickling source one, would
    // leave nobody a slot.
    rel.install(&[
        "--set",
        "operator.retryDelay=1s",
        "--set",
        "operator.maxConcurrentSyncs=3",
        "--set",
        "operator.allowInsecureRegistries=true",
    ]);
    let (pod, _, _) = operator_pod(&rel);

    // A hostile registry's layers (a 256 MiB tar name, a 64 MiB zstd window, a layer that
    // drips), pulled by oci channels while everything else below goes on; and a slowloris
    // burst against the metrics port.
    let hostile = super::hostile_registry::Hostile::serve(&node_ip());
    for (name, timeout) in [("longname", "2m"), ("zstdwindow", "2m"), ("drip", "3s")] {
        apply(&oci_channel(
            &oci,
            name,
            &format!("{}/{name}:v1", hostile.address),
            timeout,
        ));
    }
    let slowloris = Slowloris::start(&pod_ip(&rel), 600);

    // A json source that trickles one byte every 2 s, and another json channel.
    let base = serve(versions_json(&["web-v1".into()]));
    apply(&json_channel(
        &trickle,
        "trickle",
        &format!("{base}/trickle.json"),
    ));

    // A version nested 125 deep (free-form spec.metadata) and a channel nested 130 deep
    // in upgradeContainer and options (the typed schema prunes or refuses these).
    let deep_version = format!(
        r#"{{"apiVersion":"rancheros.cattle.io/v1","kind":"ManagedOSVersion","metadata":{{"name":"deep","namespace":"{deep}"}},"spec":{{"version":"v1","type":"container","metadata":{}}}}}"#,
        nested(125)
    );
    assert!(create_raw(&deep_version), "the deep version was refused");
    let mut deep_channel = custom_channel(&deep, "deep", "exit 1");
    deep_channel["spec"]["upgradeContainer"] = json!({"image": "u", "x": "DEEP"});
    deep_channel["spec"]["options"]["x"] = json!("DEEP");
    let _ = create_raw(&deep_channel.to_string().replace("\"DEEP\"", &nested(130)));
    let mut deep_top = custom_channel(&deep, "deep-container", "exit 1");
    deep_top["spec"]["upgradeContainer"] = json!({"image": "u", "securityContext": {"a": "DEEP"}});
    let _ = create_raw(&deep_top.to_string().replace("\"DEEP\"", &nested(130)));

    // 200 versions with a 400 KiB upgradeContainer.
    let names: Vec<String> = (0..200).map(|i| format!("huge-{i}")).collect();
    let mut huge = custom_channel(&big, "huge", &versions_script(&names));
    huge["spec"]["upgradeContainer"] =
        json!({"image": "u", "args": vec!["x".repeat(50 * 1024); 8]});
    // Created, not applied: kubectl apply's last-applied annotation could not hold it.
    assert!(
        create_raw(&huge.to_string()),
        "the huge channel was refused"
    );

    // Two channels that fail until they stall, then forged pods with their names, label
    // and owner references.
    for name in ["stalled-1", "stalled-2"] {
        apply(&custom_channel(&forged, name, "exit 1"));
    }

    // A runner that prints terminal escapes and fails.
    apply(&custom_channel(
        &esc,
        "esc",
        r#"printf '\033[2J\033]0;owned\007\033[31mred\r\n'; exit 3"#,
    ));

    // Meanwhile the good namespace's channel and the second json channel sync.
    kubectl_apply(&sample_channel(&good));
    // In another namespace: the trickling channel holds its own namespace's share of
    // the three slots.
    apply(&json_channel(&good, "web", &format!("{base}/channel.json")));
    let synced = |ns: &str, name: &str| {
        wait_for(&format!("{ns}/{name} to sync"), SYNC, diag, || {
            (reason(ns, name).as_deref() == Some("Synchronized")).then_some(())
        })
    };
    synced(&good, "testchannel");
    synced(&good, "web");
    assert_ne!(
        reason(&trickle, "trickle").as_deref(),
        Some("Synchronized"),
        "the trickling source ended before the other json channel synced"
    );
    assert_eq!(version_names(&good), ["bar", "foo", "web-v1"]);

    let ready = wait_for("huge to be refused", SYNC, diag, || {
        ready_condition(&channel_json(&big, "huge")).filter(|(_, r, _)| r == "InvalidConfiguration")
    });
    assert!(
        ready
            .2
            .contains("more than the 64 KiB an upgradeContainer may have"),
        "{}",
        ready.2
    );
    assert_eq!(
        version_names(&big),
        Vec::<String>::new(),
        "huge wrote versions"
    );

    let esc_ready = wait_for("esc to fail", SYNC, diag, || {
        ready_condition(&channel_json(&esc, "esc")).filter(|(_, r, _)| r == "FailedToSync")
    });
    assert!(esc_ready.2.contains("red"), "{}", esc_ready.2);
    let esc_text = channel_json(&esc, "esc")["status"].to_string();
    assert!(
        !esc_text.contains("\\u001b"),
        "ESC in the status: {esc_text}"
    );
    let table =
        output(Command::new(env!("CARGO_BIN_EXE_rancheros-operator")).args(["status", "-n", &esc]));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("esc") && !table.contains('\u{1b}'),
        "{table:?}"
    );

    for name in ["stalled-1", "stalled-2"] {
        wait_for(&format!("{name} to stall"), 2 * SYNC, diag, || {
            let ch = channel_json(&forged, name);
            let stalled = ch["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Stalled" && c["status"] == "True");
            let pod_gone = !output(kubectl().args(["get", "pod", name, "-n", &forged]))
                .status
                .success();
            (stalled && pod_gone).then_some(())
        });
        let uid = channel_json(&forged, name)["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string();
        apply(&forged_pod(&forged, name, &uid));
    }
    for name in ["stalled-1", "stalled-2"] {
        run(kubectl().args([
            "wait",
            "--for=condition=Ready",
            "--timeout=120s",
            "-n",
            &forged,
            "pod",
            name,
        ]));
    }
    apply(&custom_channel(
        &forged,
        "fresh",
        &versions_script(&["fresh-v1".into()]),
    ));
    synced(&forged, "fresh");

    // The hostile layers are refused, each naming its bound; the dripping one times out.
    for (name, says) in [
        ("longname", "GNU long-name record of 268435456 bytes"),
        ("zstdwindow", "67108864-byte window"),
        ("drip", "timed out after 3s"),
    ] {
        let failed = wait_for(&format!("oci channel {name} to fail"), SYNC, diag, || {
            ready_condition(&channel_json(&oci, name)).filter(|(_, r, _)| r == "FailedToSync")
        });
        assert!(failed.2.contains(says), "{name}: {}", failed.2);
    }
    // During the burst the probes still answered (the pod was never restarted, below), and
    // the burst's connections were ended by the server, not by the test.
    let ended = slowloris.finish();
    assert!(
        ended * 10 >= 600 * 9,
        "only {ended} of 600 slowloris connections were closed by the operator"
    );

    // The same pod throughout: never restarted, never OOM-killed.
    assert_operator_pod(&rel, &pod);

    // Restarted with the deep objects still there, the new pod serves a new channel.
    run(kubectl().args(["delete", "pod", &pod, "-n", &rel.ns, "--wait=true"]));
    let new_pod = wait_for("a new operator pod", SYNC, diag, || {
        let (name, _, _) = operator_pod(&rel);
        (name != pod).then_some(name)
    });
    // By name: the test's own JSON parser would stop at the deep version's depth.
    run(kubectl().args([
        "get",
        "managedosversions.rancheros.cattle.io",
        "deep",
        "-n",
        &deep,
        "-o",
        "name",
    ]));
    apply(&custom_channel(
        &good,
        "after-restart",
        &versions_script(&["after-v1".into()]),
    ));
    synced(&good, "after-restart");
    assert_operator_pod(&rel, &new_pod);
    eprintln!("chart attacks: {:?}", started.elapsed());
}
