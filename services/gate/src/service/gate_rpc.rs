//! The `Gate` service, for the broker: decide, resolve, account info, enablement, health.

use super::prelude::*;
use glovebox_proto::audit_row::{RowKind, Source};
use glovebox_proto::transport::messages::{AnswerStream, MAX_IN_FLIGHT, answer_each, call_status};
use tracing::Instrument;

/// Whether an allowed call of `tool` ends with its own rows, sent with its ticket by the service
/// that made it (`append_call`): a built-in tool's by the executor, a pack tool's by the pack
/// host. A client tool's rows are the broker's, sent without a ticket.
fn ends_with_its_own_rows(tool: &str) -> bool {
    glovebox_proto::tools::Tool::from_name(tool).is_some()
        || glovebox_proto::packs::split_name(tool).is_some()
}

/// Most tool names one `AccountInfo` may ask about, and the longest.
const MAX_LISTED_TOOLS: usize = 4096;
const MAX_TOOL_NAME_BYTES: usize = 256;

impl GateState {
    /// Judges a planned call, audits the verdict and signs a ticket for an allow: a `decide` on
    /// the broker's `Decisions` stream, and on an executor's `Calls` stream once its voucher is
    /// checked.
    pub(crate) async fn decide(&self, call: &ToolCall, plan: &Plan) -> DecideResponse {
        let (decided, row) = self.decide_unwritten(call, plan).await;
        self.write_decide_row(call, &decided, row).await;
        decided
    }

    /// A `decide` on the broker's `Decisions` stream: [`Self::decide`] on the call and plan it
    /// names.
    async fn decide_asked(&self, request: DecideRequest) -> Result<DecideResponse, Status> {
        let DecideRequest { call, plan } = request;
        let (call, plan) = (required(call, "call")?, required(plan, "plan")?);
        tracing::Span::current().record("call_id", call.call_id.as_str());
        Ok(self.decide(&call, &plan).await)
    }

    /// [`Self::decide`] but for its audit row, given back for the caller to write
    /// ([`Self::write_decide_row`], or with the rows of the call made ahead of its verdict).
    pub(crate) async fn decide_unwritten(
        &self,
        call: &ToolCall,
        plan: &Plan,
    ) -> (DecideResponse, AuditEvent) {
        let started = Instant::now();
        let judged = self.judge(call, plan);
        self.flush_policy_events().await;
        let v = &judged.verdict;
        let ticket =
            (v.decision == Decision::Allow).then(|| self.sign(call, plan, &judged, "auto"));
        let mut e = event(Source::Gate, RowKind::Decide, call);
        e.subject = crate::redact::subjects_text(&plan.subjects, v.decision == Decision::Allow);
        e.verdict = v.decision.as_str().to_owned();
        e.rule = v.rule.clone();
        e.reason = v.reason.clone();
        e.detail = format!("layer: {}", v.layer.as_str());
        if !v.warnings.is_empty() {
            e.detail
                .push_str(&format!("; warning: {}", v.warnings.join("; ")));
        }
        if v.decision == Decision::Allow {
            e.approval = "auto".to_owned();
        }
        e.duration_ms = started.elapsed().as_millis() as u64;
        let decided = DecideResponse {
            verdict: wire_verdict(v.decision) as i32,
            rule: v.rule.clone(),
            reason: v.reason.clone(),
            ticket,
            layer: v.layer.as_str().to_owned(),
            warnings: v.warnings.clone(),
            rows_written: false,
            delivered: false,
        };
        (decided, e)
    }

    /// Writes the audit row of a decision, before it is answered.
    pub(crate) async fn write_decide_row(
        &self,
        call: &ToolCall,
        decided: &DecideResponse,
        row: AuditEvent,
    ) {
        if decided.ticket.is_some() && ends_with_its_own_rows(&call.tool) {
            // An allowed built-in or pack call: its row takes its place in the writer's queue
            // before the answer, and the executor's or pack host's `append_call`, queued behind
            // it, is acknowledged only once both are committed. Should the gate die first,
            // `append_call` restores the row from the call's ticket (`restore_decide_row`). One
            // commit wait less per call.
            self.audit.append_queued(row).await;
        } else {
            // Written before the answer: a decision the broker acts on is already in the audit,
            // even if the gate dies the next moment (group commit keeps this cheap under load).
            self.audit(row).await;
        }
    }

