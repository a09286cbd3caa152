//! Subjects, from plan to execution: how a plan names what a call touches ([`subject`],
//! [`read_plan`]), how a preview finds it again ([`planned_subject`]), and how an executed call
//! binds the ticket's subjects to what its paths resolve to now ([`bound_subject`],
//! [`bound_subjects`]) and opens exactly what was approved ([`open_approved_read`],
//! [`open_approved_file`]).

use std::os::fd::OwnedFd;

use glovebox_proto::ErrorCode;
use glovebox_proto::v1::{Domain, FileState, Plan, Subject, TicketBody};
use rustix::fs::{FileType, OFlags, Stat};

use crate::context::OpContext;
use crate::error::OpError;
use crate::fsio;
use crate::resolve::{Resolved, resolve};

/// The plan of a call that only reads `path`: one read subject, resolved, identity only. Whether
/// the file exists and what it is are reported after the gate decided, so a denied path cannot be
/// probed for existence.
pub fn read_plan(ctx: &OpContext<'_>, path: &str) -> Result<Plan, OpError> {
    let r = resolve(path, ctx.workdir)?;
    Ok(Plan {
        subjects: vec![Subject::new(
            Domain::Read,
            r.path.clone(),
            fsio::observed(&r),
        )],
        content_tag: Vec::new(),
        pack: None,
    })
}

/// Most path arguments of one pack tool call this executor resolves.
pub const MAX_PACK_PATHS: usize = 64;

/// The subjects of a pack tool call's path arguments: each path resolved like any other (relative
/// ones against `base`, the pack's working directory, itself resolved against the workdir), in
/// the read or write domain it came with. The executor never acts on them: the pack's server
/// does, inside its own Landlock domain.
pub fn pack_paths_plan(
    ctx: &OpContext<'_>,
    base: &str,
    paths: &[Subject],
) -> Result<Plan, OpError> {
    if paths.len() > MAX_PACK_PATHS {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("more than {MAX_PACK_PATHS} path arguments"),
        ));
    }
    let base = if base.is_empty() {
        ctx.workdir.to_owned()
    } else {
        std::path::PathBuf::from(resolve(base, ctx.workdir)?.path)
    };
    let mut subjects = Vec::new();
    for p in paths {
        let domain = match Domain::try_from(p.domain) {
            Ok(d @ (Domain::Read | Domain::Write)) => d,
            _ => {
                return Err(OpError::new(
                    ErrorCode::InvalidParams,
                    "a path argument is judged as a read or a write",
                ));
            }
        };
        let r = resolve(&p.path, &base)?;
        subjects.push(Subject {
            domain: domain as i32,
            path: r.path,
            state: None,
        });
    }
    Ok(Plan {
        subjects,
        content_tag: Vec::new(),
        pack: None,
    })
}

/// The one subject of a plan this executor made for a single-path tool (preview gets the plan
/// back from the broker).
pub fn planned_subject(plan: &Plan) -> Result<&Subject, OpError> {
    match plan.subjects.as_slice() {
        [s] => Ok(s),
        _ => Err(OpError::new(
            ErrorCode::Internal,
            "the plan does not have exactly one subject",
        )),
    }
}

/// The ticket's one subject, checked against the path this call resolves to now.
pub fn bound_subject<'t>(
    ticket: &'t TicketBody,
    domain: Domain,
    resolved: &str,
) -> Result<&'t Subject, OpError> {
    let [s] = bound_subjects(ticket, &[(domain, resolved)])?[..] else {
        return Err(not_approved());
    };
    Ok(s)
}

/// The ticket's subjects, checked one by one (domain and path, in order) against what this call
/// resolves to now.
pub fn bound_subjects<'t>(
    ticket: &'t TicketBody,
    wanted: &[(Domain, &str)],
) -> Result<Vec<&'t Subject>, OpError> {
    if ticket.subjects.len() != wanted.len() {
        return Err(not_approved());
    }
    ticket
        .subjects
        .iter()
        .zip(wanted)
        .map(|(s, (domain, path))| {
            if s.domain == *domain as i32 && s.path == *path {
                Ok(s)
            } else {
                Err(not_approved())
            }
        })
        .collect()
}

fn not_approved() -> OpError {
    OpError::new(
        ErrorCode::Changed,
        "the path no longer resolves to what was approved",
    )
}

