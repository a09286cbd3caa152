//! Rule management and explain: the `Gate` methods behind `glovebox policy ...`.
//!
//! Reached over the gate's admin socket by the administrator (`service/admin_rpc.rs`), and, for
//! its own account only and without `reset`, by an account's approver through the broker
//! (`service/account_rpc.rs`, the web console). Every change is an audit event (kind `policy`).
//! Explain resolves no path: it judges a subject as the account's executor planned it.

use glovebox_policy::expiry::{Expiry, format_rfc3339};
use glovebox_policy::{Domain, Kind, Policy, RawRule, Section, Verdict, exact_rule};
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
            let e =
                Expiry::parse(&req.expires).map_err(|e| Status::invalid_argument(e.to_string()))?;
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

    /// Turns the sandbox on, or off when `confirm` says the caller means it.
    pub(crate) async fn set_sandbox(
        &self,
        account: &str,
        enabled: bool,
        confirm: bool,
    ) -> Result<pb::PolicyChangeResponse, Status> {
        if !enabled && !confirm {
            return Err(Status::failed_precondition(
                "turning the sandbox off allows everything, the secret floor too: confirm it explicitly",
            ));
        }
        self.set_switch(account, "sandbox", enabled).await
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
            .unwrap_or_else(|| "/".to_owned());
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
            Status::invalid_argument(
                "name a subject: a planned read, write, delete or exec, or a tool",
            )
        })?;
        let (subject, v) = explained(&policy, subject, req.pack.as_ref(), &req.cwd, &workdir, now)?;
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

/// What explain judges and the verdict: a subject as the executor planned it, taken as given
/// (paths must be canonical; a command's `cwd` too, empty for the workdir), or a tool's name.
fn explained(
    policy: &Policy,
    subject: Subject,
    pack: Option<&pb::PackFacts>,
    cwd: &str,
    workdir: &str,
    now: Option<i64>,
) -> Result<(String, Verdict), Status> {
    let planned = match subject {
        Subject::Tool(name) => {
            let v = crate::judge::decide_tool(policy, &name, pack, now);
            return Ok((name, v));
        }
        Subject::Planned(planned) => planned,
    };
    let domain = match pb::Domain::try_from(planned.domain) {
        Ok(pb::Domain::Read) => Domain::Read,
        Ok(pb::Domain::Write) => Domain::Write,
        Ok(pb::Domain::Delete) => Domain::Delete,
        Ok(pb::Domain::Exec) => {
            let cwd = if cwd.is_empty() {
                workdir
            } else {
                canonical(cwd)?
            };
            let v = policy.decide_command_at(&planned.path, cwd, now);
            return Ok((format!("{} (in {cwd})", planned.path), v));
        }
        _ => {
            return Err(Status::invalid_argument(
                "a planned subject to explain is a read, write, delete or exec",
            ));
        }
    };
    let path = canonical(&planned.path)?;
    Ok((path.to_owned(), policy.decide_at(domain, path, now)))
}

/// `path` if it is in canonical form (absolute, no empty, `.` or `..` components), as an
/// executor plans it; explain judges it as given and resolves nothing.
fn canonical(path: &str) -> Result<&str, Status> {
    let components_ok = path.strip_prefix('/').is_some_and(|rest| {
        rest.is_empty() || rest.split('/').all(|c| !matches!(c, "" | "." | ".."))
    });
    if components_ok {
        Ok(path)
    } else {
        Err(Status::invalid_argument(format!(
            "{path:?} is not a canonical path: explain a path as the account's executor plans it"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_policy::{Decision, Inputs, RawPolicy, Source};

    fn policy() -> Policy {
        let raw = RawPolicy::parse(
            "paths:\n  read:\n    allow: ['./**']\n    deny: ['/elsewhere/**']\n\
             delete:\n  allow: ['./link']\ncommands:\n  allow: ['git status']\n",
        )
        .unwrap();
        Policy::compile_layers(&Inputs {
            workdir: "/w".into(),
            protected: Vec::new(),
            roots: Vec::new(),
            managed: Vec::new(),
            account: Source::new("account.yaml", raw, 0),
            project: None,
        })
        .unwrap()
    }

    fn planned(domain: pb::Domain, path: &str) -> Subject {
        Subject::Planned(pb::Subject {
            domain: domain as i32,
            path: path.into(),
            state: None,
        })
    }

    #[test]
    fn a_planned_subject_is_judged_as_given() {
        use pb::Domain as D;
        let p = policy();
        let cases = [
            (
                planned(D::Read, "/w/a.txt"),
                "",
                "/w/a.txt",
                Decision::Allow,
            ),
            (
                planned(D::Read, "/elsewhere/a.txt"),
                "",
                "/elsewhere/a.txt",
                Decision::Deny,
            ),
            (
                planned(D::Delete, "/w/link"),
                "",
                "/w/link",
                Decision::Allow,
            ),
            (
                planned(D::Write, "/w/new.txt"),
                "",
                "/w/new.txt",
                Decision::Ask,
            ),
            (
                planned(D::Exec, "git status"),
                "",
                "git status (in /w)",
                Decision::Allow,
            ),
            (
                planned(D::Exec, "git status"),
                "/w/sub",
                "git status (in /w/sub)",
                Decision::Allow,
            ),
        ];
        for (subject, cwd, shown, decision) in cases {
            let (got, v) = explained(&p, subject, None, cwd, "/w", Some(0)).unwrap();
            assert_eq!((got.as_str(), v.decision), (shown, decision), "{shown}");
        }
        for (subject, cwd) in [
            (planned(D::Read, "a.txt"), ""),
            (planned(D::Read, "/w/sub/../a.txt"), ""),
            (planned(D::Exec, "git status"), "sub"),
            (planned(D::Job, "1"), ""),
            (planned(D::Unspecified, "/w/a.txt"), ""),
        ] {
            let e = explained(&p, subject, None, cwd, "/w", Some(0)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        }
    }

    #[test]
    fn only_canonical_paths_are_explained() {
        for ok in ["/", "/w", "/w/a.txt", "/w/.hidden/x..y"] {
            assert_eq!(canonical(ok).unwrap(), ok);
        }
        for bad in [
            "", "a.txt", "./a", "/w/../x", "/w/./x", "/w//x", "/w/", "w/",
        ] {
            assert_eq!(
                canonical(bad).unwrap_err().code(),
                tonic::Code::InvalidArgument,
                "{bad}"
            );
        }
    }
}
