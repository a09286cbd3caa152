//! Words that mix scripts, by UTS #39's mixed-script detection (`unicode-security`): a Cyrillic
//! `е` in a Latin `echo`, a Greek `α` in `paypal`. Finds each such word, the script most of its
//! letters share and the letters foreign to it. Pure.
//!
//! Single-script words of any script are ordinary, and so is Latin mixed with Han, Japanese or
//! Korean (UTS #39's "highly restrictive" level) — unless the word passes for ASCII: a word of
//! one script whose every letter is confusable with an ASCII one (`аррӏе`, all Cyrillic, reads
//! `apple` by UTS #39's skeleton), and fullwidth or mathematical letters (`ｅｃｈｏ`, `𝐞𝐜𝐡𝐨`),
//! are found too ([`suspect_words`]).

use unicode_security::confusable_detection::skeleton;
use unicode_security::mixed_script::AugmentedScriptSet;
use unicode_security::{
    MixedScript, RestrictionLevel, RestrictionLevelDetection,
    is_potential_mixed_script_confusable_char,
};

use super::chars::{code_token, is_blank, is_hidden, is_invisible};

/// Longest word quoted in a warning, in characters.
const MAX_QUOTED_WORD: usize = 40;

/// A word that mixes scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MixedWord {
    /// Where the word is, as char indices of the text (end exclusive).
    pub start: usize,
    pub end: usize,
    /// The script most of its letters share.
    pub home: &'static str,
    /// The letters foreign to it: (char index in the text, their script).
    pub foreign: Vec<(usize, &'static str)>,
    /// Whether a foreign letter can pass for a letter of another script.
    pub look_alike: bool,
}

impl MixedWord {
    /// `mixed scripts (Latin and Cyrillic look-alikes) in `еcho``.
    pub fn warning(&self, chars: &[char]) -> String {
        let mut scripts = vec![self.home];
        for &(_, s) in &self.foreign {
            if !scripts.contains(&s) {
                scripts.push(s);
            }
        }
        let names = match scripts.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => scripts.join(""),
        };
        let quoted = quoted(&chars[self.start..self.end]);
        let look_alikes = if self.look_alike { " look-alikes" } else { "" };
        format!("mixed scripts ({names}{look_alikes}) in `{quoted}`")
    }
}

/// Every word of `chars` that mixes scripts.
#[cfg(test)]
fn mixed_words(chars: &[char]) -> Vec<MixedWord> {
    suspect_words(chars, false).0
}

/// A word of non-ASCII letters that passes for an ASCII word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LookAlike {
    /// Where the word is, as char indices of the text (end exclusive).
    pub start: usize,
    pub end: usize,
    /// The ASCII word it reads as.
    pub reads_as: String,
    /// The non-ASCII letters: (char index in the text, what they are: `CYRILLIC`, `FULLWIDTH`).
    pub letters: Vec<(usize, String)>,
}

