//! `/healthz`: whether the gate, the audit, the policies and each executor are well. Without a
//! credential (or with an agent's) it says only that: `{"ok": true}` with 200, or `{"ok": false}`
//! with 503. An account's approver credential also gets the details that concern it — the gate's
//! reachability, the audit's health, its own policy errors, its own executor (reachability, OS
//! user, jobs, sandbox) and its connections — and nothing about other accounts. (The
//! administrator reads every account's approver token, and has the admin socket.) In system mode
//! the approve socket answers `/healthz` the same way for the accounts the peer's uid owns
//! (`glovebox status --system`).
//!
//! Probes are shared: a request that arrives while one runs takes its result, so a flood of
//! requests costs the gate and the executors one probe at a time.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use glovebox_config::AccountId;

use crate::app::App;

pub mod probe;

pub use probe::{Probe, Probes};

pub async fn health(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let approver = crate::auth::credential_of(&app.credentials, &headers)
        .filter(|who| who.role == glovebox_proto::ws::Role::Approver);
    let accounts: Vec<AccountId> = approver.into_iter().map(|who| who.account).collect();
    answer(&app, &accounts).await
}

/// `/healthz` for the approvers of `accounts` (none: up or down only), each account's details
/// merged into one body: the executors and policy errors of all of them.
pub async fn answer(app: &App, accounts: &[AccountId]) -> Response {
    let probe = app.health.current(&app.backends, Instant::now()).await;
    let status = if probe.ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let snapshot = app.admission.snapshot();
    let mut body = serde_json::json!({ "ok": probe.ok() });
    for (i, account) in accounts.iter().enumerate() {
        let details = probe.details_for(account, snapshot.of_account(account));
        if i == 0 {
            body = details;
        } else {
            merge(&mut body, details);
        }
    }
    (status, axum::Json(body)).into_response()
}

/// Adds another account's details to `into`: its executor, its policy errors, its connections.
fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(executors), Some(more)) = (
        into["executors"].as_object_mut(),
        from["executors"].as_object(),
    ) {
        executors.extend(more.clone());
    }
    if let (Some(errors), Some(more)) = (
        into["policy_errors"].as_array_mut(),
        from["policy_errors"].as_array(),
    ) {
        errors.extend(more.iter().cloned());
    }
    let connections =
        into["connections"].as_u64().unwrap_or(0) + from["connections"].as_u64().unwrap_or(0);
    into["connections"] = connections.into();
}
