//! Masks secrets in text glovebox records or shows: approved commands in the audit, the audit's
//! reasons, and any other text that came from a process glovebox does not trust (a failed pack
//! server's stderr). One masker for all of them: secrets glovebox was given are masked by value
//! ([`Masker`], [`KnownSecrets`]), and whatever looks like a secret by pattern
//! ([`mask_command`]). Keeps everything but the secret itself, so what is left still says what
//! happened. Pure but for [`KnownSecrets`]' lock.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// What stands in for a masked secret.
const MASK: &str = "****";

/// Secret values shorter than this are not masked by value (they would mask ordinary words).
pub const MIN_MASKED_SECRET: usize = 4;

/// Masks the values of known secrets wherever they appear, whatever surrounds them, then what
/// looks like a secret ([`mask_command`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Masker {
    /// Longest first, so that a secret containing another is masked whole.
    values: Vec<String>,
}

impl Masker {
    /// A masker for these secret values (those shorter than [`MIN_MASKED_SECRET`] are left to
    /// the patterns).
    pub fn new(values: impl IntoIterator<Item = String>) -> Masker {
        let mut values: Vec<String> = values
            .into_iter()
            .filter(|v| v.len() >= MIN_MASKED_SECRET)
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Masker { values }
    }

    /// `text` with every known value and every secret-looking word masked.
    pub fn mask(&self, text: &str) -> String {
        let mut shown = text.to_owned();
        for value in &self.values {
            if shown.contains(value.as_str()) {
                shown = shown.replace(value.as_str(), MASK);
            }
        }
        mask_command(&shown)
    }
}

/// The secret values each account gave glovebox, as they become known (stored, or handed to a
/// pack): shared by what stores them and what writes text others will read.
#[derive(Debug, Clone, Default)]
pub struct KnownSecrets(Arc<RwLock<HashMap<String, Masker>>>);

impl KnownSecrets {
    /// Adds `values` to what is masked in `account`'s text.
    pub fn learn(&self, account: &str, values: impl IntoIterator<Item = String>) {
        let mut known = self.0.write().unwrap_or_else(|p| p.into_inner());
        let masker = known.entry(account.to_owned()).or_default();
        let all = masker.values.iter().cloned().chain(values);
        *masker = Masker::new(all.collect::<Vec<_>>());
    }

    /// `text` of `account` masked: its known secrets by value, and the patterns.
    pub fn mask(&self, account: &str, text: &str) -> String {
        // Most audit rows have no reason: nothing to lock or scan.
        if text.is_empty() {
            return String::new();
        }
        let known = self.0.read().unwrap_or_else(|p| p.into_inner());
        match known.get(account) {
            Some(masker) => masker.mask(text),
            None => mask_command(text),
        }
    }
}

/// Replaces secrets in a command with `****`, keeping everything else (the separators too) as it
/// was: private key blocks; credentials in URLs (`scheme://user:****@host`); values of
/// `NAME=value` and `--name=value` where the name mentions a secret; the word after a secret
/// option (`--token VALUE`), after `Bearer`/`Basic`/`Token` in an authorization header, and the
/// password of `-u user:password` (curl's user option); `-pPASSWORD` of the MySQL clients; AWS
/// access key ids, JWTs, and long token-like words (mixed letters and digits).
pub fn mask_command(command: &str) -> String {
    static KEY_BLOCK: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?s)-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|\z)",
        )
        .ok()
    });
    static URL_CREDENTIALS: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| {
            regex::Regex::new(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+):[^/\s@]+@").ok()
        });
    let mut text = command.to_owned();
    if let Some(re) = KEY_BLOCK.as_ref() {
        text = re
            .replace_all(
                &text,
                "-----BEGIN ${1}PRIVATE KEY-----****-----END ${1}PRIVATE KEY-----",
            )
            .into_owned();
    }
    if let Some(re) = URL_CREDENTIALS.as_ref() {
        text = re.replace_all(&text, "${1}:****@").into_owned();
    }
    let mysql = is_mysql_client(&text);
    let mut out = String::with_capacity(text.len());
    let mut next = Masking::No;
    for piece in pieces(&text) {
        if piece.chars().all(char::is_whitespace) {
            out.push_str(piece);
            continue;
        }
        let (masked, then) = mask_word(piece, next, mysql);
        out.push_str(&masked);
        next = then;
    }
    out
}

