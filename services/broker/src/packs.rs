//! MCP tool packs at the front door. The account's pack host lists its packs' tools (the broker
//! sanitizes their schemas, see `ToolInfo::pack`); a call of `<pack>__<tool>` (or `pack_invoke`)
//! is planned by the pack host (the tool's facts, its path arguments), its path arguments resolved
//! by the account's executor, judged by the gate (asking the approver, who sees the pack, the
//! tool and the arguments), and made by the pack host on the gate's ticket. A project pack the
//! approver has not trusted yet gets a trust ask, one at a time per pack, answered at the gate.

pub(crate) mod listing;
mod rows;
pub mod trust_asks;

use std::sync::Arc;
use std::time::Duration;

use glovebox_config::AccountId;
use glovebox_proto::ErrorCode;
use glovebox_proto::transport::messages::{MessageClient, PackRuns};
use glovebox_proto::v1::{
    self as pb, Answer, PackInvokeRequest, PackPlanRequest, PlanPathsRequest, ResolveTrustRequest,
    TrustSubject,
};
use glovebox_proto::ws::{
    AskDisplay, AskSubject, Decision, PackErrorSpec, PackStateSpec, PackToolSpec, ServerFrame,
    ToolSpec, WireError,
};

use crate::app::App;
use crate::asks::AskOutcome;
use crate::authorize::{Preview, PreviewText, authorize, input_preview, note_verdict, settle};
use crate::backends::request;
use crate::call::{CallIds, Origin, from_tool_error, unavailable};
use crate::road::CallRoad;
use crate::sync::lock;

pub use listing::listing;
use listing::{annotations, json_of, pack_info};
pub use rows::view as manage_view;
pub use trust_asks::{MAX_QUEUED_TRUST_ASKS, TrustAsks};

/// What a pack call's deadline adds to the pack's own time limit (the pack host answers first).
const INVOKE_MARGIN: Duration = Duration::from_secs(5);

/// Starts the task that shows trust asks (once per broker).
pub fn spawn(app: Arc<App>) {
    let Some(mut rx) = lock(&app.trust_asks.rx).take() else {
        return;
    };
    tokio::spawn(async move {
        while let Some((account, subject)) = rx.recv().await {
            tokio::spawn(ask_trust(app.clone(), account, subject));
        }
    });
}

/// What the approver sees of a project pack that wants to start (or, for an HTTP pack, to be
/// reached).
pub fn trust_preview(s: &TrustSubject) -> String {
    let list = |items: &[String]| {
        if items.is_empty() {
            "(none)".to_owned()
        } else {
            items.join(", ")
        }
    };
    let what = if s.url.is_empty() {
        let mut command = vec![s.command.as_str()];
        command.extend(s.args.iter().map(String::as_str));
        let mut what = format!(
            "wants to start the tool pack {:?}:\n  command:     {}\n  directory:   {}\n  network:     {}\n  environment: {}",
            s.pack,
            command.join(" "),
            s.cwd,
            s.network,
            list(&s.env)
        );
        // What it would reach beyond the workdir, said only when it asks for any.
        if !s.read.is_empty() {
            what.push_str(&format!("\n  also reads:  {}", s.read.join(", ")));
        }
        if !s.write.is_empty() {
            what.push_str(&format!("\n  also writes: {}", s.write.join(", ")));
        }
        what
    } else {
        format!(
            "wants the tool pack {:?} reached over HTTP:\n  url:         {}\n  headers:     {}",
            s.pack,
            s.url,
            list(&s.env)
        )
    };
    format!(
        "The project's {}/.glovebox/mcp.json {what}\nonce: use it until glovebox stops; always: trust it for this workdir (asked again if any of this changes); deny: do not use it.\n",
        s.workdir
    )
}

