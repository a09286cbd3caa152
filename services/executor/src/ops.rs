//! The operations an executor performs. The set is closed: each tool is one file under `ops/`,
//! with the same three steps: plan (resolve subjects), preview (what the approver sees) and
//! execute (act on exactly what the ticket names).

pub mod count;
pub mod delete;
pub mod edit;
pub mod exec;
pub mod find;
pub mod grep;
pub mod head_tail;
pub mod list;
pub mod moves;
pub mod read;
pub mod write;

use std::path::Path;

use glovebox_proto::tools::ToolParams;
use glovebox_proto::v1::{Plan, TicketBody};

use crate::error::OpError;

/// What an operation needs to know about the account it runs for.
#[derive(Debug, Clone)]
pub struct OpContext<'a> {
    pub workdir: &'a Path,
    /// Canonical directories on the floor (hidden from listings).
    pub protected: &'a [String],
    /// This account's key: tags content so plans do not carry plain hashes.
    pub key: &'a glovebox_ticket::Key,
    /// This account's exec jobs.
    pub jobs: &'a crate::jobs::JobTable,
    /// The account's trash (freedesktop layout: `files/` and `info/`).
    pub trash_dir: &'a Path,
    /// The account's read denies, as the ticket carries them (listings and searches only).
    pub denied: Option<&'a globset::GlobSet>,
}

/// Why an entry met while listing or walking a tree is left out, or `None` to show it: entries on
/// the floor, and entries the account's policy denies reading (from the ticket). Hidden entries
/// are never opened.
pub fn hidden(ctx: &OpContext<'_>, canonical: &str) -> Option<String> {
    if let Some(hit) = glovebox_policy::floor::check(canonical, ctx.protected) {
        return Some(hit.rule());
    }
    if ctx.denied.is_some_and(|set| set.is_match(canonical)) {
        return Some("policy: read denied".to_owned());
    }
    None
}

/// Compiles the globs a ticket says to hide; a glob that does not compile hides everything
/// (fail closed).
pub fn denied_set(globs: &[String]) -> globset::GlobSet {
    let mut builder = globset::GlobSetBuilder::new();
    for g in globs {
        match glovebox_policy::build_glob(g) {
            Ok(glob) => {
                builder.add(glob);
            }
            Err(_) => {
                if let Ok(all) = glovebox_policy::build_glob("/**") {
                    builder.add(all);
                }
            }
        }
    }
    builder.build().unwrap_or_else(|_| {
        let mut all = globset::GlobSetBuilder::new();
        if let Ok(g) = globset::Glob::new("**") {
            all.add(g);
        }
        all.build().unwrap_or_default()
    })
}

/// Resolves a call's subjects.
pub fn plan(ctx: &OpContext<'_>, params: &ToolParams) -> Result<Plan, OpError> {
    match params {
        ToolParams::FileRead(p) => read_plan(ctx, &p.path),
        ToolParams::FileList(p) => list::plan(ctx, p),
        ToolParams::FileWrite(p) => write::plan(ctx, p),
        ToolParams::ExecRun(p) => exec::plan_run(ctx, p),
        ToolParams::ExecStatus(p) | ToolParams::ExecKill(p) => Ok(exec::plan_job(&p.job_id)),
        ToolParams::ExecTail(p) => Ok(exec::plan_job(&p.job_id)),
        ToolParams::ExecStat(_) => Ok(exec::plan_stat()),
        ToolParams::FileEdit(p) => edit::plan(ctx, p),
        ToolParams::FileGrep(p) => read_plan(ctx, &p.path),
        ToolParams::FileFind(p) => read_plan(ctx, &p.path),
        ToolParams::FileCount(p) => read_plan(ctx, &p.path),
        ToolParams::FileHeadTail(p) => read_plan(ctx, &p.path),
        ToolParams::FileDelete(p) => delete::plan(ctx, p),
        ToolParams::FileMove(p) => moves::plan(ctx, p),
    }
}

/// Renders what the approver sees for a planned call. The approver is asked whatever the preview
/// finds: a call that would fail (nothing there, not a regular file, hard links, an edit that does
/// not apply, ...) is shown with the reason, and fails only if it is approved. Failing it here would
/// tell the caller about a path — its existence, type or content — before anyone allowed it.
pub fn preview(ctx: &OpContext<'_>, params: &ToolParams, plan: &Plan) -> (String, bool) {
    preview_or_failure(ctx, params, plan).unwrap_or_else(|e| {
        (
            format!(
                "if approved, this call fails as things stand: {}: {}\n",
                e.code.as_str(),
                e.message
            ),
            false,
        )
    })
}

