//! The characters untrusted text is judged by: what a text is ([`Kind`]), which characters are
//! blank, invisible or hidden, and how one is named (`U+XXXX`). A leaf the display's parts share.

/// What a text is: each kind is shown by its own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A path or a name: one line on screen, its edges spelled out.
    Path,
    /// A shell command: may span lines, but every break and edge is made plain.
    Command,
    /// A diff or another multi-line preview: newlines and tabs are ordinary.
    Preview,
}

/// Whitespace of any kind, and characters drawn as blank (Hangul fillers, the braille blank).
pub(super) fn is_blank(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\u{115F}' | '\u{1160}' | '\u{2800}' | '\u{3164}' | '\u{FFA0}'
        )
}

/// Bidirectional controls: they reorder what is drawn around them.
pub(super) fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Characters drawn as nothing at all.
pub(super) fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200D}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{00AD}' | '\u{180E}'
    )
}

/// Characters always shown as a token (whitespace is handled apart).
pub(super) fn is_hidden(c: char) -> bool {
    !is_blank(c) && (is_bidi(c) || is_invisible(c) || c.is_control())
}

/// A character's code point as `U+XXXX`.
pub(super) fn code(c: char) -> String {
    format!("U+{:04X}", c as u32)
}

/// A character shown as a token in its place: `⟨U+XXXX⟩`.
pub(super) fn code_token(c: char) -> String {
    format!("⟨{}⟩", code(c))
}
