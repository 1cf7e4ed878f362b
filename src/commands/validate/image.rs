//! `validate --image REF`: a published channel image (or artifact) read with the
//! operator's own pull code (`registry`), then checked with the same rules as a file. Run
//! from a user's shell or a channel's CI: credentials come from the Docker or Podman login
//! file, and no address is refused (the egress policy guards the operator's network, not
//! the user's).

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{DEFAULT_PATH, ImageRef, OciOptions, Platform};
use crate::egress::Policy;
use crate::fetch::{Response, Validators};
use crate::registry::{self, Access};

use crate::commands::validate::FileReport;

/// How one image is read.
#[derive(Clone, Debug)]
pub struct ImageOptions {
    /// The file in the image (default `/channel.json`).
    pub path: Option<String>,
    /// For an image index (default `linux/<this machine's architecture>`).
    pub platform: Option<String>,
    /// Plain HTTP.
    pub insecure: bool,
    /// A PEM file the registry's certificate chains to.
    pub ca_file: Option<PathBuf>,
    /// A cosign public key the image's digest must be signed by.
    pub key_file: Option<PathBuf>,
    pub timeout: Duration,
    pub max_output_bytes: u64,
    pub max_layer_bytes: u64,
}

/// Reads and checks `image`; a pull that fails is a report with a read error.
pub async fn check(image: &str, o: &ImageOptions) -> FileReport {
    match pull(image, o).await {
        Ok((name, data)) => crate::commands::validate::report(&name, data),
        Err(why) => crate::commands::validate::unreadable(image, why),
    }
}

/// Pulls `image`'s channel data: a name for it (`repo@digest:path`) and the data.
pub async fn pull(image: &str, o: &ImageOptions) -> Result<(String, Vec<u8>), String> {
    pull_with(image, o, registry::auth::login_configs()).await
}

/// [`pull`] with the credentials of these docker config files (first match used).
pub async fn pull_with(
    image: &str,
    o: &ImageOptions,
    configs: Vec<Vec<u8>>,
) -> Result<(String, Vec<u8>), String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let reference = ImageRef::parse(image)?;
    let platform = match &o.platform {
        Some(p) => Platform::parse(p).map_err(|e| format!("--platform: {e}"))?,
        None => Platform::host(),
    };
    let path = o.path.clone().unwrap_or_else(|| DEFAULT_PATH.into());
    if !path.starts_with('/') {
        return Err(format!("--path {path:?} must be an absolute path"));
    }
    let ca_pem = match &o.ca_file {
        Some(f) => Some(std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?),
        None => None,
    };
    let verify_key = match &o.key_file {
        Some(f) => Some(std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?),
        None => None,
    };
    let credentials = registry::auth::first_credentials(&configs, &reference.registry);
    let options = OciOptions {
        path,
        insecure: o.insecure,
        platform,
        verify_secret: o.key_file.as_ref().map(|f| f.display().to_string()),
        ..OciOptions::of_image(reference, o.timeout)
    };
    let client = registry::Client::new(Policy::new(Vec::new(), Vec::new()), o.max_layer_bytes)
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let access = Access {
        credentials,
        ca_pem,
        verify_key,
    };
    // A budget of its own: one pull, one output's worth.
    let mut hold = crate::budget::Budget::new(o.max_output_bytes, crate::budget::IDLE).hold();
    match registry::pull(
        &client,
        &options,
        &access,
        &Validators::default(),
        o.max_output_bytes,
        &mut hold,
    )
    .await
    {
        Response::Body {
            data, validators, ..
        } => {
            let revision = validators.etag.unwrap_or_default();
            let digest = revision.rsplit('@').next().unwrap_or_default();
            Ok((
                format!("{}@{digest}:{}", options.image.repo(), options.path),
                data,
            ))
        }
        Response::Failed(why) | Response::Unverified(why) => Err(why),
        Response::NotModified => Err(format!("pulling {image}: the registry sent no data")),
    }
}
