//! The display form of untrusted text for approvers: characters that can hide or reorder what a
//! person reads (bidi controls, zero-width characters, C0/C1 controls other than tab and LF, line
//! and paragraph separators, ANSI escape sequences) become visible tokens such as `⟨U+202E⟩` or
//! `⟨ESC[31m⟩`. What runs is never changed; only what is shown. Pure.

/// Text prepared for display, and whether anything in it was hidden or deceptive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revealed {
    pub text: String,
    pub flagged: bool,
}

fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

fn is_zero_width(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}')
}

fn token(c: char) -> String {
    format!("⟨U+{:04X}⟩", c as u32)
}

/// Longest escape sequence shown as one token; longer ones are cut (and still flagged).
const MAX_ESCAPE: usize = 64;

/// Reveals the unsafe characters of `input`.
pub fn reveal(input: &str) -> Revealed {
    let chars: Vec<char> = input.chars().collect();
    let mut out = String::with_capacity(input.len());
    let mut flagged = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\t' | '\n' => out.push(c),
            '\r' if chars.get(i + 1) == Some(&'\n') => {
                out.push_str("⟨CRLF⟩\n");
                i += 1;
            }
            '\r' => {
                // A bare CR returns the cursor: what follows would overwrite what came before.
                out.push_str("⟨CR⟩\n");
                flagged = true;
            }
            '\u{1B}' => {
                let end = escape_end(&chars, i);
                let seq: String = chars[i + 1..end].iter().take(MAX_ESCAPE).collect();
                out.push_str(&format!(
                    "⟨ESC{}⟩",
                    seq.replace(|ch: char| ch.is_control(), "?")
                ));
                flagged = true;
                i = end;
                continue;
            }
            c if is_bidi(c) || is_zero_width(c) || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&token(c));
                flagged = true;
            }
            c if c.is_control() => {
                out.push_str(&token(c));
                flagged = true;
            }
            c => out.push(c),
        }
        i += 1;
    }
    Revealed { text: out, flagged }
}

/// The index just past an escape sequence starting at `start` (an ESC).
fn escape_end(chars: &[char], start: usize) -> usize {
    let next = start + 1;
    match chars.get(next) {
        // CSI: ESC [ parameters intermediates final
        Some('[') => {
            let mut j = next + 1;
            while let Some(&c) = chars.get(j) {
                j += 1;
                if ('\u{40}'..='\u{7E}').contains(&c) {
                    return j;
                }
                if !('\u{20}'..='\u{3F}').contains(&c) {
                    return j - 1;
                }
            }
            j
        }
        // OSC: ESC ] ... (BEL | ESC \)
        Some(']') => {
            let mut j = next + 1;
            while let Some(&c) = chars.get(j) {
                if c == '\u{7}' {
                    return j + 1;
                }
                if c == '\u{1B}' && chars.get(j + 1) == Some(&'\\') {
                    return j + 2;
                }
                j += 1;
            }
            j
        }
        Some(_) => next + 1,
        None => next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, want: &str, flagged: bool) {
        let r = reveal(input);
        assert_eq!(r.text, want, "{input:?}");
        assert_eq!(r.flagged, flagged, "{input:?}");
    }

    #[test]
    fn table() {
        check("ls -la", "ls -la", false);
        check("a\tb\nc", "a\tb\nc", false);
        check("line\r\nnext", "line⟨CRLF⟩\nnext", false);
        check("safe\rrm -rf ~", "safe⟨CR⟩\nrm -rf ~", true);
        check("file\u{202E}txt.exe", "file⟨U+202E⟩txt.exe", true);
        check("a\u{2066}b\u{2069}", "a⟨U+2066⟩b⟨U+2069⟩", true);
        check("zero\u{200B}width", "zero⟨U+200B⟩width", true);
        check("bom\u{FEFF}", "bom⟨U+FEFF⟩", true);
        check("\u{1B}[31mred\u{1B}[0m", "⟨ESC[31m⟩red⟨ESC[0m⟩", true);
        check("\u{1B}]0;title\u{7}x", "⟨ESC]0;title?⟩x", true);
        check("bell\u{7}", "bell⟨U+0007⟩", true);
        check("c1\u{85}x", "c1⟨U+0085⟩x", true);
        check("sep\u{2028}x", "sep⟨U+2028⟩x", true);
        check("null\0", "null⟨U+0000⟩", true);
        check("trailing esc\u{1B}", "trailing esc⟨ESC⟩", true);
        check("ünïcödé 日本", "ünïcödé 日本", false);
    }

    #[test]
    fn long_escapes_are_cut_but_flagged() {
        let input = format!("\u{1B}[{}m", "1;".repeat(200));
        let r = reveal(&input);
        assert!(r.flagged);
        assert!(r.text.chars().count() < 80, "{}", r.text);
    }
}