/// Re-resolves `path`, checks it is the ticket's one read subject, and opens it without following
/// links; the opened object must be the one the ticket names. Returns (canonical path, fd, stat).
pub fn open_approved_read(
    ctx: &OpContext<'_>,
    path: &str,
    ticket: &TicketBody,
) -> Result<(String, OwnedFd, Stat), OpError> {
    open_planned_read(ctx, path, ticket).map(|(canonical, fd, stat, _)| (canonical, fd, stat))
}

/// [`open_approved_read`] of the directory at the top of a walk (`file_find`, `file_tree`):
/// anything else is refused. Returns (canonical path, stat).
pub fn open_approved_dir(
    ctx: &OpContext<'_>,
    path: &str,
    ticket: &TicketBody,
) -> Result<(String, Stat), OpError> {
    let (root, _fd, stat) = open_approved_read(ctx, path, ticket)?;
    if fsio::file_type(&stat) != FileType::Directory {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{path} is not a directory"),
        ));
    }
    Ok((root, stat))
}

/// [`open_approved_read`], also returning the state the plan observed.
pub fn open_planned_read(
    ctx: &OpContext<'_>,
    path: &str,
    ticket: &TicketBody,
) -> Result<(String, OwnedFd, Stat, FileState), OpError> {
    open_planned(ctx, path, ticket, OFlags::RDONLY)
}

/// [`open_planned_read`] opening with `flags` (`O_PATH` to look at an object without opening
/// what it is: a device, a socket).
pub fn open_planned(
    ctx: &OpContext<'_>,
    path: &str,
    ticket: &TicketBody,
    flags: OFlags,
) -> Result<(String, OwnedFd, Stat, FileState), OpError> {
    let r = resolve(path, ctx.workdir)?;
    let s = bound_subject(ticket, Domain::Read, &r.path)?;
    let (fd, stat, expected) = open_subject(&r, s, path, flags)?;
    Ok((s.path.clone(), fd, stat, expected))
}

/// Opens what `s`, a ticket's subject that `r` (the path `shown`, resolved now) was bound to,
/// names: refused if the path cannot be followed, nothing was there when planned, or the object
/// is not the one planned. Returns it with its status and the planned state.
pub fn open_subject(
    r: &Resolved,
    s: &Subject,
    shown: &str,
    flags: OFlags,
) -> Result<(OwnedFd, Stat, FileState), OpError> {
    r.followable(shown)?;
    let expected = s.state.clone().unwrap_or_default();
    if !expected.exists {
        return Err(OpError::new(
            ErrorCode::NotFound,
            format!("{shown}: not found"),
        ));
    }
    let fd = fsio::open_no_links(&s.path, flags)?;
    let stat = fsio::fstat(&fd, shown)?;
    fsio::check_identity(&stat, &expected, shown)?;
    Ok((fd, stat, expected))
}

/// [`open_approved_read`] for the ops that read one file's content (`file_read`, `file_count`,
/// `file_head_tail`): the object must be a regular file with one name.
pub fn open_approved_file(
    ctx: &OpContext<'_>,
    path: &str,
    ticket: &TicketBody,
) -> Result<(String, OwnedFd, Stat), OpError> {
    let (canonical, fd, stat, planned) = open_planned_read(ctx, path, ticket)?;
    check_one_file(&stat, &planned, path)?;
    Ok((canonical, fd, stat))
}

