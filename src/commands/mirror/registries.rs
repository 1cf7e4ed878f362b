//! The registries a run speaks to, as a [`Remote`]: the project's one registry client
//! (`crate::registry`), with credentials from docker config files, plain HTTP where the
//! user said so, and the bearer tokens won kept for the next session.

use crate::registry::{self, Credentials, PullError, push};

use crate::commands::mirror::MirrorArgs;
use crate::commands::mirror::store::{Bytes, Loc, Op, Remote};

/// Where credentials and plain HTTP come from, for every registry a run speaks to.
pub(crate) struct Registries {
    client: registry::Client,
    insecure: Vec<String>,
    pub(super) configs: Vec<Vec<u8>>,
    pub(super) ca_file: Option<std::path::PathBuf>,
    timeout: std::time::Duration,
    /// The bearer tokens sessions won, by registry, repository and actions: the next
    /// session there starts with it (a token costs a 401 and a request to the token
    /// server; without this, every operation paid both).
    bearers: std::sync::Mutex<std::collections::HashMap<(String, String, &'static str), String>>,
}

impl Registries {
    pub(super) fn new(args: &MirrorArgs) -> Result<Self, String> {
        // No egress policy: it guards the operator's network, not the user's.
        let mut client =
            registry::Client::new(crate::egress::Policy::new(Vec::new(), Vec::new()), u64::MAX)
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        if let Some(f) = &args.ca_file {
            let pem = std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            client = client
                .with_roots(&pem)
                .map_err(|e| format!("--ca-file {} {e}", f.display()))?;
        }
        let mut configs = Vec::new();
        if let Some(f) = &args.registry_config {
            configs
                .push(std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?);
        }
        configs.extend(registry::auth::login_configs());
        Ok(Registries {
            client,
            insecure: args.insecure.clone(),
            configs,
            ca_file: args.ca_file.clone(),
            timeout: args.timeout,
            bearers: Default::default(),
        })
    }

    pub(super) fn is_insecure(&self, host: &str) -> bool {
        self.insecure.iter().any(|h| h == host)
    }

    pub(super) fn credentials(&self, host: &str) -> Option<Credentials> {
        registry::auth::first_credentials(&self.configs, host)
    }
}

impl Registries {
    async fn with_session<T>(
        &self,
        loc: &Loc,
        actions: &'static str,
        f: impl AsyncFnOnce(&mut registry::Session<'_>) -> Result<T, PullError>,
    ) -> Result<T, PullError> {
        let image = loc.image();
        let credentials = self.credentials(&loc.registry);
        let mut session = self.client.session(
            &image,
            self.is_insecure(&loc.registry),
            credentials.as_ref(),
            self.timeout,
            actions,
        );
        let key = (loc.registry.clone(), loc.repository.clone(), actions);
        let known = self.bearers.lock().ok().and_then(|b| b.get(&key).cloned());
        if let Some(bearer) = known {
            session.use_bearer(bearer);
        }
        let result = f(&mut session).await;
        if let (Some(bearer), Ok(mut bearers)) = (session.bearer(), self.bearers.lock()) {
            bearers.insert(key, bearer.to_string());
        }
        result
    }
}

impl Remote for Registries {
    fn manifest<'a>(
        &'a self,
        loc: &'a Loc,
        reference: &'a str,
    ) -> Op<'a, Option<(Vec<u8>, Option<String>)>> {
        Box::pin(self.with_session(loc, "pull", async |s| push::manifest(s, reference).await))
    }

    fn manifest_digest<'a>(&'a self, loc: &'a Loc, reference: &'a str) -> Op<'a, Option<String>> {
        Box::pin(self.with_session(loc, "pull", async |s| {
            push::manifest_digest(s, reference).await
        }))
    }

    fn referrers<'a>(&'a self, loc: &'a Loc, digest: &'a str) -> Op<'a, Option<Vec<u8>>> {
        Box::pin(self.with_session(loc, "pull", async |s| push::referrers(s, digest).await))
    }

    fn has_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str) -> Op<'a, bool> {
        Box::pin(self.with_session(loc, "pull", async |s| push::has_blob(s, digest).await))
    }

    fn blob<'a>(&'a self, loc: &'a Loc, digest: &'a str) -> Op<'a, Bytes> {
        Box::pin(self.with_session(loc, "pull", async |s| push::blob(s, digest).await))
    }

    fn put_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str, size: u64, data: Bytes) -> Op<'a, ()> {
        Box::pin(self.with_session(loc, "pull,push", async move |s| {
            push::put_blob(s, digest, size, data).await
        }))
    }

    fn mount_blob<'a>(&'a self, loc: &'a Loc, digest: &'a str, from: &'a str) -> Op<'a, bool> {
        Box::pin(self.with_session(loc, "pull,push", async |s| {
            push::mount_blob(s, digest, from).await
        }))
    }

    fn put_manifest<'a>(
        &'a self,
        loc: &'a Loc,
        reference: &'a str,
        media_type: &'a str,
        body: &'a [u8],
    ) -> Op<'a, ()> {
        Box::pin(self.with_session(loc, "pull,push", async |s| {
            push::put_manifest(s, reference, media_type, body).await
        }))
    }

    fn blob_time(&self) -> Option<std::time::Duration> {
        Some(self.timeout)
    }
}
