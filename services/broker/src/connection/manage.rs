//! An approver's `manage` frames: what the account's owner may see and change about the account
//! besides answering asks (the web console's administration, usable by any approver client).
//!
//! The account is always the connection's, which its credential authenticated; nothing in the
//! operation can name another. The broker still decides nothing: rules, switches, explain and the
//! audit are the gate's (`AccountAdmin`), a subject to explain is planned by the account's executor
//! as a real call would be, and jobs are seen and stopped with the account's own `exec_stat`,
//! `exec_tail` and `exec_kill` calls, judged and audited like an agent's. Packs are listed by the
//! account's pack host (`packs/rows.rs`), with the same trust asks as any listing; the account's
//! own packs and secrets are changed by the gate, which keeps them.

use glovebox_config::AccountId;
use glovebox_proto::ErrorCode;
use glovebox_proto::call_id::ClientCallId;
use glovebox_proto::tools::explain::{ExplainDomain, equivalent_call, explained_subject};
use glovebox_proto::v1::{self as pb, explain_request::Subject};
use glovebox_proto::ws::manage::{
    CallEvent, CallEvents, CallRow, Calls, Changed, Explained, Overview, Provider, Providers, Rule,
    Rules, Secrets,
};
use glovebox_proto::ws::{ManageOp, ServerFrame, WireError};
use serde::Serialize;
use serde_json::json;

use crate::app::App;
use crate::backends::request;

/// Rows `recent_calls` returns when the request names no limit.
pub const DEFAULT_RECENT_CALLS: u32 = 50;

/// Who asks: the approver connection's account (from its credential) and its id.
pub(super) struct Caller<'a> {
    pub app: &'a App,
    pub account: &'a AccountId,
    pub connection_id: &'a str,
}

type Outcome = Result<serde_json::Value, WireError>;

