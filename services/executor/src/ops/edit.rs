//! `file_edit`: replace an exact string in an existing text file (exactly one occurrence, or every
//! one with `replace_all`), or several in order (`edits`: all apply or nothing is written), and
//! return the diff. The file is bound to the fingerprint the approver saw, like `file_write`, and
//! replaced through the same atomic path; a `dry_run` is judged and bound the same way (its diff
//! shows the file) and writes nothing.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileEditParams, MAX_WRITE_BYTES};
use glovebox_proto::v1::{Domain, FileState, Plan, Subject, TicketBody};
use serde_json::json;

use crate::approved::{bound_subject, planned_subject};
use crate::context::{Done, OpContext};
use crate::diff::render_diff;
use crate::error::OpError;
use crate::fsio;
use crate::replace::{planned_content, replace_with};
use crate::resolve::resolve;

/// Applies the edits to `old` in order; returns the new text and the number of replacements.
pub fn apply(old: &[u8], p: &FileEditParams) -> Result<(String, usize), OpError> {
    let mut text = std::str::from_utf8(old)
        .map_err(|_| OpError::new(ErrorCode::Binary, format!("{} is not UTF-8 text", p.path)))?
        .to_owned();
    let changes = p.changes();
    let mut replacements = 0;
    for (i, c) in changes.iter().enumerate() {
        // Only a list of edits names which one failed.
        let which = if p.edits.is_empty() {
            String::new()
        } else {
            format!("edit {}: ", i + 1)
        };
        let count = text.matches(c.old_string.as_str()).count();
        if count == 0 {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("{which}old_string does not occur in {}", p.path),
            ));
        }
        if count > 1 && !c.replace_all {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!(
                    "{which}old_string occurs {count} times in {}; make it unique or set replace_all",
                    p.path
                ),
            ));
        }
        text = if c.replace_all {
            text.replace(c.old_string.as_str(), &c.new_string)
        } else {
            text.replacen(c.old_string.as_str(), &c.new_string, 1)
        };
        if text.len() > MAX_WRITE_BYTES {
            return Err(OpError::new(
                ErrorCode::TooLarge,
                format!("the edited file would be more than {MAX_WRITE_BYTES} bytes"),
            ));
        }
        replacements += count;
    }
    Ok((text, replacements))
}

/// Fingerprints the file like `file_write`. Whether it exists, what it is and whether the edit
/// applies are not reported here (that would tell a denied caller about the file); the plan then
/// binds no new content (and for anything but a regular file, its identity alone) and the
/// executed call reports why.
pub fn plan(ctx: &OpContext<'_>, p: &FileEditParams) -> Result<Plan, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    let fingerprinted = r
        .exists
        .then(|| fsio::fingerprint_and_content(&r.path, ctx.key));
    let (state, content_tag) = match fingerprinted {
        Some(Ok((state, old))) => {
            let tag = match apply(&old, p) {
                Ok((new, _)) => ctx.key.tag(new.as_bytes()),
                Err(_) => Vec::new(),
            };
            (state, tag)
        }
        Some(Err(_)) => (fsio::observed(&r), Vec::new()),
        None => (FileState::default(), Vec::new()),
    };
    Ok(Plan {
        subjects: vec![Subject::new(Domain::Write, r.path, state)],
        content_tag,
        pack: None,
    })
}