/// What a word does to the word after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Masking {
    No,
    /// Mask the whole next word.
    Value,
    /// Mask what follows the first `:` of the next word (`-u user:password`).
    AfterColon,
    /// Mask words until one closes this quote (a secret with spaces in quotes).
    UntilQuote(char),
}

/// Words and runs of whitespace, in order.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let space = first.is_whitespace();
        let end = rest
            .char_indices()
            .find(|(_, c)| c.is_whitespace() != space)
            .map_or(rest.len(), |(i, _)| i);
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// Masks one word given what the word before asked; returns it and what it asks of the next.
fn mask_word(word: &str, asked: Masking, mysql: bool) -> (String, Masking) {
    let (open, core, close) = unquote(word);
    let wrap = |inner: &str| format!("{open}{inner}{close}");
    // A masked value that opens a quote it does not close goes on to the closing quote.
    let rest = |masked: String| {
        let quote = open.chars().find(|c| matches!(c, '"' | '\''));
        match quote {
            Some(q) if !close.contains(q) => (masked, Masking::UntilQuote(q)),
            _ => (masked, Masking::No),
        }
    };
    match asked {
        Masking::UntilQuote(q) => {
            return if close.contains(q) {
                (format!("{MASK}{close}"), Masking::No)
            } else {
                (MASK.to_owned(), Masking::UntilQuote(q))
            };
        }
        Masking::Value if !core.is_empty() => return rest(wrap(MASK)),
        Masking::AfterColon => {
            if let Some((user, _)) = core.split_once(':') {
                return rest(wrap(&format!("{user}:{MASK}")));
            }
            return rest(wrap(MASK));
        }
        _ => {}
    }
    if let Some((name, value)) = core.split_once('=')
        && is_secret_name(name.trim_start_matches('-'))
    {
        let masked = if value.is_empty() { "" } else { MASK };
        return (wrap(&format!("{name}={masked}")), Masking::No);
    }
    let lower = core.to_ascii_lowercase();
    if ["bearer", "basic", "token"].contains(&lower.as_str()) {
        return (word.to_owned(), Masking::Value);
    }
    if core.starts_with('-') && is_secret_name(core.trim_start_matches('-')) {
        return (word.to_owned(), Masking::Value);
    }
    if matches!(core, "-u" | "--user" | "--proxy-user") {
        return (word.to_owned(), Masking::AfterColon);
    }
    if mysql && core.len() > 2 && core.starts_with("-p") && !core.starts_with("--") {
        return (wrap(&format!("-p{MASK}")), Masking::No);
    }
    if looks_like_aws_key_id(core) || looks_like_jwt(core) || looks_like_token(core) {
        return (wrap(MASK), Masking::No);
    }
    (word.to_owned(), Masking::No)
}

/// Splits surrounding quotes and punctuation off a word.
fn unquote(word: &str) -> (&str, &str, &str) {
    let is_edge = |c: char| matches!(c, '"' | '\'' | ',' | ';' | ')' | '(' | '`');
    let start = word.len() - word.trim_start_matches(is_edge).len();
    let core_and_close = &word[start..];
    let core = core_and_close.trim_end_matches(is_edge);
    (&word[..start], core, &core_and_close[core.len()..])
}

/// Whether the command runs a MySQL client (whose `-pPASSWORD` carries a password).
fn is_mysql_client(command: &str) -> bool {
    command
        .split_whitespace()
        .filter(|w| !matches!(*w, "sudo" | "env" | "exec" | "command"))
        .find(|w| !w.contains('='))
        .map(|program| program.rsplit('/').next().unwrap_or(program))
        .is_some_and(|p| {
            matches!(
                p,
                "mysql" | "mysqldump" | "mysqladmin" | "mariadb" | "mariadb-dump"
            )
        })
}

fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "APIKEY",
        "AUTH",
        "CREDENTIAL",
        "PRIVATE",
        "ACCESS_KEY",
    ]
    .iter()
    .any(|s| upper.contains(s))
}

