//! System mode's approve socket (`<runtime>/broker/approve.sock`, mode 0666): approvers are
//! people. The kernel tells the broker the uid of whoever connects (`SO_PEERCRED`), and that
//! connection is the approver of the account whose `owner` has that uid (the `account` query
//! parameter chooses among several) — no token, so none to steal. Any other uid is refused with
//! a 403 and the refusal is audited with the uid. Past the upgrade it is an ordinary approver
//! connection of `/v1/ws` (`connection::serve`). `GET /v1/token` hands an owner its account's
//! agent token (`glovebox token show --system`), read by the gate, which audits it; `GET
//! /healthz` the health details of the accounts the peer owns (`glovebox status --system`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Extension, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::TokioIo;
use tokio::net::UnixListener;
use tower::ServiceExt;

use crate::app::App;
use crate::auth::{Authenticated, Proof};
use crate::connection::Entry;
use crate::profiles::Profile;
use glovebox_proto::v1::AuditEvent;
use glovebox_proto::ws::Role;

/// Each account and the uid of its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners(pub Vec<(String, u32)>);

impl Owners {
    /// The accounts `uid` owns, in config order.
    pub fn owned_by(&self, uid: u32) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, owner)| *owner == uid)
            .map(|(account, _)| account.clone())
            .collect()
    }
}

/// The peer of one connection on the approve socket.
#[derive(Debug, Clone, Copy)]
struct PeerUid(u32);

/// Which account a connection by `uid` approves for: the one named (if the uid owns it), or the
/// only one it owns. `Err` says why not, for the client and the audit.
pub fn choose(owners: &Owners, uid: u32, named: Option<&str>) -> Result<String, String> {
    let owned = owners.owned_by(uid);
    match named {
        Some(a) if owned.iter().any(|o| o == a) => Ok(a.to_owned()),
        Some(a) => Err(format!("uid {uid} is not the owner of account {a:?}")),
        None => match owned.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(format!("uid {uid} is not the owner of any account")),
            _ => Err(format!(
                "uid {uid} owns several accounts ({}): choose one with --account",
                owned.join(", ")
            )),
        },
    }
}

/// Serves the approve socket until `shutdown` completes.
pub async fn serve(
    listener: UnixListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let router = axum::Router::new()
        .route("/v1/ws", get(upgrade))
        .route("/v1/token", get(agent_token))
        .route("/healthz", get(health))
        .with_state(app.clone());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "approve socket: accept failed");
                    tokio::time::sleep(crate::front_door::ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(uid) = stream.peer_cred().map(|c| c.uid()) else {
            continue;
        };
        let router = router.clone();
        tokio::spawn(async move {
            let service = hyper_util::service::TowerToHyperService::new(tower::service_fn(
                move |mut request: http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(PeerUid(uid));
                    router.clone().oneshot(request.map(axum::body::Body::new))
                },
            ));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

async fn upgrade(
    State(app): State<Arc<App>>,
    Extension(PeerUid(uid)): Extension<PeerUid>,
    Query(query): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let owners = app.owners();
    let account = match choose(&owners, uid, query.get("account").map(String::as_str)) {
        Ok(account) => account,
        Err(why) => {
            audit_refusal(&app, uid, query.get("account"), &why).await;
            return (http::StatusCode::FORBIDDEN, format!("{why}\n")).into_response();
        }
    };
    tracing::info!(%account, uid, "approver connected on the approve socket");
    let who = Authenticated {
        account,
        role: Role::Approver,
        proof: Proof::Owner(uid),
    };
    ws.on_upgrade(move |socket| {
        crate::connection::serve(app, who, Profile::Desktop, socket, Entry::Credential)
    })
}

/// `GET /healthz`: health, with the details of every account the peer owns (none: up or down).
async fn health(
    State(app): State<Arc<App>>,
    Extension(PeerUid(uid)): Extension<PeerUid>,
) -> Response {
    let owned = app.owners().owned_by(uid);
    crate::health::answer(&app, &owned).await
}

/// `GET /v1/token[?account=ID]`: the agent token of the account the peer owns, as plain text.
async fn agent_token(
    State(app): State<Arc<App>>,
    Extension(PeerUid(uid)): Extension<PeerUid>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let owners = app.owners();
    let account = match choose(&owners, uid, query.get("account").map(String::as_str)) {
        Ok(account) => account,
        Err(why) => {
            audit_refusal(&app, uid, query.get("account"), &why).await;
            return (http::StatusCode::FORBIDDEN, format!("{why}\n")).into_response();
        }
    };
    let request = glovebox_proto::v1::AgentTokenRequest {
        account: account.clone(),
        uid,
    };
    match app
        .backends
        .gate
        .clone()
        .agent_token(crate::backends::request(request))
        .await
    {
        Ok(r) => (
            [(http::header::CACHE_CONTROL, "no-store")],
            format!("{}\n", r.into_inner().token),
        )
            .into_response(),
        Err(status) => {
            tracing::warn!(%account, uid, error = %status.message(), "no agent token for an owner");
            let code = match status.code() {
                tonic::Code::Unavailable => http::StatusCode::SERVICE_UNAVAILABLE,
                _ => http::StatusCode::NOT_FOUND,
            };
            (code, format!("{}\n", status.message())).into_response()
        }
    }
}

async fn audit_refusal(app: &App, uid: u32, account: Option<&String>, why: &str) {
    tracing::warn!(uid, reason = %why, "refused an approver on the approve socket");
    let event = AuditEvent {
        account: account.cloned().unwrap_or_default(),
        source: "broker".into(),
        kind: "auth".into(),
        outcome: "refused".into(),
        reason: format!("approve socket: peer uid {uid}: {why}"),
        ..Default::default()
    };
    if let Err(status) = app
        .backends
        .audit
        .clone()
        .append(crate::backends::request(event))
        .await
    {
        tracing::error!(error = %status.message(), "could not send the audit event to the gate");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_approves_only_the_accounts_it_owns() {
        let owners = Owners(vec![
            ("a".into(), 1001),
            ("b".into(), 1002),
            ("c".into(), 1002),
        ]);
        assert_eq!(choose(&owners, 1001, None), Ok("a".into()));
        assert_eq!(choose(&owners, 1001, Some("a")), Ok("a".into()));
        assert!(
            choose(&owners, 1001, Some("b"))
                .unwrap_err()
                .contains("not the owner of account \"b\"")
        );
        assert!(
            choose(&owners, 1003, None)
                .unwrap_err()
                .contains("not the owner of any account")
        );
        assert!(
            choose(&owners, 1002, None)
                .unwrap_err()
                .contains("several accounts (b, c)")
        );
        assert_eq!(choose(&owners, 1002, Some("c")), Ok("c".into()));
        assert!(
            choose(&owners, 0, None).is_err(),
            "root owns nothing by default"
        );
    }
}
