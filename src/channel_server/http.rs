//! The channel server's listener: [`super::answer`] behind the operator's one bounded HTTP
//! server (`http_server`: its timeouts, connection cap and per-peer share). No reserved
//! paths: the probes live on the metrics port.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tracing::info;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response, header};

use super::{Store, answer};

async fn handle(State(store): State<Arc<Store>>, request: Request<Body>) -> Response<Body> {
    let if_none_match = request
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    let asked = super::Request {
        method: request.method().as_str(),
        path: request.uri().path(),
        query: request.uri().query(),
        if_none_match,
    };
    let answered = answer(&store, asked);
    let mut response = Response::builder().status(answered.status);
    for (name, value) in &answered.headers {
        response = response.header(*name, value.as_str());
    }
    response
        .body(Body::from(answered.body))
        .unwrap_or_else(|_| {
            // Only a header value with a control character fails here, and none is written.
            let mut failed = Response::new(Body::from("cannot answer\n"));
            *failed.status_mut() = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
            failed
        })
}

/// Serves the store on `addr` until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    store: Arc<Store>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new().fallback(handle).with_state(store);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    crate::http_server::serve(
        listener,
        app,
        &[],
        crate::http_server::Limits::default(),
        shutdown,
    )
    .await
}

/// A store of at most `max_bytes`, and its server on `addr` until `stop` turns true.
pub fn start(
    addr: SocketAddr,
    max_bytes: usize,
    mut stop: watch::Receiver<bool>,
) -> (Arc<Store>, impl Future<Output = std::io::Result<()>> + Send) {
    let store = Arc::new(Store::new(max_bytes));
    let listener = serve(addr, store.clone(), async move {
        let _ = stop.wait_for(|s| *s).await;
    });
    info!("serving the channels with spec.serve: true on {addr}");
    (store, listener)
}
