//! Requests to one repository of one registry: authenticated as the registry asks
//! (credentials sent up front when there are some, a `401` answered with Basic or the token
//! flow), every address held to the egress policy, every failure said in words that carry
//! nothing the registry sent.

use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};

use super::PullError;
use super::auth::{self, Challenge, Credentials};
use crate::config::ImageRef;
use crate::egress::{Policy, Refused};
use crate::fetch;

/// The largest token endpoint answer read.
const MAX_TOKEN_BYTES: u64 = 64 << 10;

pub struct Session<'a> {
    pub http: reqwest::Client,
    pub policy: &'a Policy,
    /// `scheme://host[:port]`.
    pub origin: String,
    pub image: &'a ImageRef,
    pub credentials: Option<&'a Credentials>,
    pub timeout: Duration,
    /// The `Authorization` the registry accepted (or asked for) so far.
    authorization: Option<String>,
    /// Requests sent, for the logs (an unchanged image costs one).
    pub requests: u32,
    /// The registry is, or answered from, an address whose answers a failure may not show
    /// (`Policy::withholds`: a private range the allow list does not name).
    pub private: bool,
    /// What a token is asked to grant when the registry's challenge names no scope:
    /// `pull`, or `pull,push` for `mirror`'s destination.
    pub actions: &'static str,
}

/// A request body that can be sent again (after a `401`): its `Content-Type` and bytes.
pub type Body<'b> = (&'b str, bytes::Bytes);

impl<'a> Session<'a> {
    pub fn new(
        http: reqwest::Client,
        policy: &'a Policy,
        image: &'a ImageRef,
        insecure: bool,
        credentials: Option<&'a Credentials>,
        timeout: Duration,
    ) -> Self {
        let scheme = if insecure { "http" } else { "https" };
        Session {
            http,
            policy,
            origin: format!("{scheme}://{}", image.registry),
            image,
            credentials,
            timeout,
            authorization: credentials.map(Credentials::basic),
            requests: 0,
            private: false,
            actions: "pull",
        }
    }

    /// The bearer token this session won, if any (`mirror` hands it to its next session
    /// of the same repository, which then skips the 401 and the token request).
    pub fn bearer(&self) -> Option<&str> {
        self.authorization
            .as_deref()
            .filter(|a| a.starts_with("Bearer "))
    }

    /// Starts with a bearer token an earlier session won; one that has expired is answered
    /// `401` and replaced as any challenge is.
    pub fn use_bearer(&mut self, bearer: String) {
        self.authorization = Some(bearer);
    }

    /// A word the registry sent, for a failure's message: not at all from a private
    /// address (the message must not map what answers there), else only a plain one.
    pub fn shown(&self, word: &str) -> String {
        if self.private {
            "(not shown: what a private address answers is withheld)".into()
        } else {
            super::manifest::word(word)
        }
    }

    pub fn repo(&self) -> String {
        self.image.repo()
    }

    pub fn url(&self, kind: &str, reference: &str) -> String {
        format!(
            "{}/v2/{}/{kind}/{reference}",
            self.origin, self.image.repository
        )
    }