/// Runs one operation for the caller's account and builds the `manage_result` frame.
pub(super) async fn run(at: &Caller<'_>, request_id: String, op: ManageOp) -> ServerFrame {
    let name = op.name();
    let outcome = match op {
        ManageOp::Overview {} => overview(at).await,
        ManageOp::ListRules {} => list_rules(at).await,
        ManageOp::AddRule {
            section,
            kind,
            pattern,
            expires,
            exact,
        } => {
            let r = pb::AddRuleRequest {
                account: at.account.to_string(),
                section,
                kind,
                pattern,
                expires: expires.unwrap_or_default(),
                exact,
            };
            changed(
                at.app
                    .backends
                    .account_admin
                    .clone()
                    .add_rule(request(r))
                    .await,
            )
        }
        ManageOp::RevokeRule {
            section,
            kind,
            pattern,
        } => {
            let r = pb::RevokeRuleRequest {
                account: at.account.to_string(),
                section,
                kind,
                index: 0,
                pattern,
            };
            let mut gate = at.app.backends.account_admin.clone();
            changed(gate.revoke_rule(request(r)).await)
        }
        ManageOp::SetSandbox { enabled, confirm } => {
            let r = pb::SetSandboxRequest {
                account: at.account.to_string(),
                enabled,
                confirm,
            };
            let mut gate = at.app.backends.account_admin.clone();
            changed(gate.set_sandbox(request(r)).await)
        }
        ManageOp::SetConfinement { enabled } => {
            let r = pb::SetConfinementRequest {
                account: at.account.to_string(),
                enabled,
            };
            let mut gate = at.app.backends.account_admin.clone();
            changed(gate.set_confinement(request(r)).await)
        }
        ManageOp::Explain {
            domain,
            subject,
            cwd,
        } => explain(at, &domain, &subject, cwd.as_deref()).await,
        ManageOp::RecentCalls { limit } => recent_calls(at, limit).await,
        ManageOp::CallDetail { call_id } => call_detail(at, call_id).await,
        ManageOp::Jobs {} => job_call(at, "exec_stat", json!({})).await,
        ManageOp::JobTail { job_id } => {
            job_call(at, "exec_tail", json!({ "job_id": job_id, "lines": 200 })).await
        }
        ManageOp::JobKill { job_id } => {
            job_call(at, "exec_kill", json!({ "job_id": job_id })).await
        }
        ManageOp::Packs {} => {
            value(crate::packs::manage_view(at.app.pack_hosts(), at.account).await)
        }
        ManageOp::Secrets {} => secrets(at, None, Vec::new()).await,
        ManageOp::SetSecret { secret, value } => {
            let set = pb::SetSecretRequest {
                account: at.account.to_string(),
                name: secret.clone(),
                value: value.0,
            };
            let mut gate = at.app.backends.account_admin.clone();
            match gate.set_secret(request(set)).await {
                Ok(r) => {
                    let restarted = restart_users(at, &secret).await;
                    secrets(at, Some(r.into_inner().changed), restarted).await
                }
                Err(status) => Err(from_status(status)),
            }
        }
        ManageOp::RemoveSecret { secret } => {
            let remove = pb::RemoveSecretRequest {
                account: at.account.to_string(),
                name: secret.clone(),
            };
            let mut gate = at.app.backends.account_admin.clone();
            match gate.remove_secret(request(remove)).await {
                Ok(r) => {
                    let restarted = restart_users(at, &secret).await;
                    secrets(at, Some(r.into_inner().changed), restarted).await
                }
                Err(status) => Err(from_status(status)),
            }
        }
        ManageOp::SetPack { pack, definition } => {
            let set = pb::SetPackRequest {
                account: at.account.to_string(),
                name: pack,
                definition: serde_json::Value::Object(definition).to_string(),
            };
            let mut gate = at.app.backends.account_admin.clone();
            changed(gate.set_pack(request(set)).await)
        }
        ManageOp::RemovePack { pack } => {
            let remove = pb::RemovePackRequest {
                account: at.account.to_string(),
                name: pack,
            };
            let mut gate = at.app.backends.account_admin.clone();
            changed(gate.remove_pack(request(remove)).await)
        }
        ManageOp::PacksAskAgain {} => {
            let forget = pb::AskAgainAboutPacksRequest {
                account: at.account.to_string(),
            };
            let mut gate = at.app.backends.account_admin.clone();
            match gate.ask_again_about_packs(request(forget)).await {
                Ok(_) => value(crate::packs::manage_view(at.app.pack_hosts(), at.account).await),
                Err(status) => Err(from_status(status)),
            }
        }
        ManageOp::Providers {} => value(Providers {
            providers: providers(at),
        }),
    };
    if let Err(e) = &outcome {
        let (account, code) = (at.account, e.code.as_str());
        tracing::info!(%account, op = name, code, "manage operation refused");
    }
    match outcome {
        Ok(result) => ServerFrame::ManageResult {
            request_id,
            ok: true,
            result: Some(result),
            error: None,
        },
        Err(error) => ServerFrame::ManageResult {
            request_id,
            ok: false,
            result: None,
            error: Some(error),
        },
    }
}

fn value(v: impl Serialize) -> Outcome {
    serde_json::to_value(v).map_err(|_| WireError::new(ErrorCode::Internal, "could not encode"))
}

/// A gate refusal as the approver sees it: its message for what the approver can fix, a stable
/// code for the rest.
fn from_status(status: tonic::Status) -> WireError {
    use tonic::Code;
    let code = match status.code() {
        Code::InvalidArgument | Code::FailedPrecondition | Code::NotFound => {
            ErrorCode::InvalidParams
        }
        Code::PermissionDenied => ErrorCode::Denied,
        Code::Unavailable | Code::DeadlineExceeded => {
            return WireError::new(ErrorCode::Unavailable, "the gate is unavailable");
        }
        _ => ErrorCode::Internal,
    };
    WireError::new(code, status.message())
}

fn changed(r: Result<tonic::Response<pb::PolicyChangeResponse>, tonic::Status>) -> Outcome {
    let r = r.map_err(from_status)?.into_inner();
    value(Changed {
        changed: r.changed,
        summary: r.summary,
    })
}

