//! The operator's startup check of the installed CRDs against the ones it was built with
//! (their `rancheros.cattle.io/schema-hash` annotation), on the real cluster.
//!
//! The real CRDs are shared by every test on the cluster and must stay current, so the
//! mismatch cases run the operator against CRDs made for the test under an API group of
//! their own, named by the operator's test-only `RANCHEROS_OPERATOR_CRD_CHECK_GROUP`:
//! the same GET, annotation and exit path as for the real names, only the group differs.

use crate::common;

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use common::TestNs;
use common::test_crds::TestCrds;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionSpec;
use kube::api::{Api, PostParams};
use rancheros_operator::crds::{self, CHECK_GROUP_ENV, SCHEMA_HASH_ANNOTATION};
use serde_json::json;

/// The expected hash of one of this build's CRDs, by plural name.
fn expected_hash(plural: &str) -> String {
    let crd = crds::crds()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .unwrap();
    crds::schema_hash(&crd.spec)
}

/// Waits for the operator to exit on its own (it must not need a signal).
fn wait_exit(t: &TestNs, child: &mut Child, within: Duration) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the operator is still running after {}s; it should have refused the CRDs\n{}",
                within.as_secs(),
                t.operator_log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the operator logged that it is starting its controllers, then checks it
/// is still running; stops it.
fn assert_starts(t: &TestNs, child: &mut Child) {
    let started = Instant::now();
    while !t.operator_log().contains("starting") {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the operator exited ({status}) instead of starting\n{}",
                t.operator_log()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the operator did not start within 120s\n{}",
            t.operator_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the operator stopped right after starting\n{}",
        t.operator_log()
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// The operator's one error line (`error: ...`).
fn error_line(t: &TestNs) -> String {
    let log = t.operator_log();
    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "one error line expected\n{log}");
    errors[0].to_string()
}

/// An operator checking the CRDs of `group` exits 1, its one error line saying each of
/// `says`.
fn refuses_to_start(t: &mut TestNs, group: &str, says: &[&str]) {
    let mut op = t.spawn_operator(&[], &[(CHECK_GROUP_ENV, group)]);
    let status = wait_exit(t, &mut op, Duration::from_secs(120));
    assert_eq!(status.code(), Some(1), "{}", t.operator_log());
    let line = error_line(t);
    for part in says {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
}

#[tokio::test]
async fn an_operator_facing_a_crd_with_another_schema_hash_exits_with_the_fix() {
    let mut t = TestNs::new("crd-other-hash").await;
    let mut test = TestCrds::group("other-hash");
    // A leftover channel CRD of an older release: the schema without `spec.suspend`, and
    // its hash. The versions CRD is current.
    let older = |spec: &CustomResourceDefinitionSpec| {
        let mut v = serde_json::to_value(spec).unwrap();
        let props =
            v["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                .as_object_mut()
                .unwrap();
        assert!(props.remove("suspend").is_some());
        crds::schema_hash(&serde_json::from_value(v).unwrap())
    };
    let older_hash = older(
        &crds::crds()
            .into_iter()
            .find(|c| c.spec.names.plural == "managedosversionchannels")
            .unwrap()
            .spec,
    );
    test.create(&t.client, |spec| {
        Some(if spec.names.plural == "managedosversionchannels" {
            older(spec)
        } else {
            crds::schema_hash(spec)
        })
    })
    .await;

    refuses_to_start(
        &mut t,
        &test.group,
        &[
            &format!("managedosversionchannels.{}", test.group),
            &older_hash,
            &expected_hash("managedosversionchannels"),
            "apply the CRDs of this release",
            "`kubectl apply -f crds/`",
        ],
    );
    assert!(
        !t.operator_log().contains("starting"),
        "the controllers must not start\n{}",
        t.operator_log()
    );
    drop(test);
    t.cleanup().await;
}

#[tokio::test]
async fn an_operator_facing_a_crd_without_a_schema_hash_exits_with_the_fix() {
    let mut t = TestNs::new("crd-no-hash").await;
    let mut test = TestCrds::group("no-hash");
    // CRDs applied by an operator from before the hash: the same schema, no annotation.
    test.create(&t.client, |_| None).await;

    refuses_to_start(
        &mut t,
        &test.group,
        &[
            &format!("managedosversionchannels.{}", test.group),
            &format!("no {SCHEMA_HASH_ANNOTATION} annotation"),
            &expected_hash("managedosversionchannels"),
            "`kubectl apply -f crds/`",
        ],
    );
    drop(test);
    t.cleanup().await;
}

#[tokio::test]
async fn an_operator_facing_a_missing_crd_exits_naming_how_to_install() {
    let mut t = TestNs::new("crd-missing").await;
    // A group with no CRDs at all: as on a cluster where crds/ was never applied.
    let test = TestCrds::group("missing");
    refuses_to_start(
        &mut t,
        &test.group,
        &[
            &format!("managedosversionchannels.{} is not installed", test.group),
            "`kubectl apply -f crds/`",
            "Helm chart",
        ],
    );
    t.cleanup().await;
}

#[tokio::test]
async fn an_operator_facing_the_crds_of_its_release_starts() {
    let mut t = TestNs::new("crd-current").await;
    // The real CRDs, as the harness installed them from the types (with their hashes).
    let mut op = t.spawn_operator(&[], &[]);
    assert_starts(&t, &mut op);
    assert!(
        !t.operator_log().contains("not checking the installed CRDs"),
        "{}",
        t.operator_log()
    );
    // And test CRDs under another group that carry this build's hashes.
    let mut test = TestCrds::group("current");
    test.create(&t.client, |spec| Some(crds::schema_hash(spec)))
        .await;
    let mut op = t.spawn_operator(&[], &[(CHECK_GROUP_ENV, &test.group)]);
    assert_starts(&t, &mut op);
    drop(test);
    t.cleanup().await;
}

#[tokio::test]
async fn an_operator_not_allowed_to_read_crds_warns_once_and_starts() {
    let mut t = TestNs::new("crd-forbidden").await;
    let ns = t.ns.clone();
    // A ServiceAccount with the operator's namespace rights and no right on CRDs, as under
    // the RBAC of a chart from before the check.
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "operator"},
        "rules": [
            {"apiGroups": ["rancheros.cattle.io"], "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["*"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["*"]}
        ]
    }))
    .unwrap();
    Api::<Role>::namespaced(t.client.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(t.client.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(t.client.clone(), &ns);
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "operator"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let request =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = sas
        .create_token_request("operator", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;

    // A kubeconfig for the ServiceAccount: the admin one's cluster, the token as user.
    let admin = kube::config::Kubeconfig::read().unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "operator", "namespace": ns}}],
        "current-context": "c"
    });
    let path =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}.kubeconfig"));
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    let arg = format!("--kubeconfig={}", path.display());

    let mut op = t.spawn_operator(&[&arg], &[]);
    assert_starts(&t, &mut op);
    let _ = std::fs::remove_file(&path);
    let log = t.operator_log();
    let warnings = log
        .lines()
        .filter(|l| l.contains("not checking the installed CRDs"))
        .count();
    assert_eq!(warnings, 1, "{log}");
    assert!(
        log.contains("grant get on customresourcedefinitions managedosversionchannels.rancheros.cattle.io and managedosversions.rancheros.cattle.io"),
        "{log}"
    );
    t.cleanup().await;
}
