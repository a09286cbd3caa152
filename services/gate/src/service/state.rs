//! [`GateState`], what the gate's services share (policies, enablement, audit, keys), and what
//! they do with it: judge a planned call, sign its ticket, switch enablement, check who calls and
//! admit a peer's audit rows.

use std::sync::Arc;

use glovebox_config::AccountId;
use glovebox_policy::Decision;
use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::v1::{self as pb, AuditEvent, Plan, TicketBody, ToolCall};
use glovebox_ticket::{MasterKey, TICKET_TTL_MS};
use tonic::{Request, Status};

use crate::audit::AuditStore;
use crate::judge::{self, Judged};
use crate::policies::AccountPolicies;

use super::vouchers::Vouchers;

/// Shared by the `Gate` and `Audit` services.
pub struct GateState {
    pub policies: AccountPolicies,
    pub audit: AuditStore,
    pub master_key: MasterKey,
    /// For `SetEnabled`, which edits `glovebox.yaml`.
    pub state_dir: glovebox_config::StateDir,
    /// Whether each account's tools are on (judged here, switched here).
    pub enablement: crate::enablement::Enablement,
    /// Each account's `mcp.json`, project pack trust and pack secrets.
    pub packs: crate::packs::PackState,
    /// Who may call the audit socket now (each account's executor and pack host), as the
    /// supervisor last said.
    pub audit_access: AuditAccess,
    /// The broker's vouchers, for an executor's `decide` (`ExecutorGate.Calls`).
    pub vouchers: Vouchers,
    /// Where the answers of reads made ahead go to the broker (`Gate.Deliveries`).
    pub deliveries: crate::deliveries::Outlet,
    /// One account change at a time: each reads `accounts.yaml`, checks and writes it (a tools
    /// switch of an added account too: [`GateState::set_enabled`]).
    pub account_changes: tokio::sync::Mutex<()>,
}

/// Who may call the gate's audit socket now; the listener and the calls share it.
#[derive(Clone, Default)]
pub struct AuditAccess {
    pub keys: glovebox_proto::transport::ServerKeys,
    pub uids: glovebox_proto::transport::AllowedUids,
}

/// The `Gate` service; the receiver becomes true when the gate stops (each `Decisions` stream
/// then takes no more requests, answers those it took and ends).
#[derive(Clone)]
pub struct GateService(pub Arc<GateState>, pub tokio::sync::watch::Receiver<bool>);

#[derive(Clone)]
pub struct AuditService(pub Arc<GateState>);

impl GateState {
    /// Judges a planned call with the account's swapped-in state (see [`crate::judge`]).
    pub(super) fn judge(&self, call: &ToolCall, plan: &Plan) -> Judged {
        let now = crate::policies::now_unix();
        let current = self.policies.current(&call.account);
        let enabled = self.enablement.is_enabled(&call.account);
        let account = match &current {
            None => judge::Account::Unknown,
            Some(c) => judge::Account::Known {
                id: &call.account,
                policy: c
                    .policy
                    .as_ref()
                    .ok_or(c.error.as_deref().unwrap_or("no policy")),
                enabled,
            },
        };
        judge::judge(account, &call.tool, plan, now)
    }

    /// Signs a ticket for a call judged by `judged` (whose policy says what a walk must hide). A
    /// pack tool's ticket is signed with the account's pack key, carries the facts the call was
    /// judged on and binds the call's parameters by their digest.
    pub(super) fn sign(
        &self,
        call: &ToolCall,
        plan: &Plan,
        judged: &Judged,
        approval: &str,
    ) -> pb::Ticket {
        let now_ms = glovebox_ticket::now_ms().unwrap_or(0);
        let pack = glovebox_proto::packs::split_name(&call.tool).is_some();
        let body = TicketBody {
            account: call.account.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            subjects: plan.subjects.clone(),
            content_tag: if pack {
                glovebox_proto::packs::params_digest(&call.params_json)
            } else {
                plan.content_tag.clone()
            },
            expires_at_ms: now_ms + TICKET_TTL_MS,
            approval: approval.to_owned(),
            hidden_globs: judge::hidden_globs(&call.tool, judged),
            pack: if pack { plan.pack.clone() } else { None },
            job_network: judge::job_network(&call.tool, judged).to_owned(),
        };
        if pack {
            self.master_key.packs_key(&call.account).sign(&body)
        } else {
            self.master_key.account_key(&call.account).sign(&body)
        }
    }

    /// Switches an account's tools on or off, writes it to `glovebox.yaml` and audits who did.
    pub(crate) async fn set_enabled(
        &self,
        account: &AccountId,
        enabled: bool,
        by: &str,
    ) -> Result<(), Status> {
        if self.policies.workdir(account).is_none() {
            return Err(Status::not_found("unknown account"));
        }
        // An added account's switch rewrites `accounts.yaml`: not while an account change does.
        let one = self.account_changes.lock().await;
        let written = tokio::task::block_in_place(|| self.enablement.set(account, enabled));
        drop(one);
        if let Err(e) = written {
            tracing::error!(error = %e, "could not switch an account's tools");
            return Err(Status::internal("could not write the configuration"));
        }
        self.audit(AuditEvent {
            account: account.to_string(),
            source: Source::Gate.into(),
            kind: RowKind::Enablement.into(),
            outcome: if enabled {
                Outcome::Enabled
            } else {
                Outcome::Disabled
            }
            .into(),
            detail: format!("switched by the {by}"),
            ..Default::default()
        })
        .await;
        Ok(())
    }

