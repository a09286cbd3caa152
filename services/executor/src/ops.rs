//! The operations an executor performs, and the dispatch from a call's parameters to them. The
//! set is closed: each tool is one file under `ops/`, with the same three steps: plan (resolve
//! subjects), preview (what the approver sees) and execute (act on exactly what the ticket names).
//!
//! Ops never borrow from each other: what several share lives beside them (`approved`, `context`,
//! `fsio`, `replace`, `movable`, `diff`, `walk`), and the `tidy` test keeps it that way.

pub mod count;
pub mod delete;
pub mod edit;
pub mod exec;
pub mod find;
pub mod grep;
pub mod head_tail;
pub mod info;
pub mod list;
pub mod mkdir;
pub mod moves;
pub mod read;
pub mod read_many;
pub mod read_media;
pub mod roots;
pub mod tree;
pub mod write;

use glovebox_proto::tools::ToolParams;
use glovebox_proto::v1::{Plan, TicketBody};

use crate::approved::read_plan;
use crate::context::{Done, OpContext};
use crate::error::OpError;

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
        ToolParams::ExecInput(p) => exec::plan_input(ctx, p),
        ToolParams::FileEdit(p) => edit::plan(ctx, p),
        ToolParams::FileGrep(p) => read_plan(ctx, &p.path),
        ToolParams::FileFind(p) => read_plan(ctx, &p.path),
        ToolParams::FileCount(p) => read_plan(ctx, &p.path),
        ToolParams::FileHeadTail(p) => read_plan(ctx, &p.path),
        ToolParams::FileDelete(p) => delete::plan(ctx, p),
        ToolParams::FileMove(p) => moves::plan(ctx, p),
        ToolParams::FileInfo(p) => read_plan(ctx, &p.path),
        ToolParams::FileRoots(_) => Ok(roots::plan()),
        ToolParams::FileMkdir(p) => mkdir::plan(ctx, p),
        ToolParams::FileReadMany(p) => read_many::plan(ctx, p),
        ToolParams::FileReadMedia(p) => read_plan(ctx, &p.path),
        ToolParams::FileTree(p) => read_plan(ctx, &p.path),
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
        ToolParams::ExecInput(p) => Ok(exec::preview_input(p, plan)),
        ToolParams::FileMkdir(_) => mkdir::preview(plan),
        ToolParams::FileRead(_)
        | ToolParams::FileInfo(_)
        | ToolParams::FileRoots(_)
        | ToolParams::FileReadMany(_)
        | ToolParams::FileReadMedia(_)
        | ToolParams::FileTree(_)
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
        ToolParams::ExecInput(p) => exec::execute_input(ctx, p, ticket),
        ToolParams::FileEdit(p) => edit::execute(ctx, p, ticket),
        ToolParams::FileGrep(p) => grep::execute(ctx, p, ticket),
        ToolParams::FileFind(p) => find::execute(ctx, p, ticket),
        ToolParams::FileCount(p) => count::execute(ctx, p, ticket),
        ToolParams::FileHeadTail(p) => head_tail::execute(ctx, p, ticket),
        ToolParams::FileDelete(p) => delete::execute(ctx, p, ticket),
        ToolParams::FileMove(p) => moves::execute(ctx, p, ticket),
        ToolParams::FileInfo(p) => info::execute(ctx, p, ticket),
        ToolParams::FileRoots(_) => roots::execute(ctx, ticket),
        ToolParams::FileMkdir(p) => mkdir::execute(ctx, p, ticket),
        ToolParams::FileReadMany(p) => read_many::execute(ctx, p, ticket),
        ToolParams::FileReadMedia(p) => read_media::execute(ctx, p, ticket),
        ToolParams::FileTree(p) => tree::execute(ctx, p, ticket),
    }
}

/// The outcome of a call made before its verdict ([`ahead`]): a whole-file read's result, or a
/// listing still to be cut by what the ticket hides.
pub enum Ahead {
    Done(Done),
    Listing(list::ListedAhead),
}

impl Ahead {
    /// The bytes the call moved, as its execute row records them.
    pub fn bytes(&self) -> u64 {
        match self {
            Ahead::Done(done) => done.bytes,
            Ahead::Listing(_) => 0,
        }
    }

    /// The result, once the ticket says what `denied` hides from listings.
    pub fn finish(self, denied: &globset::GlobSet) -> Done {
        match self {
            Ahead::Done(done) => done,
            Ahead::Listing(listing) => listing.finish(denied),
        }
    }
}