    /// Sends a request; a `401` is answered once as the challenge asks, a second one is
    /// [`PullError::Unauthorized`].
    pub async fn send(
        &mut self,
        method: Method,
        url: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, PullError> {
        self.send_body(method, url, accept, None).await
    }

    /// [`Session::send`] with a body.
    pub async fn send_body(
        &mut self,
        method: Method,
        url: &str,
        accept: Option<&str>,
        body: Option<Body<'_>>,
    ) -> Result<reqwest::Response, PullError> {
        let mut answered = false;
        loop {
            let response = self
                .raw(
                    method.clone(),
                    url,
                    accept,
                    self.authorization.clone(),
                    body.clone(),
                )
                .await?;
            if response.status() != StatusCode::UNAUTHORIZED {
                return Ok(response);
            }
            if answered {
                // A token was issued (else `token` failed): for these credentials, if any,
                // it grants no pull of this repository.
                let bearer = self
                    .authorization
                    .as_deref()
                    .is_some_and(|a| a.starts_with("Bearer "));
                return Err(self.unauthorized(bearer));
            }
            answered = true;
            let header = response
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            match header.as_deref().and_then(auth::challenge) {
                Some(Challenge::Bearer {
                    realm,
                    service,
                    scope,
                }) => {
                    let token = self.token(&realm, service, scope).await?;
                    self.authorization = Some(format!("Bearer {token}"));
                }
                // Basic credentials were sent already, or there are none.
                _ => return Err(self.unauthorized(false)),
            }
        }
    }

    fn unauthorized(&self, token_issued: bool) -> PullError {
        PullError::Unauthorized {
            repo: self.repo(),
            why: refusal(self.credentials.is_some(), token_issued),
        }
    }

    /// A `PUT` of a streamed body of `len` bytes (a blob), sent once with the authorization
    /// earlier requests of this session won (a stream cannot be sent again), its answer due
    /// within the session's timeout (it comes after the whole body).
    pub async fn put_stream(
        &mut self,
        url: &str,
        len: u64,
        body: reqwest::Body,
    ) -> Result<reqwest::Response, PullError> {
        self.check_literal(url)?;
        let mut request = self
            .http
            .put(url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .header(reqwest::header::CONTENT_LENGTH, len)
            .body(body);
        if let Some(a) = &self.authorization {
            request = request.header(AUTHORIZATION, a);
        }
        self.dispatch(request, self.timeout).await
    }

    /// Refuses a URL whose host is an IP literal the egress policy refuses (an IP literal
    /// is never resolved: the resolver cannot check it, this does).
    fn check_literal(&self, url: &str) -> Result<(), PullError> {
        if let Ok(parsed) = reqwest::Url::parse(url) {
            fetch::check_literal(self.policy, &parsed)
                .map_err(|r| PullError::Transport(r.to_string()))?;
        }
        Ok(())
    }

    /// Sends `request` (one more of this session's), its answer due `within`.
    async fn dispatch(
        &mut self,
        request: reqwest::RequestBuilder,
        within: std::time::Duration,
    ) -> Result<reqwest::Response, PullError> {
        self.requests = self.requests.saturating_add(1);
        match tokio::time::timeout(within, request.send()).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(PullError::Transport(describe(
                &e,
                &self.image.registry,
                self.timeout,
            ))),
            Err(_) => Err(silent(&self.image.registry)),
        }
    }

    async fn raw(
        &mut self,
        method: Method,
        url: &str,
        accept: Option<&str>,
        authorization: Option<String>,
        body: Option<Body<'_>>,
    ) -> Result<reqwest::Response, PullError> {
        self.check_literal(url)?;
        let mut request = self.http.request(method, url);
        if let Some(a) = accept {
            request = request.header(ACCEPT, a);
        }
        if let Some(a) = authorization {
            request = request.header(AUTHORIZATION, a);
        }
        if let Some((content_type, bytes)) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(bytes);
        }
        let response = self.dispatch(request, crate::budget::IDLE).await?;
        self.private |= response
            .remote_addr()
            .is_some_and(|a| self.policy.withholds(a.ip()));
        Ok(response)
    }

    /// The token flow: the realm is asked (with the credentials, when there are some) for
    /// a pull token of this repository.
    async fn token(
        &mut self,
        realm: &str,
        service: Option<String>,
        scope: Option<String>,
    ) -> Result<String, PullError> {
        let scope = scope
            .unwrap_or_else(|| format!("repository:{}:{}", self.image.repository, self.actions));
        let mut url = reqwest::Url::parse(realm).map_err(|_| {
            PullError::Bad(format!(
                "the registry's token realm of {} is not a URL",
                self.repo()
            ))
        })?;
        realm_allowed(&url, &self.origin).map_err(PullError::Bad)?;
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = &service {
                q.append_pair("service", s);
            }
            q.append_pair("scope", &scope);
        }
        let basic = self.credentials.map(Credentials::basic);
        let response = self
            .raw(Method::GET, url.as_str(), None, basic, None)
            .await?;
        if matches!(
            response.status(),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) {
            return Err(self.unauthorized(false));
        }
        if !response.status().is_success() {
            return Err(PullError::Status {
                what: format!("the token endpoint of {}", self.repo()),
                status: response.status().as_u16(),
            });
        }
        let body = read_capped(response, MAX_TOKEN_BYTES, "the token answer", self).await?;
        let token: auth::Token = serde_json::from_slice(&body).map_err(|_| {
            PullError::Bad(format!("the token answer for {} is not JSON", self.repo()))
        })?;
        token.token.or(token.access_token).ok_or_else(|| {
            PullError::Bad(format!(
                "the token answer for {} holds no token",
                self.repo()
            ))
        })
    }
}