fn preview_or_failure(
    ctx: &OpContext<'_>,
    params: &ToolParams,
    plan: &Plan,
) -> Result<(String, bool), OpError> {
    match params {
        ToolParams::FileWrite(p) => write::preview(ctx, p, plan),
        ToolParams::FileEdit(p) => edit::preview(ctx, p, plan),
        ToolParams::FileDelete(p) => delete::preview(ctx, p, plan),
        ToolParams::FileMove(p) => moves::preview(ctx, p, plan),
        ToolParams::ExecRun(p) => Ok(exec::preview_run(p, plan)),
        ToolParams::FileRead(_)
        | ToolParams::FileList(_)
        | ToolParams::FileGrep(_)
        | ToolParams::FileFind(_)
        | ToolParams::FileCount(_)
        | ToolParams::FileHeadTail(_)
        | ToolParams::ExecStatus(_)
        | ToolParams::ExecTail(_)
        | ToolParams::ExecKill(_)
        | ToolParams::ExecStat(_) => Ok((String::new(), false)),
    }
}

/// The outcome of an executed operation: its JSON result and the bytes it moved.
#[derive(Debug)]
pub struct Done {
    pub result: serde_json::Value,
    pub bytes: u64,
}

/// Acts on a verified ticket.
pub fn execute(
    ctx: &OpContext<'_>,
    params: &ToolParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    match params {
        ToolParams::FileRead(p) => read::execute(ctx, p, ticket),
        ToolParams::FileList(p) => list::execute(ctx, p, ticket),
        ToolParams::FileWrite(p) => write::execute(ctx, p, ticket),
        ToolParams::ExecRun(p) => exec::execute_run(ctx, p, ticket),
        ToolParams::ExecStatus(p) => exec::execute_status(ctx, p, ticket),
        ToolParams::ExecTail(p) => exec::execute_tail(ctx, p, ticket),
        ToolParams::ExecKill(p) => exec::execute_kill(ctx, p, ticket),
        ToolParams::ExecStat(_) => exec::execute_stat(ctx, ticket),
        ToolParams::FileEdit(p) => edit::execute(ctx, p, ticket),
        ToolParams::FileGrep(p) => grep::execute(ctx, p, ticket),
        ToolParams::FileFind(p) => find::execute(ctx, p, ticket),
        ToolParams::FileCount(p) => count::execute(ctx, p, ticket),
        ToolParams::FileHeadTail(p) => head_tail::execute(ctx, p, ticket),
        ToolParams::FileDelete(p) => delete::execute(ctx, p, ticket),
        ToolParams::FileMove(p) => moves::execute(ctx, p, ticket),
    }
}

/// What the audit may record about a call's parameters beyond its subjects: never contents, and
/// for searches only the pattern's kind, length and flags.
pub fn audit_detail(params: &ToolParams) -> String {
    match params {
        ToolParams::FileGrep(p) => {
            let mut flags = Vec::new();
            for (on, name) in [
                (p.case_insensitive, "case_insensitive"),
                (p.hidden, "hidden"),
                (p.no_ignore, "no_ignore"),
            ] {
                if on {
                    flags.push(name);
                }
            }
            format!(
                "pattern: {}, {} bytes; globs: {}; flags: {}",
                if p.literal { "literal" } else { "regex" },
                p.pattern.len(),
                p.globs.len(),
                if flags.is_empty() {
                    "none".to_owned()
                } else {
                    flags.join(",")
                }
            )
        }
        ToolParams::FileFind(p) => format!("name globs: {}", p.names.len()),
        ToolParams::FileEdit(p) => format!(
            "replace {} bytes with {} bytes{}",
            p.old_string.len(),
            p.new_string.len(),
            if p.replace_all {
                ", every occurrence"
            } else {
                ""
            }
        ),
        _ => String::new(),
    }
}

/// The plan of a call that only reads `path`: one read subject, resolved, identity only. Whether
/// the file exists and what it is are reported after the gate decided, so a denied path cannot be
/// probed for existence.
pub fn read_plan(ctx: &OpContext<'_>, path: &str) -> Result<Plan, OpError> {
    let r = crate::resolve::resolve(path, ctx.workdir)?;
    Ok(Plan {
        subjects: vec![subject(
            glovebox_proto::v1::Domain::Read,
            r.path.clone(),
            read::observed(&r),
        )],
        content_tag: Vec::new(),
    })
}

