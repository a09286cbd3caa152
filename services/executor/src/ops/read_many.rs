//! `file_read_many`: several UTF-8 text files in one call, each path a read subject of its own
//! (the gate judges every one; one refused refuses the call). Once allowed, each file is opened
//! exactly as `file_read` opens one (no links, the object planned, one name) and comes back with
//! its content or with why it could not be read; the contents share one byte budget.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileReadManyParams, MAX_READ_BYTES, MAX_READ_MANY_BYTES};
use glovebox_proto::v1::{Domain, Plan, Subject, TicketBody};
use rustix::fs::OFlags;
use serde_json::{Value, json};

use crate::approved::{bound_subjects, check_one_file, open_subject, read_plan};
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::resolve::{Resolved, resolve};

/// One read subject per path, in order.
pub fn plan(ctx: &OpContext<'_>, p: &FileReadManyParams) -> Result<Plan, OpError> {
    let mut subjects = Vec::with_capacity(p.paths.len());
    for path in &p.paths {
        subjects.extend(read_plan(ctx, path)?.subjects);
    }
    Ok(Plan {
        subjects,
        ..Plan::default()
    })
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileReadManyParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let resolved: Vec<Resolved> = p
        .paths
        .iter()
        .map(|path| resolve(path, ctx.workdir))
        .collect::<Result<_, _>>()?;
    let wanted: Vec<(Domain, &str)> = resolved
        .iter()
        .map(|r| (Domain::Read, r.path.as_str()))
        .collect();
    let subjects = bound_subjects(ticket, &wanted)?;
    let mut budget = MAX_READ_MANY_BYTES;
    let mut total = 0u64;
    let files: Vec<Value> = p
        .paths
        .iter()
        .zip(&resolved)
        .zip(subjects)
        .map(|((shown, r), s)| match read_one(r, s, shown, budget) {
            Ok(text) => {
                let n = text.len() as u64;
                budget -= n;
                total += n;
                json!({"path": s.path, "content": text, "bytes": n})
            }
            Err(e) => json!({
                "path": s.path,
                "error": {"code": e.code.as_str(), "message": e.message},
            }),
        })
        .collect();
    Ok(Done::new(&json!({ "files": files, "bytes": total }), total))
}

/// One file's text, within `budget` bytes (and `MAX_READ_BYTES`).
fn read_one(r: &Resolved, s: &Subject, shown: &str, budget: u64) -> Result<String, OpError> {
    let (fd, stat, planned) = open_subject(r, s, shown, OFlags::RDONLY)?;
    check_one_file(&stat, &planned, shown)?;
    let limit = MAX_READ_BYTES.min(budget);
    let bytes = fsio::read_capped(fd, &stat, limit, shown).map_err(|e| {
        if e.code != ErrorCode::TooLarge {
            e
        } else if limit < MAX_READ_BYTES {
            OpError::new(
                ErrorCode::TooLarge,
                format!("{shown}: the call's {MAX_READ_MANY_BYTES} bytes were spent on the files before it; read it alone"),
            )
        } else {
            OpError::new(
                ErrorCode::TooLarge,
                format!("{shown} is larger than {MAX_READ_BYTES} bytes; read a range of lines with file_read"),
            )
        }
    })?;
    fsio::utf8_text(bytes, shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};

    fn read(f: &Fixture, paths: &[&str]) -> Result<Value, OpError> {
        let p = FileReadManyParams {
            paths: paths.iter().map(|s| (*s).to_owned()).collect(),
        };
        let planned = plan(&f.ctx(), &p)?;
        execute(&f.ctx(), &p, &ticket_for(&planned)).map(|d| d.value())
    }

    #[test]
    fn each_file_comes_back_with_its_content_or_why_not() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "alpha").unwrap();
        std::fs::write(f.work.join("bin"), b"\0\x01").unwrap();
        std::fs::create_dir(f.work.join("dir")).unwrap();
        std::fs::write(f.root.join("secret"), "s").unwrap();
        std::fs::hard_link(f.root.join("secret"), f.work.join("alias")).unwrap();
        let r = read(&f, &["a.txt", "missing", "bin", "dir", "alias", "a.txt"]).unwrap();
        let files = r["files"].as_array().unwrap();
        assert_eq!(files[0]["content"], "alpha");
        let codes: Vec<&str> = files[1..5]
            .iter()
            .map(|f| f["error"]["code"].as_str().unwrap())
            .collect();
        assert_eq!(codes, ["not_found", "binary", "invalid_params", "denied"]);
        assert_eq!(
            files[5]["content"], "alpha",
            "a path named twice is read twice"
        );
        assert_eq!(r["bytes"], 10);
    }

    #[test]
    fn the_contents_share_one_budget() {
        let f = Fixture::new();
        let big = "x".repeat(MAX_READ_BYTES as usize);
        let names: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
        for n in &names {
            std::fs::write(f.work.join(n), &big).unwrap();
        }
        let paths: Vec<&str> = names.iter().map(String::as_str).collect();
        let r = read(&f, &paths).unwrap();
        let files = r["files"].as_array().unwrap();
        assert!(
            files[..4].iter().all(|f| f["bytes"] == MAX_READ_BYTES),
            "{r:.200}"
        );
        assert_eq!(files[4]["error"]["code"], "too_large");
        assert!(
            files[4]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("spent"),
            "{}",
            files[4]
        );
        assert_eq!(r["bytes"], MAX_READ_MANY_BYTES);
    }

    #[test]
    fn a_path_that_resolves_elsewhere_since_it_was_approved_refuses_the_call() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a"), "a").unwrap();
        std::fs::write(f.root.join("other"), "o").unwrap();
        let p = FileReadManyParams {
            paths: vec!["a".into(), "b".into()],
        };
        let planned = plan(&f.ctx(), &p).unwrap();
        std::os::unix::fs::symlink(f.root.join("other"), f.work.join("b")).unwrap();
        assert_eq!(
            execute(&f.ctx(), &p, &ticket_for(&planned))
                .unwrap_err()
                .code,
            ErrorCode::Changed
        );
    }
}
