//! What the audit may say of a call's subjects: paths as they are, approved commands in full with
//! token-like strings masked, other commands only by their length. The one renderer of audit
//! subjects (the executors' execute rows included). Pure.

use glovebox_proto::v1 as pb;

/// Replaces secrets in a command with `****`: values of `NAME=value` where the name mentions a
/// secret, `--token value`-style options, and long token-like words (mixed letters and digits).
pub fn mask_command(command: &str) -> String {
    let mut out = Vec::new();
    let mut mask_next = false;
    for word in command.split(' ') {
        if mask_next && !word.is_empty() {
            out.push("****".to_owned());
            mask_next = false;
            continue;
        }
        if let Some((name, value)) = word.split_once('=')
            && is_secret_name(name)
            && !value.is_empty()
        {
            out.push(format!("{name}=****"));
            continue;
        }
        let bare = word.trim_start_matches('-');
        if word.starts_with('-') && is_secret_name(bare) {
            mask_next = true;
            out.push(word.to_owned());
            continue;
        }
        out.push(if looks_like_token(word) {
            "****".to_owned()
        } else {
            word.to_owned()
        });
    }
    out.join(" ")
}

/// What the audit says of a command that was not run.
pub fn command_length(command: &str) -> String {
    format!("<command of {} bytes>", command.len())
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
    ]
    .iter()
    .any(|s| upper.contains(s))
}

fn looks_like_token(word: &str) -> bool {
    let core = word.trim_matches(|c: char| matches!(c, '"' | '\'' | ',' | ';' | ')' | '('));
    core.len() >= 20
        && core
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '/' | '=' | '.'))
        && core.chars().any(|c| c.is_ascii_digit())
        && core.chars().any(|c| c.is_ascii_alphabetic())
        && !core.contains('/')
}

/// The subjects as the audit records them. Commands appear in full (masked) only when `ran`;
/// otherwise only their length.
pub(crate) fn subjects_text(subjects: &[pb::Subject], ran: bool) -> String {
    subjects
        .iter()
        .map(|s| match pb::Domain::try_from(s.domain) {
            Ok(pb::Domain::Read) => format!("read {}", s.path),
            Ok(pb::Domain::Write) => format!("write {}", s.path),
            Ok(pb::Domain::Delete) => format!("delete {}", s.path),
            Ok(pb::Domain::Exec) if ran => format!("exec {}", mask_command(&s.path)),
            Ok(pb::Domain::Exec) => format!("exec {}", command_length(&s.path)),
            Ok(pb::Domain::Job) => format!("job {}", s.path),
            Ok(pb::Domain::Tool) => format!("tool {}", s.path),
            _ => "?".to_owned(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ];
        for (input, want) in cases {
            assert_eq!(mask_command(input), want, "{input}");
        }
        assert_eq!(command_length("rm -rf /"), "<command of 8 bytes>");
    }
}