async fn overview(at: &Caller<'_>) -> Outcome {
    let app = at.app;
    let info = app
        .backends
        .gate
        .clone()
        .account_info(request(pb::AccountInfoRequest {
            tools: Vec::new(),
            account: at.account.to_string(),
        }))
        .await
        .map_err(from_status)?
        .into_inner();
    let status = match app.backends.executor(at.account) {
        Some(mut e) => e
            .status(request(pb::ExecutorStatusRequest {}))
            .await
            .ok()
            .map(|s| s.into_inner()),
        None => None,
    };
    value(Overview {
        account: at.account.to_string(),
        workdir: info.workdir,
        enabled: info.enabled,
        sandbox_enabled: info.sandbox_enabled,
        confined: info.confined,
        active: app.asks.is_active(at.account),
        approvers: app.asks.approver_count(at.account),
        policy_error: info.policy_error,
        policy_warnings: info.policy_warnings,
        executor_sandbox: status
            .as_ref()
            .map_or_else(|| "unreachable".to_owned(), |s| s.sandbox.clone()),
        running_jobs: status.map_or(0, |s| s.running_jobs),
        providers: providers(at),
    })
}

/// The account's client-tool providers now, the most recently registered first.
fn providers(at: &Caller<'_>) -> Vec<Provider> {
    at.app
        .registry
        .providers(at.account)
        .into_iter()
        .map(|(connection_id, tools)| Provider {
            connection_id,
            tools,
        })
        .collect()
}

async fn list_rules(at: &Caller<'_>) -> Outcome {
    let r = at
        .app
        .backends
        .account_admin
        .clone()
        .list_rules(request(pb::ListRulesRequest {
            account: at.account.to_string(),
        }))
        .await
        .map_err(from_status)?
        .into_inner();
    value(Rules {
        workdir: r.workdir,
        sandbox_enabled: r.sandbox_enabled,
        confined: r.confined,
        caps: r.caps,
        warnings: r.warnings,
        error: r.error,
        rules: r
            .rules
            .into_iter()
            .map(|r| Rule {
                layer: r.layer,
                section: r.section,
                kind: r.kind,
                index: r.index,
                pattern: r.pattern,
                expires: r.expires,
                expired: r.expired,
                read_only: r.read_only,
                file: r.file,
            })
            .collect(),
    })
}

/// The names of the account's pack secrets (never their values), with what a change did.
async fn secrets(at: &Caller<'_>, changed: Option<bool>, restarted: Vec<String>) -> Outcome {
    let list = pb::ListSecretsRequest {
        account: at.account.to_string(),
    };
    let mut gate = at.app.backends.account_admin.clone();
    let names = gate
        .list_secrets(request(list))
        .await
        .map_err(from_status)?
        .into_inner()
        .names;
    value(Secrets {
        names,
        changed,
        restarted,
    })
}

/// Restarts the account's packs that use `secret` (best effort: a pack host that is down has
/// nothing running); their names.
async fn restart_users(at: &Caller<'_>, secret: &str) -> Vec<String> {
    let Some(mut packs) = at.app.backends.packs(at.account) else {
        return Vec::new();
    };
    let reload = pb::ReloadPacksRequest {
        secret: secret.to_owned(),
    };
    match packs.reload(request(reload)).await {
        Ok(r) => r.into_inner().restarted,
        Err(_) => Vec::new(),
    }
}

