//! oci channels: the channel data read straight from a registry (the OCI distribution
//! protocol), with no pod. A sync resolves the tag to a digest with one `HEAD`; an
//! unchanged digest pulls nothing (the data read before is used again). A changed one
//! fetches the manifest (from an image index, the platform's), then the layers from the top
//! down until the file is found, each streamed, decompressed and walked in a blocking task
//! with the bounds of `--max-layer-bytes` and `--max-output-bytes`; an artifact whose layer
//! is JSON is the data itself.
//!
//! Built on the json channels' reqwest client rather than a registry crate: the egress
//! policy must judge the address actually connected to (the resolver of `fetch`), and
//! `oci-client`, the maintained Rust one, builds its own reqwest client with no way to give
//! it a resolver, a redirect policy or a proxy setting, and reads whole blobs into memory.

use std::sync::Arc;

use reqwest::StatusCode;

pub mod auth;
mod get;
pub mod layers;
pub mod manifest;
mod pull;
pub mod push;
pub mod secrets;
mod session;
mod signature;

pub use auth::Credentials;
pub use pull::pull;
pub use session::Session;

use crate::egress::Policy;

/// The client every oci channel shares (a channel with its own CA gets a copy with that
/// root added), with the egress policy and the layer bound.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    policy: Arc<Policy>,
    pub max_layer_bytes: u64,
}

impl Client {
    pub fn new(policy: Policy, max_layer_bytes: u64) -> reqwest::Result<Self> {
        let policy = Arc::new(policy);
        let http = builder(policy.clone()).build()?;
        Ok(Client {
            http,
            policy,
            max_layer_bytes,
        })
    }

    /// A session with one repository (`image`'s), for `mirror`: `actions` `pull` or
    /// `pull,push`.
    pub fn session<'a>(
        &'a self,
        image: &'a crate::config::ImageRef,
        insecure: bool,
        credentials: Option<&'a Credentials>,
        timeout: std::time::Duration,
        actions: &'static str,
    ) -> Session<'a> {
        let mut s = Session::new(
            self.http.clone(),
            &self.policy,
            image,
            insecure,
            credentials,
            timeout,
        );
        s.actions = actions;
        s
    }

    /// This client with the roots of `ca_pem` added (`mirror --ca-file`).
    pub fn with_roots(&self, ca_pem: &[u8]) -> Result<Client, CaError> {
        Ok(Client {
            http: self.with_ca(Some(ca_pem))?,
            policy: self.policy.clone(),
            max_layer_bytes: self.max_layer_bytes,
        })
    }

    /// The client for a registry whose certificate chains to `ca_pem` (or the system's
    /// roots).
    fn with_ca(&self, ca_pem: Option<&[u8]>) -> Result<reqwest::Client, CaError> {
        let Some(pem) = ca_pem else {
            return Ok(self.http.clone());
        };
        let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|_| CaError::NotPem)?;
        let mut b = builder(self.policy.clone());
        for c in certs {
            b = b.add_root_certificate(c);
        }
        b.build().map_err(|e| CaError::Unusable(e.to_string()))
    }
}

fn builder(policy: Arc<Policy>) -> reqwest::ClientBuilder {
    // A registry that sends nothing for `budget::IDLE` fails the read: `Session` bounds the
    // wait for an answer and for each chunk of a body, naming that bound when it ends one.
    crate::fetch::guarded(policy)
}

/// Why a CA bundle cannot be used; the caller names where it came from before it
/// (`caSecretRef: ca.crt`, `--ca-file FILE`).
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("is not a PEM certificate")]
    NotPem,
    #[error("cannot be used: {0}")]
    Unusable(String),
}

/// What a pull is given from the channel's namespace: the credentials for the image's
/// registry (from `imagePullSecrets`), and the CA of `caSecretRef`.
#[derive(Debug, Default)]
pub struct Access {
    pub credentials: Option<Credentials>,
    pub ca_pem: Option<Vec<u8>>,
    /// `cosign.pub` of `spec.verify`'s Secret: the key the image's digest must be signed by.
    pub verify_key: Option<Vec<u8>>,
}

/// Why a pull failed, as one line (after "pulling IMAGE: ").
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("401 unauthorized for {repo} ({why})")]
    Unauthorized { repo: String, why: Refusal },
    #[error("403 forbidden for {0}")]
    Forbidden(String),
    #[error("manifest unknown {0}")]
    ManifestUnknown(String),
    #[error("no file {path} in {image}")]
    NoFile { path: String, image: String },
    #[error("no platform {platform} in the image index of {image} (it has {listed})")]
    NoPlatform {
        platform: String,
        image: String,
        listed: String,
    },
    #[error("{what}: the registry answered HTTP {status}")]
    Status { what: String, status: u16 },
    #[error("{0}")]
    Transport(String),
    #[error(transparent)]
    Layer(#[from] layers::LayerError),
    #[error("{0}")]
    Bad(String),
    /// The signature check of `spec.verify` refused the image (its data is not used).
    #[error("{0}")]
    Unverified(String),
}

/// Why the registry said `401`: what the user has to fix differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no credentials for it in imagePullSecrets")]
    NoCredentials,
    #[error("the registry refused the credentials of imagePullSecrets")]
    CredentialsRefused,
    /// The token server took the credentials, but its token does not grant the pull.
    #[error(
        "the registry's token for the credentials of imagePullSecrets does not grant pulling it"
    )]
    NotGranted,
}

/// The failure of a manifest or blob answer that is not a success.
fn status_error(
    status: StatusCode,
    what: String,
    repo: String,
    manifest: Option<String>,
) -> PullError {
    match (status, manifest) {
        (StatusCode::NOT_FOUND, Some(reference)) => PullError::ManifestUnknown(reference),
        (StatusCode::FORBIDDEN, _) => PullError::Forbidden(repo),
        _ => PullError::Status {
            what,
            status: status.as_u16(),
        },
    }
}

pub use crate::digest::{Algorithm, matches, sha256};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_checked_with_the_algorithm_they_name_and_others_are_unverifiable() {
        let data = b"an index entry's manifest";
        let sha512 = Algorithm::Sha512.digest(data);
        assert_eq!(matches(&sha512, data), Some(true));
        assert_eq!(matches(&sha512, b"another"), Some(false));
        assert_eq!(matches(&sha256(data), data), Some(true));
        // The same hex under another name is not it.
        let renamed = sha512.replacen("sha512:", "sha256:", 1);
        assert_eq!(matches(&renamed, data), Some(false));
        for unknown in ["md5:00", "sha384:00", "blake3:00", "sha256", ""] {
            assert_eq!(matches(unknown, data), None, "{unknown}");
        }
    }
}