async fn ask_trust(app: Arc<App>, account: AccountId, subject: TrustSubject) {
    let key = glovebox_proto::packs::trust_key(&subject);
    let outcome = if app.asks.approver_count(&account) == 0 {
        AskOutcome::NoApprover
    } else {
        let preview = trust_preview(&subject);
        let mut command = vec![subject.command.clone()];
        command.extend(subject.args.iter().cloned());
        if !subject.url.is_empty() {
            command = vec![subject.url.clone()];
        }
        let subjects = vec![
            AskSubject {
                domain: "pack".into(),
                path: subject.pack.clone(),
            },
            AskSubject {
                domain: "exec".into(),
                path: command.join(" "),
            },
            AskSubject {
                domain: "read".into(),
                path: subject.cwd.clone(),
            },
        ];
        let (display, warnings) = AskDisplay::of("pack_trust", &subjects, &preview);
        let warning = (!warnings.is_empty()).then(|| warnings.join("; "));
        app.asks
            .ask(
                &account,
                |ask_id, expires_in_ms| ServerFrame::Ask {
                    ask_id: ask_id.to_owned(),
                    call_id: format!("trust-{}", &key[..16]),
                    account: account.to_string(),
                    connection_id: String::new(),
                    tool: "pack_trust".into(),
                    subjects,
                    preview,
                    expires_in_ms,
                    display,
                    warning,
                    preview_cut: false,
                },
                std::future::pending::<()>(),
            )
            .await
    };
    let answer = match outcome {
        AskOutcome::Answered(Decision::Once) => Some(Answer::Once),
        AskOutcome::Answered(Decision::Always) => Some(Answer::Always),
        AskOutcome::Answered(Decision::Deny) => Some(Answer::Deny),
        AskOutcome::Timeout => Some(Answer::Timeout),
        // Nobody to ask, or no room to: the pack keeps waiting, and is asked about next time.
        AskOutcome::NoApprover
        | AskOutcome::ApproverGone
        | AskOutcome::Busy
        | AskOutcome::Cancelled => None,
    };
    let mut recorded = false;
    if let Some(answer) = answer {
        let mut gate = app.backends.gate.clone();
        let resolved = gate
            .resolve_trust(request(ResolveTrustRequest {
                account: account.to_string(),
                subject: Some(subject.clone()),
                answer: answer as i32,
            }))
            .await;
        match resolved {
            Ok(_) => recorded = true,
            Err(status) => {
                tracing::error!(error = %status.message(), "could not record a pack trust answer")
            }
        }
    }
    app.trust_asks.done(&account, &subject, recorded);
}

/// A pack tool's facts as its pack host lists them now (`None` for another tool, or one not
/// listed): what explaining it needs to answer as its call would be decided.
pub async fn facts_of(app: &App, account: &AccountId, name: &str) -> Option<pb::PackFacts> {
    glovebox_proto::packs::split_name(name)?;
    glovebox_proto::packs::facts_of(&listing(app.pack_hosts(), account).await.ok()?, name)
}

/// The account's pack tools as front doors list them (none if the pack host cannot say).
pub async fn tool_specs(app: &App, account: &AccountId) -> Vec<ToolSpec> {
    match listing(app.pack_hosts(), account).await {
        Err(why) => {
            tracing::warn!(%account, error = %why, "no pack tools listed");
            Vec::new()
        }
        Ok(listed) => listed
            .tools
            .iter()
            .filter_map(|t| {
                let i = pack_info(t).ok()?;
                Some(ToolSpec {
                    name: i.name,
                    description: i.description,
                    input_schema: i.input_schema,
                    annotations: Some(annotations(t)),
                    output_schema: json_of(&t.output_schema_json)
                        .and_then(|s| glovebox_proto::packs::sanitize_output_schema(&s)),
                    title: glovebox_proto::packs::sanitize_title(&t.title),
                    meta: json_of(&t.meta_json)
                        .and_then(|m| glovebox_proto::packs::sanitize_meta(&m)),
                })
            })
            .collect(),
    }
}