/// The one subject of a plan this executor made for a single-path tool (preview gets the plan
/// back from the broker).
pub fn planned_subject(plan: &Plan) -> Result<&glovebox_proto::v1::Subject, OpError> {
    match plan.subjects.as_slice() {
        [s] => Ok(s),
        _ => Err(OpError::new(
            glovebox_proto::ErrorCode::Internal,
            "the plan does not have exactly one subject",
        )),
    }
}

/// The ticket's one subject, checked against the path this call resolves to now.
pub fn bound_subject<'t>(
    ticket: &'t TicketBody,
    domain: glovebox_proto::v1::Domain,
    resolved: &str,
) -> Result<&'t glovebox_proto::v1::Subject, OpError> {
    let [s] = bound_subjects(ticket, &[(domain, resolved)])?[..] else {
        return Err(not_approved());
    };
    Ok(s)
}

/// The ticket's subjects, checked one by one (domain and path, in order) against what this call
/// resolves to now.
pub fn bound_subjects<'t>(
    ticket: &'t TicketBody,
    wanted: &[(glovebox_proto::v1::Domain, &str)],
) -> Result<Vec<&'t glovebox_proto::v1::Subject>, OpError> {
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
        glovebox_proto::ErrorCode::Changed,
        "the path no longer resolves to what was approved",
    )
}

/// A subject for `path` in `domain` with the given state.
pub fn subject(
    domain: glovebox_proto::v1::Domain,
    path: String,
    state: glovebox_proto::v1::FileState,
) -> glovebox_proto::v1::Subject {
    glovebox_proto::v1::Subject {
        domain: domain as i32,
        path,
        state: Some(state),
    }
}

/// Re-resolves `path`, checks it is the ticket's one read subject, and opens it without following
/// links; the opened object must be the one the ticket names. Returns (canonical path, fd, stat).
pub fn open_approved_read(
    ctx: &OpContext<'_>,
    path: &str,
    ticket: &TicketBody,
) -> Result<(String, std::os::fd::OwnedFd, rustix::fs::Stat), OpError> {
    let r = crate::resolve::resolve(path, ctx.workdir)?;
    let s = bound_subject(ticket, glovebox_proto::v1::Domain::Read, &r.path)?;
    r.followable(path)?;
    let expected = s.state.clone().unwrap_or_default();
    if !expected.exists {
        return Err(OpError::new(
            glovebox_proto::ErrorCode::NotFound,
            format!("{path}: not found"),
        ));
    }
    let fd = crate::fsio::open_no_links(&s.path, rustix::fs::OFlags::RDONLY)?;
    let stat = crate::fsio::fstat(&fd, path)?;
    crate::fsio::check_identity(&stat, &expected, path)?;
    Ok((s.path.clone(), fd, stat))
}

/// [`open_approved_read`] for the ops that read one file's content (`file_read`, `file_count`,
/// `file_head_tail`): the object must be a regular file with one name.
pub fn open_approved_file(
    ctx: &OpContext<'_>,
    path: &str,
    ticket: &TicketBody,
) -> Result<(String, std::os::fd::OwnedFd, rustix::fs::Stat), OpError> {
    use rustix::fs::FileType;
    let (canonical, fd, stat) = open_approved_read(ctx, path, ticket)?;
    let wrong_type = |what: &str| {
        OpError::new(
            glovebox_proto::ErrorCode::InvalidParams,
            format!("{path} is {what}"),
        )
    };
    match crate::fsio::file_type(&stat) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(wrong_type("a directory; use file_list")),
        _ => return Err(wrong_type("not a regular file")),
    }
    crate::fsio::refuse_hard_links(&stat, path)?;
    Ok((canonical, fd, stat))
}

#[cfg(test)]
pub mod testing {
    //! A temporary workdir and trash for op tests, and tickets made straight from plans (what
    //! the gate would sign on an allow).

    use std::path::PathBuf;

    use glovebox_proto::v1::{Plan, TicketBody};

    use super::OpContext;

    pub struct Fixture {
        _dir: tempfile::TempDir,
        pub root: PathBuf,
        pub work: PathBuf,
        pub trash: PathBuf,
        pub protected: Vec<String>,
        pub key: glovebox_ticket::Key,
        pub jobs: crate::jobs::JobTable,
    }