/// Explains a subject the way `glovebox policy explain` does: planned by the account's executor
/// as the equivalent call, then judged by the gate.
async fn explain(at: &Caller<'_>, domain: &str, subject: &str, cwd: Option<&str>) -> Outcome {
    let domain = ExplainDomain::parse(domain).ok_or_else(|| {
        WireError::new(
            ErrorCode::InvalidParams,
            "domain must be read, write, delete, exec or tool",
        )
    })?;
    let mut pack = None;
    let (subject, cwd) = match equivalent_call(domain, subject, cwd) {
        None => {
            pack = crate::packs::facts_of(at.app, at.account, subject).await;
            (Subject::Tool(subject.to_owned()), String::new())
        }
        Some((tool, params)) => {
            let mut executor = at.app.backends.executor(at.account).ok_or_else(|| {
                WireError::new(ErrorCode::Unavailable, "the account's executor is unknown")
            })?;
            let planned = executor
                .plan(request(pb::PlanRequest {
                    call: Some(pb::ToolCall {
                        account: at.account.to_string(),
                        call_id: glovebox_proto::ids::new_id("explain"),
                        tool: tool.name().to_owned(),
                        params_json: params.to_string(),
                        client_call_id: String::new(),
                    }),
                }))
                .await
                .map_err(|_| {
                    WireError::new(
                        ErrorCode::Unavailable,
                        "the account's executor is unavailable",
                    )
                })?
                .into_inner();
            if let Some(e) = planned.error {
                let code = ErrorCode::parse(&e.code).unwrap_or(ErrorCode::Internal);
                return Err(WireError::new(code, e.message));
            }
            let plan = planned.plan.unwrap_or_default();
            let (planned, cwd) =
                explained_subject(&plan).map_err(|e| WireError::new(ErrorCode::Internal, e))?;
            (Subject::Planned(planned), cwd)
        }
    };
    let r = at
        .app
        .backends
        .account_admin
        .clone()
        .explain(request(pb::ExplainRequest {
            account: at.account.to_string(),
            subject: Some(subject),
            cwd,
            pack,
        }))
        .await
        .map_err(from_status)?
        .into_inner();
    let verdict = match pb::Verdict::try_from(r.verdict) {
        Ok(pb::Verdict::Allow) => "allow",
        Ok(pb::Verdict::Ask) => "ask",
        _ => "deny",
    };
    value(Explained {
        verdict: verdict.to_owned(),
        subject: r.subject,
        layer: r.layer,
        rule: r.rule,
        reason: r.reason,
        warnings: r.warnings,
    })
}

async fn recent_calls(at: &Caller<'_>, limit: Option<u32>) -> Outcome {
    let r = at
        .app
        .backends
        .account_admin
        .clone()
        .recent_calls(request(pb::RecentCallsRequest {
            account: at.account.to_string(),
            limit: limit.unwrap_or(DEFAULT_RECENT_CALLS),
        }))
        .await
        .map_err(from_status)?
        .into_inner();
    value(Calls {
        calls: r
            .calls
            .into_iter()
            .map(|c| CallRow {
                call_id: c.call_id,
                client_call_id: c.client_call_id,
                started_at: c.started_at,
                tool: c.tool,
                subject: c.subject,
                verdict: c.verdict,
                rule: c.rule,
                approval: c.approval,
                outcome: c.outcome,
                error_code: c.error_code,
                duration_ms: c.duration_ms,
            })
            .collect(),
    })
}

async fn call_detail(at: &Caller<'_>, call_id: String) -> Outcome {
    let r = at
        .app
        .backends
        .account_admin
        .clone()
        .call_events(request(pb::CallEventsRequest {
            account: at.account.to_string(),
            call_id: call_id.clone(),
        }))
        .await
        .map_err(from_status)?
        .into_inner();
    value(CallEvents {
        call_id,
        events: r
            .events
            .into_iter()
            .map(|row| {
                let e = row.event.unwrap_or_default();
                CallEvent {
                    ts: row.ts,
                    source: e.source,
                    kind: e.kind,
                    tool: e.tool,
                    subject: e.subject,
                    verdict: e.verdict,
                    rule: e.rule,
                    reason: e.reason,
                    approval: e.approval,
                    outcome: e.outcome,
                    error_code: e.error_code,
                    duration_ms: e.duration_ms,
                    bytes: e.bytes,
                    detail: e.detail,
                }
            })
            .collect(),
    })
}

/// One of the account's own job tools, run as a call of the account from this connection: the
/// executor acts only on the gate's ticket, and the audit has the call like any other.
async fn job_call(at: &Caller<'_>, tool: &str, params: serde_json::Value) -> Outcome {
    let origin = crate::call::Origin {
        account: at.account.clone(),
        connection_id: at.connection_id.to_owned(),
        profile: crate::profiles::Profile::Desktop,
        tables: false,
    };
    let (_keep, never) = tokio::sync::watch::channel(false);
    let call_id = ClientCallId::random("console");
    match crate::pipeline::run_call(at.app.road(), &origin, &call_id, tool, params, never)
        .await
        .into_frame()
    {
        ServerFrame::Result {
            ok: true,
            result: Some(result),
            ..
        } => Ok(result),
        ServerFrame::Result {
            error: Some(error), ..
        } => Err(error),
        _ => Err(WireError::new(
            ErrorCode::Internal,
            "the call had no result",
        )),
    }
}
