//! `glovebox approve`'s input: each line an approver types is stamped with the moment its first
//! byte arrived, and a line counts as an answer only to an ask that was on screen before that
//! moment (by at least [`MIN_READING_TIME`]). Input typed ahead — for an ask that was withdrawn
//! meanwhile, or while no ask was shown — is dropped, never applied to the next ask.
//!
//! The splitting and the judging are pure; `spawn_stdin_reader` is the IO edge, a thread that
//! reads the raw stdin descriptor (no buffer of its own that could hold lines back) as soon as
//! bytes arrive.

use std::time::{Duration, Instant};

use glovebox_proto::ws::Decision;

/// A line that started sooner than this after its ask was shown was typed before the approver
/// could have read the ask: it is dropped. (It also covers the moment between a byte arriving
/// and the reader stamping it.)
pub const MIN_READING_TIME: Duration = Duration::from_secs(1);
/// Longest line kept, in bytes; the rest of a longer line is dropped (no answer is that long).
const MAX_LINE_BYTES: usize = 1024;

/// A line of input (without its newline) and when its first byte arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub text: String,
    pub started: Instant,
}

/// What the reader sends on.
#[derive(Debug)]
pub enum Input {
    Line(Line),
    /// Stdin ended (or failed): no answer can come any more.
    End,
}

/// Splits byte chunks into lines, remembering when each line's first byte arrived.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
    started: Option<Instant>,
}

impl LineSplitter {
    /// Takes the bytes read at `now`; returns the lines they complete.
    pub fn feed(&mut self, bytes: &[u8], now: Instant) -> Vec<Line> {
        let mut lines = Vec::new();
        for &b in bytes {
            let started = *self.started.get_or_insert(now);
            if b == b'\n' {
                lines.push(Line {
                    text: String::from_utf8_lossy(&self.partial).into_owned(),
                    started,
                });
                self.partial.clear();
                self.started = None;
            } else if self.partial.len() < MAX_LINE_BYTES {
                self.partial.push(b);
            }
        }
        lines
    }

    /// At the end of input: the unterminated last line, if any.
    pub fn finish(&mut self) -> Option<Line> {
        let started = self.started.take()?;
        let text = String::from_utf8_lossy(&self.partial).into_owned();
        self.partial.clear();
        Some(Line { text, started })
    }
}

/// What a line means for the ask on screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Answer(Decision),
    /// Typed before the ask on screen was shown (or too soon after to have been read).
    Stale,
    /// No ask is on screen.
    NoAsk,
    /// Not one of the answers.
    Unknown,
}

/// Judges `line` against the ask on screen, shown at `shown` (`None`: no ask on screen).
pub fn judge(line: &Line, shown: Option<Instant>) -> Verdict {
    let Some(shown) = shown else {
        return Verdict::NoAsk;
    };
    if shown
        .checked_add(MIN_READING_TIME)
        .is_none_or(|readable| line.started < readable)
    {
        return Verdict::Stale;
    }
    match line.text.trim() {
        "y" | "Y" => Verdict::Answer(Decision::Once),
        "a" | "A" => Verdict::Answer(Decision::Always),
        "n" | "N" => Verdict::Answer(Decision::Deny),
        _ => Verdict::Unknown,
    }
}

/// Reads stdin on its own thread from now on, sending each line (stamped) and then `End`.
pub fn spawn_stdin_reader() -> std::io::Result<tokio::sync::mpsc::UnboundedReceiver<Input>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("approve-stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            let mut splitter = LineSplitter::default();
            let mut buf = [0u8; 512];
            loop {
                match rustix::io::read(&stdin, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        for line in splitter.feed(&buf[..n], Instant::now()) {
                            if tx.send(Input::Line(line)).is_err() {
                                return;
                            }
                        }
                    }
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => break,
                }
            }
            if let Some(line) = splitter.finish() {
                let _ = tx.send(Input::Line(line));
            }
            let _ = tx.send(Input::End);
        })?;
    Ok(rx)
}

/// Drops what was typed on the terminal but not yet read (a half-typed answer, in canonical
/// mode), so it cannot complete into an answer to an ask shown after it. Not a terminal: nothing
/// to do (lines already read are judged by their stamp).
pub fn discard_unread_terminal_input() {
    let stdin = std::io::stdin();
    if rustix::termios::isatty(&stdin) {
        let _ = rustix::termios::tcflush(&stdin, rustix::termios::QueueSelector::IFlush);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, started: Instant) -> Line {
        Line {
            text: text.to_owned(),
            started,
        }
    }

    #[test]
    fn lines_are_stamped_with_their_first_byte() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let t2 = t0 + Duration::from_secs(2);
        let mut s = LineSplitter::default();
        // "y" typed before, its newline after: the line started at t0
        assert_eq!(s.feed(b"y", t0), []);
        assert_eq!(s.feed(b"\nn\na", t1), [line("y", t0), line("n", t1)]);
        assert_eq!(s.feed(b"\n", t2), [line("a", t1)]);
        assert_eq!(s.finish(), None);
        assert_eq!(s.feed(b"tail", t2), []);
        assert_eq!(s.finish(), Some(line("tail", t2)));
        // an over-long line is cut, and the next one starts clean
        let long = vec![b'x'; 5000];
        let got = s.feed(&[long.as_slice(), b"\ny\n"].concat(), t0);
        assert_eq!(got[0].text.len(), MAX_LINE_BYTES);
        assert_eq!(got[1], line("y", t0));
    }

    #[test]
    fn only_a_line_begun_after_the_ask_was_shown_answers_it() {
        let shown = Instant::now() + Duration::from_secs(10);
        let after = shown + MIN_READING_TIME;
        let table = [
            (
                line("y", after),
                Some(shown),
                Verdict::Answer(Decision::Once),
            ),
            (
                line(" A ", after),
                Some(shown),
                Verdict::Answer(Decision::Always),
            ),
            (
                line("n", after),
                Some(shown),
                Verdict::Answer(Decision::Deny),
            ),
            (line("yes please", after), Some(shown), Verdict::Unknown),
            (line("", after), Some(shown), Verdict::Unknown),
            // typed before the ask was shown (for one withdrawn meanwhile, say)
            (
                line("y", shown - Duration::from_millis(1)),
                Some(shown),
                Verdict::Stale,
            ),
            // typed as it appeared: too soon to have been read
            (
                line("y", shown + Duration::from_millis(10)),
                Some(shown),
                Verdict::Stale,
            ),
            (line("n", shown), Some(shown), Verdict::Stale),
            // nothing on screen
            (line("y", after), None, Verdict::NoAsk),
        ];
        for (l, shown, want) in table {
            assert_eq!(judge(&l, shown), want, "{l:?}");
        }
    }
}
