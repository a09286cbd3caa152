//! `glovebox approve`'s input: what the approver types, stamped with the moment it arrived, and
//! what it means for the ask on screen. On a terminal each key is an entry (`y`, no Enter); from a
//! pipe each line is (scripts keep working). An entry answers only the ask that was on screen
//! before it arrived, by at least [`MIN_READING_TIME`]: input typed ahead — for an ask that was
//! withdrawn meanwhile, or while no ask was shown — is dropped, never applied to the next ask.
//!
//! The splitting into keys and lines and the judging are pure; `spawn_stdin_reader` is the IO
//! edge, a thread that reads the raw stdin descriptor (no buffer of its own that could hold input
//! back) as soon as bytes arrive.

use std::time::{Duration, Instant};

use glovebox_proto::ws::Decision;

/// An entry that arrived sooner than this after its ask was shown was typed before the approver
/// could have read the ask: it is dropped. (It also covers the moment between a byte arriving
/// and the reader stamping it.)
pub const MIN_READING_TIME: Duration = Duration::from_secs(1);
/// Longest line kept, in bytes; the rest of a longer line is dropped (no answer is that long).
const MAX_LINE_BYTES: usize = 1024;
/// The byte a terminal sends for Ctrl-C when it does not turn it into SIGINT itself.
const CTRL_C: u8 = 0x03;
/// The byte that starts a terminal's escape sequence (arrow keys, function keys…).
const ESC: u8 = 0x1b;

/// How stdin is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A terminal in non-canonical mode: each key is an entry.
    Keys,
    /// Anything else (a pipe, a script): each line is an entry.
    Lines,
}

/// A key or a line of input (without its newline) and when it arrived (a line: its first byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub text: String,
    pub at: Instant,
}

/// What the reader sends on.
#[derive(Debug)]
pub enum Input {
    /// The entries of one read, in order.
    Typed(Vec<Entry>),
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
    pub fn feed(&mut self, bytes: &[u8], now: Instant) -> Vec<Entry> {
        let mut lines = Vec::new();
        for &b in bytes {
            let started = *self.started.get_or_insert(now);
            if b == b'\n' {
                lines.push(Entry {
                    text: String::from_utf8_lossy(&self.partial).into_owned(),
                    at: started,
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
    pub fn finish(&mut self) -> Option<Entry> {
        let at = self.started.take()?;
        let text = String::from_utf8_lossy(&self.partial).into_owned();
        self.partial.clear();
        Some(Entry { text, at })
    }
}

/// The keys in the bytes of one read from a terminal, each stamped `now`: one per character, an
/// escape sequence (what an arrow or function key sends, in one read) as one key.
pub fn keys(bytes: &[u8], now: Instant) -> Vec<Entry> {
    let mut keys = Vec::new();
    let mut rest = bytes;
    while let Some(&first) = rest.first() {
        let len = if first == ESC {
            rest.len()
        } else {
            utf8_len(first).min(rest.len())
        };
        let (key, tail) = rest.split_at(len);
        keys.push(Entry {
            text: String::from_utf8_lossy(key).into_owned(),
            at: now,
        });
        rest = tail;
    }
    keys
}

/// The length of the UTF-8 character `first` starts (1 for a stray continuation byte).
fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xf7 => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

/// What an entry means for the ask on screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Answer(Decision),
    /// `?`: show the ask's details again.
    Details,
    /// Ctrl-C read as a key (a terminal that does not turn it into SIGINT): deny and stop.
    Interrupt,
    /// Enter, a space or an empty line: no answer, and nothing to say about it.
    Nothing,
    /// An answer typed before the ask on screen was shown (or too soon after to have been read).
    Stale,
    /// No ask is on screen.
    NoAsk,
    /// Not one of the answers.
    Unknown,
}

/// Judges `entry` against the ask on screen, shown at `shown` (`None`: no ask on screen).
pub fn judge(entry: &Entry, shown: Option<Instant>) -> Verdict {
    let text = entry.text.trim();
    if text.as_bytes() == [CTRL_C] {
        return Verdict::Interrupt;
    }
    if text.is_empty() {
        return Verdict::Nothing;
    }
    let Some(shown) = shown else {
        return Verdict::NoAsk;
    };
    let decision = match text {
        "y" | "Y" => Decision::Once,
        "a" | "A" => Decision::Always,
        "n" | "N" => Decision::Deny,
        "?" => return Verdict::Details,
        _ => return Verdict::Unknown,
    };
    if shown
        .checked_add(MIN_READING_TIME)
        .is_none_or(|readable| entry.at < readable)
    {
        return Verdict::Stale;
    }
    Verdict::Answer(decision)
}

/// Reads stdin on its own thread from now on, sending what each read brings (stamped, as keys or
/// lines by `mode`) and then `End`.
pub fn spawn_stdin_reader(
    mode: Mode,
) -> std::io::Result<tokio::sync::mpsc::UnboundedReceiver<Input>> {
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
                        let now = Instant::now();
                        let typed = match mode {
                            Mode::Keys => keys(&buf[..n], now),
                            Mode::Lines => splitter.feed(&buf[..n], now),
                        };
                        if !typed.is_empty() && tx.send(Input::Typed(typed)).is_err() {
                            return;
                        }
                    }
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => break,
                }
            }
            if let Some(line) = splitter.finish() {
                let _ = tx.send(Input::Typed(vec![line]));
            }
            let _ = tx.send(Input::End);
        })?;
    Ok(rx)
}

