//! The hidden `probe URL` subcommand: GET an HTTP(S) URL until it answers 2xx or the timeout
//! passes. The chart's `helm test` pod runs it against the operator's `/readyz`: the image
//! holds nothing but this binary (no shell, no curl).

use std::time::{Duration, Instant};

/// Why the probe failed, as one line.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0} is not an http:// or https:// URL")]
    BadUrl(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("GET {url} did not answer 2xx within {timeout}: {last}")]
    NotReady {
        url: String,
        timeout: String,
        last: String,
    },
}

/// The longest one attempt may take, and the pause between attempts.
const ATTEMPT: Duration = Duration::from_secs(5);
const PAUSE: Duration = Duration::from_secs(1);

/// GETs `url` until it answers 2xx (Ok: the status line's code) or `timeout` has passed.
pub async fn run(url: &str, timeout: Duration) -> Result<u16, ProbeError> {
    let parsed = reqwest::Url::parse(url).map_err(|_| ProbeError::BadUrl(url.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ProbeError::BadUrl(url.to_string()));
    }
    // The json-channel client's TLS provider, for an https URL.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(ATTEMPT.min(timeout))
        .build()
        .map_err(|e| ProbeError::Client(e.to_string()))?;
    let start = Instant::now();
    loop {
        let last = match http.get(parsed.clone()).send().await {
            Ok(r) if r.status().is_success() => return Ok(r.status().as_u16()),
            Ok(r) => format!("HTTP {}", r.status()),
            Err(e) => innermost(&e),
        };
        if start.elapsed().saturating_add(PAUSE) >= timeout {
            return Err(ProbeError::NotReady {
                url: url.to_string(),
                timeout: crate::duration::format(timeout),
                last,
            });
        }
        tokio::time::sleep(PAUSE).await;
    }
}

/// reqwest's message, then its innermost cause (connection refused, DNS, timeout).
fn innermost(e: &reqwest::Error) -> String {
    let mut cause: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_timeout() {
        format!("timed out after {}", crate::duration::format(ATTEMPT))
    } else {
        format!("{e}: {cause}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server on loopback that answers each connection with the next status of `codes`
    /// (the last one repeated); its address.
    async fn server(codes: &'static [u16]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for i in 0.. {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let code = codes[i.min(codes.len() - 1)];
                let reply =
                    format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        format!("http://{addr}/readyz")
    }

    #[tokio::test]
    async fn answers_once_the_server_says_200() {
        let url = server(&[503, 200]).await;
        assert_eq!(run(&url, Duration::from_secs(10)).await.unwrap(), 200);
    }

    #[tokio::test]
    async fn fails_with_the_last_answer_when_never_ready() {
        let url = server(&[503]).await;
        let err = run(&url, Duration::from_secs(2))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("did not answer 2xx within 2s"), "{err}");
        assert!(err.contains("HTTP 503"), "{err}");
    }

    #[tokio::test]
    async fn refuses_what_is_not_an_http_url() {
        for url in ["localhost:8080/readyz", "ftp://x/", "not a url"] {
            let err = run(url, Duration::from_secs(1)).await.unwrap_err();
            assert!(matches!(err, ProbeError::BadUrl(_)), "{url}: {err}");
        }
    }
}
