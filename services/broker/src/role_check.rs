//! The role a request's credential must have: an agent token is refused where an approver's is
//! wanted and the other way round, and a valid credential used for another role is audited
//! (kind `auth`, outcome `refused`) as the attack it may be.

use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::v1::AuditEvent;

use crate::app::App;
use crate::backends::request;

/// The credential `headers` carry when it is `role`'s: otherwise the answer to send (401
/// without a valid one; 403 for another role's, audited as used for `wanted`).
pub async fn credential_for(
    app: &App,
    headers: &http::HeaderMap,
    role: glovebox_proto::ws::Role,
    wanted: &str,
) -> Result<crate::auth::Authenticated, axum::response::Response> {
    let Some(who) = crate::auth::credential_of(&app.credentials, headers) else {
        return Err(crate::auth::unauthorized());
    };
    if who.role != role {
        audit_auth_refusal(&app.backends, &who, wanted).await;
        return Err(crate::auth::wrong_role(role));
    }
    Ok(who)
}

/// Audits a valid credential used for a role it does not have (kind `auth`, outcome `refused`):
/// an agent token asking to approve is an attack worth an administrator's attention.
pub async fn audit_auth_refusal(
    backends: &crate::backends::Backends,
    who: &crate::auth::Authenticated,
    wanted: &str,
) {
    let event = AuditEvent {
        account: who.account.to_string(),
        source: Source::Broker.into(),
        kind: RowKind::Auth.into(),
        outcome: Outcome::Refused.into(),
        reason: format!(
            "the account's {} credential was used for {wanted}",
            who.role.as_str()
        ),
        ..Default::default()
    };
    tracing::warn!(account = %who.account, role = who.role.as_str(), %wanted, "refused a credential used for another role");
    if let Err(status) = backends.audit.clone().append(request(event)).await {
        tracing::error!(error = %status.message(), "could not send the audit event to the gate");
    }
}
