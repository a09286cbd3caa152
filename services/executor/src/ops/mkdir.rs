//! `file_mkdir`: creates a directory and any missing parents (`mkdir -p`), each made beneath the
//! last without following links; a write of its path. One that exists already is left as it is
//! (`created: false`); anything else there is refused.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::FileMkdirParams;
use glovebox_proto::v1::{Domain, Plan, Subject, TicketBody};
use rustix::fs::FileType;
use serde_json::json;

use crate::approved::{bound_subject, planned_subject};
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::resolve::resolve;

pub fn plan(ctx: &OpContext<'_>, p: &FileMkdirParams) -> Result<Plan, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    Ok(Plan {
        subjects: vec![Subject::new(
            Domain::Write,
            r.path.clone(),
            fsio::observed(&r),
        )],
        content_tag: Vec::new(),
        pack: None,
    })
}

/// What the approver sees: the directory, or that it is already there.
pub fn preview(plan: &Plan) -> Result<(String, bool), OpError> {
    let s = planned_subject(plan)?;
    let exists = s.state.as_ref().is_some_and(|st| st.exists);
    Ok((
        if exists {
            format!("{} exists already: nothing to create\n", s.path)
        } else {
            format!(
                "create the directory {} (and any missing parents)\n",
                s.path
            )
        },
        false,
    ))
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileMkdirParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    let s = bound_subject(ticket, Domain::Write, &r.path)?;
    r.followable(&p.path)?;
    let existed = r.exists;
    let dir = fsio::make_dirs(&s.path, &p.path)?;
    let stat = fsio::fstat(&dir, &p.path)?;
    if fsio::file_type(&stat) != FileType::Directory {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{} exists and is not a directory", p.path),
        ));
    }
    Ok(Done::new(
        &json!({ "path": s.path, "created": !existed }),
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};

    fn mkdir(f: &Fixture, path: &str) -> Result<serde_json::Value, OpError> {
        let p = FileMkdirParams { path: path.into() };
        let planned = plan(&f.ctx(), &p)?;
        execute(&f.ctx(), &p, &ticket_for(&planned)).map(|d| d.value())
    }

    #[test]
    fn makes_missing_parents_and_leaves_an_existing_directory() {
        let f = Fixture::new();
        let made = mkdir(&f, "a/b/c").unwrap();
        assert_eq!(made["created"], true);
        assert!(f.work.join("a/b/c").is_dir());
        assert_eq!(mkdir(&f, "a/b/c").unwrap()["created"], false);
        assert_eq!(mkdir(&f, "a").unwrap()["created"], false);
    }

    #[test]
    fn refuses_a_file_in_the_way_and_never_makes_through_a_link() {
        let f = Fixture::new();
        std::fs::write(f.work.join("file"), "x").unwrap();
        assert_eq!(
            mkdir(&f, "file").unwrap_err().code,
            ErrorCode::InvalidParams
        );
        assert_eq!(
            mkdir(&f, "file/sub").unwrap_err().code,
            ErrorCode::InvalidParams
        );
        // A link planted where a missing parent was planned: the directory is not made through it.
        let p = FileMkdirParams {
            path: "planted/sub".into(),
        };
        let planned = plan(&f.ctx(), &p).unwrap();
        std::fs::create_dir(f.root.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(f.root.join("elsewhere"), f.work.join("planted")).unwrap();
        assert!(execute(&f.ctx(), &p, &ticket_for(&planned)).is_err());
        assert!(!f.root.join("elsewhere/sub").exists());
    }
}
