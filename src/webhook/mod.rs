//! The registry webhook: `POST /hook/registry` on `--webhook-address`, authenticated by
//! the bearer token in `--webhook-token-file`. A push of `repository:tag` requests a sync
//! (the `sync-requested-at` annotation, as `sync` sets it) of every `custom` or `oci`
//! channel in the operator's namespaces whose `options.image` names that tag; the
//! syncer's request limits apply as to any other request.
//!
//! Every replica answers (the Service picks any of them): the annotation is written
//! through the API server, and the leader acts on it.

pub mod push;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::api::{ManagedOSVersionChannel, SYNC_REQUESTED_AT_ANNOTATION};
use crate::metrics::Metrics;

pub const PATH: &str = "/hook/registry";
/// The field manager of the webhook's requests, apart from the operator's own writes.
pub const FIELD_MANAGER: &str = "rancheros-operator-webhook";
/// A registry's notification envelope is a few KiB; more is not one. Read only once the
/// caller's token is checked.
const MAX_BODY: usize = 1 << 20;
/// A token file is one line; a bigger file is a mistake, not a token.
const MAX_TOKEN: u64 = 4096;
/// Channels listed per page while matching a push.
const PAGE: u32 = 500;

pub struct Hook {
    client: Client,
    /// The operator's namespaces (empty: all).
    namespaces: Vec<String>,
    token_file: PathBuf,
    metrics: Arc<Metrics>,
    /// One push handled at a time: a burst of notifications is a queue, not a burst of
    /// LISTs and patches.
    one_at_a_time: Semaphore,
}

impl Hook {
    pub fn new(
        client: Client,
        namespaces: Vec<String>,
        token_file: PathBuf,
        metrics: Arc<Metrics>,
    ) -> Self {
        Hook {
            client,
            namespaces,
            token_file,
            metrics,
            one_at_a_time: Semaphore::new(1),
        }
    }
}

/// Serves the webhook until `shutdown`, within the bounds of [`crate::http_server`].
pub async fn serve(
    addr: SocketAddr,
    hook: Arc<Hook>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(%addr, path = PATH, "serving the registry webhook");
    crate::http_server::serve(
        listener,
        router(hook),
        RESERVED,
        crate::http_server::Limits::default(),
        shutdown,
    )
    .await
}

/// Served from the reserved connections too: with the cap full, a registry's push (one
/// request, sent at once) still finds a slot, as the kubelet's probes do on the metrics port.
const RESERVED: &[&str] = &[PATH];

fn router(hook: Arc<Hook>) -> Router {
    Router::new().route(PATH, post(handle)).with_state(hook)
}

/// What a request came to, for the answer and the metric.
enum Answer {
    Accepted { pushes: usize, channels: usize },
    Unauthorized,
    BadRequest(String),
    TooLarge,
    Unavailable(String),
}

impl Answer {
    fn label(&self) -> &'static str {
        match self {
            Answer::Accepted { .. } => "accepted",
            Answer::Unauthorized => "unauthorized",
            Answer::BadRequest(_) => "bad_request",
            Answer::TooLarge => "too_large",
            Answer::Unavailable(_) => "unavailable",
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self {
            Answer::Accepted { pushes, channels } => (
                StatusCode::ACCEPTED,
                [(header::CONTENT_TYPE, "application/json")],
                format!("{}\n", json!({"pushes": pushes, "channels": channels})),
            )
                .into_response(),
            Answer::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a valid bearer token is required\n",
            )
                .into_response(),
            Answer::BadRequest(why) => {
                (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response()
            }
            Answer::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over {MAX_BODY} bytes or was not sent whole\n"),
            )
                .into_response(),
            // 503: a registry retries it later, and no push is lost.
            Answer::Unavailable(why) => {
                (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
            }
        }
    }
}

/// Takes the request whole, not a body extractor: the body is read only after the token is
/// checked, so a caller without it costs no read at all (whatever length it declares).
async fn handle(State(hook): State<Arc<Hook>>, request: Request) -> Response {
    let answer = answer(&hook, request).await;
    hook.metrics.webhook_request(answer.label());
    answer.into_response()
}

async fn answer(hook: &Hook, request: Request) -> Answer {
    let (parts, body) = request.into_parts();
    // Read on every request, so that a rotated Secret takes effect without a restart.
    let token = match read_token(&hook.token_file).await {
        Ok(token) => token,
        Err(why) => {
            warn!("registry webhook: {why}");
            return Answer::Unavailable("the webhook's token cannot be read".into());
        }
    };
    if !authorized(&parts.headers, &token) {
        return Answer::Unauthorized;
    }
    // The server's request timeout bounds how long this read may take.
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return Answer::TooLarge;
    };
    let pushes = match push::parse(&body) {
        Ok(pushes) => pushes,
        Err(e) => return Answer::BadRequest(e.to_string()),
    };
    if pushes.is_empty() {
        return Answer::Accepted {
            pushes: 0,
            channels: 0,
        };
    }
    let _turn = hook.one_at_a_time.acquire().await;
    match request_syncs(hook, &pushes).await {
        Ok(channels) => Answer::Accepted {
            pushes: pushes.len(),
            channels,
        },
        Err(e) => {
            warn!("registry webhook: {e}");
            Answer::Unavailable("the channels could not be read or annotated; retry".into())
        }
    }
}

