//! `spec.verify`: the digest's cosign signature fetched from the image's repository (the
//! `sha256-<hex>.sig` tag) and checked by [`crate::cosign`] before any data is used.

use super::PullError;
use super::get::{get_blob, get_manifest};
use super::session::{Session, read_capped};
use crate::cosign::{self, MAX_PAYLOAD_BYTES, PublicKey};

/// Verifies that `digest` (the manifest the tag names) is signed by `key_pem`.
pub(super) async fn verify(
    session: &mut Session<'_>,
    key_pem: &[u8],
    digest: &str,
) -> Result<(), PullError> {
    let unverified = |e: cosign::VerifyError| PullError::Unverified(e.to_string());
    let key = std::str::from_utf8(key_pem)
        .map_err(|_| cosign::VerifyError::BadKey)
        .and_then(PublicKey::from_pem)
        .map_err(unverified)?;
    let tag = cosign::signature_tag(digest).map_err(unverified)?;
    let image = format!("{}@{digest}", session.repo());
    let body = match get_manifest(session, &tag).await {
        Ok((body, _)) => Some(body),
        Err(PullError::ManifestUnknown(_)) => None,
        Err(e) => return Err(e),
    };
    let layers = cosign::to_read(digest, &image, body.as_deref()).map_err(unverified)?;
    let mut read = Vec::with_capacity(layers.len());
    for layer in layers {
        let response = get_blob(session, &layer.payload_digest).await?;
        let payload =
            read_capped(response, MAX_PAYLOAD_BYTES, "a signature payload", session).await?;
        read.push((layer, payload));
    }
    cosign::verify_read(&key, digest, read).map_err(unverified)
}
