//! A capped output buffer for one stream of a job: keeps the newest bytes, counts all of them,
//! and answers "the last N lines" and "everything since offset X". Pure.

use std::collections::VecDeque;

#[derive(Debug)]
pub struct Ring {
    buf: VecDeque<u8>,
    cap: usize,
    total: u64,
}

/// A slice of a stream's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    /// Offset of the first returned byte in the stream.
    pub start: u64,
    /// Bytes the caller asked for that are no longer kept.
    pub dropped: u64,
}

impl Ring {
    pub fn new(cap: usize) -> Ring {
        Ring {
            buf: VecDeque::with_capacity(cap.min(64 * 1024)),
            cap,
            total: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let bytes = if bytes.len() > self.cap {
            &bytes[bytes.len() - self.cap..]
        } else {
            bytes
        };
        let overflow = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(bytes);
    }

    /// Bytes ever written to the stream.
    pub fn total(&self) -> u64 {
        self.total
    }

    fn first_kept(&self) -> u64 {
        self.total - self.buf.len() as u64
    }

    /// Everything from `offset` on.
    pub fn since(&self, offset: u64) -> Chunk {
        let first = self.first_kept();
        let start = offset.clamp(first, self.total);
        let skip = (start - first) as usize;
        let bytes: Vec<u8> = self.buf.iter().skip(skip).copied().collect();
        Chunk {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            start,
            dropped: first.saturating_sub(offset),
        }
    }

    /// The last `n` lines (a final line without a newline counts as a line).
    pub fn last_lines(&self, n: usize) -> Chunk {
        let len = self.buf.len();
        let mut newlines = 0;
        let mut cut = 0;
        // Walk back over the kept bytes; a trailing newline does not start a new line.
        for i in (0..len).rev() {
            if self.buf[i] == b'\n' && i + 1 != len {
                newlines += 1;
                if newlines == n {
                    cut = i + 1;
                    break;
                }
            }
        }
        let start = self.first_kept() + cut as u64;
        let bytes: Vec<u8> = self.buf.iter().skip(cut).copied().collect();
        Chunk {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            start,
            dropped: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_bytes_and_counts_all() {
        let mut r = Ring::new(8);
        r.push(b"hello ");
        r.push(b"world\n");
        assert_eq!(r.total(), 12);
        let all = r.since(0);
        assert_eq!(
            all,
            Chunk {
                text: "o world\n".into(),
                start: 4,
                dropped: 4
            }
        );
        assert_eq!(r.since(10).text, "d\n");
        assert_eq!(
            r.since(99),
            Chunk {
                text: String::new(),
                start: 12,
                dropped: 0
            }
        );
        // a single push bigger than the cap keeps its tail
        r.push(&[b'x'; 20]);
        assert_eq!(r.since(0).text, "xxxxxxxx");
        assert_eq!(r.total(), 32);
    }

    #[test]
    fn last_lines() {
        let mut r = Ring::new(1024);
        r.push(b"one\ntwo\nthree\n");
        assert_eq!(r.last_lines(1).text, "three\n");
        assert_eq!(r.last_lines(2).text, "two\nthree\n");
        assert_eq!(r.last_lines(10).text, "one\ntwo\nthree\n");
        r.push(b"partial");
        assert_eq!(r.last_lines(1).text, "partial");
        assert_eq!(r.last_lines(2).text, "three\npartial");
        assert_eq!(r.last_lines(2).start, 8);
        assert_eq!(Ring::new(4).last_lines(3).text, "");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        let mut r = Ring::new(16);
        r.push(b"a\xffb\n");
        assert_eq!(r.since(0).text, "a\u{fffd}b\n");
    }
}
