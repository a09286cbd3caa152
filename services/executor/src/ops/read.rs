//! `file_read`: a UTF-8 text file of at most `MAX_READ_BYTES`, or a range of lines (offset,
//! limit) of a bigger one, with the file's total line count and whether the reply was cut.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileReadParams, MAX_READ_BYTES};
use glovebox_proto::v1::TicketBody;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use serde_json::json;

use crate::approved::open_approved_file;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::walk::Deadline;

/// How long a ranged read may spend reaching its first line and counting the rest.
const RANGE_COUNT_MILLIS: u64 = 10_000;

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileReadParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let (path, fd, stat) = open_approved_file(ctx, &p.path, ticket)?;
    if p.offset.is_some() || p.limit.is_some() {
        return read_range(path, fd, p);
    }
    let bytes = fsio::read_capped(fd, &stat, MAX_READ_BYTES, &p.path).map_err(|e| {
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
    let text = fsio::utf8_text(bytes, &p.path)?;
    let n = text.len() as u64;
    let lines = text.lines().count();
    Ok(Done::new(
        &json!({
            "path": path, "content": text, "bytes": n, "lines": lines,
            "total_lines": lines, "truncated": false,
        }),
        n,
    ))
}

/// Lines `offset..offset+limit` (counting from 1), cut at `MAX_READ_BYTES`. The rest of the file
/// is only counted, in bulk, until `RANGE_COUNT_MILLIS`; a line longer than the cap is skipped
/// without being held in memory.
fn read_range(path: String, fd: std::os::fd::OwnedFd, p: &FileReadParams) -> Result<Done, OpError> {
    let first = p.offset.unwrap_or(1);
    let limit = p.limit.unwrap_or(u64::MAX);
    let io = |e| OpError::io(e, &p.path);
    let deadline = Deadline::after(Duration::from_millis(RANGE_COUNT_MILLIS));
    let mut reader = BufReader::with_capacity(256 * 1024, std::fs::File::from(fd));
    let mut out: Vec<u8> = Vec::new();
    let (mut total, mut taken, mut cut) = (0u64, 0u64, false);
    let mut line = Vec::new();
    // Phase one: skip to `first` and take lines while they fit.
    while !cut && taken < limit {
        line.clear();
        let n = (&mut reader)
            .take(MAX_READ_BYTES + 1)
            .read_until(b'\n', &mut line)
            .map_err(io)?;
        if n == 0 {
            break;
        }
        if !line.ends_with(b"\n") && n as u64 > MAX_READ_BYTES {
            // Longer than anything we may return: skip the rest of it.
            skip_line(&mut reader).map_err(io)?;
            line.clear();
            total += 1;
            if total >= first {
                cut = true;
            }
            continue;
        }
        total += 1;
        if total < first {
            if deadline.passed() {
                return Err(OpError::new(
                    ErrorCode::Timeout,
                    format!("{}: reaching line {first} took too long", p.path),
                ));
            }
            continue;
        }
        if (out.len() + line.len()) as u64 > MAX_READ_BYTES {
            cut = true;
            // This line is counted; it is not returned.
            break;
        }
        out.extend_from_slice(&line);
        taken += 1;
    }
    // Phase two: count what is left.
    let rest = count_rest(&mut reader, deadline).map_err(io)?;
    total += rest.lines;
    // Anything left is at least one line.
    cut |= rest.lines > 0;
    let text = fsio::utf8_text(out, &p.path)?;
    let n = text.len() as u64;
    Ok(Done::new(
        &json!({
            "path": path, "content": text, "bytes": n, "lines": taken, "offset": first,
            "total_lines": rest.complete.then_some(total), "truncated": cut,
        }),
        n,
    ))
}

/// The lines left after a range, counted in bulk.
struct Rest {
    lines: u64,
    /// Whether counting reached the end before the deadline.
    complete: bool,
}

/// Counts the lines left in `reader` (a last line without a newline too) until `deadline`.
fn count_rest(reader: &mut impl BufRead, deadline: Deadline) -> std::io::Result<Rest> {
    let mut lines = 0;
    let mut partial = false;
    loop {
        if deadline.passed() {
            return Ok(Rest {
                lines: lines + u64::from(partial),
                complete: false,
            });
        }
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        lines += buf.iter().filter(|b| **b == b'\n').count() as u64;
        partial = buf.last() != Some(&b'\n');
        let len = buf.len();
        reader.consume(len);
    }
    Ok(Rest {
        lines: lines + u64::from(partial),
        complete: true,
    })
}

/// Consumes the rest of the current line (through its newline) without keeping it.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|b| *b == b'\n') {
            reader.consume(i + 1);
            return Ok(());
        }
        let len = buf.len();
        reader.consume(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, ticket_for};

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
        let planned = crate::approved::read_plan(&f.ctx(), &p.path)?;
        execute(&f.ctx(), &p, &ticket_for(&planned))
            .map(|d| crate::testing::conforming(glovebox_proto::tools::Tool::FileRead, d.value()))
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
        assert_eq!(r["total_lines"], 200_000);
        assert!(r["bytes"].as_u64().unwrap() <= MAX_READ_BYTES);
    }

    #[test]
    fn a_fifo_does_not_block_the_executor() {
        let f = Fixture::new();
        crate::testing::make_fifo(&f.work.join("big.txt"));
        assert_eq!(
            run(&f, None, None).unwrap_err().code,
            ErrorCode::InvalidParams
        );
    }

    #[test]
    fn a_line_longer_than_the_cap_is_skipped_not_held() {
        let f = Fixture::new();
        let long = "x".repeat(MAX_READ_BYTES as usize + 10);
        std::fs::write(f.work.join("big.txt"), format!("a\n{long}\nb\nc")).unwrap();
        let r = run(&f, Some(1), Some(1)).unwrap();
        assert_eq!(
            (r["content"].as_str(), r["total_lines"].as_u64()),
            (Some("a\n"), Some(4))
        );
        assert_eq!(r["truncated"], true);
        let r = run(&f, Some(2), None).unwrap();
        assert_eq!(
            (r["content"].as_str(), r["truncated"].as_bool()),
            (Some(""), Some(true))
        );
        let r = run(&f, Some(3), None).unwrap();
        assert_eq!(
            (r["content"].as_str(), r["truncated"].as_bool()),
            (Some("b\nc"), Some(false))
        );
        assert_eq!(r["total_lines"], 4);
    }
}