async fn read_token(path: &std::path::Path) -> Result<String, String> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_TOKEN)
        .read_to_string(&mut text)
        .await
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let token = text.trim().to_string();
    if token.is_empty() {
        return Err(format!("the token file {} is empty", path.display()));
    }
    Ok(token)
}

/// `Authorization: Bearer <token>`, compared by digest so that the time taken says
/// nothing about how much of a guess was right.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    use ring::digest::{SHA256, digest};
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    digest(&SHA256, given.trim().as_bytes()).as_ref() == digest(&SHA256, token.as_bytes()).as_ref()
}

/// The image a channel's data comes from, for the types that have one.
fn image_of(channel: &ManagedOSVersionChannel) -> Option<&str> {
    if !matches!(channel.spec.type_.as_str(), "custom" | "oci")
        || channel.spec.suspend == Some(true)
    {
        return None;
    }
    channel.spec.options.as_ref()?.get("image")?.as_str()
}

/// Annotates every channel a push moves; how many it annotated.
async fn request_syncs(hook: &Hook, pushes: &[push::Push]) -> Result<usize, kube::Error> {
    let apis: Vec<Api<ManagedOSVersionChannel>> = if hook.namespaces.is_empty() {
        vec![Api::all(hook.client.clone())]
    } else {
        hook.namespaces
            .iter()
            .map(|ns| Api::namespaced(hook.client.clone(), ns))
            .collect()
    };
    let value = Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {SYNC_REQUESTED_AT_ANNOTATION: value}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut annotated = 0usize;
    for api in apis {
        let mut list = ListParams::default().limit(PAGE);
        loop {
            let page = api.list(&list).await?;
            for ch in &page.items {
                if !image_of(ch).is_some_and(|image| push::moves(pushes, image)) {
                    continue;
                }
                let ns = ch.namespace().unwrap_or_default();
                let api: Api<ManagedOSVersionChannel> = Api::namespaced(hook.client.clone(), &ns);
                match api
                    .patch(&ch.name_any(), &params, &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        annotated = annotated.saturating_add(1);
                        info!(namespace = %ns, channel = %ch.name_any(), "a registry push requested a sync");
                    }
                    // Deleted since the list: nothing to request.
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => list = list.continue_token(&token),
                None => break,
            }
        }
    }
    hook.metrics.webhook_syncs_requested(annotated);
    Ok(annotated)
}

#[cfg(test)]
mod serve_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn only_the_exact_bearer_token_is_authorized() {
        assert!(authorized(&bearer("Bearer s3cret"), "s3cret"));
        assert!(!authorized(&bearer("Bearer s3cre"), "s3cret"));
        assert!(!authorized(&bearer("Bearer s3crett"), "s3cret"));
        assert!(!authorized(&bearer("Basic s3cret"), "s3cret"));
        assert!(!authorized(&bearer("s3cret"), "s3cret"));
        assert!(!authorized(&HeaderMap::new(), "s3cret"));
    }

    fn channel(type_: &str, image: Option<&str>, suspend: bool) -> ManagedOSVersionChannel {
        let mut ch = ManagedOSVersionChannel::new("c", Default::default());
        ch.spec.type_ = type_.into();
        ch.spec.suspend = Some(suspend);
        ch.spec.options = image.map(|i| {
            let mut m = serde_json::Map::new();
            m.insert("image".into(), i.into());
            m
        });
        ch
    }

    #[test]
    fn custom_and_oci_channels_have_an_image_json_and_suspended_ones_do_not() {
        assert_eq!(
            image_of(&channel("custom", Some("a/b:1"), false)),
            Some("a/b:1")
        );
        assert_eq!(
            image_of(&channel("oci", Some("a/b:1"), false)),
            Some("a/b:1")
        );
        assert_eq!(image_of(&channel("json", Some("a/b:1"), false)), None);
        assert_eq!(image_of(&channel("custom", Some("a/b:1"), true)), None);
        assert_eq!(image_of(&channel("custom", None, false)), None);
    }

    #[tokio::test]
    async fn the_token_file_is_trimmed_bounded_and_never_empty() {
        let dir = std::env::temp_dir().join(format!("hook-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "abc\n").unwrap();
        assert_eq!(read_token(&file).await.unwrap(), "abc");
        std::fs::write(&file, " \n").unwrap();
        assert!(read_token(&file).await.unwrap_err().contains("is empty"));
        let missing = read_token(&dir.join("missing")).await.unwrap_err();
        assert!(missing.contains("cannot read the token file"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