/// A body's chunks, each due within [`crate::budget::IDLE`] of the last: a registry that
/// stops sending mid-body fails that read then, not at the end of the channel's timeout
/// (which a big layer on a slow link may need to be long).
pub fn chunks(
    response: reqwest::Response,
    session: &Session<'_>,
) -> futures::stream::BoxStream<'static, Result<bytes::Bytes, PullError>> {
    let (host, timeout, idle) = (
        session.image.registry.clone(),
        session.timeout,
        crate::budget::IDLE,
    );
    // (The wait for the answer's head is bounded the same way, in `raw`.)
    futures::stream::unfold(Some(response.bytes_stream().boxed()), move |stream| {
        let host = host.clone();
        async move {
            let mut stream = stream?;
            match tokio::time::timeout(idle, stream.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(stream))),
                Ok(Some(Err(e))) => Some((
                    Err(PullError::Transport(describe(&e, &host, timeout))),
                    None,
                )),
                Ok(None) => None,
                Err(_) => Some((Err(silent(&host)), None)),
            }
        }
    })
    .boxed()
}

/// A registry that sent nothing for the idle bound.
fn silent(host: &str) -> PullError {
    PullError::Transport(format!(
        "{host}: {}",
        crate::budget::Stall::Silent(crate::budget::IDLE)
    ))
}

/// A body read whole, at most `max` bytes (more is an error naming `what`).
pub async fn read_capped(
    response: reqwest::Response,
    max: u64,
    what: &str,
    session: &Session<'_>,
) -> Result<Vec<u8>, PullError> {
    if response.content_length().is_some_and(|l| l > max) {
        return Err(PullError::Bad(format!("{what} is more than {max} bytes")));
    }
    let mut data = Vec::new();
    let mut stream = chunks(response, session);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if data.len().saturating_add(chunk.len()) as u64 > max {
            return Err(PullError::Bad(format!("{what} is more than {max} bytes")));
        }
        data.extend_from_slice(&chunk);
    }
    Ok(data)
}

/// Why a request failed: TLS and name resolution said as such, the rest as json fetches
/// say it (never with bytes the server sent).
pub fn describe(e: &reqwest::Error, host: &str, timeout: Duration) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<Refused>() {
            return c.to_string();
        }
        if let Some(tls) = tls_error(c) {
            return format!("TLS with {host} failed: {tls}");
        }
        let text = c.to_string();
        if text.contains("failed to lookup address") || text.contains("Name or service not known") {
            return format!("cannot resolve {host}: {text}");
        }
        cause = c.source();
    }
    fetch::describe(e, timeout)
}

/// Credentials go to a token realm only over HTTPS, or over plain HTTP to the very
/// registry the admin allowed to be insecure (the same scheme, host and port): a realm a
/// registry names may be any URL, and Basic credentials over HTTP are sent in clear. (Its
/// address is held to the egress policy as every request's is.)
fn realm_allowed(realm: &reqwest::Url, origin: &str) -> Result<(), String> {
    let same_origin = reqwest::Url::parse(origin).is_ok_and(|o| o.origin() == realm.origin());
    match realm.scheme() {
        "https" => Ok(()),
        "http" if same_origin => Ok(()),
        _ => Err(format!(
            "the registry's token realm is not an https:// URL (host {}); credentials are sent to a realm only over HTTPS, or to the insecure registry itself",
            super::manifest::word(realm.host_str().unwrap_or_default())
        )),
    }
}

/// Why a `401` was final: no credentials, credentials refused (by the registry or its token
/// server), or a token for them that does not grant the pull.
fn refusal(had_credentials: bool, token_issued: bool) -> super::Refusal {
    use super::Refusal::*;
    match (had_credentials, token_issued) {
        (false, _) => NoCredentials,
        (true, false) => CredentialsRefused,
        (true, true) => NotGranted,
    }
}

/// The rustls error `c` is or carries. The TLS stream's `io::Error` wraps it, and the
/// connector wraps that in another `io::Error`: `source()` of an `io::Error` skips what it
/// wraps, so each one is opened here.
fn tls_error<'e>(c: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut c = c;
    loop {
        if let Some(tls) = c.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        c = c.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
}

#[cfg(test)]
mod tests;
