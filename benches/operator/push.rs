//! Channel artifacts pushed to the test registry over the distribution protocol, from this
//! process: a thousand pushes by skopeo or oras processes would take minutes, and the push
//! is not what is measured. Each artifact is what `oras push --artifact-type
//! application/vnd.rancheros.channel.v1+json REF channel.json:TYPE` makes: an image
//! manifest whose config is the empty descriptor and whose one layer is the channel data.
//! The manifest and URL parts are pure, unit-tested in tests/bench_operator.rs.

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use serde_json::{Value, json};

pub const ARTIFACT_TYPE: &str = "application/vnd.rancheros.channel.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const EMPTY_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The empty descriptor's content (`{}`).
const EMPTY: &[u8] = b"{}";

pub fn digest(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The manifest of a channel artifact whose layer is `data`.
pub fn artifact_manifest(data: &[u8]) -> Value {
    json!({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": EMPTY_TYPE, "digest": digest(EMPTY), "size": EMPTY.len()},
        "layers": [{"mediaType": ARTIFACT_TYPE, "digest": digest(data), "size": data.len(),
                    "annotations": {"org.opencontainers.image.title": "channel.json"}}],
    })
}

/// Where to `PUT` an upload's bytes: the `Location` the registry answered (absolute, or a
/// path of `base`) with the blob's digest added to its query.
pub fn upload_url(base: &str, location: &str, digest: &str) -> String {
    let url = if location.starts_with("http://") || location.starts_with("https://") {
        location.to_string()
    } else {
        format!("{base}{location}")
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}digest={}", digest.replace(':', "%3A"))
}

/// The plain HTTP test registry (`RANCHEROS_TEST_REGISTRY`, basic auth).
#[derive(Clone)]
pub struct Registry {
    client: reqwest::Client,
    base: String,
    user: String,
    password: String,
}

impl Registry {
    pub fn from_env() -> Result<Self> {
        // reqwest is built without a TLS provider of its own (the operator installs ring).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let var = |n: &str| std::env::var(n).unwrap_or_default();
        Ok(Registry {
            client: reqwest::Client::builder()
                .build()
                .wrap_err("an HTTP client")?,
            base: format!("http://{}", var("RANCHEROS_TEST_REGISTRY")),
            user: var("RANCHEROS_TEST_REGISTRY_USER"),
            password: var("RANCHEROS_TEST_REGISTRY_PASSWORD"),
        })
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, url)
            .basic_auth(&self.user, Some(&self.password))
    }

    /// Uploads one blob (a monolithic upload: `POST`, then `PUT` of the bytes).
    pub async fn put_blob(&self, repo: &str, data: &[u8]) -> Result<()> {
        let start = format!("{}/v2/{repo}/blobs/uploads/", self.base);
        let r = self.request(reqwest::Method::POST, &start).send().await?;
        if r.status() != reqwest::StatusCode::ACCEPTED {
            bail!("starting an upload to {repo}: {}", r.status());
        }
        let location = r
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| eyre!("the registry named no upload location"))?
            .to_string();
        let url = upload_url(&self.base, &location, &digest(data));
        let r = self
            .request(reqwest::Method::PUT, &url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(data.to_vec())
            .send()
            .await?;
        if r.status() != reqwest::StatusCode::CREATED {
            bail!("uploading a blob to {repo}: {}", r.status());
        }
        Ok(())
    }

    /// The empty config blob the artifacts of `repo` share; once per repository.
    pub async fn put_empty_config(&self, repo: &str) -> Result<()> {
        self.put_blob(repo, EMPTY).await
    }

    /// Pushes the channel artifact of `data` as `repo:tag` (its config pushed already).
    pub async fn push_artifact(&self, repo: &str, tag: &str, data: &[u8]) -> Result<()> {
        self.put_blob(repo, data).await?;
        let manifest = artifact_manifest(data).to_string();
        let url = format!("{}/v2/{repo}/manifests/{tag}", self.base);
        let r = self
            .request(reqwest::Method::PUT, &url)
            .header(reqwest::header::CONTENT_TYPE, MANIFEST_TYPE)
            .body(manifest)
            .send()
            .await?;
        if r.status() != reqwest::StatusCode::CREATED {
            bail!("pushing {repo}:{tag}: {}", r.status());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_artifact_as_oras_pushes_it() {
        let m = artifact_manifest(b"[]");
        assert_eq!(m["artifactType"], ARTIFACT_TYPE);
        assert_eq!(
            m["config"]["digest"],
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(m["layers"][0]["digest"], digest(b"[]"));
        assert_eq!(m["layers"][0]["size"], 2);
        assert_eq!(m["layers"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn upload_urls() {
        let d = "sha256:ab";
        assert_eq!(
            upload_url("http://r:1", "/v2/x/blobs/uploads/u?_state=s", d),
            "http://r:1/v2/x/blobs/uploads/u?_state=s&digest=sha256%3Aab"
        );
        assert_eq!(
            upload_url("http://r:1", "http://other/v2/x/u", d),
            "http://other/v2/x/u?digest=sha256%3Aab"
        );
    }
}
