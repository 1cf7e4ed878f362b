//! A fake API server for unit tests (a `tower-test` mock service): what the code under
//! test sends, and answers the test makes up. What the real API server decides is tested
//! on the local cluster.

use http::request::Parts;
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::Value;

/// A client of a fake API server that hands each request (its head, and its body read as
/// JSON, `null` when it is not) to `answer`: the status code and JSON body of the
/// response, or `None` to hold the request unanswered for as long as the server runs.
pub(crate) fn client(
    namespace: &str,
    mut answer: impl FnMut(&Parts, &Value) -> Option<(u16, Value)> + Send + 'static,
) -> Client {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        let mut handle = std::pin::pin!(handle);
        let mut held = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let (head, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let Some((code, answer)) = answer(&head, &body) else {
                held.push(send);
                continue;
            };
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap();
            send.send_response(response);
        }
    });
    Client::new(service, namespace)
}
