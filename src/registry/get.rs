//! The two GETs of the distribution protocol that pulls and signature checks share: a
//! manifest (capped, with its media type) and a blob (the response, to be streamed).

use reqwest::Method;
use reqwest::header::CONTENT_TYPE;

use super::manifest::{ACCEPT, MAX_MANIFEST_BYTES};
use super::session::{Session, read_capped};
use super::{PullError, status_error};

/// A manifest by tag or digest, and its `Content-Type`.
pub(super) async fn get_manifest(
    session: &mut Session<'_>,
    reference: &str,
) -> Result<(Vec<u8>, Option<String>), PullError> {
    let url = session.url("manifests", reference);
    let response = session.send(Method::GET, &url, Some(ACCEPT)).await?;
    if !response.status().is_success() {
        let shown = format!("{}:{reference}", session.repo()).replace(":sha256:", "@sha256:");
        return Err(status_error(
            response.status(),
            format!("the manifest {shown}"),
            session.repo(),
            Some(shown),
        ));
    }
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = read_capped(response, MAX_MANIFEST_BYTES, "the manifest", session).await?;
    Ok((body, content_type))
}

/// A blob by digest: the response, its body not yet read.
pub(super) async fn get_blob(
    session: &mut Session<'_>,
    digest: &str,
) -> Result<reqwest::Response, PullError> {
    let url = session.url("blobs", digest);
    let response = session.send(Method::GET, &url, None).await?;
    if !response.status().is_success() {
        return Err(status_error(
            response.status(),
            format!("blob {digest} of {}", session.repo()),
            session.repo(),
            None,
        ));
    }
    Ok(response)
}
