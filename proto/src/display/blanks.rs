//! Whitespace as the display form sees it: runs of it split into characters (a CR LF pair is
//! one), their visible tokens, and a run's count as shown when it is compressed. Pure.

use super::chars::{Kind, code, code_token, is_blank};

/// One whitespace character (a CR LF pair counts as one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blank {
    Space,
    Tab,
    Lf,
    CrLf,
    Cr,
    /// VT, FF, NEL, line and paragraph separators.
    Break(char),
    /// Any other space: no-break, Unicode spaces, blank-looking fillers.
    Other(char),
}

impl Blank {
    pub(super) fn is_break(self) -> bool {
        matches!(self, Blank::Lf | Blank::CrLf | Blank::Cr | Blank::Break(_))
    }

    /// The visible token for this character.
    pub(super) fn token(self) -> String {
        match self {
            Blank::Space => "⟨SP⟩".to_owned(),
            Blank::Tab => "⟨TAB⟩".to_owned(),
            Blank::Lf => "⟨LF⟩".to_owned(),
            Blank::CrLf => "⟨CRLF⟩".to_owned(),
            Blank::Cr => "⟨CR⟩".to_owned(),
            Blank::Break(c) | Blank::Other(c) => code_token(c),
        }
    }

    /// How it is shown inside a command or a preview.
    pub(super) fn inline(self, kind: Kind) -> String {
        match (self, kind) {
            (Blank::Space, _) => " ".to_owned(),
            (Blank::Tab, Kind::Preview) => "\t".to_owned(),
            (Blank::Lf, _) => "\n".to_owned(),
            // A bare CR returns the cursor: what follows would overwrite what came before.
            (Blank::CrLf | Blank::Cr, _) => format!("{}\n", self.token()),
            (Blank::Other(c), Kind::Preview) => c.to_string(),
            (u, _) => u.token(),
        }
    }
}

/// The maximal run of whitespace starting at `start`, and the index just past it.
pub(super) fn blank_run(chars: &[char], start: usize) -> (Vec<Blank>, usize) {
    let mut units = Vec::new();
    let mut i = start;
    while let Some(&c) = chars.get(i) {
        if !is_blank(c) {
            break;
        }
        let unit = match c {
            ' ' => Blank::Space,
            '\t' => Blank::Tab,
            '\n' => Blank::Lf,
            '\r' if chars.get(i + 1) == Some(&'\n') => {
                i += 1;
                Blank::CrLf
            }
            '\r' => Blank::Cr,
            '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}' => Blank::Break(c),
            c => Blank::Other(c),
        };
        units.push(unit);
        i += 1;
    }
    (units, i)
}

/// What a run holds, in order of first appearance: "240 spaces", "2 line breaks, 3 tabs",
/// "5 × U+00A0".
pub(super) fn describe(units: &[Blank]) -> String {
    let mut parts: Vec<(String, usize)> = Vec::new();
    for &u in units {
        let what = match u {
            Blank::Space => "space".to_owned(),
            Blank::Tab => "tab".to_owned(),
            Blank::Lf | Blank::CrLf | Blank::Cr | Blank::Break(_) => "line break".to_owned(),
            Blank::Other(c) => code(c),
        };
        match parts.iter_mut().find(|(w, _)| *w == what) {
            Some((_, n)) => *n += 1,
            None => parts.push((what, 1)),
        }
    }
    parts
        .iter()
        .map(|(what, n)| match (what.starts_with("U+"), n) {
            (true, n) => format!("{n} × {what}"),
            (false, 1) => format!("1 {what}"),
            (false, n) => format!("{n} {what}s"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &str) -> Vec<Blank> {
        let chars: Vec<char> = s.chars().collect();
        let (units, end) = blank_run(&chars, 0);
        assert_eq!(end, chars.len(), "{s:?} is not all whitespace");
        units
    }

    #[test]
    fn runs_split_into_characters_with_crlf_as_one() {
        use Blank::*;
        assert_eq!(run(" \t\r\n\r"), [Space, Tab, CrLf, Cr]);
        assert_eq!(
            run("\u{A0}\u{2028}\u{3164}\u{0B}"),
            [
                Other('\u{A0}'),
                Break('\u{2028}'),
                Other('\u{3164}'),
                Break('\u{0B}')
            ]
        );
        // a run ends at the first other character
        let chars: Vec<char> = "  x ".chars().collect();
        assert_eq!(blank_run(&chars, 0), (vec![Space, Space], 2));
        assert!(
            !is_blank('\u{200B}'),
            "zero-width characters are hidden, not blank"
        );
    }

    #[test]
    fn descriptions() {
        for (input, want) in [
            (" ", "1 space"),
            ("    ", "4 spaces"),
            ("\t\t", "2 tabs"),
            ("\n\r\n\r\u{2029}", "4 line breaks"),
            (" \n \n", "2 spaces, 2 line breaks"),
            ("\u{A0}\u{A0}\u{2003}", "2 × U+00A0, 1 × U+2003"),
        ] {
            assert_eq!(describe(&run(input)), want, "{input:?}");
        }
    }
}
