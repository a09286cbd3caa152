//! `file_head_tail`: the first or the last N lines of a text file. The tail is read backwards
//! from the end, so a huge file costs only the bytes returned; output is cut at 1 MiB.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileHeadTailParams, MAX_READ_BYTES};
use glovebox_proto::v1::TicketBody;
use serde_json::json;

use crate::approved::open_approved_file;
use crate::context::{Done, OpContext};
use crate::error::OpError;

/// Lines returned when the call does not say.
pub const DEFAULT_LINES: u32 = 10;
const CHUNK: u64 = 64 * 1024;

/// The first `n` lines (with their newlines), at most `cap` bytes; (text, cut by the cap).
pub fn head(reader: impl Read, n: u32, cap: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let mut reader = BufReader::new(reader.take(cap + 1));
    let mut out = Vec::new();
    for _ in 0..n {
        if reader.read_until(b'\n', &mut out)? == 0 {
            break;
        }
    }
    let cut = out.len() as u64 > cap;
    out.truncate(cap as usize);
    Ok((out, cut))
}

/// The last `n` lines of a file of `size` bytes, at most `cap` bytes; (text, cut by the cap).
pub fn tail(
    file: &mut (impl Read + Seek),
    size: u64,
    n: u32,
    cap: u64,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut buf: Vec<u8> = Vec::new();
    let mut pos = size;
    loop {
        // A final newline ends the last line; it does not start an empty one.
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let newlines = body.iter().filter(|b| **b == b'\n').count();
        if newlines >= n as usize || pos == 0 || buf.len() as u64 > cap {
            break;
        }
        let step = CHUNK.min(pos);
        pos -= step;
        let mut chunk = vec![0u8; step as usize];
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
    }
    let body_len = buf.strip_suffix(b"\n").map_or(buf.len(), <[u8]>::len);
    let mut start = 0;
    let mut seen = 0;
    for i in (0..body_len).rev() {
        if buf[i] == b'\n' {
            seen += 1;
            if seen == n {
                start = i + 1;
                break;
            }
        }
    }
    let mut out = buf.split_off(start);
    let cut = out.len() as u64 > cap;
    if cut {
        out = out.split_off(out.len() - cap as usize);
    }
    Ok((out, cut))
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileHeadTailParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let (path, fd, stat) = open_approved_file(ctx, &p.path, ticket)?;
    let n = p.lines.unwrap_or(DEFAULT_LINES);
    let mut file = std::fs::File::from(fd);
    let io = |e| OpError::io(e, &p.path);
    let (bytes, cut) = if p.tail {
        tail(&mut file, stat.st_size.max(0) as u64, n, MAX_READ_BYTES).map_err(io)?
    } else {
        head(file, n, MAX_READ_BYTES).map_err(io)?
    };
    if bytes.contains(&0) {
        return Err(OpError::new(
            ErrorCode::Binary,
            format!("{} is a binary file", p.path),
        ));
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let lines = text.lines().count();
    Ok(Done::new(
        &json!({ "path": path, "content": text, "lines": lines, "truncated": cut }),
        bytes.len() as u64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn tail_of(text: &str, n: u32, cap: u64) -> (String, bool) {
        let mut c = Cursor::new(text.as_bytes().to_vec());
        let (b, cut) = tail(&mut c, text.len() as u64, n, cap).unwrap();
        (String::from_utf8(b).unwrap(), cut)
    }

    #[test]
    fn a_files_head_and_tail_come_with_the_fields_the_catalog_names() {
        use crate::testing::{Fixture, conforming, ticket_for};
        use glovebox_proto::tools::Tool;
        let f = Fixture::new();
        std::fs::write(f.work.join("t.txt"), "1\n2\n3\n4\n").unwrap();
        let run = |tail| {
            let p = FileHeadTailParams {
                path: "t.txt".into(),
                lines: Some(2),
                tail,
            };
            let planned = crate::approved::read_plan(&f.ctx(), &p.path).unwrap();
            let done = execute(&f.ctx(), &p, &ticket_for(&planned)).unwrap();
            conforming(Tool::FileHeadTail, done.value())
        };
        let head = run(false);
        assert_eq!(head["content"], "1\n2\n");
        assert_eq!(head["lines"], 2);
        assert_eq!(head["truncated"], false);
        assert_eq!(head["path"], f.path("t.txt"));
        assert_eq!(run(true)["content"], "3\n4\n");
    }

    #[test]
    fn head_and_tail_table() {
        let text = "1\n2\n3\n4\n";
        assert_eq!(
            head(text.as_bytes(), 2, 100).unwrap(),
            (b"1\n2\n".to_vec(), false)
        );
        assert_eq!(head(text.as_bytes(), 9, 100).unwrap().0, text.as_bytes());
        assert_eq!(tail_of(text, 2, 100), ("3\n4\n".to_owned(), false));
        assert_eq!(tail_of("1\n2\n3", 2, 100), ("2\n3".to_owned(), false));
        assert_eq!(tail_of(text, 9, 100), (text.to_owned(), false));
        assert_eq!(tail_of("", 3, 100), (String::new(), false));
        assert_eq!(
            head(text.as_bytes(), 4, 3).unwrap(),
            (b"1\n2".to_vec(), true)
        );
    }

    #[test]
    fn tail_reads_across_chunks() {
        let text: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
        let (t, cut) = tail_of(&text, 3, MAX_READ_BYTES);
        assert_eq!(t, "line 49997\nline 49998\nline 49999\n");
        assert!(!cut);
        let (t, cut) = tail_of(&text, 50_000, 1000);
        assert!(cut);
        assert_eq!(t.len(), 1000);
    }
}
