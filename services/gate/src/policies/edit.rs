//! Rule management on an account's own policy file: "always" answers, `glovebox policy
//! add|revoke|reset|confine|sandbox`. Each edit changes the file's text keeping its comments
//! (`glovebox_policy::edit`), is compiled before it is written (an edit that would leave the file
//! not compiling is refused and nothing is written), is serialized with the others, and is
//! recorded as a policy event for the audit.

use glovebox_proto::audit_row::Outcome;
use std::sync::Arc;

use glovebox_config::write_private_file;
use glovebox_policy::{Kind, RawPolicy, RawRule, Section, check_account_text, edit, exact_rule};

use super::files::read_policy_text;
use super::{AccountEntry, AccountPolicies, EditError, now_unix};

impl AccountPolicies {
    fn entry_or_unknown(&self, account: &str) -> Result<Arc<AccountEntry>, EditError> {
        self.entry(account)
            .ok_or_else(|| EditError::UnknownAccount(account.to_owned()))
    }

    /// Reads, edits and writes the account file under the edit lock, then reloads. The edited
    /// text is compiled first: an edit that would leave the file not compiling is refused and
    /// nothing is written.
    fn edit_file(
        &self,
        account: &str,
        outcome: Outcome,
        change: impl FnOnce(&str) -> Result<Option<(String, String)>, EditError>,
    ) -> Result<Option<String>, EditError> {
        let entry = self.entry_or_unknown(account)?;
        let _guard = super::lock(&self.edit_lock);
        let file_err = |message: String| EditError::File {
            file: entry.file.display().to_string(),
            message,
        };
        let text = read_policy_text(&entry.file)
            .map_err(|e| file_err(e.to_string()))?
            .map(|(text, _)| text)
            .unwrap_or_default();
        let Some((new_text, summary)) = change(&text)? else {
            return Ok(None);
        };
        let name = entry.file.display().to_string();
        check_account_text(&name, &new_text, &entry.workdir, now_unix()).map_err(|e| {
            EditError::Invalid(format!(
                "refused: the account file would not compile ({e}); it is unchanged"
            ))
        })?;
        write_private_file(&entry.file, new_text.as_bytes())
            .map_err(|e| file_err(e.to_string()))?;
        self.push_event(account, outcome, summary.clone());
        let _ = self.current(account);
        Ok(Some(summary))
    }

    /// Persists an exact allow rule for each (section, subject) ("always" answers): a canonical
    /// path, a command line or a tool name, matching that one subject only.
    pub fn add_exact_rules(
        &self,
        account: &str,
        subjects: &[(Section, String)],
    ) -> Result<usize, String> {
        let mut added = 0;
        self.edit_file(account, Outcome::RuleAdded, |text| {
            let mut text = text.to_owned();
            let mut names = Vec::new();
            for (section, subject) in subjects {
                let section = *section;
                let rule = RawRule::Pattern(exact_rule(section, subject));
                let edited = edit::add_rule(&text, section, Kind::Allow, &rule)
                    .map_err(|e| EditError::Invalid(e.to_string()))?;
                if let Some(e) = edited {
                    text = e.text;
                    names.push(added_rule(section, Kind::Allow, &rule, e.rewritten));
                }
            }
            added = names.len();
            Ok((!names.is_empty()).then(|| (text, format!("always: {}", names.join("; ")))))
        })
        .map_err(|e| e.to_string())?;
        Ok(added)
    }

    /// Adds one rule to the account file. Returns a summary, or `None` if it was already there.
    pub fn add_rule(
        &self,
        account: &str,
        section: Section,
        kind: Kind,
        rule: RawRule,
    ) -> Result<Option<String>, EditError> {
        self.edit_file(account, Outcome::RuleAdded, |text| {
            let edited = edit::add_rule(text, section, kind, &rule)
                .map_err(|e| EditError::Invalid(e.to_string()))?;
            Ok(edited.map(|e| {
                let summary = added_rule(section, kind, &rule, e.rewritten);
                (e.text, summary)
            }))
        })
    }

    /// Removes the rule at `index` of a list, if its pattern is still `pattern`.
    pub fn revoke_rule(
        &self,
        account: &str,
        section: Section,
        kind: Kind,
        index: usize,
        pattern: &str,
    ) -> Result<Option<String>, EditError> {
        self.edit_file(account, Outcome::RuleRevoked, |text| {
            let raw = RawPolicy::parse(text).map_err(|e| EditError::Invalid(e.to_string()))?;
            let list = raw.rules(section, kind);
            let index = if pattern.is_empty() {
                index
            } else {
                list.iter()
                    .position(|r| r.pattern() == pattern)
                    .ok_or_else(|| {
                        EditError::Invalid(format!(
                            "{}.{} has no rule {pattern:?}",
                            section.name(),
                            kind.as_str()
                        ))
                    })?
            };
            let Some(rule) = list.get(index) else {
                return Err(EditError::Invalid(format!(
                    "{}.{}[{index}] does not exist",
                    section.name(),
                    kind.as_str()
                )));
            };
            let summary = format!(
                "{}.{}[{index}]: {}",
                section.name(),
                kind.as_str(),
                rule.pattern()
            );
            let e = edit::remove_rule(text, section, kind, index)
                .map_err(|e| EditError::Invalid(e.to_string()))?;
            Ok(Some((e.text, summary)))
        })
    }

    /// Empties the account's own rules (switches kept): everything asks again.
    pub fn reset_rules(&self, account: &str) -> Result<Option<String>, EditError> {
        self.edit_file(account, Outcome::Reset, |text| {
            let new = edit::reset(text).map_err(|e| EditError::Invalid(e.to_string()))?;
            Ok(Some((
                new,
                "every rule of the account file removed".to_owned(),
            )))
        })
    }

    /// Sets `confine_to_workdir` or `sandbox` in the account file.
    pub fn set_switch(
        &self,
        account: &str,
        key: &str,
        value: bool,
    ) -> Result<Option<String>, EditError> {
        let outcome = if key == "sandbox" {
            Outcome::Sandbox
        } else {
            Outcome::Confinement
        };
        self.edit_file(account, outcome, |text| {
            let e =
                edit::set_flag(text, key, value).map_err(|e| EditError::Invalid(e.to_string()))?;
            Ok(Some((e.text, format!("{key}: {value}"))))
        })
    }
}

/// How an added rule is reported, e.g. `commands.allow: git status (expires ...)`.
fn added_rule(section: Section, kind: Kind, rule: &RawRule, rewritten: bool) -> String {
    let mut s = format!("{}.{}: {}", section.name(), kind.as_str(), rule.pattern());
    if let Some(x) = rule.expires() {
        s.push_str(&format!(" (expires {x})"));
    }
    if rewritten {
        s.push_str(" (file rewritten; comments were lost)");
    }
    s
}