/// Makes a call before its verdict, on `ticket` (the plan's subjects, no denies): only what
/// changes nothing and shows nothing before the ticket — a whole-file read and a listing of one
/// directory's names and types; `None` for anything else.
pub fn ahead(
    ctx: &OpContext<'_>,
    params: &ToolParams,
    ticket: &TicketBody,
) -> Option<Result<Ahead, OpError>> {
    match params {
        ToolParams::FileRead(p) if params.reads_whole_file() => {
            Some(read::execute(ctx, p, ticket).map(Ahead::Done))
        }
        ToolParams::FileList(p) => {
            list::list_ahead(ctx, p, ticket).map(|listed| listed.map(Ahead::Listing))
        }
        _ => None,
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
        ToolParams::FileReadMany(p) => format!("{} paths", p.paths.len()),
        ToolParams::ExecInput(p) => format!(
            "{} bytes of input{}",
            p.input.len(),
            if p.close { ", then closed" } else { "" }
        ),
        ToolParams::FileEdit(p) => {
            let changes = p.changes();
            let mut said = match changes.as_slice() {
                [one] => format!(
                    "replace {} bytes with {} bytes{}",
                    one.old_string.len(),
                    one.new_string.len(),
                    if one.replace_all {
                        ", every occurrence"
                    } else {
                        ""
                    }
                ),
                many => format!(
                    "{} edits, replacing {} bytes with {} bytes",
                    many.len(),
                    many.iter().map(|c| c.old_string.len()).sum::<usize>(),
                    many.iter().map(|c| c.new_string.len()).sum::<usize>()
                ),
            };
            if p.dry_run {
                said.push_str("; dry run");
            }
            said
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_plan_has_the_domains_the_catalog_lists_for_its_tool() {
        use glovebox_proto::tools::Tool;
        let f = crate::testing::Fixture::new();
        std::fs::write(f.work.join("a.txt"), "a\n").unwrap();
        std::fs::create_dir_all(f.work.join("d")).unwrap();
        let sample = |tool: Tool| -> serde_json::Value {
            match tool {
                Tool::FileRead
                | Tool::FileCount
                | Tool::FileHeadTail
                | Tool::FileDelete
                | Tool::FileInfo
                | Tool::FileReadMedia => serde_json::json!({"path": "a.txt"}),
                Tool::FileMkdir => serde_json::json!({"path": "new/dir"}),
                Tool::FileRoots => serde_json::json!({}),
                Tool::FileReadMany => serde_json::json!({"paths": ["a.txt"]}),
                Tool::FileList | Tool::FileTree => serde_json::json!({"path": "d"}),
                Tool::FileWrite => serde_json::json!({"path": "b.txt", "content": "b"}),
                Tool::FileEdit => {
                    serde_json::json!({"path": "a.txt", "old_string": "a", "new_string": "b"})
                }
                Tool::FileGrep => serde_json::json!({"pattern": "a"}),
                Tool::FileFind => serde_json::json!({"names": ["*.txt"]}),
                Tool::FileMove => serde_json::json!({"source": "a.txt", "destination": "c.txt"}),
                Tool::ExecRun => serde_json::json!({"command": "true"}),
                Tool::ExecStatus | Tool::ExecTail | Tool::ExecKill => {
                    serde_json::json!({"job_id": "job-0123456789abcdef"})
                }
                Tool::ExecStat => serde_json::json!({}),
                Tool::ExecInput => {
                    serde_json::json!({"job_id": "job-0123456789abcdef", "input": "y\n"})
                }
            }
        };
        for tool in Tool::ALL {
            let params = tool.parse_params(&sample(tool)).unwrap();
            let plan = plan(&f.ctx(), &params).unwrap();
            let domains: Vec<i32> = plan.subjects.iter().map(|s| s.domain).collect();
            let want: Vec<i32> = tool.entry().domains.iter().map(|d| *d as i32).collect();
            assert_eq!(domains, want, "{}", tool.name());
        }
    }

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

    fn params(tool: &str, json: serde_json::Value) -> ToolParams {
        Tool::from_name(tool)
            .unwrap()
            .parse_params(&json)
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
    }

    /// A workdir with a file, a directory, a dangling link, a hard-linked file and a FIFO.
    fn awkward() -> crate::testing::Fixture {
        let f = crate::testing::Fixture::new();
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
            ("file_info", json!({"path": "nothere/x"}), NotFound),
            ("file_info", json!({"path": "dangling"}), InvalidParams),
            ("file_info", json!({"path": "linked"}), Denied),
            ("file_mkdir", json!({"path": "a.txt"}), InvalidParams),
            ("file_mkdir", json!({"path": "dangling"}), InvalidParams),
            ("file_mkdir", json!({"path": "a.txt/x"}), InvalidParams),
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
            let e = execute(&f.ctx(), &p, &crate::testing::ticket_for(&planned))
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
