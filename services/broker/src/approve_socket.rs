//! System mode's approve socket (`<runtime>/broker/approve.sock`, mode 0666): approvers are
//! people. The kernel tells the broker the uid of whoever connects (`SO_PEERCRED`), and that
//! connection is the approver of the account whose `owner` has that uid (the `account` query
//! parameter chooses among several) — no token, so none to steal. Any other uid is refused with
//! a 403 and the refusal is audited with the uid. Past the upgrade it is an ordinary approver
//! connection of `/v1/ws` (`connection::serve`). `GET /v1/token` hands an owner its account's
//! agent token (`glovebox token show --system`), read by the gate, which audits it; `GET
//! /healthz` the health details of the accounts the peer owns (`glovebox status --system`).

use std::collections::HashMap;

use glovebox_config::AccountId;
use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use std::future::Future;
use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Extension, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::TokioIo;
use tokio::net::UnixListener;
use tower::ServiceExt;

use crate::admission::{Admission, Peer, Pools, Slot};
use crate::app::App;
pub use crate::auth::Owners;
use crate::auth::{Authenticated, Proof};
use crate::connection::Entry;
use crate::held::Held;
use crate::profiles::Profile;
use glovebox_proto::v1::AuditEvent;
use glovebox_proto::ws::Role;

/// Who a connection by `uid` approves for, and its proof: the account's owner, or root, the
/// machine's administrator, who may open any account it names (never choosing one for it) —
/// root can read any credential on the machine anyway, so this grants nothing new, and it is
/// audited. Agent tokens are for owners only ([`choose`]).
pub fn approver_of(
    owners: &Owners,
    uid: u32,
    named: Option<&str>,
) -> Result<(AccountId, Proof), String> {
    match (uid, named) {
        (0, Some(a)) => match owners.0.iter().find(|(account, _)| account == a) {
            Some((account, _)) => Ok((account.clone(), Proof::Administrator)),
            None => Err(format!("no account {a:?}")),
        },
        (0, None) => {
            Err("root owns no account: as the administrator, name one with --account".to_owned())
        }
        _ => choose(owners, uid, named).map(|account| (account, Proof::Owner(uid))),
    }
}

/// The peer of one connection on the approve socket.
#[derive(Debug, Clone, Copy)]
struct PeerUid(u32);