/// Drops what was typed on the terminal but not yet read, so it cannot answer an ask shown after
/// it. Not a terminal: nothing to do (what was already read is judged by its stamp).
pub fn discard_unread_terminal_input() {
    let stdin = std::io::stdin();
    if rustix::termios::isatty(&stdin) {
        let _ = rustix::termios::tcflush(&stdin, rustix::termios::QueueSelector::IFlush);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str, at: Instant) -> Entry {
        Entry {
            text: text.to_owned(),
            at,
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
        assert_eq!(s.feed(b"\nn\na", t1), [entry("y", t0), entry("n", t1)]);
        assert_eq!(s.feed(b"\n", t2), [entry("a", t1)]);
        assert_eq!(s.finish(), None);
        assert_eq!(s.feed(b"tail", t2), []);
        assert_eq!(s.finish(), Some(entry("tail", t2)));
        // an over-long line is cut, and the next one starts clean
        let long = vec![b'x'; 5000];
        let got = s.feed(&[long.as_slice(), b"\ny\n"].concat(), t0);
        assert_eq!(got[0].text.len(), MAX_LINE_BYTES);
        assert_eq!(got[1], entry("y", t0));
    }

    #[test]
    fn a_terminals_bytes_are_keys_and_an_escape_sequence_is_one() {
        let t = Instant::now();
        let texts =
            |bytes: &[u8]| -> Vec<String> { keys(bytes, t).into_iter().map(|k| k.text).collect() };
        assert_eq!(texts(b"y"), ["y"]);
        assert_eq!(texts(b"y\n"), ["y", "\n"]);
        assert_eq!(texts(b"?n\r"), ["?", "n", "\r"]);
        assert_eq!(texts("é!".as_bytes()), ["é", "!"]);
        // the up arrow
        assert_eq!(texts(b"\x1b[A"), ["\x1b[A"]);
        assert_eq!(texts(b"y\x1b[B"), ["y", "\x1b[B"]);
        assert_eq!(texts(b""), Vec::<String>::new());
        // a character cut by the end of the read is one (unknown) key, not a panic
        assert_eq!(texts(&"é".as_bytes()[..1]).len(), 1);
        assert!(keys(b"an", t).iter().all(|k| k.at == t));
    }

    #[test]
    fn keys_map_to_answers_details_and_reminders() {
        let shown = Instant::now();
        let after = shown + MIN_READING_TIME;
        for (text, want) in [
            ("y", Verdict::Answer(Decision::Once)),
            ("Y", Verdict::Answer(Decision::Once)),
            ("a", Verdict::Answer(Decision::Always)),
            ("A", Verdict::Answer(Decision::Always)),
            ("n", Verdict::Answer(Decision::Deny)),
            ("N", Verdict::Answer(Decision::Deny)),
            ("?", Verdict::Details),
            ("\x03", Verdict::Interrupt),
            ("\n", Verdict::Nothing),
            ("\r", Verdict::Nothing),
            (" ", Verdict::Nothing),
            ("x", Verdict::Unknown),
            ("\x04", Verdict::Unknown),
            ("\x1b[A", Verdict::Unknown),
            ("q", Verdict::Unknown),
        ] {
            assert_eq!(judge(&entry(text, after), Some(shown)), want, "{text:?}");
        }
    }

    #[test]
    fn only_an_answer_that_arrived_a_second_after_the_ask_was_shown_answers_it() {
        let shown = Instant::now() + Duration::from_secs(10);
        let after = shown + MIN_READING_TIME;
        let table = [
            (
                entry("y", after),
                Some(shown),
                Verdict::Answer(Decision::Once),
            ),
            (
                entry(" A ", after),
                Some(shown),
                Verdict::Answer(Decision::Always),
            ),
            (
                entry("n", after),
                Some(shown),
                Verdict::Answer(Decision::Deny),
            ),
            (entry("yes please", after), Some(shown), Verdict::Unknown),
            (entry("", after), Some(shown), Verdict::Nothing),
            // typed before the ask was shown (for one withdrawn meanwhile, say)
            (
                entry("y", shown - Duration::from_millis(1)),
                Some(shown),
                Verdict::Stale,
            ),
            // typed as it appeared: too soon to have been read
            (
                entry("y", shown + Duration::from_millis(10)),
                Some(shown),
                Verdict::Stale,
            ),
            (
                entry("a", after - Duration::from_millis(1)),
                Some(shown),
                Verdict::Stale,
            ),
            (entry("n", shown), Some(shown), Verdict::Stale),
            // asking for the details, or Ctrl-C, is never too soon
            (entry("?", shown), Some(shown), Verdict::Details),
            (entry("\x03", shown), Some(shown), Verdict::Interrupt),
            // nothing on screen
            (entry("y", after), None, Verdict::NoAsk),
            (entry("?", after), None, Verdict::NoAsk),
            (entry("\n", after), None, Verdict::Nothing),
            (entry("\x03", after), None, Verdict::Interrupt),
        ];
        for (e, shown, want) in table {
            assert_eq!(judge(&e, shown), want, "{e:?}");
        }
    }
}
