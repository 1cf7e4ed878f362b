//! CRDs made for a test under an API group of its own: the real CRDs are shared by every
//! test on the cluster and must stay current, so the checks of a CRD's schema hash (the
//! operator's at start, `check`'s) are pointed at these by the test-only
//! `RANCHEROS_OPERATOR_CRD_CHECK_GROUP`.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionSpec,
};
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use rancheros_operator::crds::{self, SCHEMA_HASH_ANNOTATION};

/// Test CRDs under their own group; deleted when dropped, even when the test fails.
pub struct TestCrds {
    pub group: String,
    names: Vec<String>,
}

impl TestCrds {
    /// `test`: a short DNS label.
    pub fn group(test: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Self {
            group: format!("{test}-{nanos:x}.crd-check.rancheros-tests.example"),
            names: Vec::new(),
        }
    }

    /// Creates this build's CRDs under the test group, with `hash(spec)` of the real spec as
    /// the schema-hash annotation (`None`: no annotation), and waits until they serve.
    pub async fn create(
        &mut self,
        client: &kube::Client,
        hash: impl Fn(&CustomResourceDefinitionSpec) -> Option<String>,
    ) {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for mut crd in crds::crds() {
            // The hash of this build's spec, as a release's CRD carries it; only the name
            // and group change below.
            let annotation = hash(&crd.spec);
            crd.spec.group = self.group.clone();
            // No short names or categories: kubectl would resolve `mosvc` (and `kubectl get
            // all`-style categories) to these while they exist, in every other test's
            // commands (the chart test's README commands did, beside a cli check test).
            crd.spec.names.short_names = None;
            crd.spec.names.categories = None;
            let name = format!("{}.{}", crd.spec.names.plural, self.group);
            crd.metadata.name = Some(name.clone());
            let annotations = crd
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            annotations.remove(SCHEMA_HASH_ANNOTATION);
            if let Some(h) = annotation {
                annotations.insert(SCHEMA_HASH_ANNOTATION.into(), h);
            }
            api.create(&PostParams::default(), &crd)
                .await
                .unwrap_or_else(|e| panic!("creating the test CRD {name}: {e}"));
            self.names.push(name.clone());
            tokio::time::timeout(
                Duration::from_secs(60),
                await_condition(api.clone(), &name, conditions::is_crd_established()),
            )
            .await
            .unwrap_or_else(|_| panic!("the test CRD {name} is not established after 60s"))
            .unwrap();
        }
    }
}

impl Drop for TestCrds {
    fn drop(&mut self) {
        if self.names.is_empty() {
            return;
        }
        // Gone before the test ends: a CRD of our kinds' names left terminating (or kept in
        // etcd by a cluster stopped meanwhile) makes kubectl resolve those names to it.
        let _ = Command::new("kubectl")
            .args([
                "delete",
                "crd",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=60s",
            ])
            .args(&self.names)
            .status();
    }
}