/// Which account a connection by `uid` approves for: the one named (if the uid owns it), or the
/// only one it owns. `Err` says why not, for the client and the audit.
pub fn choose(owners: &Owners, uid: u32, named: Option<&str>) -> Result<AccountId, String> {
    let owned = owners.owned_by(uid);
    match named {
        Some(a) => match owned.iter().find(|o| *o == a) {
            Some(o) => Ok(o.clone()),
            None => Err(format!("uid {uid} is not the owner of account {a:?}")),
        },
        None => match owned.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(format!("uid {uid} is not the owner of any account")),
            _ => Err(format!(
                "uid {uid} owns several accounts ({}): choose one with --account",
                owned
                    .iter()
                    .map(AccountId::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        },
    }
}

/// Connections on the approve socket at most, in every state.
const MAX_SOCKETS: usize = 512;
/// Of those, not (yet) an owner's approver at most.
const MAX_UNCLAIMED: usize = 256;
/// Unclaimed connections of one uid at most: its oldest is shed for its next.
const MAX_UNCLAIMED_PER_UID: usize = 16;
/// Approver connections of one account at most.
const MAX_PER_ACCOUNT: usize = 32;
/// Approver connections each account can always have, whatever the others hold.
const RESERVED_PER_ACCOUNT: usize = 4;

/// The approve socket's pools for `owners`: counted per uid until a connection becomes an
/// account's approver, then per account, as the front door counts its sockets (`admission`), so
/// no local user and no account can take the places of another.
pub fn pools(owners: &Owners) -> Pools {
    let accounts: std::collections::HashSet<AccountId> =
        owners.0.iter().map(|(a, _)| a.clone()).collect();
    let room = MAX_SOCKETS - MAX_UNCLAIMED;
    Pools {
        sockets: MAX_SOCKETS,
        unauthenticated: MAX_UNCLAIMED,
        per_peer: MAX_UNCLAIMED_PER_UID,
        per_account: MAX_PER_ACCOUNT,
        reserved_per_account: RESERVED_PER_ACCOUNT.min(room / accounts.len().max(1)),
        accounts,
    }
}

/// Serves the approve socket until `shutdown` completes. A request's headers must arrive within
/// `header_timeout`, as on the front door.
pub async fn serve(
    listener: UnixListener,
    app: Arc<App>,
    header_timeout: std::time::Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let router = axum::Router::new()
        .route("/v1/ws", get(upgrade))
        .route("/v1/token", get(agent_token))
        .route("/healthz", get(health))
        .with_state(app.clone());
    let admission = Admission::new(pools(&app.owners()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout);
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
        let slot = match crate::front_door::admit_shedding(&admission, Peer::Uid(uid)).await {
            Ok(slot) => Arc::new(slot),
            Err(refusal) => {
                let _ = stream.try_write(crate::front_door::refusal_response(refusal).as_bytes());
                tracing::debug!(uid, %refusal, "approve socket: refused a connection");
                continue;
            }
        };
        let router = router.clone();
        let shed = slot.clone();
        let service = hyper_util::service::TowerToHyperService::new(tower::service_fn(
            move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(PeerUid(uid));
                request.extensions_mut().insert(slot.clone());
                router.clone().oneshot(request.map(axum::body::Body::new))
            },
        ));
        let io = Held::new(stream, shed.clone());
        let connection = builder.serve_connection(TokioIo::new(io), service);
        tokio::spawn(async move {
            tokio::select! {
                _ = connection.with_upgrades() => {}
                // Shed for a newcomer of the same uid while it was no account's approver.
                () = shed.shed() => {}
            }
        });
    }
}

async fn upgrade(
    State(app): State<Arc<App>>,
    Extension(PeerUid(uid)): Extension<PeerUid>,
    Extension(slot): Extension<Arc<Slot>>,
    Query(query): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let owners = app.owners();
    let (account, proof) = match approver_of(&owners, uid, query.get("account").map(String::as_str))
    {
        Ok(chosen) => chosen,
        Err(why) => {
            audit_refusal(&app, uid, query.get("account"), &why).await;
            return (http::StatusCode::FORBIDDEN, format!("{why}\n")).into_response();
        }
    };
    if let Err(refusal) = slot.claim(&account) {
        return (
            http::StatusCode::SERVICE_UNAVAILABLE,
            [(http::header::CONNECTION, "close")],
            format!("{refusal}\n"),
        )
            .into_response();
    }
    tracing::info!(%account, uid, "approver connected on the approve socket");
    if proof == Proof::Administrator {
        audit_administrator(&app, &account).await;
    }
    let who = Authenticated {
        account,
        role: Role::Approver,
        proof,
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
        account: account.to_string(),
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

/// Records that root opened an account it does not own as its approver.
async fn audit_administrator(app: &App, account: &AccountId) {
    let reason = "approve socket: peer uid 0 (root) opened the account as its approver";
    audit_auth(app, account, Outcome::Administrator, reason.to_owned()).await;
}

async fn audit_refusal(app: &App, uid: u32, account: Option<&String>, why: &str) {
    tracing::warn!(uid, reason = %why, "refused an approver on the approve socket");
    let account = account.map(String::as_str).unwrap_or_default();
    let reason = format!("approve socket: peer uid {uid}: {why}");
    audit_auth(app, account, Outcome::Refused, reason).await;
}

/// An `auth` row of the approve socket.
async fn audit_auth(app: &App, account: &str, outcome: Outcome, reason: String) {
    let event = AuditEvent {
        account: account.to_owned(),
        source: Source::Broker.into(),
        kind: RowKind::Auth.into(),
        outcome: outcome.into(),
        reason,
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
            ("a".parse().unwrap(), 1001),
            ("b".parse().unwrap(), 1002),
            ("c".parse().unwrap(), 1002),
        ]);
        assert_eq!(choose(&owners, 1001, None), Ok("a".parse().unwrap()));
        assert_eq!(choose(&owners, 1001, Some("a")), Ok("a".parse().unwrap()));
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
        assert_eq!(choose(&owners, 1002, Some("c")), Ok("c".parse().unwrap()));
        assert!(
            choose(&owners, 0, None).is_err(),
            "root owns nothing by default"
        );
    }

    #[test]
    fn root_opens_any_account_it_names_as_the_administrator_and_only_that() {
        let owners = Owners(vec![
            ("a".parse().unwrap(), 1001),
            ("b".parse().unwrap(), 1002),
        ]);
        assert_eq!(
            approver_of(&owners, 0, Some("b")),
            Ok(("b".parse().unwrap(), Proof::Administrator))
        );
        assert!(
            approver_of(&owners, 0, None).is_err(),
            "never chosen for root"
        );
        assert!(approver_of(&owners, 0, Some("zz")).is_err());
        assert_eq!(
            approver_of(&owners, 1001, None),
            Ok(("a".parse().unwrap(), Proof::Owner(1001)))
        );
        assert!(
            approver_of(&owners, 1001, Some("b")).is_err(),
            "an owner is no administrator"
        );
        // Agent tokens stay the owners': root is refused there.
        assert!(choose(&owners, 0, Some("a")).is_err());
    }
}
