//! What the audit may say of a call's subjects: paths as they are, approved commands in full with
//! secrets masked (`glovebox_redact`), other commands only by their length. The one renderer of
//! audit subjects (the executors' execute rows included). Pure.

use glovebox_proto::v1 as pb;
pub use glovebox_redact::mask_command;

/// What the audit says of a command that was not run.
pub fn command_length(command: &str) -> String {
    format!("<command of {} bytes>", command.len())
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
            Ok(pb::Domain::Account) => format!("account {}", s.path),
            _ => "?".to_owned(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_ran_is_masked_and_one_that_did_not_is_only_its_length() {
        let subjects = [
            pb::Subject {
                domain: pb::Domain::Exec as i32,
                path: "curl -u alice:hunter2 https://x".into(),
                ..Default::default()
            },
            pb::Subject {
                domain: pb::Domain::Read as i32,
                path: "src/main.rs".into(),
                ..Default::default()
            },
        ];
        assert_eq!(
            subjects_text(&subjects, true),
            "exec curl -u alice:**** https://x; read src/main.rs"
        );
        assert_eq!(
            subjects_text(&subjects, false),
            "exec <command of 31 bytes>; read src/main.rs"
        );
        assert_eq!(command_length("rm -rf /"), "<command of 8 bytes>");
    }
}