    /// Persists an exact allow rule for each subject an "always" answer approved that asked
    /// (never for a file that makes later commands run code: no rule stops it asking, and writing
    /// one would only mislead). Returns what the audit row says of it.
    fn persist_always(&self, account: &str, plan: &Plan, judged: &judge::Judged) -> String {
        let asked: Vec<(Section, String)> = judged
            .per_subject
            .iter()
            .filter(|(_, _, d)| *d == Decision::Ask)
            .filter_map(|(i, section, _)| Some((*section, plan.subjects.get(*i)?.path.clone())))
            .filter(|(section, path)| !judge::always_asks(*section, path))
            .collect();
        match self.policies.add_exact_rules(account, &asked) {
            Ok(n) => format!("added {n} exact allow rule(s)"),
            Err(why) => {
                tracing::error!(error = %why, "could not persist an always rule");
                "could not persist the always rule; approved once".to_owned()
            }
        }
    }
}

/// The answer to one request on the broker's `Decisions` stream: its verdict, or the status it
/// failed with.
pub(super) async fn answer_decision(state: &GateState, asked: pb::DecideCall) -> pb::DecideAnswer {
    use pb::decide_answer::Body as Answer;
    let span = glovebox_telemetry::propagation::message_server_span(
        "glovebox.v1.Gate",
        "Decide",
        &asked.trace,
    );
    let answered = async { state.decide_asked(required(asked.decide, "decide")?).await }
        .instrument(span)
        .await;
    pb::DecideAnswer {
        id: asked.id,
        body: Some(match answered {
            Ok(decided) => Answer::Decided(decided),
            Err(status) => Answer::Error(call_status(&status)),
        }),
    }
}

#[tonic::async_trait]
impl pb::gate_server::Gate for GateService {
    type DecisionsStream = AnswerStream<pb::DecideAnswer>;

    async fn decisions(
        &self,
        request: Request<tonic::Streaming<pb::DecideCall>>,
    ) -> Result<Response<Self::DecisionsStream>, Status> {
        require_peer(&request, &[BROKER])?;
        let state = Arc::clone(&self.0);
        Ok(Response::new(answer_each(
            request.into_inner(),
            self.1.clone(),
            MAX_IN_FLIGHT,
            move |asked| {
                let state = Arc::clone(&state);
                async move { answer_decision(&state, asked).await }
            },
        )))
    }

    type DeliveriesStream = crate::deliveries::Handed;

