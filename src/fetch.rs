//! The json channel's HTTP fetch: one GET with a timeout, conditional when the last good
//! body is known, capped at the operator's output limit, and held to the egress policy
//! (`egress`) at every hop: a name is resolved once and only the addresses the policy
//! allows are connected to (so a name that resolves differently the second time cannot
//! slip past the check), IP literals are checked before the request and at each redirect,
//! and at most [`MAX_REDIRECTS`] redirects are followed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{ETAG, HeaderValue, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use reqwest::redirect;

use crate::budget::Hold;
use crate::config::JsonOptions;
use crate::egress::{Policy, Refused};

/// The most redirects one fetch follows.
const MAX_REDIRECTS: usize = 5;

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
        /// An oci image's changelogs, read with its channel file (`None`: not an image).
        changelogs: Option<std::sync::Arc<crate::channel::changelogs::Changelogs>>,
    },
    /// 304: the body the validators stand for is still current.
    NotModified,
    /// Why the fetch failed, as one line for the channel's status.
    Failed(String),
    /// An oci image whose signature did not verify (`spec.verify`): its data is not used.
    Unverified(String),
}

/// The client every json channel shares (its TLS provider is installed by the operator),
/// with the egress policy it enforces.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    policy: Arc<Policy>,
}

impl Client {
    pub fn new(policy: Policy) -> reqwest::Result<Self> {
        let policy = Arc::new(policy);
        let http = guarded(policy.clone()).build()?;
        Ok(Client { http, policy })
    }
}

/// A client builder held to the egress policy (the json channels' and the oci
/// registries'): names resolved once and only allowed addresses connected to, redirects
/// checked at each hop, no proxy. IP literals in a first URL are the caller's to check
/// ([`check_literal`]).
pub(crate) fn guarded(policy: Arc<Policy>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(concat!("rancheros-operator/", env!("CARGO_PKG_VERSION")))
        // Through a proxy the address connected to would be the proxy's, and the
        // proxy would resolve the name: the policy could not see where a request goes.
        .no_proxy()
        .dns_resolver(Arc::new(Resolver {
            policy: policy.clone(),
        }))
        .redirect(redirects(policy))
}

/// Resolves a name once and hands the connector only the addresses the policy allows.
struct Resolver {
    policy: Arc<Policy>,
}

impl Resolve for Resolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            // Port 0: the connector puts in the URL's port.
            let resolved: Vec<IpAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect();
            let allowed = policy.filter(&resolved)?;
            let addrs: Addrs = Box::new(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("more than {MAX_REDIRECTS} redirects (the most a json channel follows)")]
struct TooManyRedirects;

/// Follows at most [`MAX_REDIRECTS`] redirects, each to a host the policy allows (a name
/// is checked when it is resolved, an IP literal here, since it is never resolved).
fn redirects(policy: Arc<Policy>) -> redirect::Policy {
    redirect::Policy::custom(move |attempt| {
        // `previous` holds the first URL and every redirect followed so far.
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(TooManyRedirects);
        }
        match check_literal(&policy, attempt.url()) {
            Err(refused) => attempt.error(refused),
            Ok(()) => attempt.follow(),
        }
    })
}

/// A host that is an IP literal is never resolved, so the resolver cannot check it: this
/// does (for a name it does nothing).
pub(crate) fn check_literal(policy: &Policy, url: &reqwest::Url) -> Result<(), Refused> {
    url.host_str().map_or(Ok(()), |h| policy.check_host(h))
}

