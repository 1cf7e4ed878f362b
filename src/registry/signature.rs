//! `spec.verify`: the digest's cosign signature fetched from the image's repository (the
//! `sha256-<hex>.sig` tag) and checked by [`crate::cosign`] before any data is used.

use super::get::{get_blob, get_manifest};
use super::session::{Session, read_capped};
use super::{PullError, matches};
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
        Ok((body, _)) => body,
        Err(PullError::ManifestUnknown(_)) => {
            return Err(unverified(cosign::VerifyError::Unsigned(image, tag)));
        }
        Err(e) => return Err(e),
    };
    let layers = cosign::signature_layers(&body, &image).map_err(unverified)?;
    let mut signed = Vec::with_capacity(layers.len());
    for layer in layers {
        if layer.payload_size > MAX_PAYLOAD_BYTES {
            continue;
        }
        let response = get_blob(session, &layer.payload_digest).await?;
        let payload =
            read_capped(response, MAX_PAYLOAD_BYTES, "a signature payload", session).await?;
        // A payload that is not the blob its layer names is not what was signed.
        if matches(&layer.payload_digest, &payload) == Some(true) {
            signed.push((payload, layer.signature));
        }
    }
    cosign::verify(&key, digest, &signed).map_err(unverified)
}