impl LookAlike {
    /// ``аррӏе` passes for the ASCII `apple` (Cyrillic letters)`.
    pub fn warning(&self, chars: &[char]) -> String {
        let mut kinds: Vec<String> = Vec::new();
        for (_, kind) in &self.letters {
            let kind = kind.to_lowercase();
            let kind = match kind.as_str() {
                "fullwidth" | "mathematical" => kind,
                _ => capitalised(&kind),
            };
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        format!(
            "`{}` passes for the ASCII `{}` ({} letters)",
            quoted(&chars[self.start..self.end]),
            self.reads_as,
            kinds.join(" and ")
        )
    }
}

/// Every word of `chars` that mixes scripts, and (with `look_alikes`) every other one that reads
/// as ASCII though it is not: its letters are fullwidth or mathematical forms of ASCII, or all
/// confusable with ASCII by UTS #39's skeleton. One pass over the words.
pub(super) fn suspect_words(chars: &[char], look_alikes: bool) -> (Vec<MixedWord>, Vec<LookAlike>) {
    let (mut mixed, mut alike) = (Vec::new(), Vec::new());
    for (start, end) in words(chars) {
        match mixed_word(chars, start, end) {
            Some(word) => mixed.push(word),
            None if look_alikes => alike.extend(look_alike(chars, start, end)),
            None => {}
        }
    }
    (mixed, alike)
}

fn look_alike(chars: &[char], start: usize, end: usize) -> Option<LookAlike> {
    let word = &chars[start..end];
    if word.iter().all(char::is_ascii) {
        return None;
    }
    let visible = (start..end).filter(|&i| !chars[i].is_ascii() && !is_hidden(chars[i]));
    // only hidden characters are not ASCII: they are flagged as such
    visible.clone().next()?;
    let text: String = word.iter().filter(|&&c| !is_hidden(c)).collect();
    let reads_as: String = skeleton(&text).collect();
    let compatibility = word.iter().any(|&c| compatibility_form(c).is_some());
    let ascii = reads_as.chars().all(|c| c.is_ascii_alphanumeric());
    if !(compatibility || ascii) || reads_as.is_empty() {
        return None;
    }
    let letters = visible
        .map(|i| {
            let c = chars[i];
            let kind = compatibility_form(c)
                .map(str::to_owned)
                .unwrap_or_else(|| script_name(AugmentedScriptSet::for_char(c)).to_uppercase());
            (i, kind)
        })
        .collect();
    Some(LookAlike {
        start,
        end,
        reads_as: quoted(&reads_as.chars().collect::<Vec<_>>()),
        letters,
    })
}

/// `FULLWIDTH` for the fullwidth forms of ASCII (`ｅ`), `MATHEMATICAL` for the mathematical
/// alphanumerics (`𝐞`, `𝕖`): letters drawn like ASCII but not ASCII.
fn compatibility_form(c: char) -> Option<&'static str> {
    match c {
        '\u{FF01}'..='\u{FF5E}' => Some("FULLWIDTH"),
        '\u{1D400}'..='\u{1D7FF}' => Some("MATHEMATICAL"),
        _ => None,
    }
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The maximal runs of word characters of `chars`, as (start, end) char indices.
fn words(chars: &[char]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < chars.len() && !is_word_char(chars[i]) {
            i += 1;
        }
        if i == chars.len() {
            return None;
        }
        let start = i;
        while i < chars.len() && is_word_char(chars[i]) {
            i += 1;
        }
        Some((start, i))
    })
}

/// A word as a warning quotes it: hidden characters as tokens, cut at [`MAX_QUOTED_WORD`].
fn quoted(word: &[char]) -> String {
    let mut quoted: String = word
        .iter()
        .take(MAX_QUOTED_WORD)
        .map(|&c| {
            if is_hidden(c) {
                code_token(c)
            } else {
                c.to_string()
            }
        })
        .collect();
    if word.len() > MAX_QUOTED_WORD {
        quoted.push('…');
    }
    quoted
}

/// Letters, digits and combining marks; invisible characters too, so that one cannot split a
/// word in two single-script halves (they are shown as tokens anyway).
fn is_word_char(c: char) -> bool {
    !is_blank(c)
        && !c.is_control()
        && (c.is_alphanumeric()
            || is_invisible(c)
            || AugmentedScriptSet::for_char(c).base.is_inherited())
}

