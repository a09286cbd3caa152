//! `file_read`: a UTF-8 text file of at most `MAX_READ_BYTES`, or a range of lines (offset,
//! limit) of a bigger one, with the file's total line count and whether the reply was cut.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileReadParams, MAX_READ_BYTES};
use glovebox_proto::v1::{Domain, Plan, TicketBody};
use std::io::{BufRead, BufReader};

use rustix::fs::FileType;
use serde_json::json;

use super::{Done, OpContext, subject};
use crate::error::OpError;
use crate::fsio;
use crate::resolve::resolve;

/// Only resolves: whether the file exists and what it is are reported after the gate decided,
/// so a denied path cannot be probed for existence.
pub fn plan(ctx: &OpContext<'_>, p: &FileReadParams) -> Result<Plan, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    Ok(Plan {
        subjects: vec![subject(Domain::Read, r.path.clone(), observed(&r))],
        content_tag: Vec::new(),
    })
}

/// What is at a resolved path now (identity only; `exists: false` if nothing is).
pub fn observed(r: &crate::resolve::Resolved) -> glovebox_proto::v1::FileState {
    match r.exists.then(|| fsio::stat_path(&r.path)) {
        Some(Ok(stat)) => fsio::state_of(&stat),
        _ => glovebox_proto::v1::FileState::default(),
    }
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileReadParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let (path, fd, stat) = super::open_approved_read(ctx, &p.path, ticket)?;
    match fsio::file_type(&stat) {
        FileType::RegularFile => {}
        FileType::Directory => {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("{} is a directory; use file_list", p.path),
            ));
        }
        _ => {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("{} is not a regular file", p.path),
            ));
        }
    }
    fsio::refuse_hard_links(&stat, &p.path)?;
    if p.offset.is_some() || p.limit.is_some() {
        return read_range(path, fd, p);
    }
    let bytes = fsio::read_capped(fd, MAX_READ_BYTES, &p.path).map_err(|e| {
        if e.code == ErrorCode::TooLarge {
            OpError::new(
                ErrorCode::TooLarge,
                format!(
                    "{} is larger than {MAX_READ_BYTES} bytes; read a range of lines with offset and limit",
                    p.path
                ),
            )
        } else {
            e
        }
    })?;
    let text = text_of(bytes, &p.path)?;
    let n = text.len() as u64;
    let lines = text.lines().count();
    Ok(Done {
        result: json!({
            "path": path, "content": text, "bytes": n, "lines": lines,
            "total_lines": lines, "truncated": false,
        }),
        bytes: n,
    })
}

fn text_of(bytes: Vec<u8>, shown: &str) -> Result<String, OpError> {
    if bytes.contains(&0) {
        return Err(OpError::new(
            ErrorCode::Binary,
            format!("{shown} is a binary file"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| OpError::new(ErrorCode::Binary, format!("{shown} is not UTF-8 text")))
}

/// Lines `offset..offset+limit` (counting from 1), cut at `MAX_READ_BYTES`; the rest of the file
/// is only counted.
fn read_range(path: String, fd: std::os::fd::OwnedFd, p: &FileReadParams) -> Result<Done, OpError> {
    let first = p.offset.unwrap_or(1);
    let limit = p.limit.unwrap_or(u64::MAX);
    let io = |e| crate::resolve::io_error(e, &p.path);
    let mut reader = BufReader::with_capacity(256 * 1024, std::fs::File::from(fd));
    let mut out: Vec<u8> = Vec::new();
    let (mut total, mut taken, mut cut) = (0u64, 0u64, false);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
            break;
        }
        total += 1;
        if total < first || cut {
            continue;
        }
        if taken >= limit {
            cut = true;
            continue;
        }
        if (out.len() + line.len()) as u64 > MAX_READ_BYTES {
            cut = true;
            continue;
        }
        out.extend_from_slice(&line);
        taken += 1;
    }
    let text = text_of(out, &p.path)?;
    let n = text.len() as u64;
    Ok(Done {
        result: json!({
            "path": path, "content": text, "bytes": n, "lines": taken, "offset": first,
            "total_lines": total, "truncated": cut,
        }),
        bytes: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{Fixture, ticket_for};

    fn run(
        f: &Fixture,
        offset: Option<u64>,
        limit: Option<u64>,
    ) -> Result<serde_json::Value, OpError> {
        let p = FileReadParams {
            path: "big.txt".into(),
            offset,
            limit,
        };
        let planned = plan(&f.ctx(), &p)?;
        execute(&f.ctx(), &p, &ticket_for(&planned)).map(|d| d.result)
    }

    #[test]
    fn a_big_file_is_read_by_line_range() {
        let f = Fixture::new();
        let text: String = (1..=200_000).map(|i| format!("line {i}\n")).collect();
        assert!(text.len() as u64 > MAX_READ_BYTES);
        std::fs::write(f.work.join("big.txt"), &text).unwrap();
        let e = run(&f, None, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::TooLarge);
        assert!(e.message.contains("offset and limit"), "{}", e.message);
        let r = run(&f, Some(10), Some(2)).unwrap();
        assert_eq!(r["content"], "line 10\nline 11\n");
        assert_eq!(r["total_lines"], 200_000);
        assert_eq!(r["truncated"], true);
        let r = run(&f, Some(199_999), None).unwrap();
        assert_eq!(r["content"], "line 199999\nline 200000\n");
        assert_eq!(r["truncated"], false);
        let r = run(&f, Some(1), None).unwrap();
        assert_eq!(r["truncated"], true);
        assert!(r["bytes"].as_u64().unwrap() <= MAX_READ_BYTES);
    }
}
