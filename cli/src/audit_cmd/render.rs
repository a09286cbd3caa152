//! How audit values reach a terminal: every stored text is untrusted (an agent chose the paths,
//! commands and ids it holds), so control characters, escape sequences and the invisible or
//! reordering code points are shown escaped (`\x1b`, `\u{202e}`), never sent to the terminal;
//! tables are aligned; JSON is serde_json's, which escapes control characters itself. Pure.

use std::fmt::Write;

/// Widest cell shown in a table, in characters; a longer value ends in `…` (`--json` has it all).
pub const MAX_CELL_CHARS: usize = 200;

/// One value as SQLite stores it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    /// Bytes the value holds (for the output bound).
    pub fn size(&self) -> usize {
        match self {
            Value::Null => 4,
            Value::Integer(_) | Value::Real(_) => 8,
            Value::Text(t) => t.len(),
            Value::Blob(b) => b.len() * 2,
        }
    }

    /// The value for a table cell, escaped.
    pub fn cell(&self) -> String {
        match self {
            Value::Null => "NULL".into(),
            Value::Integer(n) => n.to_string(),
            Value::Real(x) => x.to_string(),
            Value::Text(t) => escape(t),
            Value::Blob(b) => format!("x'{}'", hex::encode(b)),
        }
    }

    pub fn json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Integer(n) => (*n).into(),
            Value::Real(x) => serde_json::Number::from_f64(*x)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Text(t) => t.clone().into(),
            Value::Blob(b) => hex::encode(b).into(),
        }
    }
}

/// `text` with everything a terminal could act on written out: C0 and C1 controls, DEL, and the
/// code points that reorder or hide text (bidi controls, zero-width characters, the BOM); a
/// backslash is doubled so the escapes stay unambiguous.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) || invisible(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Code points that change how the text around them shows without showing themselves.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}' | '\u{feff}' | '\u{061c}' | '\u{00ad}')
}

/// Cuts a cell to [`MAX_CELL_CHARS`].
fn clip(cell: String) -> String {
    if cell.chars().count() <= MAX_CELL_CHARS {
        return cell;
    }
    let mut cut: String = cell.chars().take(MAX_CELL_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// An aligned table: a header, a rule, the rows; every cell escaped and clipped.
pub fn table(columns: &[String], rows: &[Vec<Value>]) -> String {
    let header: Vec<String> = columns.iter().map(|c| clip(escape(c))).collect();
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|v| clip(v.cell())).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            if i + 1 < cells.len() {
                text.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut out, &header);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut out, &rule);
    for row in &body {
        line(&mut out, row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_a_terminal_acts_on_gets_through() {
        let cases = [
            ("plain /w/a.txt", "plain /w/a.txt"),
            ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
            ("\x1b[2J", "\\x1b[2J"),
            ("a\u{9b}31m", "a\\u{9b}31m"),
            ("evil\u{202e}txt.exe", "evil\\u{202e}txt.exe"),
            ("zero\u{200b}width", "zero\\u{200b}width"),
            ("two\nlines\r", "two\\nlines\\r"),
            ("back\\slash", "back\\\\slash"),
            ("del\x7f", "del\\x7f"),
            ("naïve ünïcode 日本", "naïve ünïcode 日本"),
        ];
        for (raw, want) in cases {
            let got = escape(raw);
            assert_eq!(got, want);
            assert!(!got.chars().any(|c| c.is_control()), "{got:?}");
        }
    }

    #[test]
    fn tables_align_and_clip() {
        let columns = vec!["id".to_owned(), "subject\x1b".to_owned()];
        let rows = vec![
            vec![Value::Integer(1), Value::Text("read /a".into())],
            vec![Value::Integer(22), Value::Null],
            vec![Value::Integer(3), Value::Text("x".repeat(500))],
        ];
        let t = table(&columns, &rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "id  subject\\x1b");
        assert_eq!(lines[1], "--  ".to_owned() + &"-".repeat(MAX_CELL_CHARS));
        assert_eq!(lines[2], "1   read /a");
        assert_eq!(lines[3], "22  NULL");
        assert!(lines[4].ends_with('…'));
        assert_eq!(lines[4].chars().count(), 4 + MAX_CELL_CHARS);
    }
}