/// Fetches a json channel's data; the body takes room in `hold` as it arrives, and a
/// source that sends nothing for the budget's idle bound (an answer, or the next bytes of
/// the body) fails the fetch.
pub async fn get(
    client: &Client,
    options: &JsonOptions,
    validators: &Validators,
    max_bytes: u64,
    hold: &mut Hold,
) -> Response {
    let uri = &options.uri;
    let failed = |what: String| Response::Failed(format!("fetching {uri}: {what}"));
    // A URL that does not parse is left to reqwest, which says why.
    let url = reqwest::Url::parse(uri).ok();
    if let Some(url) = &url
        && let Err(refused) = check_literal(&client.policy, url)
    {
        return failed(refused.to_string());
    }
    // Toward a private address, a failure says so and nothing of what answered: an HTTP
    // status, a connect error, a timeout or a size would map the private network.
    let mut private = match url.as_ref().and_then(reqwest::Url::host_str) {
        Some(host) => resolves_private(&client.policy, host).await,
        None => false,
    };
    let quiet = |private: bool, what: String| {
        if private {
            failed(PRIVATE.into())
        } else {
            failed(what)
        }
    };
    let mut get = client.http.get(uri).timeout(options.timeout);
    if let Some(etag) = &validators.etag {
        get = get.header(IF_NONE_MATCH, etag);
    }
    if let Some(date) = &validators.last_modified {
        get = get.header(IF_MODIFIED_SINCE, date);
    }
    let budget = hold.budget().clone();
    let response = match budget.step(get.send()).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let why = describe(&e, options.timeout);
            return if is_refusal(&e) {
                failed(why)
            } else {
                quiet(private, why)
            };
        }
        Err(stall) => return quiet(private, stall.to_string()),
    };
    private |= response
        .remote_addr()
        .is_some_and(|a| client.policy.withholds(a.ip()));
    let status = response.status();
    if status == reqwest::StatusCode::NOT_MODIFIED {
        return Response::NotModified;
    }
    if !status.is_success() {
        return quiet(private, format!("the server answered HTTP {status}"));
    }
    if let Some(len) = response.content_length()
        && len > max_bytes
    {
        return quiet(
            private,
            format!(
                "the body is {len} bytes, more than the operator's limit of {max_bytes} bytes (--max-output-bytes)"
            ),
        );
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
    loop {
        let chunk = match budget.step(stream.next()).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(stall) => return quiet(private, stall.to_string()),
        };
        match chunk {
            Ok(bytes) => {
                let len = data.len().saturating_add(bytes.len());
                if len as u64 > max_bytes {
                    return quiet(
                        private,
                        format!(
                            "the body is more than the operator's limit of {max_bytes} bytes (--max-output-bytes)"
                        ),
                    );
                }
                if let Err(stall) = hold.grow(len).await {
                    return failed(stall.to_string());
                }
                data.extend_from_slice(&bytes);
            }
            Err(e) => return quiet(private, describe(&e, options.timeout)),
        }
    }
    Response::Body {
        data,
        validators,
        changelogs: None,
    }
}

/// What a failed fetch toward a private address says.
pub const PRIVATE: &str = "the request to a private address failed (json egress: what a private address answers is not shown)";

/// Whether a URL's host is, or resolves to, an address whose failures are withheld
/// (`Policy::withholds`).
/// A name that resolves differently at connect time is caught by the connected address
/// (`remote_addr`) once it answers.
pub(crate) async fn resolves_private(policy: &Policy, host: &str) -> bool {
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return policy.withholds(ip);
    }
    match tokio::net::lookup_host((literal, 0)).await {
        Ok(addrs) => addrs.into_iter().any(|a| policy.withholds(a.ip())),
        Err(_) => false,
    }
}

/// Whether the policy refused the request (its refusal names the address and the rule:
/// nothing answered).
fn is_refusal(e: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<Refused>() || c.is::<TooManyRedirects>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Why a request failed, in words that carry nothing the server sent: reqwest's own
/// message names a URL, which after a redirect comes from a server's `Location`.
pub(crate) fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("timed out after {}", crate::duration::format(timeout));
    }
    // The innermost cause says what went wrong.
    let mut cause: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    // The policy's refusals say all there is to say.
    if cause.is::<Refused>() || cause.is::<TooManyRedirects>() {
        return cause.to_string();
    }
    let what = if e.is_connect() {
        "cannot connect"
    } else if e.is_redirect() {
        "cannot follow a redirect"
    } else if e.is_body() || e.is_decode() {
        "cannot read the body"
    } else if e.is_builder() {
        "not a usable URL"
    } else {
        "the request failed"
    };
    format!("{what}: {cause}")
}

#[cfg(test)]
mod tests;
