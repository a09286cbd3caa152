//! `file_delete`: moves an entry (a file, a directory, or a link itself) to the account's trash;
//! never a permanent delete. A hard-linked file, or a directory holding a floor entry or a
//! hard-linked file anywhere inside it, is refused.

use glovebox_proto::tools::FileDeleteParams;
use glovebox_proto::v1::{Domain, Plan, Subject, TicketBody};
use rustix::fs::FileType;
use serde_json::json;

use crate::approved::{bound_subject, planned_subject};
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::movable::{open_movable, refuse_trash_ancestor};
use crate::resolve::resolve_entry;

pub fn plan(ctx: &OpContext<'_>, p: &FileDeleteParams) -> Result<Plan, OpError> {
    let r = resolve_entry(&p.path, ctx.workdir)?;
    Ok(Plan {
        subjects: vec![Subject::new(
            Domain::Delete,
            r.path.clone(),
            fsio::observed(&r),
        )],
        content_tag: Vec::new(),
        pack: None,
    })
}

/// Shows the refusals to the approver (they are checked again when the call executes).
pub fn preview(
    ctx: &OpContext<'_>,
    p: &FileDeleteParams,
    plan: &Plan,
) -> Result<(String, bool), OpError> {
    let s = planned_subject(plan)?;
    refuse_trash_ancestor(ctx, &s.path)?;
    open_movable(ctx, &s.path, &p.path, &s.state.clone().unwrap_or_default())?;
    Ok((
        format!(
            "move to the trash ({}): {}\n",
            ctx.trash_dir.display(),
            s.path
        ),
        false,
    ))
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileDeleteParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let r = resolve_entry(&p.path, ctx.workdir)?;
    let s = bound_subject(ticket, Domain::Delete, &r.path)?;
    r.followable(&p.path)?;
    refuse_trash_ancestor(ctx, &s.path)?;
    let expected = s.state.clone().unwrap_or_default();
    let entry = open_movable(ctx, &s.path, &p.path, &expected)?;
    let trashed = crate::trash::put(ctx.trash_dir, &entry.dir, &entry.name, &s.path)?;
    let kind = match entry.kind {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    };
    Ok(Done::new(
        &json!({
            "path": s.path,
            "type": kind,
            "trashed_as": ctx.trash_dir.join(&trashed.file).to_string_lossy(),
            "trash_info": ctx.trash_dir.join(&trashed.info).to_string_lossy(),
        }),
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};
    use glovebox_proto::ErrorCode;
    use std::os::unix::fs::symlink;

    fn run(f: &Fixture, path: &str) -> Result<serde_json::Value, OpError> {
        let p = FileDeleteParams { path: path.into() };
        let plan = plan(&f.ctx(), &p)?;
        execute(&f.ctx(), &p, &ticket_for(&plan)).map(|d| d.value())
    }

    #[test]
    fn a_file_goes_to_the_trash_with_its_info() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "A").unwrap();
        let r = run(&f, "a.txt").unwrap();
        assert!(!f.work.join("a.txt").exists());
        assert_eq!(
            std::fs::read_to_string(f.trash.join("files/a.txt")).unwrap(),
            "A"
        );
        let info = std::fs::read_to_string(f.trash.join("info/a.txt.trashinfo")).unwrap();
        assert!(
            info.starts_with(&format!("[Trash Info]\nPath={}\n", f.path("a.txt"))),
            "{info}"
        );
        assert_eq!(r["type"], "file");
    }

    #[test]
    fn a_link_is_trashed_not_its_target() {
        let f = Fixture::new();
        std::fs::write(f.root.join("target.txt"), "T").unwrap();
        symlink(f.root.join("target.txt"), f.work.join("l")).unwrap();
        assert_eq!(run(&f, "l").unwrap()["type"], "symlink");
        assert_eq!(
            std::fs::read_to_string(f.root.join("target.txt")).unwrap(),
            "T"
        );
        assert!(
            std::fs::symlink_metadata(f.trash.join("files/l"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn refusals_leave_everything_in_place() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("d/deep/.ssh")).unwrap();
        std::fs::write(f.work.join("d/deep/.ssh/id_rsa"), "K").unwrap();
        let e = run(&f, "d").unwrap_err();
        assert_eq!(e.code, ErrorCode::Denied);
        assert!(e.message.contains(".ssh"), "{}", e.message);
        assert!(f.work.join("d/deep/.ssh/id_rsa").exists());

        std::fs::create_dir_all(f.work.join("h")).unwrap();
        std::fs::write(f.work.join("h/x"), "X").unwrap();
        std::fs::hard_link(f.work.join("h/x"), f.root.join("elsewhere")).unwrap();
        assert!(run(&f, "h").unwrap_err().message.contains("hard links"));
        assert!(run(&f, "h/x").unwrap_err().message.contains("hard links"));
        assert!(f.work.join("h/x").exists());
    }

    #[test]
    fn a_swapped_entry_is_refused() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "A").unwrap();
        let p = FileDeleteParams {
            path: "a.txt".into(),
        };
        let planned = plan(&f.ctx(), &p).unwrap();
        std::fs::write(f.work.join("b.txt"), "B").unwrap();
        std::fs::rename(f.work.join("b.txt"), f.work.join("a.txt")).unwrap();
        let e = execute(&f.ctx(), &p, &ticket_for(&planned)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Changed);
        assert!(f.work.join("a.txt").exists());
    }

    #[test]
    fn the_trash_itself_is_refused() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.root.join("home")).unwrap();
        // before the trash exists: refused, and the preview does not create it
        let p = FileDeleteParams {
            path: f.root.join("home").to_str().unwrap().into(),
        };
        let planned = plan(&f.ctx(), &p).unwrap();
        let e = preview(&f.ctx(), &p, &planned).unwrap_err();
        assert!(e.message.contains("holds the trash"), "{}", e.message);
        assert!(!f.trash.exists());
        std::fs::create_dir_all(&f.trash).unwrap();
        let e = run(&f, f.root.join("home").to_str().unwrap()).unwrap_err();
        assert!(e.message.contains("holds the trash"), "{}", e.message);
        assert!(f.trash.exists());
    }
}
