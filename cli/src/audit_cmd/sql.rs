//! What `glovebox audit query` accepts: exactly one statement that reads. A small SQLite lexer
//! (strings, quoted identifiers, comments) finds the statement's end and its first keyword; it is
//! the first of three walls, the read-only connection (`mode=ro`) and `PRAGMA query_only` being
//! the others, so a statement it lets through still cannot change the file. Pure: no IO.

/// Longest SQL text accepted.
pub const MAX_SQL_BYTES: usize = 64 * 1024;

/// Keywords a read starts with. `WITH` may still front a write (`WITH x AS (…) DELETE …`): the
/// read-only connection refuses that one.
const READ_KEYWORDS: &[&str] = &["SELECT", "WITH", "VALUES", "EXPLAIN"];

/// Why a text is not one read statement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no SQL statement given")]
    Empty,
    #[error("the SQL is {0} bytes; at most {max} are accepted", max = MAX_SQL_BYTES)]
    TooLong(usize),
    #[error("exactly one statement is accepted; a second one starts at byte {0}")]
    Second(usize),
    #[error("an unterminated string, quoted name or comment")]
    Unterminated,
    #[error(
        "ATTACH is refused: a query reads this audit and nothing else (the database is read-only)"
    )]
    Attach,
    #[error(
        "{0} is refused: a query only reads the audit (SELECT, WITH, VALUES or EXPLAIN); the audit is append-only and written by the gate alone"
    )]
    NotRead(String),
}

/// The one statement in `sql`, without its trailing `;`, comments and blanks, once it is known
/// to start like a read.
pub fn one_read_statement(sql: &str) -> Result<&str, Refusal> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(Refusal::TooLong(sql.len()));
    }
    let tokens = lex(sql)?;
    let Some(first) = tokens.first() else {
        return Err(Refusal::Empty);
    };
    if first.kind == Kind::Semicolon {
        // A leading `;` is an empty statement before the real one: refuse, it is never meant.
        return Err(Refusal::Second(first.start));
    }
    let mut end = sql.len();
    let mut ended = false;
    for t in &tokens {
        match t.kind {
            Kind::Semicolon if !ended => {
                ended = true;
                end = t.start;
            }
            Kind::Semicolon => {}
            _ if ended => return Err(Refusal::Second(t.start)),
            _ => {}
        }
    }
    let keyword = sql[first.start..first.end].to_ascii_uppercase();
    if first.kind != Kind::Word || !READ_KEYWORDS.contains(&keyword.as_str()) {
        if keyword == "ATTACH" {
            return Err(Refusal::Attach);
        }
        return Err(Refusal::NotRead(if first.kind == Kind::Word {
            keyword
        } else {
            "a statement that does not start with a keyword".into()
        }));
    }
    if tokens
        .iter()
        .any(|t| t.kind == Kind::Word && sql[t.start..t.end].eq_ignore_ascii_case("ATTACH"))
    {
        return Err(Refusal::Attach);
    }
    Ok(sql[first.start..end].trim_end())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Word,
    Semicolon,
    Other,
}

#[derive(Debug, Clone, Copy)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
}

/// SQLite's tokens as far as this check needs them: words, `;`, and everything else (quoted
/// strings and names are one token each; comments and blanks are dropped).
fn lex(sql: &str) -> Result<Vec<Token>, Refusal> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let close = sql[i + 2..].find("*/").ok_or(Refusal::Unterminated)?;
                i += 2 + close + 2;
            }
            b'\'' | b'"' | b'`' | b'[' => {
                let close = if c == b'[' { b']' } else { c };
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Err(Refusal::Unterminated),
                        // A doubled quote is the quote itself (not for `[…]`).
                        Some(&x) if x == close && c != b'[' && b.get(i + 1) == Some(&close) => {
                            i += 2
                        }
                        Some(&x) if x == close => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                out.push(Token {
                    kind: Kind::Other,
                    start,
                    end: i,
                });
            }
            b';' => {
                i += 1;
                out.push(Token {
                    kind: Kind::Semicolon,
                    start,
                    end: i,
                });
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80)
                {
                    i += 1;
                }
                out.push(Token {
                    kind: Kind::Word,
                    start,
                    end: i,
                });
            }
            _ => {
                i += 1;
                out.push(Token {
                    kind: Kind::Other,
                    start,
                    end: i,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_read_is_accepted_and_trimmed() {
        let cases: &[(&str, &str)] = &[
            ("SELECT 1", "SELECT 1"),
            (
                "  select * from events ;  -- done\n",
                "select * from events",
            ),
            (
                "/* c */ WITH x AS (SELECT 1) SELECT * FROM x;;",
                "WITH x AS (SELECT 1) SELECT * FROM x",
            ),
            (
                "SELECT ';' AS a, \"b;\" FROM [c;d]",
                "SELECT ';' AS a, \"b;\" FROM [c;d]",
            ),
            ("SELECT 'it''s; fine'", "SELECT 'it''s; fine'"),
            ("VALUES (1)", "VALUES (1)"),
            ("SELECT 'attach'", "SELECT 'attach'"),
        ];
        for (sql, want) in cases {
            assert_eq!(one_read_statement(sql).as_deref(), Ok(*want), "{sql}");
        }
    }

    #[test]
    fn everything_else_is_refused() {
        let cases: &[(&str, Refusal)] = &[
            ("", Refusal::Empty),
            ("  -- nothing\n", Refusal::Empty),
            ("SELECT 1; SELECT 2", Refusal::Second(10)),
            ("SELECT 1; DELETE FROM events", Refusal::Second(10)),
            ("; SELECT 1", Refusal::Second(0)),
            ("DELETE FROM events", Refusal::NotRead("DELETE".into())),
            (
                "update events set kind = 'x'",
                Refusal::NotRead("UPDATE".into()),
            ),
            ("PRAGMA query_only = 0", Refusal::NotRead("PRAGMA".into())),
            ("ATTACH 'x.db' AS x", Refusal::Attach),
            ("SELECT 1 FROM (ATTACH 'x' AS y)", Refusal::Attach),
            ("SELECT 'unterminated", Refusal::Unterminated),
            ("SELECT 1 /* open", Refusal::Unterminated),
            (
                "(SELECT 1)",
                Refusal::NotRead("a statement that does not start with a keyword".into()),
            ),
        ];
        for (sql, want) in cases {
            assert_eq!(one_read_statement(sql).as_ref(), Err(want), "{sql}");
        }
        let long = format!("SELECT '{}'", "x".repeat(MAX_SQL_BYTES));
        assert!(matches!(
            one_read_statement(&long),
            Err(Refusal::TooLong(_))
        ));
    }
}