/// An AWS access key id: `AKIA`/`ASIA` and 16 more upper-case letters or digits.
fn looks_like_aws_key_id(word: &str) -> bool {
    word.len() == 20
        && (word.starts_with("AKIA") || word.starts_with("ASIA"))
        && word
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// A JSON web token: three base64url parts, the first starting `eyJ`.
fn looks_like_jwt(word: &str) -> bool {
    let parts: Vec<&str> = word.split('.').collect();
    parts.len() == 3
        && parts[0].starts_with("eyJ")
        && parts[..2].iter().all(|p| p.len() >= 4)
        && parts.iter().all(|p| {
            p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        })
}

fn looks_like_token(core: &str) -> bool {
    core.len() >= 20
        && core
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '/' | '=' | '.'))
        && core.chars().any(|c| c.is_ascii_digit())
        && core.chars().any(|c| c.is_ascii_alphabetic())
        && !core.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_are_masked_whatever_surrounds_them_and_patterns_too() {
        let m = Masker::new([
            "correct horse battery".to_owned(),
            "horse".to_owned(),
            "pw".to_owned(),
        ]);
        assert_eq!(
            m.mask("login failed:correct horse battery(retry) horse pw secret=hunter2"),
            "login failed:****(retry) **** pw secret=****"
        );
        let known = KnownSecrets::default();
        assert_eq!(known.mask("a", "token=abc x-9f3k"), "token=**** x-9f3k");
        known.learn("a", ["x-9f3k".to_owned()]);
        known.learn("a", ["other-value".to_owned()]);
        assert_eq!(known.mask("a", "token=abc x-9f3k"), "token=**** ****");
        assert_eq!(known.mask("a", "other-value"), "****");
        // another account's values are its own
        assert_eq!(known.mask("b", "x-9f3k"), "x-9f3k");
    }

    #[test]
    fn table() {
        let cases = [
            ("ls -la", "ls -la"),
            ("git status", "git status"),
            (
                "GITHUB_TOKEN=ghp_abc123 gh pr list",
                "GITHUB_TOKEN=**** gh pr list",
            ),
            ("curl --token abc def", "curl --token **** def"),
            ("mysql --password hunter2 db", "mysql --password **** db"),
            ("echo sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e", "echo ****"),
            (
                "cat src/main.rs target/debug/build-1234567890abcdef",
                "cat src/main.rs target/debug/build-1234567890abcdef",
            ),
            ("cargo test --workspace", "cargo test --workspace"),
            ("export API_KEY=", "export API_KEY="),
            // The shapes the first masker missed, and more.
            (
                "git clone https://alice:hunter2@example.com/repo.git",
                "git clone https://alice:****@example.com/repo.git",
            ),
            (
                "curl -u alice:hunter2 https://x",
                "curl -u alice:**** https://x",
            ),
            (
                "curl --user 'bob:pa ss word' x",
                "curl --user 'bob:**** **** ****' x",
            ),
            (
                "tool --token \"two words\" next",
                "tool --token \"**** ****\" next",
            ),
            ("mysql -uroot -phunter2 db", "mysql -uroot -p**** db"),
            ("sudo mysqldump -pS3cret db", "sudo mysqldump -p**** db"),
            ("mkdir -p out", "mkdir -p out"),
            ("cp -pr a b", "cp -pr a b"),
            ("export\tGITHUB_TOKEN=abc", "export\tGITHUB_TOKEN=****"),
            ("env\tPASSWORD=x\tmake", "env\tPASSWORD=****\tmake"),
            (
                "curl -H 'Authorization: Bearer abc.def' x",
                "curl -H 'Authorization: Bearer ****' x",
            ),
            (
                "curl -H \"Authorization: Basic dXNlcjpwYXNz\" x",
                "curl -H \"Authorization: Basic ****\" x",
            ),
            (
                "aws s3 ls --access-key AKIAIOSFODNN7EXAMPLE",
                "aws s3 ls --access-key ****",
            ),
            ("echo AKIAIOSFODNN7EXAMPLE", "echo ****"),
            ("psql --password=hunter2 db", "psql --password=**** db"),
            (
                "echo eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
                "echo ****",
            ),
            (
                "printf '-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----' > k",
                "printf '-----BEGIN RSA PRIVATE KEY-----****-----END RSA PRIVATE KEY-----' > k",
            ),
            (
                "echo '-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk",
                "echo '-----BEGIN OPENSSH PRIVATE KEY-----****-----END OPENSSH PRIVATE KEY-----",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(mask_command(input), want, "{input}");
        }
    }
}