/// The answer to `packs_list`: every pack tool and every pack that has none now.
pub async fn packs_frame(app: &App, account: &AccountId) -> ServerFrame {
    let info = app.backends.account_info(account, Vec::new()).await;
    if !info.as_ref().is_some_and(|i| i.enabled) {
        return ServerFrame::Packs {
            tools: Vec::new(),
            errors: vec![PackErrorSpec {
                pack: String::new(),
                origin: String::new(),
                message: "the account's tools are switched off (or the gate is unavailable)".into(),
            }],
            packs: Vec::new(),
        };
    }
    match listing(app.pack_hosts(), account).await {
        Err(why) => ServerFrame::Packs {
            tools: Vec::new(),
            errors: vec![PackErrorSpec {
                pack: String::new(),
                origin: String::new(),
                message: why.to_string(),
            }],
            packs: Vec::new(),
        },
        Ok(listed) => {
            let mut errors: Vec<PackErrorSpec> = listed
                .errors
                .iter()
                .map(|e| PackErrorSpec {
                    pack: e.pack.clone(),
                    origin: e.origin.clone(),
                    message: e.message.clone(),
                })
                .collect();
            let mut tools = Vec::new();
            for t in &listed.tools {
                match pack_info(t) {
                    Ok(i) => tools.push(PackToolSpec {
                        name: i.name,
                        pack: t.pack.clone(),
                        tool: t.tool.clone(),
                        description: i.description,
                        input_schema: i.input_schema,
                        annotations: annotations(t),
                        origin: t.origin.clone(),
                    }),
                    Err(why) => errors.push(PackErrorSpec {
                        pack: t.pack.clone(),
                        origin: t.origin.clone(),
                        message: why.to_string(),
                    }),
                }
            }
            let packs = listed
                .packs
                .iter()
                .map(|p| PackStateSpec {
                    pack: p.name.clone(),
                    origin: p.origin.clone(),
                    state: p.state.clone(),
                    message: p.message.clone(),
                })
                .collect();
            ServerFrame::Packs {
                tools,
                errors,
                packs,
            }
        }
    }
}

/// What the approver is shown of a pack call: the pack, the tool and the arguments.
fn call_preview(pack: &str, tool: &str, params: &serde_json::Value) -> PreviewText {
    let arguments = input_preview(params, "arguments");
    PreviewText {
        text: format!("pack: {pack}\ntool: {tool}\n{}", arguments.text),
        cut: arguments.cut,
    }
}

