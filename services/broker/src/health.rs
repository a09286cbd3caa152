//! `/healthz`: whether the gate, the audit, the policies and each executor are well, as JSON
//! (200 when all are, 503 otherwise), with each executor's sandbox and the open connections.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::app::App;

/// How long `/healthz` waits for each backend.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn health(State(app): State<Arc<App>>) -> Response {
    let mut gate = app.backends.gate.clone();
    let mut req = tonic::Request::new(glovebox_proto::v1::HealthRequest {});
    req.set_timeout(PROBE_TIMEOUT);
    let gate_health = gate.health(req).await.ok().map(|h| h.into_inner());
    let (executors, executors_ok) = executors(&app).await;
    let (status, body) = match gate_health {
        Some(h) => {
            let ok = h.audit_healthy && h.policy_errors.is_empty() && executors_ok;
            (
                if ok {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                },
                serde_json::json!({
                    "ok": ok,
                    "gate": "reachable",
                    "audit": { "healthy": h.audit_healthy, "failures": h.audit_failures, "rows": h.audit_rows },
                    "policy_errors": h.policy_errors,
                    "executors": executors,
                    "connections": app.open_connections(),
                }),
            )
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "ok": false, "gate": "unreachable", "executors": executors }),
        ),
    };
    (status, axum::Json(body)).into_response()
}

/// Each executor's status by account, and whether all are reachable and sandboxed.
async fn executors(app: &App) -> (serde_json::Map<String, serde_json::Value>, bool) {
    let mut executors = serde_json::Map::new();
    let mut executors_ok = true;
    for account in app.backends.accounts() {
        let status = match app.backends.executor(&account) {
            Some(mut client) => {
                let mut req = tonic::Request::new(glovebox_proto::v1::ExecutorStatusRequest {});
                req.set_timeout(PROBE_TIMEOUT);
                client.status(req).await.ok().map(|s| s.into_inner())
            }
            None => None,
        };
        let entry = match status {
            Some(s) => {
                // Where the kernel has no Landlock, health says so rather than pretending.
                executors_ok &= s.sandbox != "landlock=not_available";
                serde_json::json!({ "reachable": true, "sandbox": s.sandbox, "jobs": s.jobs, "uid": s.uid, "running_jobs": s.running_jobs })
            }
            None => {
                executors_ok = false;
                serde_json::json!({ "reachable": false })
            }
        };
        executors.insert(account, entry);
    }
    (executors, executors_ok)
}
