//! `file_edit`: replace an exact string in an existing text file (exactly one occurrence, or every
//! one with `replace_all`) and return the diff. The file is bound to the fingerprint the approver
//! saw, like `file_write`, and replaced through the same atomic path.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileEditParams, MAX_WRITE_BYTES};
use glovebox_proto::v1::{Domain, FileState, Plan, TicketBody};
use serde_json::json;

use crate::approved::{bound_subject, planned_subject, subject};
use crate::context::{Done, OpContext};
use crate::diff::render_diff;
use crate::error::OpError;
use crate::fsio;
use crate::replace::{planned_content, replace_with};
use crate::resolve::resolve;

/// Applies the edit to `old`; returns the new text and the number of replacements.
pub fn apply(old: &[u8], p: &FileEditParams) -> Result<(String, usize), OpError> {
    let text = std::str::from_utf8(old)
        .map_err(|_| OpError::new(ErrorCode::Binary, format!("{} is not UTF-8 text", p.path)))?;
    let count = text.matches(p.old_string.as_str()).count();
    if count == 0 {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("old_string does not occur in {}", p.path),
        ));
    }
    if count > 1 && !p.replace_all {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!(
                "old_string occurs {count} times in {}; make it unique or set replace_all",
                p.path
            ),
        ));
    }
    let new = if p.replace_all {
        text.replace(p.old_string.as_str(), &p.new_string)
    } else {
        text.replacen(p.old_string.as_str(), &p.new_string, 1)
    };
    if new.len() > MAX_WRITE_BYTES {
        return Err(OpError::new(
            ErrorCode::TooLarge,
            format!("the edited file would be more than {MAX_WRITE_BYTES} bytes"),
        ));
    }
    Ok((new, count))
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
        subjects: vec![subject(Domain::Write, r.path, state)],
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
    Ok(render_diff(&s.path, &old, new.as_bytes(), true))
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
    let (old, new) = replace_with(ctx, &s.path, &p.path, &expected, |old| {
        let (new, count) = apply(old, p)?;
        if ctx.key.tag(new.as_bytes()) != ticket.content_tag {
            return Err(OpError::changed(&p.path));
        }
        replacements = count;
        Ok(new.into_bytes())
    })?;
    let (diff, diff_truncated) = render_diff(&s.path, &old, &new, true);
    Ok(Done::new(
        &json!({
            "path": s.path,
            "replacements": replacements,
            "bytes": new.len(),
            "diff": diff,
            "diff_truncated": diff_truncated,
        }),
        new.len() as u64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};

    fn params(path: &str, old: &str, new: &str, all: bool) -> FileEditParams {
        FileEditParams {
            path: path.into(),
            old_string: old.into(),
            new_string: new.into(),
            replace_all: all,
        }
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
