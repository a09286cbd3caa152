//! `file_count`: lines, words and bytes of a regular file (like `wc`), streamed, with a time cap.

use std::io::Read;
use std::time::Duration;

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileCountParams, MAX_SEARCH_MILLIS};
use glovebox_proto::v1::TicketBody;
use serde_json::json;

use crate::approved::open_approved_file;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::walk::Deadline;

/// Running counts over a stream of chunks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub lines: u64,
    pub words: u64,
    pub bytes: u64,
    in_word: bool,
}

impl Counts {
    pub fn feed(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        for &b in chunk {
            if b == b'\n' {
                self.lines += 1;
            }
            let space = b.is_ascii_whitespace();
            if !space && !self.in_word {
                self.words += 1;
            }
            self.in_word = !space;
        }
    }
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileCountParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let (path, fd, _) = open_approved_file(ctx, &p.path, ticket)?;
    let deadline = Deadline::after(Duration::from_millis(MAX_SEARCH_MILLIS));
    let mut file = std::fs::File::from(fd);
    let mut buf = vec![0u8; 256 * 1024];
    let mut counts = Counts::default();
    loop {
        if deadline.passed() {
            return Err(OpError::new(
                ErrorCode::Timeout,
                format!("counting {} took longer than the time cap", p.path),
            ));
        }
        let n = file.read(&mut buf).map_err(|e| OpError::io(e, &p.path))?;
        if n == 0 {
            break;
        }
        counts.feed(&buf[..n]);
    }
    Ok(Done::new(
        &json!({
            "path": path,
            "lines": counts.lines,
            "words": counts.words,
            "bytes": counts.bytes,
        }),
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approved::read_plan;
    use crate::testing::{Fixture, ticket_for};

    #[test]
    fn counts_like_wc_across_chunks() {
        let mut c = Counts::default();
        c.feed(b"one two\nthr");
        c.feed(b"ee  four\n\nfive");
        assert_eq!((c.lines, c.words, c.bytes), (3, 5, 25));
    }

    #[test]
    fn counts_a_file_and_refuses_a_directory() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a"), "a b\nc\n").unwrap();
        let p = FileCountParams { path: "a".into() };
        let plan = read_plan(&f.ctx(), "a").unwrap();
        let r = execute(&f.ctx(), &p, &ticket_for(&plan)).unwrap().value();
        assert_eq!(
            (
                r["lines"].as_u64(),
                r["words"].as_u64(),
                r["bytes"].as_u64()
            ),
            (Some(2), Some(3), Some(6))
        );
        let p = FileCountParams { path: ".".into() };
        let plan = read_plan(&f.ctx(), ".").unwrap();
        assert_eq!(
            execute(&f.ctx(), &p, &ticket_for(&plan)).unwrap_err().code,
            ErrorCode::InvalidParams
        );
    }
}
