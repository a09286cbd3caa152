//! `file_roots`: the directories the account may work in and its working directory. The account's
//! own facts (an `account` subject the gate always allows): what a `roots` refusal would tell.

use glovebox_proto::ErrorCode;
use glovebox_proto::v1::{Domain, FileState, Plan, Subject, TicketBody};
use serde_json::json;

use crate::context::{Done, OpContext};
use crate::error::OpError;

/// The subject's name: the fact asked for.
const ROOTS: &str = "roots";

pub fn plan() -> Plan {
    Plan {
        subjects: vec![Subject::new(
            Domain::Account,
            ROOTS.to_owned(),
            FileState::default(),
        )],
        content_tag: Vec::new(),
        pack: None,
    }
}

pub fn execute(ctx: &OpContext<'_>, ticket: &TicketBody) -> Result<Done, OpError> {
    match ticket.subjects.as_slice() {
        [s] if s.domain == Domain::Account as i32 && s.path == ROOTS => {}
        _ => {
            return Err(OpError::new(
                ErrorCode::Changed,
                "the ticket does not name the account's roots",
            ));
        }
    }
    let roots: Vec<String> = ctx
        .jobs
        .roots()
        .iter()
        .map(|r| r.to_string_lossy().into_owned())
        .collect();
    Ok(Done::new(
        &json!({ "workdir": ctx.workdir.to_string_lossy(), "roots": roots }),
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};

    #[test]
    fn names_the_workdir_and_every_root_and_only_on_its_own_ticket() {
        let f = Fixture::new();
        let r = execute(&f.ctx(), &ticket_for(&plan())).unwrap().value();
        assert_eq!(r["workdir"], f.work.to_string_lossy().as_ref());
        let roots = r["roots"].as_array().unwrap();
        assert!(!roots.is_empty(), "{r}");
        let other = Plan {
            subjects: vec![Subject::new(Domain::Job, "*".into(), FileState::default())],
            ..Plan::default()
        };
        assert_eq!(
            execute(&f.ctx(), &ticket_for(&other)).unwrap_err().code,
            ErrorCode::Changed
        );
    }
}