/// A call of a pack tool: planned by the pack host and the executor, judged by the gate, made by
/// the pack host on the gate's ticket. Withdrawing it (`cancel`) while it runs tells the pack's
/// server to cancel.
///
/// A call is handed to the pack host in one hop (`Packs.Runs`): it plans the call and, when it
/// has no path arguments, asks the gate itself with the broker's voucher and makes it on an
/// allow. What comes back otherwise is where the broker goes on: the approver for an ask, the
/// executor for path arguments. A client that asked for progress is served on the two-step road
/// (`Plan`, then `InvokeStream`).
pub async fn pack_call(
    road: CallRoad<'_>,
    origin: &Origin,
    ids: &CallIds,
    exposed: &str,
    (pack, tool): (&str, &str),
    params: serde_json::Value,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<serde_json::Value, WireError> {
    let account = &origin.account;
    if !params.is_object() {
        return Err(WireError::new(
            ErrorCode::InvalidParams,
            "params must be a JSON object",
        ));
    }
    let crate::backends::PacksLink {
        client: mut packs,
        runs,
    } = road
        .backends
        .packs_link(account)
        .ok_or_else(|| unavailable("the account's pack host"))?;
    let call = ids.tool_call(account, exposed, params.to_string());
    let wants_progress = crate::call::PROGRESS.try_with(|_| ()).is_ok();
    let (mut planned, decided) = if wants_progress {
        (plan_on(&mut packs, &call).await?, None)
    } else {
        match unless_withdrawn(cancelled.clone(), run_in_one_hop(road, &runs, &call)).await? {
            Ran::Made(invoked) => return answer_of(invoked),
            Ran::Planned(planned) => *planned,
        }
    };
    let facts = planned
        .facts
        .take()
        .ok_or_else(|| WireError::new(ErrorCode::Internal, "the pack host returned no facts"))?;
    let paths = resolve_path_args(road, account, &call, &planned).await?;
    let plan = glovebox_proto::packs::plan_of(exposed, facts, paths);
    let preview = pack_preview(pack, tool, &params, &planned.unjudged);
    let ticket = match decided {
        // Judged already, at the pack host's request: what is left is the approver's answer.
        Some(decided) => {
            let verdict = note_verdict(&decided);
            if verdict == pb::Verdict::Allow {
                return Err(WireError::new(
                    ErrorCode::Internal,
                    "the pack host's answer does not fit its verdict",
                ));
            }
            let judged = (verdict, decided);
            settle(
                road.deciders(),
                origin,
                &call,
                &plan,
                judged,
                cancelled.clone(),
                preview,
            )
            .await?
        }
        None => {
            authorize(
                road.deciders(),
                origin,
                &call,
                &plan,
                cancelled.clone(),
                preview,
            )
            .await?
        }
    };
    let mut invoke = tonic::Request::new(PackInvokeRequest {
        call: Some(call),
        ticket: Some(ticket),
        call_age_ms: crate::call::call_age_ms(),
    });
    invoke.set_timeout(Duration::from_millis(planned.timeout_ms) + INVOKE_MARGIN);
    invoke_on_ticket(&mut packs, invoke, cancelled).await
}

/// What a pack call handed over in one hop came to.
enum Ran {
    /// Allowed and made: the pack host's answer.
    Made(pb::PackInvokeResponse),
    /// Planned, and judged unless it has path arguments: the broker goes on from here.
    Planned(Box<(pb::PackPlanResponse, Option<pb::DecideResponse>)>),
}

/// Hands `call` to the pack host in one hop, with the broker's voucher. Given up (withdrawn at the
/// pack host) after the longest a call may take: the plan's backend time, the longest time limit a
/// pack may set, and the margin.
async fn run_in_one_hop(
    road: CallRoad<'_>,
    runs: &MessageClient<PackRuns>,
    call: &pb::ToolCall,
) -> Result<Ran, WireError> {
    let voucher = road
        .backends
        .vouchers
        .vouch(call, glovebox_ticket::now_ms().unwrap_or(0));
    let run = runs.run(pb::PackRunRequest {
        call: Some(call.clone()),
        voucher: Some(voucher),
        call_age_ms: crate::call::call_age_ms(),
    });
    let ran = tokio::time::timeout(LONGEST_RUN, run)
        .await
        .map_err(|_| pack_host_failed())?
        .map_err(|_| pack_host_failed())?;
    if let Some(e) = ran.error {
        return Err(from_tool_error(e));
    }
    match (ran.invoked, ran.planned, ran.decision) {
        (Some(invoked), None, Some(decided)) if note_verdict(&decided) == pb::Verdict::Allow => {
            Ok(Ran::Made(invoked))
        }
        // A verdict comes only for a call with no path arguments: one on a plan without the
        // paths would be a verdict on less than the call.
        (None, Some(planned), decided) if decided.is_none() || planned.paths.is_empty() => {
            if let Some(e) = planned.error {
                return Err(from_tool_error(e));
            }
            Ok(Ran::Planned(Box::new((planned, decided))))
        }
        _ => Err(WireError::new(
            ErrorCode::Internal,
            "the pack host's answer does not fit its verdict",
        )),
    }
}

/// The longest a pack call handed over in one hop may take at the pack host.
const LONGEST_RUN: Duration = Duration::from_secs(
    crate::backends::BACKEND_TIMEOUT.as_secs()
        + glovebox_config::mcp_json::MAX_TIMEOUT_S
        + INVOKE_MARGIN.as_secs(),
);

/// The pack host's plan of `call` (`Packs.Plan`).
async fn plan_on(
    packs: &mut glovebox_proto::v1::packs_client::PacksClient<glovebox_proto::transport::Link>,
    call: &pb::ToolCall,
) -> Result<pb::PackPlanResponse, WireError> {
    let planned = packs
        .plan(request(PackPlanRequest {
            call: Some(call.clone()),
        }))
        .await
        .map_err(|_| unavailable("the account's pack host"))?
        .into_inner();
    match planned.error {
        Some(e) => Err(from_tool_error(e)),
        None => Ok(planned),
    }
}

fn pack_host_failed() -> WireError {
    WireError::new(
        ErrorCode::Unavailable,
        "the account's pack host failed during the call; it was not retried",
    )
}

/// The pack's path arguments (`planned.paths`), resolved by the account's executor into the
/// subjects the gate judges (none for a tool with no path arguments).
async fn resolve_path_args(
    road: CallRoad<'_>,
    account: &AccountId,
    call: &pb::ToolCall,
    planned: &pb::PackPlanResponse,
) -> Result<Vec<pb::Subject>, WireError> {
    if planned.paths.is_empty() {
        return Ok(Vec::new());
    }
    let mut executor = road
        .backends
        .executor(account)
        .ok_or_else(|| unavailable("the account's executor"))?;
    let resolved = executor
        .plan_paths(request(PlanPathsRequest {
            call: Some(call.clone()),
            paths: planned
                .paths
                .iter()
                .map(|a| pb::Subject {
                    domain: a.domain,
                    path: a.path.clone(),
                    state: None,
                })
                .collect(),
            base: planned.base.clone(),
        }))
        .await
        .map_err(|_| unavailable("the account's executor"))?
        .into_inner();
    if let Some(e) = resolved.error {
        return Err(from_tool_error(e));
    }
    let paths = resolved.plan.map(|p| p.subjects).unwrap_or_default();
    if paths.len() != planned.paths.len() {
        return Err(WireError::new(
            ErrorCode::Internal,
            "the executor did not resolve every path argument",
        ));
    }
    Ok(paths)
}

/// What the approver is shown of a pack call: its pack, tool and arguments, and each argument
/// that looks like a path but is not judged as one.
fn pack_preview(
    pack: &str,
    tool: &str,
    params: &serde_json::Value,
    unjudged: &[String],
) -> Preview {
    let mut preview = call_preview(pack, tool, params);
    for unjudged in unjudged {
        preview.text.push_str(&format!(
            "note: {unjudged}, which looks like a path but is not judged as one (a pack lists such \
             arguments in its path_args)\n"
        ));
    }
    Preview::Text(preview)
}

/// Makes the call on the pack host with its ticket, streaming progress to a client that asked
/// for it; withdrawing the call (`cancelled`) tells the pack's server to cancel.
async fn invoke_on_ticket(
    packs: &mut glovebox_proto::v1::packs_client::PacksClient<glovebox_proto::transport::Link>,
    invoke: tonic::Request<PackInvokeRequest>,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> Result<serde_json::Value, WireError> {
    let progress = crate::call::PROGRESS.try_with(Clone::clone).ok();
    let invoking = async move {
        let invoked = match progress {
            None => packs.invoke(invoke).await,
            Some(to) => invoke_with_progress(packs, invoke, &to).await,
        };
        invoked.map_err(|_| pack_host_failed())
    };
    answer_of(unless_withdrawn(cancelled, invoking).await?.into_inner())
}

/// `call`'s outcome, unless the agent withdraws the call first (`cancelled`): then `call` is
/// dropped, which tells the pack host to withdraw it and the pack's server to cancel it.
async fn unless_withdrawn<T>(
    mut cancelled: tokio::sync::watch::Receiver<bool>,
    call: impl std::future::Future<Output = Result<T, WireError>>,
) -> Result<T, WireError> {
    let withdrawn = async move {
        if cancelled.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        r = call => r,
        _ = withdrawn => Err(WireError::new(
            ErrorCode::Cancelled,
            "the call was withdrawn; the pack's server was told to cancel it",
        )),
    }
}

/// What a pack call the pack host made answers. Its result row says what it answered; a result
/// the broker cannot pass on is a failure that row does not know of, so the broker writes its own
/// row besides.
fn answer_of(invoked: pb::PackInvokeResponse) -> Result<serde_json::Value, WireError> {
    let answered = match invoked.error {
        Some(e) => Err(from_tool_error(e)),
        None => match serde_json::from_str(&invoked.result_json) {
            Ok(value) => Ok(value),
            Err(_) => {
                return Err(WireError::new(
                    ErrorCode::Internal,
                    "the pack host returned a malformed result",
                ));
            }
        },
    };
    if invoked.result_audited {
        let _ = crate::call::CALL.try_with(|c| c.result_audited.set(true));
    }
    answered
}

/// A pack call made with `InvokeStream`: each progress of the server's goes to `to` as it comes
/// (dropped when `to` is full: a slow client loses progress, not the call), then its end.
async fn invoke_with_progress(
    packs: &mut glovebox_proto::v1::packs_client::PacksClient<glovebox_proto::transport::Link>,
    invoke: tonic::Request<PackInvokeRequest>,
    to: &tokio::sync::mpsc::Sender<pb::PackProgress>,
) -> Result<tonic::Response<pb::PackInvokeResponse>, tonic::Status> {
    use pb::pack_invoke_event::Event;
    let mut events = packs.invoke_stream(invoke).await?.into_inner();
    while let Some(event) = events.message().await? {
        match event.event {
            Some(Event::Progress(p)) => {
                let _ = to.try_send(p);
            }
            Some(Event::Done(done)) => return Ok(tonic::Response::new(done)),
            None => {}
        }
    }
    Err(tonic::Status::unavailable(
        "the call's stream ended without its end",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trust_ask_shows_everything_that_decides_what_runs() {
        let s = TrustSubject {
            workdir: "/w".into(),
            pack: "db".into(),
            command: "python3".into(),
            args: vec!["server.py".into()],
            env: vec!["TOKEN=${secret:db}".into()],
            cwd: "/w/tools".into(),
            network: "none".into(),
            url: String::new(),
            read: Vec::new(),
            write: Vec::new(),
        };
        let p = trust_preview(&s);
        for needle in [
            "/w/.glovebox/mcp.json",
            "\"db\"",
            "python3 server.py",
            "/w/tools",
            "network:     none",
            "TOKEN=${secret:db}",
        ] {
            assert!(p.contains(needle), "{needle}: {p}");
        }
    }

    #[test]
    fn a_trust_ask_for_an_http_pack_shows_its_url_and_headers_not_a_command() {
        let s = TrustSubject {
            workdir: "/w".into(),
            pack: "remote".into(),
            env: vec!["Authorization: Bearer ${secret:r}".into()],
            cwd: "/w".into(),
            network: "any".into(),
            url: "https://mcp.example.com/mcp".into(),
            ..Default::default()
        };
        let p = trust_preview(&s);
        for needle in [
            "\"remote\" reached over HTTP",
            "url:         https://mcp.example.com/mcp",
            "Authorization: Bearer ${secret:r}",
        ] {
            assert!(p.contains(needle), "{needle}: {p}");
        }
        assert!(!p.contains("command:"), "{p}");
    }

    #[test]
    fn a_pack_call_shows_pack_tool_and_arguments() {
        let p = call_preview("e", "echo", &serde_json::json!({"message": "hi"}));
        assert_eq!(
            p.text,
            "pack: e\ntool: echo\narguments:\n{\n  \"message\": \"hi\"\n}\n"
        );
        assert!(!p.cut);
    }
}