    #[allow(clippy::new_without_default)]
    impl Fixture {
        pub fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(dir.path()).unwrap();
            let work = root.join("work");
            std::fs::create_dir_all(&work).unwrap();
            let state = root.join("state");
            std::fs::create_dir_all(&state).unwrap();
            let scratch = root.join("scratch");
            std::fs::create_dir_all(&scratch).unwrap();
            let roots = vec![work.clone()];
            Fixture {
                _dir: dir,
                trash: root.join("home/.local/share/Trash"),
                protected: vec![state.to_string_lossy().into_owned()],
                work,
                root,
                key: glovebox_ticket::Key::from_bytes(&[7u8; 32]).unwrap(),
                // Unit tests check what a ticket allows to start; `/bin/true` stands in for the
                // shim (the real one is the glovebox binary, exercised end to end).
                jobs: crate::jobs::JobTable::new(crate::jobs::JobConfig {
                    env: Vec::new(),
                    shim: PathBuf::from("/bin/true"),
                    roots,
                    scratch,
                }),
            }
        }

        pub fn ctx(&self) -> OpContext<'_> {
            OpContext {
                workdir: &self.work,
                protected: &self.protected,
                key: &self.key,
                jobs: &self.jobs,
                trash_dir: &self.trash,
                denied: None,
            }
        }

        pub fn path(&self, rel: &str) -> String {
            self.work.join(rel).to_string_lossy().into_owned()
        }
    }

    pub fn ticket_for(plan: &Plan) -> TicketBody {
        TicketBody {
            account: "a".into(),
            call_id: "c".into(),
            tool: "t".into(),
            subjects: plan.subjects.clone(),
            content_tag: plan.content_tag.clone(),
            expires_at_ms: u64::MAX,
            approval: "auto".into(),
            hidden_globs: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::tools::Tool;

    #[test]
    fn audit_details_never_carry_patterns_or_contents() {
        let p = Tool::FileGrep
            .parse_params(&serde_json::json!({"pattern": "hunter2", "case_insensitive": true, "globs": ["*.rs"]}))
            .unwrap();
        let d = audit_detail(&p);
        assert_eq!(
            d,
            "pattern: regex, 7 bytes; globs: 1; flags: case_insensitive"
        );
        let p = Tool::FileEdit
            .parse_params(
                &serde_json::json!({"path": "a", "old_string": "secret", "new_string": "x"}),
            )
            .unwrap();
        let d = audit_detail(&p);
        assert_eq!(d, "replace 6 bytes with 1 bytes");
        assert!(!d.contains("secret"));
        let p = Tool::FileRead
            .parse_params(&serde_json::json!({"path": "a"}))
            .unwrap();
        assert_eq!(audit_detail(&p), "");
    }

    #[test]
    fn only_a_regular_file_with_one_name_is_opened_for_its_content() {
        use super::testing::{Fixture, ticket_for};
        use glovebox_proto::ErrorCode;
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("dir")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            f.work.join("fifo").as_path(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
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

    fn params(tool: &str, json: serde_json::Value) -> ToolParams {
        Tool::from_name(tool)
            .unwrap()
            .parse_params(&json)
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
    }

    /// A workdir with a file, a directory, a dangling link, a hard-linked file and a FIFO.
    fn awkward() -> testing::Fixture {
        let f = testing::Fixture::new();
        std::fs::write(f.work.join("a.txt"), "a").unwrap();
        std::fs::create_dir(f.work.join("dir")).unwrap();
        std::os::unix::fs::symlink(f.root.join("nowhere"), f.work.join("dangling")).unwrap();
        std::fs::write(f.work.join("linked"), "x").unwrap();
        std::fs::hard_link(f.work.join("linked"), f.root.join("other-name")).unwrap();
        f
    }

    #[test]
    fn plans_never_fail_on_what_is_on_disk_and_execution_says_why() {
        use glovebox_proto::ErrorCode::{self, *};
        use serde_json::json;
        let f = awkward();
        let cases: &[(&str, serde_json::Value, ErrorCode)] = &[
            ("file_read", json!({"path": "nothere/x"}), NotFound),
            ("file_read", json!({"path": "nothere/.ssh/../x"}), NotFound),
            ("file_read", json!({"path": "dangling"}), InvalidParams),
            ("file_read", json!({"path": "a.txt/x"}), InvalidParams),
            ("file_read", json!({"path": "dir"}), InvalidParams),
            ("file_list", json!({"path": "nothere/x"}), NotFound),
            ("file_list", json!({"path": "a.txt"}), InvalidParams),
            (
                "file_grep",
                json!({"pattern": "x", "path": "nothere"}),
                NotFound,
            ),
            (
                "file_find",
                json!({"names": ["*"], "path": "nothere"}),
                NotFound,
            ),
            ("file_count", json!({"path": "nothere/x"}), NotFound),
            ("file_head_tail", json!({"path": "dangling"}), InvalidParams),
            (
                "file_write",
                json!({"path": "dir", "content": "x"}),
                InvalidParams,
            ),
            (
                "file_write",
                json!({"path": "linked", "content": "x"}),
                Denied,
            ),
            (
                "file_write",
                json!({"path": "dangling", "content": "x"}),
                InvalidParams,
            ),
            (
                "file_write",
                json!({"path": "a.txt/x", "content": "x"}),
                InvalidParams,
            ),
            (
                "file_edit",
                json!({"path": "nothere/x", "old_string": "a", "new_string": "b"}),
                NotFound,
            ),
            (
                "file_edit",
                json!({"path": "dir", "old_string": "a", "new_string": "b"}),
                InvalidParams,
            ),
            (
                "file_edit",
                json!({"path": "linked", "old_string": "x", "new_string": "y"}),
                Denied,
            ),
            (
                "file_delete",
                json!({"path": "nothere/.ssh/id_rsa"}),
                NotFound,
            ),
            (
                "file_delete",
                json!({"path": "nothere/.ssh/../x"}),
                NotFound,
            ),
            ("file_delete", json!({"path": "dangling/x"}), InvalidParams),
            (
                "file_move",
                json!({"source": "nothere/x", "destination": "y"}),
                NotFound,
            ),
            (
                "file_move",
                json!({"source": "a.txt", "destination": "dangling/y"}),
                InvalidParams,
            ),
            (
                "exec_run",
                json!({"command": "true", "cwd": "nothere"}),
                NotFound,
            ),
            (
                "exec_run",
                json!({"command": "true", "cwd": "a.txt"}),
                InvalidParams,
            ),
        ];
        for (tool, json, code) in cases {
            let p = params(tool, json.clone());
            let planned = plan(&f.ctx(), &p).unwrap_or_else(|e| panic!("{tool} {json}: {e:?}"));
            let e = execute(&f.ctx(), &p, &testing::ticket_for(&planned))
                .expect_err(&format!("{tool} {json}"));
            assert_eq!(e.code, *code, "{tool} {json}: {}", e.message);
        }
        assert_eq!(std::fs::read_to_string(f.work.join("a.txt")).unwrap(), "a");
        assert_eq!(std::fs::read_to_string(f.work.join("linked")).unwrap(), "x");
        assert!(!f.root.join("nowhere").exists());
        assert!(!f.work.join("y").exists());
        assert_eq!(f.jobs.running(), 0);
    }

    #[test]
    fn a_missing_floor_path_plans_like_an_existing_one() {
        let f = awkward();
        std::fs::create_dir_all(f.work.join("proj/.ssh")).unwrap();
        std::fs::write(f.work.join("proj/.ssh/id_rsa"), "KEY").unwrap();
        for tool in ["file_read", "file_delete", "file_list"] {
            for dir in ["proj", "nothere"] {
                let p = params(
                    tool,
                    serde_json::json!({"path": format!("{dir}/.ssh/id_rsa")}),
                );
                let planned = plan(&f.ctx(), &p).unwrap();
                assert_eq!(
                    planned.subjects[0].path,
                    f.path(&format!("{dir}/.ssh/id_rsa")),
                    "{tool}"
                );
            }
        }
    }

    #[test]
    fn a_preview_that_fails_is_shown_to_the_approver_not_returned() {
        let f = awkward();
        std::fs::write(f.work.join("b.txt"), "b b").unwrap();
        for (tool, json, says) in [
            (
                "file_delete",
                serde_json::json!({"path": "linked"}),
                "hard links",
            ),
            (
                "file_delete",
                serde_json::json!({"path": "nothere"}),
                "not found",
            ),
            (
                "file_edit",
                serde_json::json!({"path": "b.txt", "old_string": "b", "new_string": "c"}),
                "2 times",
            ),
            (
                "file_edit",
                serde_json::json!({"path": "a.txt", "old_string": "zzz", "new_string": "c"}),
                "does not occur",
            ),
            (
                "file_write",
                serde_json::json!({"path": "dir", "content": "x"}),
                "is a directory",
            ),
        ] {
            let p = params(tool, json);
            let planned = plan(&f.ctx(), &p).unwrap();
            let (text, _) = preview(&f.ctx(), &p, &planned);
            assert!(
                text.starts_with("if approved, this call fails"),
                "{tool}: {text}"
            );
            assert!(text.contains(says), "{tool}: {text}");
        }
    }
}
