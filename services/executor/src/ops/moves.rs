//! `file_move`: renames an entry (a link itself, never its target) to a new path that must not
//! exist. Both ends are resolved and judged: the source as delete and read, the destination as
//! write. Never a copy: a move across file systems is refused.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::FileMoveParams;
use glovebox_proto::v1::{Domain, Plan, Subject, TicketBody};
use rustix::fs::{OFlags, RenameFlags};
use serde_json::json;

use crate::approved::bound_subjects;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::movable::{open_movable, refuse_trash_ancestor};
use crate::resolve::{resolve, resolve_entry};

pub fn plan(ctx: &OpContext<'_>, p: &FileMoveParams) -> Result<Plan, OpError> {
    let src = resolve_entry(&p.source, ctx.workdir)?;
    let dst = resolve(&p.destination, ctx.workdir)?;
    let src_state = fsio::observed(&src);
    Ok(Plan {
        subjects: vec![
            Subject::new(Domain::Delete, src.path.clone(), src_state.clone()),
            Subject::new(Domain::Read, src.path, src_state),
            Subject::new(Domain::Write, dst.path.clone(), fsio::observed(&dst)),
        ],
        content_tag: Vec::new(),
        pack: None,
    })
}

/// Shows the source's refusals to the approver (they are checked again when the call executes).
pub fn preview(
    ctx: &OpContext<'_>,
    p: &FileMoveParams,
    plan: &Plan,
) -> Result<(String, bool), OpError> {
    let [src, _, dst] = plan.subjects.as_slice() else {
        return Err(OpError::new(
            ErrorCode::Internal,
            "a move plan has three subjects",
        ));
    };
    refuse_trash_ancestor(ctx, &src.path)?;
    open_movable(
        ctx,
        &src.path,
        &p.source,
        &src.state.clone().unwrap_or_default(),
    )?;
    Ok((format!("move {}\n  to {}\n", src.path, dst.path), false))
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileMoveParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let src = resolve_entry(&p.source, ctx.workdir)?;
    let dst = resolve(&p.destination, ctx.workdir)?;
    let bound = bound_subjects(
        ticket,
        &[
            (Domain::Delete, &src.path),
            (Domain::Read, &src.path),
            (Domain::Write, &dst.path),
        ],
    )?;
    let (s, d) = (bound[0], bound[2]);
    src.followable(&p.source)?;
    dst.followable(&p.destination)?;
    if dst.exists || d.state.as_ref().is_some_and(|st| st.exists) {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{} exists; file_move never replaces", p.destination),
        ));
    }
    if glovebox_policy::floor::is_same_or_below(&d.path, &s.path) {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("cannot move {} into itself", p.source),
        ));
    }
    refuse_trash_ancestor(ctx, &s.path)?;
    let expected = s.state.clone().unwrap_or_default();
    let entry = open_movable(ctx, &s.path, &p.source, &expected)?;
    let (dst_parent, dst_name) = fsio::split_parent(&d.path)?;
    let dst_dir = fsio::open_no_links(dst_parent, OFlags::RDONLY | OFlags::DIRECTORY)?;
    rustix::fs::renameat_with(
        &entry.dir,
        entry.name.as_str(),
        &dst_dir,
        dst_name,
        RenameFlags::NOREPLACE,
    )
    .map_err(|e| match e {
        rustix::io::Errno::EXIST => OpError::new(
            ErrorCode::Changed,
            format!("{} was created since it was approved", p.destination),
        ),
        rustix::io::Errno::XDEV => OpError::new(
            ErrorCode::InvalidParams,
            "source and destination are on different file systems; refusing to copy",
        ),
        e => OpError::errno(e, &p.source),
    })?;
    Ok(Done::new(
        &json!({ "source": s.path, "destination": d.path }),
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};
    use std::os::unix::fs::symlink;

    fn run(f: &Fixture, src: &str, dst: &str) -> Result<serde_json::Value, OpError> {
        let p = FileMoveParams {
            source: src.into(),
            destination: dst.into(),
        };
        let plan = plan(&f.ctx(), &p)?;
        execute(&f.ctx(), &p, &ticket_for(&plan)).map(|d| d.value())
    }

    #[test]
    fn moves_and_plans_three_subjects() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a"), "A").unwrap();
        let p = FileMoveParams {
            source: "a".into(),
            destination: "sub/../b".into(),
        };
        std::fs::create_dir(f.work.join("sub")).unwrap();
        let planned = plan(&f.ctx(), &p).unwrap();
        let domains: Vec<i32> = planned.subjects.iter().map(|s| s.domain).collect();
        assert_eq!(
            domains,
            [
                Domain::Delete as i32,
                Domain::Read as i32,
                Domain::Write as i32
            ]
        );
        assert_eq!(planned.subjects[2].path, f.path("b"));
        execute(&f.ctx(), &p, &ticket_for(&planned)).unwrap();
        assert_eq!(std::fs::read_to_string(f.work.join("b")).unwrap(), "A");
        assert!(!f.work.join("a").exists());
    }

    #[test]
    fn never_replaces_and_never_moves_into_itself() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a"), "A").unwrap();
        std::fs::write(f.work.join("b"), "B").unwrap();
        assert!(
            run(&f, "a", "b")
                .unwrap_err()
                .message
                .contains("never replaces")
        );
        std::fs::create_dir(f.work.join("d")).unwrap();
        assert!(
            run(&f, "d", "d/e")
                .unwrap_err()
                .message
                .contains("into itself")
        );
        assert_eq!(std::fs::read_to_string(f.work.join("b")).unwrap(), "B");
    }

    #[test]
    fn a_destination_through_a_link_lands_at_its_target_and_is_judged_there() {
        let f = Fixture::new();
        let outside = f.root.join("outside");
        std::fs::create_dir(&outside).unwrap();
        symlink(&outside, f.work.join("out")).unwrap();
        std::fs::write(f.work.join("a"), "A").unwrap();
        let p = FileMoveParams {
            source: "a".into(),
            destination: "out/a".into(),
        };
        let planned = plan(&f.ctx(), &p).unwrap();
        assert_eq!(
            planned.subjects[2].path,
            outside.join("a").to_str().unwrap()
        );
    }

    #[test]
    fn hard_links_and_floor_trees_are_refused() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a"), "A").unwrap();
        std::fs::hard_link(f.work.join("a"), f.work.join("a2")).unwrap();
        assert!(
            run(&f, "a", "c")
                .unwrap_err()
                .message
                .contains("hard links")
        );
        std::fs::create_dir_all(f.work.join("d/.aws")).unwrap();
        assert_eq!(run(&f, "d", "e").unwrap_err().code, ErrorCode::Denied);
        assert!(f.work.join("d/.aws").exists());
    }
}
