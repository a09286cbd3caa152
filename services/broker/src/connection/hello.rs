//! The start of a `/v1/ws` connection: the client's `hello` names its role, which must be its
//! credential's, and `hello_ok` answers with the account, the tools the connection may call (see
//! `tool_list`) and facts about the machine.

use axum::extract::ws::Message;
use glovebox_config::AccountId;
use glovebox_proto::ErrorCode;
use glovebox_proto::ws::{
    ClientContext, ClientFrame, Role, ServerFrame, ToolSpec, parse_client_frame,
};

use super::frames::{frame_error, text};
use crate::app::App;
use crate::auth::Authenticated;
use crate::profiles::Profile;
use crate::session::{CLOSE_POLICY, Session};

/// Waits (up to the hello timeout, see `limits`) for the hello frame and answers it; returns the
/// role and the tools `hello_ok` offered. `None` if the connection
/// ended first or took too long, or if the hello asked for a role its credential does not have
/// (then the connection is closed with a policy-violation code and the attempt is audited).
pub(super) async fn hello(
    app: &App,
    who: &Authenticated,
    profile: Profile,
    connection_id: &str,
    session: &mut Session<Message>,
) -> Option<(Role, Vec<ToolSpec>)> {
    let answered = async {
        let role = await_hello(app, who, session).await?;
        let ok = hello_ok(app, &who.account, connection_id, role, profile).await;
        session.outbox().send(text(&ok)).await;
        let ServerFrame::HelloOk { tools, .. } = ok else {
            return None;
        };
        Some((role, tools))
    };
    let timeout = app.config.limits.hello_timeout;
    match tokio::time::timeout(timeout, answered).await {
        Ok(role) => role,
        Err(_) => {
            let outbox = session.outbox();
            let message = format!("no hello frame within {} seconds", timeout.as_secs());
            outbox
                .send(frame_error(ErrorCode::InvalidParams, message))
                .await;
            outbox.close_without_code();
            None
        }
    }
}

/// Reads frames until a hello; anything else before it gets an error frame. A hello for another
/// role than the credential's is refused (audited, and the connection closed).
async fn await_hello(
    app: &App,
    who: &Authenticated,
    session: &mut Session<Message>,
) -> Option<Role> {
    loop {
        let frame = session.next_text().await.ok()?;
        let outbox = session.outbox();
        match parse_client_frame(frame.as_str()) {
            Ok(ClientFrame::Hello { role }) if role != who.role => {
                let wanted = format!("the {} role", role.as_str());
                crate::role_check::audit_auth_refusal(&app.backends, who, &wanted).await;
                let message = format!(
                    "this is the account's {} credential: it cannot take the {} role",
                    who.role.as_str(),
                    role.as_str()
                );
                outbox.send(frame_error(ErrorCode::Denied, message)).await;
                outbox.close(CLOSE_POLICY, "credential not valid for this role");
                return None;
            }
            Ok(ClientFrame::Hello { role }) => return Some(role),
            Ok(_) => {
                let message = "the first frame must be hello";
                outbox
                    .send(frame_error(ErrorCode::InvalidParams, message))
                    .await;
            }
            Err(e) => {
                outbox
                    .send(frame_error(ErrorCode::InvalidParams, e.to_string()))
                    .await;
            }
        }
    }
}

async fn hello_ok(
    app: &App,
    account: &AccountId,
    connection_id: &str,
    role: Role,
    profile: Profile,
) -> ServerFrame {
    let info = app.backends.account_info(account, Vec::new()).await;
    ServerFrame::HelloOk {
        account: account.to_string(),
        connection_id: connection_id.to_owned(),
        role,
        profile: profile.as_str().to_owned(),
        tools: crate::tool_list::tools_for(app, account, profile, info.as_ref()).await,
        context: context(app, info.as_ref()),
        protocol_version: glovebox_proto::ws::PROTOCOL_VERSION,
        audit_checkpoint: match role {
            Role::Approver => audit_checkpoint(app).await,
            Role::Agent => None,
        },
    }
}

/// The audit's newest signed checkpoint, from the gate (`None` if it does not answer at once).
async fn audit_checkpoint(app: &App) -> Option<String> {
    let mut gate = app.backends.gate.clone();
    let asking = gate.health(crate::backends::request(
        glovebox_proto::v1::HealthRequest {},
    ));
    let health = tokio::time::timeout(std::time::Duration::from_secs(1), asking)
        .await
        .ok()?
        .ok()?
        .into_inner();
    Some(health.audit_checkpoint).filter(|c| !c.is_empty())
}

fn context(app: &App, info: Option<&glovebox_proto::v1::AccountInfoResponse>) -> ClientContext {
    ClientContext {
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        shell: app.config.shell.clone(),
        cwd: info.map(|i| i.workdir.clone()).unwrap_or_default(),
        // Unknown (gate unreachable) is reported as enabled: the gate, when back, still decides.
        sandbox_enabled: info.is_none_or(|i| i.sandbox_enabled),
        timezone: app.config.timezone.clone(),
    }
}
