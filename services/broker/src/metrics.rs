//! `/metrics`: the broker's and the gate's metrics in the Prometheus text format. Behind an
//! approver credential (any account's: the numbers are counts without account labels); an
//! agent's credential gets 403, none 401. The gate's part comes over the gate link (its
//! `Metrics` RPC); a gate that cannot be reached leaves a comment in its place.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use glovebox_proto::ws::Role;

use crate::app::App;

/// How long `/metrics` waits for the gate's part.
const GATE_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(refused) =
        crate::role_check::credential_for(&app, &headers, Role::Approver, "/metrics").await
    {
        return refused;
    }
    let mut text = glovebox_telemetry::metrics::render();
    let mut gate = app.backends.gate.clone();
    let mut request = tonic::Request::new(glovebox_proto::v1::MetricsRequest {});
    request.set_timeout(GATE_TIMEOUT);
    match tokio::time::timeout(GATE_TIMEOUT, gate.metrics(request)).await {
        Ok(Ok(reply)) => text.push_str(&reply.into_inner().text),
        _ => text.push_str("# the gate's metrics are unavailable (the gate did not answer)\n"),
    }
    (
        StatusCode::OK,
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}