pub fn preview(
    ctx: &OpContext<'_>,
    p: &FileEditParams,
    plan: &Plan,
) -> Result<(String, bool), OpError> {
    let s = planned_subject(plan)?;
    let planned = s.state.clone().unwrap_or_default();
    if !planned.exists {
        return Err(OpError::new(
            ErrorCode::NotFound,
            format!("{}: not found", p.path),
        ));
    }
    let old = planned_content(ctx, &s.path, &p.path, &planned)?;
    let (new, _) = apply(&old, p)?;
    let (diff, cut) = render_diff(&s.path, &old, new.as_bytes(), true);
    if p.dry_run {
        return Ok((format!("dry run: nothing is written\n{diff}"), cut));
    }
    Ok((diff, cut))
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileEditParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    let s = bound_subject(ticket, Domain::Write, &r.path)?;
    r.followable(&p.path)?;
    let expected = s.state.clone().unwrap_or_default();
    if !expected.exists || !r.exists {
        return Err(OpError::new(
            ErrorCode::NotFound,
            format!("{}: not found", p.path),
        ));
    }
    let mut replacements = 0;
    let mut edited = |old: &[u8]| {
        let (new, count) = apply(old, p)?;
        if ctx.key.tag(new.as_bytes()) != ticket.content_tag {
            return Err(OpError::changed(&p.path));
        }
        replacements = count;
        Ok(new.into_bytes())
    };
    let (old, new) = if p.dry_run {
        // Read as planned (same file, same content), changed in memory only.
        let old = planned_content(ctx, &s.path, &p.path, &expected)?;
        let new = edited(&old)?;
        (old, new)
    } else {
        replace_with(ctx, &s.path, &p.path, &expected, edited)?
    };
    let (diff, diff_truncated) = render_diff(&s.path, &old, &new, true);
    Ok(Done::new(
        &json!({
            "path": s.path,
            "replacements": replacements,
            "bytes": new.len(),
            "diff": diff,
            "diff_truncated": diff_truncated,
            "dry_run": p.dry_run,
        }),
        if p.dry_run { 0 } else { new.len() as u64 },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};

    fn params(path: &str, old: &str, new: &str, all: bool) -> FileEditParams {
        FileEditParams {
            path: path.into(),
            old_string: Some(old.into()),
            new_string: Some(new.into()),
            replace_all: all,
            edits: Vec::new(),
            dry_run: false,
        }
    }

    fn several(path: &str, edits: &[(&str, &str, bool)], dry_run: bool) -> FileEditParams {
        FileEditParams {
            path: path.into(),
            old_string: None,
            new_string: None,
            replace_all: false,
            edits: edits
                .iter()
                .map(|(old, new, all)| glovebox_proto::tools::FileEditChange {
                    old_string: (*old).into(),
                    new_string: (*new).into(),
                    replace_all: *all,
                })
                .collect(),
            dry_run,
        }
    }

    #[test]
    fn several_edits_apply_in_order_or_not_at_all() {
        let p = several("f", &[("a", "b", false), ("b", "c", true)], false);
        assert_eq!(apply(b"ab", &p).unwrap(), ("cc".to_owned(), 3));
        let p = several("f", &[("a", "b", false), ("zzz", "y", false)], false);
        let e = apply(b"a", &p).unwrap_err();
        assert!(e.message.starts_with("edit 2: "), "{}", e.message);
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "one two\n").unwrap();
        let p = several("a.txt", &[("one", "1", false), ("nope", "x", false)], false);
        let planned = plan(&f.ctx(), &p).unwrap();
        assert!(execute(&f.ctx(), &p, &ticket_for(&planned)).is_err());
        assert_eq!(
            std::fs::read_to_string(f.work.join("a.txt")).unwrap(),
            "one two\n",
            "the first edit is not written alone"
        );
    }

    #[test]
    fn a_dry_run_returns_the_diff_and_writes_nothing() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "one\ntwo\n").unwrap();
        let before = std::fs::metadata(f.work.join("a.txt")).unwrap();
        let p = several("a.txt", &[("one", "1", false), ("two", "2", false)], true);
        let planned = plan(&f.ctx(), &p).unwrap();
        let (preview, _) = preview(&f.ctx(), &p, &planned).unwrap();
        assert!(
            preview.starts_with("dry run: nothing is written\n"),
            "{preview}"
        );
        let r = execute(&f.ctx(), &p, &ticket_for(&planned))
            .unwrap()
            .value();
        assert_eq!(r["dry_run"], true);
        assert_eq!(r["replacements"], 2);
        assert!(r["diff"].as_str().unwrap().contains("+1\n+2\n"), "{r}");
        assert_eq!(
            std::fs::read_to_string(f.work.join("a.txt")).unwrap(),
            "one\ntwo\n"
        );
        let after = std::fs::metadata(f.work.join("a.txt")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (before.ino(), before.mtime_nsec()),
            (after.ino(), after.mtime_nsec())
        );
        // Bound like a real edit: a file changed since it was planned is refused.
        std::fs::write(f.work.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        assert_eq!(
            execute(&f.ctx(), &p, &ticket_for(&planned))
                .unwrap_err()
                .code,
            ErrorCode::Changed
        );
    }

    #[test]
    fn apply_table() {
        let p = params("f", "b", "B", false);
        assert_eq!(apply(b"abc", &p).unwrap(), ("aBc".to_owned(), 1));
        assert_eq!(
            apply(b"abcb", &params("f", "b", "B", true)).unwrap(),
            ("aBcB".to_owned(), 2)
        );
        let e = apply(b"abcb", &p).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert!(e.message.contains("2 times"), "{}", e.message);
        let e = apply(b"xyz", &p).unwrap_err();
        assert!(e.message.contains("does not occur"), "{}", e.message);
        assert_eq!(apply(b"\xff", &p).unwrap_err().code, ErrorCode::Binary);
    }

    #[test]
    fn edit_replaces_once_and_returns_the_diff() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let p = params("a.txt", "two", "2", false);
        let plan = plan(&f.ctx(), &p).unwrap();
        let (preview, _) = preview(&f.ctx(), &p, &plan).unwrap();
        assert!(preview.contains("-two\n+2\n"), "{preview}");
        let done = execute(&f.ctx(), &p, &ticket_for(&plan)).unwrap();
        assert_eq!(done.value()["replacements"], 1);
        assert!(done.value()["diff"].as_str().unwrap().contains("+2"));
        assert_eq!(
            std::fs::read_to_string(f.work.join("a.txt")).unwrap(),
            "one\n2\nthree\n"
        );
    }

    #[test]
    fn a_change_after_planning_is_refused() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "one two\n").unwrap();
        let p = params("a.txt", "one", "1", false);
        let plan = plan(&f.ctx(), &p).unwrap();
        std::fs::write(f.work.join("a.txt"), "one two three\n").unwrap();
        let e = execute(&f.ctx(), &p, &ticket_for(&plan)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Changed);
        assert_eq!(
            std::fs::read_to_string(f.work.join("a.txt")).unwrap(),
            "one two three\n"
        );
    }

    #[test]
    fn ambiguous_edit_fails_at_execution_and_leaves_the_file() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "x x\n").unwrap();
        let p = params("a.txt", "x", "y", false);
        let plan = plan(&f.ctx(), &p).unwrap();
        assert!(plan.content_tag.is_empty());
        let e = execute(&f.ctx(), &p, &ticket_for(&plan)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert_eq!(
            std::fs::read_to_string(f.work.join("a.txt")).unwrap(),
            "x x\n"
        );
    }
}