    /// The broker's stream of answers handed over; it ends when the broker's side does, when
    /// another replaces it, or when the gate stops.
    async fn deliveries(
        &self,
        request: Request<tonic::Streaming<pb::DeliveriesRequest>>,
    ) -> Result<Response<Self::DeliveriesStream>, Status> {
        require_peer(&request, &[BROKER])?;
        let mut incoming = request.into_inner();
        let (serial, handed) = self.0.deliveries.open();
        let (state, mut stopping) = (Arc::clone(&self.0), self.1.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = async { while let Ok(Some(_)) = incoming.message().await {} } => {}
                _ = stopping.wait_for(|stop| *stop) => {}
            }
            state.deliveries.close(serial);
        });
        Ok(Response::new(handed))
    }

    #[tracing::instrument(skip_all, fields(call_id))]
    async fn resolve(
        &self,
        request: Request<ResolveRequest>,
    ) -> Result<Response<ResolveResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let ResolveRequest { call, plan, answer } = request.into_inner();
        let (call, plan) = (required(call, "call")?, required(plan, "plan")?);
        tracing::Span::current().record("call_id", call.call_id.as_str());
        let answer = Answer::try_from(answer).unwrap_or(Answer::Unspecified);
        let mut e = event(Source::Gate, RowKind::Resolve, &call);
        e.subject = crate::redact::subjects_text(&plan.subjects, false);
        let response = match answer {
            Answer::Once | Answer::Always => {
                let judged = self.0.judge(&call, &plan);
                if judged.verdict.decision == Decision::Deny {
                    e.approval = "denied".to_owned();
                    e.verdict = Decision::Deny.as_str().to_owned();
                    e.rule = judged.verdict.rule.clone();
                    e.reason = format!("an approval cannot lift a deny: {}", judged.verdict.reason);
                    ResolveResponse {
                        granted: false,
                        ticket: None,
                        rule: judged.verdict.rule,
                        reason: judged.verdict.reason,
                    }
                } else {
                    let approval = if answer == Answer::Always {
                        "approved_always"
                    } else {
                        "approved"
                    };
                    e.approval = approval.to_owned();
                    e.subject = crate::redact::subjects_text(&plan.subjects, true);
                    if answer == Answer::Always {
                        e.detail = self.0.persist_always(&call.account, &plan, &judged);
                    }
                    ResolveResponse {
                        granted: true,
                        ticket: Some(self.0.sign(&call, &plan, &judged, approval)),
                        rule: "approver".to_owned(),
                        reason: format!("{approval} by the account's approver"),
                    }
                }
            }
            other => {
                let (approval, reason) = match other {
                    Answer::Deny => ("denied", "the approver denied this call"),
                    Answer::Timeout => ("timeout", "the approver did not answer in time"),
                    Answer::NoApprover => {
                        ("no_approver", "no approver is connected for this account")
                    }
                    Answer::Cancelled => {
                        ("cancelled", "the call was withdrawn before it was approved")
                    }
                    _ => ("denied", "the answer was not understood"),
                };
                e.approval = approval.to_owned();
                e.reason = reason.to_owned();
                ResolveResponse {
                    granted: false,
                    ticket: None,
                    rule: "approver".to_owned(),
                    reason: reason.to_owned(),
                }
            }
        };
        self.0.audit(e).await;
        Ok(Response::new(response))
    }

    async fn set_enabled(
        &self,
        request: Request<pb::SetEnabledRequest>,
    ) -> Result<Response<pb::SetEnabledResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let pb::SetEnabledRequest {
            account,
            enabled,
            by,
        } = request.into_inner();
        // Through the broker, only the account's approver switches it (the broker checks the
        // role from the credential); anything else is the administrator, on the admin socket.
        let by = if by == "approver" {
            "approver"
        } else {
            "admin"
        };
        self.0
            .set_enabled(&known_account(&account)?, enabled, by)
            .await?;
        Ok(Response::new(pb::SetEnabledResponse { enabled }))
    }

    async fn resolve_trust(
        &self,
        request: Request<pb::ResolveTrustRequest>,
    ) -> Result<Response<pb::ResolveTrustResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        Ok(Response::new(
            self.0.resolve_trust(request.into_inner()).await?,
        ))
    }

    async fn account_info(
        &self,
        request: Request<AccountInfoRequest>,
    ) -> Result<Response<AccountInfoResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let AccountInfoRequest { account, tools } = request.into_inner();
        if tools.len() > MAX_LISTED_TOOLS || tools.iter().any(|t| t.len() > MAX_TOOL_NAME_BYTES) {
            return Err(Status::invalid_argument(format!(
                "at most {MAX_LISTED_TOOLS} tool names of at most {MAX_TOOL_NAME_BYTES} bytes"
            )));
        }
        let current = self
            .0
            .policies
            .current(&account)
            .ok_or_else(|| Status::not_found("unknown account"))?;
        Ok(Response::new(AccountInfoResponse {
            sandbox_enabled: current.policy.as_ref().is_none_or(|p| p.sandbox_enabled()),
            workdir: self
                .0
                .policies
                .workdir(&account)
                .unwrap_or_default()
                .to_owned(),
            policy_error: current.error.unwrap_or_default(),
            confined: current.policy.as_ref().is_some_and(|p| p.confined()),
            policy_warnings: current
                .policy
                .as_ref()
                .map(|p| p.warnings().to_vec())
                .unwrap_or_default(),
            enabled: self.0.enablement.is_enabled(&account),
            capped_tools: current
                .policy
                .as_ref()
                .map(|p| crate::judge::capped_tools(p))
                .unwrap_or_default(),
            packs_capped: current
                .policy
                .as_ref()
                .is_some_and(|p| p.capped(glovebox_policy::permissions::Capability::NoPacks)),
            denied_tools: match current.policy.as_ref() {
                Some(p) => {
                    let now = Some(crate::policies::now_unix());
                    tools
                        .into_iter()
                        .filter(|t| p.managed_denies_tool(t, now))
                        .collect()
                }
                None => Vec::new(),
            },
            managed_tool_denies: current
                .policy
                .as_ref()
                .map(|p| p.managed_tool_denies())
                .unwrap_or_default(),
        }))
    }

    async fn health(
        &self,
        request: Request<HealthRequest>,
    ) -> Result<Response<HealthResponse>, Status> {
        require_peer(&request, &[BROKER, SUPERVISOR])?;
        let h = self.0.audit.health();
        Ok(Response::new(HealthResponse {
            audit_healthy: h.healthy,
            audit_failures: h.failures,
            audit_rows: h.rows,
            policy_errors: self.0.policies.errors(),
            audit_checkpoint: self.0.audit.newest_checkpoint().unwrap_or_default(),
        }))
    }

    async fn agent_token(
        &self,
        request: Request<pb::AgentTokenRequest>,
    ) -> Result<Response<pb::AgentTokenResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        let token = self.0.agent_token(&r.account, r.uid).await?;
        Ok(Response::new(pb::AgentTokenResponse { token }))
    }

    async fn metrics(
        &self,
        request: Request<glovebox_proto::v1::MetricsRequest>,
    ) -> Result<Response<glovebox_proto::v1::MetricsResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        Ok(Response::new(glovebox_proto::v1::MetricsResponse {
            text: glovebox_telemetry::metrics::render(),
        }))
    }
}
