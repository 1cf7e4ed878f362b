//! The distribution protocol's other half, for `mirror`: what a repository has (`HEAD`),
//! and blob and manifest uploads. Blobs are streamed from one session into another, never
//! held whole; the registry checks the digest an upload names, so a blob whose bytes are
//! not its digest's is refused there and never stored.

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::LOCATION;
use reqwest::{Method, StatusCode};

use super::get::{get_blob, get_manifest};
use super::manifest::{ACCEPT, MAX_MANIFEST_BYTES};
use super::session::{Session, chunks, read_capped};
use super::{PullError, status_error};

/// A manifest by tag or digest and its `Content-Type`; `None` when the repository has none.
pub async fn manifest(
    session: &mut Session<'_>,
    reference: &str,
) -> Result<Option<(Vec<u8>, Option<String>)>, PullError> {
    match get_manifest(session, reference).await {
        Ok(found) => Ok(Some(found)),
        Err(PullError::ManifestUnknown(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The digest of the manifest `reference` names (the registry's `Docker-Content-Digest`),
/// `Some("")` when it has one but names no digest; `None` when it has none.
pub async fn manifest_digest(
    session: &mut Session<'_>,
    reference: &str,
) -> Result<Option<String>, PullError> {
    let what = |repo: String| format!("the manifest {repo}:{reference}");
    let found = head(session, "manifests", reference, Some(ACCEPT), what).await?;
    Ok(found.map(|response| {
        response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    }))
}

/// A `HEAD` of the `kind` (`manifests`, `blobs`) named `reference`: its answer, `None` when
/// the repository has none (`404`); another failure is an error about `what` (given the
/// repository).
async fn head(
    session: &mut Session<'_>,
    kind: &str,
    reference: &str,
    accept: Option<&str>,
    what: impl FnOnce(String) -> String,
) -> Result<Option<reqwest::Response>, PullError> {
    let url = session.url(kind, reference);
    let response = session.send(Method::HEAD, &url, accept).await?;
    match response.status() {
        StatusCode::NOT_FOUND => Ok(None),
        s if s.is_success() => Ok(Some(response)),
        s => Err(status_error(s, what(session.repo()), session.repo(), None)),
    }
}

/// The OCI 1.1 referrers of `digest` (an image index, capped as manifests are); `None`
/// when the registry has no referrers API (any answer but `200`: older registries route
/// the path nowhere), so that the caller falls back to the referrers tag.
pub async fn referrers(
    session: &mut Session<'_>,
    digest: &str,
) -> Result<Option<Vec<u8>>, PullError> {
    let url = session.url("referrers", digest);
    let response = session
        .send(Method::GET, &url, Some(super::manifest::OCI_INDEX))
        .await?;
    if response.status() != StatusCode::OK {
        return Ok(None);
    }
    let what = format!("the referrers of {}@{digest}", session.repo());
    read_capped(response, MAX_MANIFEST_BYTES, &what, session)
        .await
        .map(Some)
}

/// Whether the repository has the blob.
pub async fn has_blob(session: &mut Session<'_>, digest: &str) -> Result<bool, PullError> {
    let what = |repo: String| format!("blob {digest} of {repo}");
    Ok(head(session, "blobs", digest, None, what).await?.is_some())
}

/// A blob's bytes as they arrive (each chunk due within the idle bound).
pub async fn blob(
    session: &mut Session<'_>,
    digest: &str,
) -> Result<BoxStream<'static, Result<bytes::Bytes, PullError>>, PullError> {
    let response = get_blob(session, digest).await?;
    Ok(chunks(response, session))
}

/// Asks the registry to take a blob it holds in repository `from` (same registry) into
/// this one, instead of an upload: whether it did (`201`; a `202` starts an upload
/// instead, which is left unused).
pub async fn mount_blob(
    session: &mut Session<'_>,
    digest: &str,
    from: &str,
) -> Result<bool, PullError> {
    let mut url = reqwest::Url::parse(&format!(
        "{}/v2/{}/blobs/uploads/",
        session.origin, session.image.repository
    ))
    .map_err(|_| PullError::Bad(format!("{} is not a URL", session.origin)))?;
    url.query_pairs_mut()
        .append_pair("mount", digest)
        .append_pair("from", from);
    let response = session.send(Method::POST, url.as_str(), None).await?;
    Ok(response.status() == StatusCode::CREATED)
}

/// Uploads a blob of `size` bytes from `data` (a monolithic upload: `POST`, then one `PUT`
/// naming the digest).
pub async fn put_blob(
    session: &mut Session<'_>,
    digest: &str,
    size: u64,
    data: BoxStream<'static, Result<bytes::Bytes, PullError>>,
) -> Result<(), PullError> {
    let url = format!(
        "{}/v2/{}/blobs/uploads/",
        session.origin, session.image.repository
    );
    let response = session.send(Method::POST, &url, None).await?;
    if response.status() != StatusCode::ACCEPTED {
        return Err(status_error(
            response.status(),
            format!("starting an upload to {}", session.repo()),
            session.repo(),
            None,
        ));
    }
    let location = response
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            PullError::Bad(format!(
                "{} started an upload without a Location",
                session.repo()
            ))
        })?;
    let base = reqwest::Url::parse(&session.origin)
        .map_err(|_| PullError::Bad(format!("{} is not a URL", session.origin)))?;
    let mut upload = base.join(location).map_err(|_| {
        PullError::Bad(format!(
            "{} answered an upload with an unusable Location",
            session.repo()
        ))
    })?;
    // The upload stays on the registry it started on.
    if upload.origin() != base.origin() {
        return Err(PullError::Bad(format!(
            "{} sent the upload to another host",
            session.repo()
        )));
    }
    upload.query_pairs_mut().append_pair("digest", digest);
    let body = reqwest::Body::wrap_stream(data.map(|c| c.map_err(std::io::Error::other)));
    let response = session.put_stream(upload.as_str(), size, body).await?;
    if response.status() != StatusCode::CREATED {
        return Err(PullError::Status {
            what: format!("uploading blob {digest} to {}", session.repo()),
            status: response.status().as_u16(),
        });
    }
    Ok(())
}

/// Stores a manifest under `reference` (a tag, or the digest of `body`).
pub async fn put_manifest(
    session: &mut Session<'_>,
    reference: &str,
    media_type: &str,
    body: &[u8],
) -> Result<(), PullError> {
    let url = session.url("manifests", reference);
    let response = session
        .send_body(
            Method::PUT,
            &url,
            None,
            Some((media_type, bytes::Bytes::copy_from_slice(body))),
        )
        .await?;
    if response.status() != StatusCode::CREATED {
        return Err(PullError::Status {
            what: format!("storing the manifest {}:{reference}", session.repo()),
            status: response.status().as_u16(),
        });
    }
    Ok(())
}

/// The `Content-Type` a manifest is stored with: its `mediaType`, else the one it came with.
pub fn media_type(body: &[u8], content_type: Option<&str>) -> String {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Typed {
        media_type: Option<String>,
    }
    serde_json::from_slice::<Typed>(body)
        .ok()
        .and_then(|t| t.media_type)
        .or_else(|| content_type.map(str::to_string))
        .unwrap_or_else(|| super::manifest::OCI_MANIFEST.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_is_stored_with_its_own_media_type_first() {
        let index = br#"{"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert_eq!(
            media_type(index, Some("application/json")),
            "application/vnd.oci.image.index.v1+json"
        );
        assert_eq!(
            media_type(
                br#"{"schemaVersion":2}"#,
                Some("application/vnd.docker.distribution.manifest.v2+json")
            ),
            "application/vnd.docker.distribution.manifest.v2+json"
        );
        assert_eq!(
            media_type(b"not json", None),
            "application/vnd.oci.image.manifest.v1+json"
        );
    }
}
