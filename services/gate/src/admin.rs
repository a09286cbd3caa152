//! Rule management and explain: the `Gate` methods behind `glovebox policy ...`.
//!
//! Reached only over the gate's private socket by the account's user or the administrator; the
//! broker has no code path to any of them. Every change is an audit event (kind `policy`).

use std::path::{Component, Path, PathBuf};

use glovebox_policy::expiry::{Expiry, format_rfc3339};
use glovebox_policy::{Domain, Kind, RawRule, Section, exact_rule};
use glovebox_proto::v1::{self as pb, explain_request::Subject};
use tonic::Status;

use crate::policies::{EditError, now_unix};
use crate::service::GateState;

fn status(e: EditError) -> Status {
    match e {
        EditError::UnknownAccount(_) => Status::not_found(e.to_string()),
        EditError::Invalid(_) => Status::invalid_argument(e.to_string()),
        EditError::File { .. } => Status::failed_precondition(e.to_string()),
    }
}

fn section_kind(section: &str, kind: &str) -> Result<(Section, Kind), Status> {
    let s = Section::parse(section).ok_or_else(|| {
        Status::invalid_argument(format!(
            "unknown section {section:?}: expected paths.read, paths.write, commands, delete or tools"
        ))
    })?;
    let k = Kind::parse(kind).ok_or_else(|| {
        Status::invalid_argument(format!("unknown kind {kind:?}: expected allow or deny"))
    })?;
    Ok((s, k))
}

fn changed(summary: Option<String>) -> pb::PolicyChangeResponse {
    pb::PolicyChangeResponse {
        changed: summary.is_some(),
        summary: summary.unwrap_or_default(),
    }
}

impl GateState {
    pub(crate) async fn list_rules(&self, account: &str) -> Result<pb::ListRulesResponse, Status> {
        let current = self
            .policies
            .current(account)
            .ok_or_else(|| Status::not_found("unknown account"))?;
        self.flush_policy_events().await;
        let now = now_unix();
        let mut rules: Vec<pb::PolicyRule> = glovebox_policy::floor::entries()
            .into_iter()
            .enumerate()
            .map(|(i, e)| pb::PolicyRule {
                layer: "floor".into(),
                kind: "deny".into(),
                index: i as u32,
                pattern: e,
                read_only: true,
                ..Default::default()
            })
            .collect();
        let mut resp = pb::ListRulesResponse {
            workdir: self
                .policies
                .workdir(account)
                .unwrap_or_default()
                .to_owned(),
            error: current.error.unwrap_or_default(),
            sandbox_enabled: true,
            ..Default::default()
        };
        if let Some(p) = current.policy {
            resp.sandbox_enabled = p.sandbox_enabled();
            resp.confined = p.confined();
            resp.caps = p
                .caps()
                .iter()
                .map(|(c, file)| format!("{} ({file})", c.as_str()))
                .collect();
            resp.warnings = p.warnings().to_vec();
            rules.extend(p.rules().map(|r| pb::PolicyRule {
                layer: r.layer.as_str().into(),
                section: r.section.name().into(),
                kind: r.kind.as_str().into(),
                index: r.index as u32,
                pattern: r.pattern.clone(),
                expires: r.expires.map(format_rfc3339).unwrap_or_default(),
                expired: r.expires.is_some_and(|t| now >= t),
                read_only: r.layer != glovebox_policy::Layer::Account,
                file: r.file.clone(),
            }));
        }
        resp.rules = rules;
        Ok(resp)
    }

    pub(crate) async fn add_rule(
        &self,
        req: pb::AddRuleRequest,
    ) -> Result<pb::PolicyChangeResponse, Status> {
        let (section, kind) = section_kind(&req.section, &req.kind)?;
        if req.pattern.is_empty() {
            return Err(Status::invalid_argument("the rule's pattern is empty"));
        }
        let pattern = if req.exact {
            exact_rule(section, &req.pattern)
        } else {
            req.pattern.clone()
        };
        let expires = if req.expires.is_empty() {
            None
        } else {
            let e = Expiry::parse(&req.expires).map_err(Status::invalid_argument)?;
            Some(format_rfc3339(e.resolve(now_unix())))
        };
        let r = self
            .policies
            .add_rule(&req.account, section, kind, RawRule::new(pattern, expires))
            .map_err(status);
        self.flush_policy_events().await;
        Ok(changed(r?))
    }

