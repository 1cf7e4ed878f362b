//! The json channel's HTTP fetch: one GET with a timeout, conditional when the last good
//! body is known, capped at the operator's output limit.

use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{ETAG, HeaderValue, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};

use crate::config::JsonOptions;

/// The validators of a body fetched before, for a conditional request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Validators {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

impl Validators {
    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.last_modified.is_none()
    }
}

#[derive(Debug, PartialEq)]
pub enum Response {
    Body {
        data: Vec<u8>,
        validators: Validators,
    },
    /// 304: the body the validators stand for is still current.
    NotModified,
    /// Why the fetch failed, as one line for the channel's status.
    Failed(String),
}

/// The client every json channel shares (its TLS provider is installed by the operator).
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .user_agent(concat!("rancheros-operator/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Fetches a json channel's data.
pub async fn get(
    http: &reqwest::Client,
    options: &JsonOptions,
    validators: &Validators,
    max_bytes: u64,
) -> Response {
    let uri = &options.uri;
    let failed = |what: String| Response::Failed(format!("fetching {uri}: {what}"));
    let mut get = http.get(uri).timeout(options.timeout);
    if let Some(etag) = &validators.etag {
        get = get.header(IF_NONE_MATCH, etag);
    }
    if let Some(date) = &validators.last_modified {
        get = get.header(IF_MODIFIED_SINCE, date);
    }
    let response = match get.send().await {
        Ok(r) => r,
        Err(e) => return failed(describe(&e, options.timeout)),
    };
    let status = response.status();
    if status == reqwest::StatusCode::NOT_MODIFIED {
        return Response::NotModified;
    }
    if !status.is_success() {
        return failed(format!("the server answered HTTP {status}"));
    }
    if let Some(len) = response.content_length()
        && len > max_bytes
    {
        return failed(format!(
            "the body is {len} bytes, more than the operator's limit of {max_bytes} bytes (--max-output-bytes)"
        ));
    }
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    let validators = Validators {
        etag: header(ETAG),
        last_modified: header(LAST_MODIFIED),
    };
    let mut data = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => {
                if (data.len() + bytes.len()) as u64 > max_bytes {
                    return failed(format!(
                        "the body is more than the operator's limit of {max_bytes} bytes (--max-output-bytes)"
                    ));
                }
                data.extend_from_slice(&bytes);
            }
            Err(e) => return failed(describe(&e, options.timeout)),
        }
    }
    Response::Body { data, validators }
}

fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("timed out after {}", crate::duration::format(timeout));
    }
    // reqwest's own message is generic; the innermost cause says what went wrong.
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_connect() {
        format!("cannot connect: {cause}")
    } else {
        format!("{e}: {cause}")
    }
}