    /// Appends an audit event (kind `policy`) for each policy change or failed reload.
    pub(crate) async fn flush_policy_events(&self) {
        for ev in self.policies.take_events() {
            self.audit(AuditEvent {
                account: ev.account,
                source: Source::Gate.into(),
                kind: RowKind::Policy.into(),
                outcome: ev.outcome.into(),
                detail: ev.detail,
                ..Default::default()
            })
            .await;
        }
    }

    pub(crate) async fn audit(&self, event: AuditEvent) {
        // A failed write is counted and reported by Health; the call still gets its answer.
        let _ = self.audit.append(event).await;
    }
}

/// A decision as Decide and Explain answer it.
/// The account a request names, checked: an id that cannot name an account is not a known one.
pub(crate) fn known_account(raw: &str) -> Result<AccountId, Status> {
    AccountId::parse(raw).map_err(|_| Status::not_found("unknown account"))
}

pub(crate) fn wire_verdict(decision: Decision) -> pb::Verdict {
    match decision {
        Decision::Allow => pb::Verdict::Allow,
        Decision::Ask => pb::Verdict::Ask,
        Decision::Deny => pb::Verdict::Deny,
    }
}

pub(super) fn event(source: Source, kind: RowKind, call: &ToolCall) -> AuditEvent {
    AuditEvent {
        call_id: call.call_id.clone(),
        client_call_id: call.client_call_id.clone(),
        account: call.account.clone(),
        source: source.into(),
        kind: kind.into(),
        tool: call.tool.clone(),
        ..Default::default()
    }
}

/// The authenticated peer of `request` on the audit socket, refused if it is an account's
/// executor or pack host whose account is no longer served.
pub(super) fn served_peer<T>(state: &GateState, request: &Request<T>) -> Result<String, Status> {
    let peer = glovebox_proto::transport::peer_of(request)
        .ok_or_else(|| Status::unauthenticated("the connection was not authenticated"))?;
    if !state.account_peer_current(peer) {
        tracing::warn!(%peer, "refused a request of a removed account's service");
        return Err(Status::permission_denied(format!(
            "{peer} is no longer served"
        )));
    }
    Ok(peer.to_owned())
}

/// Admits an audit event from `peer`: the row's source is who the connection proved to be, never
/// what the event says, and each principal writes only its own kinds of rows (an executor only
/// `execute` and `job` rows of its own account, a pack host only `execute` rows). Returns why a
/// row is refused.
/// Why the gate refused a peer's audit row (or a call's rows): said to the peer, never written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowRefused {
    #[error("{0} may not write audit rows")]
    NotAWriter(String),
    #[error("{writer} of {account:?} may not write rows of account {named:?}")]
    OtherAccount {
        writer: Source,
        account: String,
        named: String,
    },
    #[error("{peer} may not write {kind:?} rows")]
    Kind { peer: String, kind: String },
    #[error("a row's outcome must be one of the audit's, not {0:?}")]
    Outcome(String),
    #[error("{0} may not write a call's rows")]
    NotACallRunner(String),
    #[error("a call's rows need the execute row, the result row and the ticket")]
    Incomplete,
    #[error("the {which} of a call's rows must be its {wanted}, not {kind:?}")]
    OutOfPlace {
        which: &'static str,
        wanted: &'static str,
        kind: String,
    },
    #[error("a call's two rows must name the same account, call and tool")]
    Mismatched,
    #[error("the call's ticket was refused: {0}")]
    Ticket(String),
    #[error("the ticket names another call")]
    OtherCall,
}

/// Refuses a row whose outcome is not one of the audit's [`Outcome`]s, spelled exactly: what
/// administrators count with SQL is never a peer's free text.
pub(crate) fn known_outcome(event: &AuditEvent) -> Result<(), RowRefused> {
    match Outcome::parse(&event.outcome) {
        Some(_) => Ok(()),
        None => Err(RowRefused::Outcome(event.outcome.clone())),
    }
}

pub(crate) fn admit_audit_event(peer: &str, event: &mut AuditEvent) -> Result<(), RowRefused> {
    use glovebox_proto::transport::handover::peer as p;
    let source = if peer == p::BROKER {
        Source::Broker
    } else if peer == p::SUPERVISOR {
        Source::Supervisor
    } else if let Some((source, account)) = peer
        .strip_prefix("executor:")
        .map(|a| (Source::Executor, a))
        .or_else(|| peer.strip_prefix("packs:").map(|a| (Source::Packs, a)))
    {
        if event.account.is_empty() {
            event.account = account.to_owned();
        }
        if event.account != account {
            return Err(RowRefused::OtherAccount {
                writer: source,
                account: account.to_owned(),
                named: event.account.clone(),
            });
        }
        source
    } else {
        return Err(RowRefused::NotAWriter(peer.to_owned()));
    };
    match RowKind::parse(&event.kind) {
        Some(kind) if source.may_send().contains(&kind) => {}
        _ => {
            return Err(RowRefused::Kind {
                peer: peer.to_owned(),
                kind: event.kind.clone(),
            });
        }
    }
    known_outcome(event)?;
    event.source = source.into();
    // One renderer and redactor of subjects, the gate's: an executor's execute row names what its
    // ticket allowed (a command in full, with secrets masked); free text is never trusted.
    event.subject = crate::redact::subjects_text(
        &event.subjects,
        matches!(source, Source::Executor | Source::Packs),
    );
    event.subjects.clear();
    Ok(())
}