    pub(crate) async fn revoke_rule(
        &self,
        req: pb::RevokeRuleRequest,
    ) -> Result<pb::PolicyChangeResponse, Status> {
        let (section, kind) = section_kind(&req.section, &req.kind)?;
        let r = self
            .policies
            .revoke_rule(
                &req.account,
                section,
                kind,
                req.index as usize,
                &req.pattern,
            )
            .map_err(status);
        self.flush_policy_events().await;
        Ok(changed(r?))
    }

    pub(crate) async fn reset_rules(
        &self,
        account: &str,
    ) -> Result<pb::PolicyChangeResponse, Status> {
        let r = self.policies.reset_rules(account).map_err(status);
        self.flush_policy_events().await;
        Ok(changed(r?))
    }

    pub(crate) async fn set_switch(
        &self,
        account: &str,
        key: &str,
        value: bool,
    ) -> Result<pb::PolicyChangeResponse, Status> {
        let r = self
            .policies
            .set_switch(account, key, value)
            .map_err(status);
        self.flush_policy_events().await;
        Ok(changed(r?))
    }

    pub(crate) async fn explain(
        &self,
        req: pb::ExplainRequest,
    ) -> Result<pb::ExplainResponse, Status> {
        let current = self
            .policies
            .current(&req.account)
            .ok_or_else(|| Status::not_found("unknown account"))?;
        self.flush_policy_events().await;
        let workdir = self
            .policies
            .workdir(&req.account)
            .unwrap_or("/")
            .to_owned();
        let Some(policy) = current.policy else {
            return Ok(pb::ExplainResponse {
                verdict: pb::Verdict::Deny as i32,
                layer: "default".into(),
                rule: "policy".into(),
                reason: format!(
                    "the account's policy is invalid: {}",
                    current.error.unwrap_or_default()
                ),
                ..Default::default()
            });
        };
        let now = Some(now_unix());
        let subject = req.subject.ok_or_else(|| {
            Status::invalid_argument("name a subject: read, write, delete, exec or tool")
        })?;
        let path = |domain: Domain, p: &str| {
            let canonical = canonical_subject(p, &workdir);
            let v = policy.decide_at(domain, &canonical, now);
            (canonical, v)
        };
        let (subject, v) = match subject {
            Subject::Read(p) => path(Domain::Read, &p),
            Subject::Write(p) => path(Domain::Write, &p),
            Subject::Delete(p) => path(Domain::Delete, &p),
            Subject::Exec(cmd) => {
                let cwd = if req.cwd.is_empty() {
                    workdir.clone()
                } else {
                    canonical_subject(&req.cwd, &workdir)
                };
                let v = policy.decide_command_at(&cmd, &cwd, now);
                (format!("{cmd} (in {cwd})"), v)
            }
            Subject::Tool(name) => {
                let v = policy.decide_tool_at(&name, now);
                (name, v)
            }
        };
        let mut warnings = policy.warnings().to_vec();
        if let Some(e) = current.error {
            warnings.insert(
                0,
                format!("the policy on disk is invalid, the last good one decided: {e}"),
            );
        }
        Ok(pb::ExplainResponse {
            verdict: crate::service::wire_verdict(v.decision) as i32,
            subject,
            layer: v.layer.as_str().into(),
            rule: v.rule,
            reason: v.reason,
            warnings,
        })
    }
}

/// A path made absolute against the workdir and resolved like the executor does: symlinks of
/// the nearest existing ancestor followed, the rest appended.
fn canonical_subject(path: &str, workdir: &str) -> String {
    let joined = if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        Path::new(workdir).join(path)
    };
    let mut missing: Vec<std::ffi::OsString> = Vec::new();
    let mut cur = joined.clone();
    loop {
        if let Ok(c) = std::fs::canonicalize(&cur) {
            let mut out = c;
            for m in missing.iter().rev() {
                out.push(m);
            }
            return lexical(&out);
        }
        match (cur.file_name().map(|n| n.to_owned()), cur.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                cur = parent.to_owned();
            }
            _ => return lexical(&joined),
        }
    }
}

fn lexical(p: &Path) -> String {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out.to_string_lossy().into_owned()
}