/// Refuses, for a read of content, anything but a regular file that has (and had when planned)
/// one name.
pub fn check_one_file(stat: &Stat, planned: &FileState, shown: &str) -> Result<(), OpError> {
    let wrong_type =
        |what: &str| OpError::new(ErrorCode::InvalidParams, format!("{shown} is {what}"));
    match fsio::file_type(stat) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(wrong_type("a directory; use file_list")),
        _ => return Err(wrong_type("not a regular file")),
    }
    fsio::refuse_other_names(stat, planned.links, shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};

    #[test]
    fn only_a_regular_file_with_one_name_is_opened_for_its_content() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("dir")).unwrap();
        crate::testing::make_fifo(&f.work.join("fifo"));
        std::fs::write(f.work.join("linked"), "x").unwrap();
        std::fs::hard_link(f.work.join("linked"), f.root.join("other-name")).unwrap();
        std::fs::write(f.work.join("plain"), "x").unwrap();
        let open = |name: &str| {
            let ticket = ticket_for(&read_plan(&f.ctx(), name).unwrap());
            open_approved_file(&f.ctx(), name, &ticket).map(|(path, _, _)| path)
        };
        for (name, code) in [
            ("dir", ErrorCode::InvalidParams),
            ("fifo", ErrorCode::InvalidParams),
            ("linked", ErrorCode::Denied),
        ] {
            assert_eq!(open(name).unwrap_err().code, code, "{name}");
        }
        assert_eq!(open("plain").unwrap(), f.path("plain"));
    }

    /// A job swapping a hard link to a denied file in and out under the allowed name: the plan
    /// saw the denied file's inode with two names; once the other name is gone again the opened
    /// file has one name, and is still refused.
    #[test]
    fn a_file_with_other_names_when_planned_is_refused_with_one_name_when_opened() {
        let f = Fixture::new();
        std::fs::write(f.work.join("secret"), "denied content").unwrap();
        std::fs::hard_link(f.work.join("secret"), f.work.join("allowed")).unwrap();
        let ticket = ticket_for(&read_plan(&f.ctx(), "allowed").unwrap());
        std::fs::remove_file(f.work.join("secret")).unwrap();
        let e = open_approved_file(&f.ctx(), "allowed", &ticket).unwrap_err();
        assert_eq!(e.code, ErrorCode::Denied, "{e:?}");
        // A plan made now, of the file with its one name, opens it.
        let ticket = ticket_for(&read_plan(&f.ctx(), "allowed").unwrap());
        assert!(open_approved_file(&f.ctx(), "allowed", &ticket).is_ok());
    }

    #[test]
    fn a_ticket_binds_its_subjects_in_order() {
        let f = Fixture::new();
        let a = f.path("a");
        let b = f.path("b");
        let mut ticket = ticket_for(&Plan::default());
        ticket.subjects = vec![
            Subject::new(Domain::Delete, a.clone(), FileState::default()),
            Subject::new(Domain::Write, b.clone(), FileState::default()),
        ];
        assert!(bound_subjects(&ticket, &[(Domain::Delete, &a), (Domain::Write, &b)]).is_ok());
        for wanted in [
            vec![(Domain::Write, b.as_str()), (Domain::Delete, a.as_str())],
            vec![(Domain::Delete, a.as_str()), (Domain::Read, b.as_str())],
            vec![(Domain::Delete, a.as_str())],
        ] {
            let e = bound_subjects(&ticket, &wanted).unwrap_err();
            assert_eq!(e.code, ErrorCode::Changed, "{wanted:?}");
        }
        assert_eq!(
            bound_subject(&ticket, Domain::Delete, &a).unwrap_err().code,
            ErrorCode::Changed
        );
    }

    #[test]
    fn pack_path_arguments_resolve_against_the_packs_directory() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("sub")).unwrap();
        std::os::unix::fs::symlink(f.root.join("state"), f.work.join("sub/link")).unwrap();
        let arg = |domain: Domain, path: &str| Subject {
            domain: domain as i32,
            path: path.to_owned(),
            state: None,
        };
        let plan = pack_paths_plan(
            &f.ctx(),
            &f.path("sub"),
            &[
                arg(Domain::Read, "a.txt"),
                arg(Domain::Write, "../.env"),
                arg(Domain::Read, "link/x"),
            ],
        )
        .unwrap();
        let got: Vec<(i32, String)> = plan
            .subjects
            .iter()
            .map(|s| (s.domain, s.path.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (Domain::Read as i32, f.path("sub/a.txt")),
                (Domain::Write as i32, f.path(".env")),
                // A link is judged at its target.
                (
                    Domain::Read as i32,
                    f.root.join("state/x").display().to_string()
                ),
            ]
        );
        let relative_to_workdir = pack_paths_plan(&f.ctx(), "", &[arg(Domain::Read, "a")]).unwrap();
        assert_eq!(relative_to_workdir.subjects[0].path, f.path("a"));
        for bad in [
            vec![arg(Domain::Exec, "a")],
            vec![arg(Domain::Read, "")],
            vec![arg(Domain::Read, "a\0b")],
            (0..=MAX_PACK_PATHS)
                .map(|_| arg(Domain::Read, "a"))
                .collect(),
        ] {
            assert!(pack_paths_plan(&f.ctx(), "", &bad).is_err(), "{bad:?}");
        }
    }
}