fn mixed_word(chars: &[char], start: usize, end: usize) -> Option<MixedWord> {
    let letters: String = chars[start..end]
        .iter()
        .filter(|&&c| !is_hidden(c))
        .collect();
    if letters.as_str().is_single_script()
        || letters.as_str().detect_restriction_level() <= RestrictionLevel::HighlyRestrictive
    {
        return None;
    }
    let sets: Vec<(usize, AugmentedScriptSet)> = (start..end)
        .map(|i| (i, AugmentedScriptSet::for_char(chars[i])))
        .filter(|(_, s)| !s.is_all())
        .collect();
    let compatible = |a: AugmentedScriptSet, b: AugmentedScriptSet| {
        let mut both = a;
        both.intersect_with(b);
        !both.is_empty()
    };
    // The home script is the one most letters share; Latin wins a tie, since look-alikes
    // usually pose as Latin letters.
    let mut home: Option<(usize, bool, AugmentedScriptSet)> = None;
    for &(_, candidate) in &sets {
        let score = sets
            .iter()
            .filter(|(_, s)| compatible(*s, candidate))
            .count();
        let latin = script_name(candidate) == "Latin";
        if home.is_none_or(|(best, best_latin, _)| (score, latin) > (best, best_latin)) {
            home = Some((score, latin, candidate));
        }
    }
    let (_, _, home) = home?;
    let foreign: Vec<(usize, &'static str)> = sets
        .iter()
        .filter(|(_, s)| !compatible(*s, home))
        .map(|&(i, s)| (i, script_name(s)))
        .collect();
    let look_alike = foreign
        .iter()
        .any(|&(i, _)| is_potential_mixed_script_confusable_char(chars[i]));
    Some(MixedWord {
        start,
        end,
        home: script_name(home),
        foreign,
        look_alike,
    })
}

fn script_name(set: AugmentedScriptSet) -> &'static str {
    set.base
        .iter()
        .next()
        .map(|s| s.full_name())
        .unwrap_or("Unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mixed words of `text`: (word, home script, foreign letters).
    fn mixed(text: &str) -> Vec<(String, &'static str, String)> {
        let chars: Vec<char> = text.chars().collect();
        mixed_words(&chars)
            .into_iter()
            .map(|w| {
                (
                    chars[w.start..w.end].iter().collect(),
                    w.home,
                    w.foreign.iter().map(|&(i, _)| chars[i]).collect(),
                )
            })
            .collect()
    }

    fn owned(word: &str, home: &'static str, foreign: &str) -> (String, &'static str, String) {
        (word.to_owned(), home, foreign.to_owned())
    }

    #[test]
    fn which_words_mix_and_which_letters_are_foreign() {
        assert_eq!(mixed("echo hi"), []);
        assert_eq!(
            mixed("\u{435}cho hi"),
            [owned("\u{435}cho", "Latin", "\u{435}")]
        );
        // the majority decides the home script; Latin wins a tie
        assert_eq!(
            mixed("\u{41C}o\u{441}\u{43A}\u{432}\u{430}"),
            [owned(
                "\u{41C}o\u{441}\u{43A}\u{432}\u{430}",
                "Cyrillic",
                "o"
            )]
        );
        assert_eq!(mixed("a\u{3B1}"), [owned("a\u{3B1}", "Latin", "\u{3B1}")]);
        // punctuation and digits separate or join nothing: each word is judged alone
        assert_eq!(
            mixed("n\u{43E}tes.txt v2"),
            [owned("n\u{43E}tes", "Latin", "\u{43E}")]
        );
        // an invisible character does not split a word into two single-script halves
        assert_eq!(
            mixed("\u{435}\u{200B}cho"),
            [owned("\u{435}\u{200B}cho", "Latin", "\u{435}")]
        );
        // single-script words of any script, and Latin with Japanese, are ordinary
        for ordinary in [
            "日本語のファイル",
            "レポートv2",
            "\u{41F}\u{440}\u{438}\u{432}\u{435}\u{442} world",
            "αβγ δ",
            "café naïve",
        ] {
            assert_eq!(mixed(ordinary), [], "{ordinary}");
        }
    }

    #[test]
    fn warnings_name_the_scripts_and_quote_the_word_safely() {
        let chars: Vec<char> = "\u{435}\u{200B}cho".chars().collect();
        let words = mixed_words(&chars);
        assert_eq!(
            words[0].warning(&chars),
            "mixed scripts (Latin and Cyrillic look-alikes) in `\u{435}⟨U+200B⟩cho`"
        );
        let long: String = "\u{435}".chars().chain("x".repeat(60).chars()).collect();
        let chars: Vec<char> = long.chars().collect();
        let warning = mixed_words(&chars)[0].warning(&chars);
        assert!(warning.ends_with("x…`"), "{warning}");
        assert!(warning.chars().count() < 100, "{warning}");
        let chars: Vec<char> = "a\u{3B1}\u{435}".chars().collect();
        assert_eq!(
            mixed_words(&chars)[0].warning(&chars),
            "mixed scripts (Latin, Greek and Cyrillic look-alikes) in `a\u{3B1}\u{435}`"
        );
    }
}
