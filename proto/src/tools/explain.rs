//! What `explain` judges, for both of its clients (`glovebox policy explain` and the approver's
//! `manage` `explain`): the call a real agent would make to touch a subject, which the account's
//! executor plans exactly as it plans an agent's, and the one subject of that plan the gate is
//! asked to explain. Pure: nothing here resolves a path.

use serde_json::{Value, json};

use super::Tool;
use crate::v1 as pb;

/// What kind of subject is explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExplainDomain {
    Read,
    Write,
    Delete,
    Exec,
    /// A tool's name, which needs no plan.
    Tool,
}

impl ExplainDomain {
    /// `read`, `write`, `delete`, `exec` or `tool`.
    pub fn parse(s: &str) -> Option<ExplainDomain> {
        Some(match s {
            "read" => ExplainDomain::Read,
            "write" => ExplainDomain::Write,
            "delete" => ExplainDomain::Delete,
            "exec" => ExplainDomain::Exec,
            "tool" => ExplainDomain::Tool,
            _ => return None,
        })
    }
}

/// The call whose plan is explained for `subject` (a path, or a command run in `cwd`); `None`
/// for a tool name.
pub fn equivalent_call(
    domain: ExplainDomain,
    subject: &str,
    cwd: Option<&str>,
) -> Option<(Tool, Value)> {
    Some(match domain {
        ExplainDomain::Read => (Tool::FileRead, json!({ "path": subject })),
        ExplainDomain::Write => (Tool::FileWrite, json!({ "path": subject, "content": "" })),
        ExplainDomain::Delete => (Tool::FileDelete, json!({ "path": subject })),
        ExplainDomain::Exec => {
            let mut params = json!({ "command": subject });
            if let Some(cwd) = cwd {
                params["cwd"] = json!(cwd);
            }
            (Tool::ExecRun, params)
        }
        ExplainDomain::Tool => return None,
    })
}

/// What the gate is asked to explain from a plan: its one path subject, or its command with the
/// working directory planned for it. What the executor observed of the subject stays out.
pub fn explained_subject(plan: &pb::Plan) -> Result<(pb::Subject, String), &'static str> {
    use pb::Domain as D;
    let domain = |s: &pb::Subject| D::try_from(s.domain).ok();
    let bare = |s: &pb::Subject| pb::Subject {
        domain: s.domain,
        path: s.path.clone(),
        state: None,
    };
    match plan.subjects.as_slice() {
        [s] if matches!(domain(s), Some(D::Read | D::Write | D::Delete)) => {
            Ok((bare(s), String::new()))
        }
        [command, cwd] if domain(command) == Some(D::Exec) && domain(cwd) == Some(D::Read) => {
            Ok((bare(command), cwd.path.clone()))
        }
        _ => Err("the executor's plan names neither one path nor one command"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_subject_is_planned_as_the_call_that_would_touch_it() {
        use ExplainDomain as E;
        let call = |d, s, cwd| equivalent_call(d, s, cwd);
        assert_eq!(
            call(E::Read, "a/../b", None),
            Some((Tool::FileRead, json!({"path": "a/../b"})))
        );
        assert_eq!(
            call(E::Write, "new.txt", None),
            Some((Tool::FileWrite, json!({"path": "new.txt", "content": ""})))
        );
        assert_eq!(
            call(E::Delete, "link", None),
            Some((Tool::FileDelete, json!({"path": "link"})))
        );
        assert_eq!(
            call(E::Exec, "git status", None),
            Some((Tool::ExecRun, json!({"command": "git status"})))
        );
        assert_eq!(
            call(E::Exec, "ls", Some("sub")),
            Some((Tool::ExecRun, json!({"command": "ls", "cwd": "sub"})))
        );
        assert_eq!(call(E::Tool, "client__x", None), None);
        assert_eq!(ExplainDomain::parse("exec"), Some(E::Exec));
        assert_eq!(ExplainDomain::parse("job"), None);
    }

    fn subject(domain: pb::Domain, path: &str) -> pb::Subject {
        pb::Subject {
            domain: domain as i32,
            path: path.into(),
            state: Some(pb::FileState {
                exists: true,
                ino: 7,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_gate_is_sent_the_planned_subject_without_what_was_observed() {
        use pb::Domain as D;
        let plan = |subjects| pb::Plan {
            subjects,
            content_tag: Vec::new(),
            pack: None,
        };
        let (s, cwd) = explained_subject(&plan(vec![subject(D::Delete, "/w/link")])).unwrap();
        assert_eq!(
            (s.domain, s.path.as_str(), s.state, cwd.as_str()),
            (D::Delete as i32, "/w/link", None, "")
        );
        let (s, cwd) = explained_subject(&plan(vec![
            subject(D::Exec, "git status"),
            subject(D::Read, "/w/sub"),
        ]))
        .unwrap();
        assert_eq!(
            (s.domain, s.path.as_str(), cwd.as_str()),
            (D::Exec as i32, "git status", "/w/sub")
        );
        for bad in [
            vec![],
            vec![subject(D::Job, "1")],
            vec![subject(D::Read, "/a"), subject(D::Read, "/b")],
            vec![
                subject(D::Delete, "/a"),
                subject(D::Read, "/a"),
                subject(D::Write, "/b"),
            ],
        ] {
            assert!(explained_subject(&plan(bad)).is_err());
        }
    }
}
