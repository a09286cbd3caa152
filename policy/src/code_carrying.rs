//! Files that make later commands run code: changing them always asks.
//!
//! An exactly allowed command is only as safe as the files it reads: `git status` runs whatever
//! `core.fsmonitor` in `.git/config` names, and a new terminal runs `~/.bashrc`. So a write or a
//! delete (a move's source and destination too) of one of these paths asks the approver, with a
//! warning saying why, whatever allow rule matches — the managed layer's, `sandbox: false`
//! included, since the sandbox switch is about the policy and this is about what later commands
//! run. A deny still denies and the secret floor still wins; reads are not affected.
//!
//! The list is short on purpose (each entry runs code without anyone running it on purpose):
//! - `.git`: the git directory itself and everything in it, in any repository (`.git/config`,
//!   `config.worktree`, `.git/hooks/**`, `.git/info/attributes`, submodules' `.git/modules/**`,
//!   and a `.git` file, whose `gitdir:` line says where the config is);
//! - `.gitconfig` and `.config/git/**`: the user's git configuration, read by every repository;
//! - shell startup files: `.bashrc`, `.bash_profile`, `.bash_login`, `.bash_logout`, `.profile`,
//!   `.zshenv`, `.zshrc`, `.zprofile`, `.zlogin`, `.zlogout`.
//!
//! Not on it: `.gitattributes` and `.gitmodules` (attributes only select drivers a config file
//! defines, and git no longer runs commands named in `.gitmodules`), and the project's own build
//! and test files — an allowed `cargo test` or `make` runs the project's code by design. Some such
//! files are denied outright by the secret floor already: `.envrc` (direnv; `.env*`), `.npmrc`,
//! `.ssh/config`. A directory an agent can write
//! could still be made into a bare repository that git finds from a working directory inside it;
//! `safe.bareRepository = explicit` in the user's git configuration closes that.
//!
//! Segments are compared after the floor's folding ([`crate::floor::fold_segment`]): case does
//! not matter, and neither do look-alike letters, invisible characters or trailing dots.

use crate::floor::fold_segment;

/// Shell startup files, by name.
const SHELL_STARTUP: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshenv",
    ".zshrc",
    ".zprofile",
    ".zlogin",
    ".zlogout",
];

/// Why a path carries code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeCarryingHit {
    /// The entry that matched, e.g. `.git/config` or `.bashrc`.
    pub entry: String,
    /// What runs it.
    pub why: &'static str,
}

impl CodeCarryingHit {
    pub fn rule(&self) -> String {
        format!("code-carrying:{}", self.entry)
    }

    pub fn reason(&self) -> String {
        format!(
            "changing this file makes later commands run code: {}",
            self.why
        )
    }

    /// What the approver is told about `path`.
    pub fn warning(&self, path: &str) -> String {
        format!(
            "changing {path} makes later commands run code ({}); this always asks",
            self.why
        )
    }
}

/// Checks a canonical absolute path against the list.
pub fn check(path: &str) -> Option<CodeCarryingHit> {
    let segments: Vec<std::borrow::Cow<'_, str>> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(fold_segment)
        .collect();
    let hit = |entry: &str, why: &'static str| {
        Some(CodeCarryingHit {
            entry: entry.to_owned(),
            why,
        })
    };
    if let Some(git) = segments.iter().position(|s| s == ".git") {
        let below = &segments[git + 1..];
        if below.iter().any(|s| s == "hooks") {
            return hit(
                ".git/hooks",
                "git runs its hooks on commit, checkout, merge and push",
            );
        }
        if below
            .last()
            .is_some_and(|s| s == "config" || s == "config.worktree")
        {
            return hit(
                ".git/config",
                "git runs the programs it names, such as core.fsmonitor, even for `git status`",
            );
        }
        return hit(
            ".git",
            "the git directory decides what git runs: its config, hooks and `gitdir:` pointer",
        );
    }
    if segments
        .windows(2)
        .any(|w| w[0] == ".config" && w[1] == "git")
    {
        return hit(
            ".config/git",
            "the user's git configuration: every repository's git commands run what it names",
        );
    }
    let last = segments.last()?;
    if last == ".gitconfig" {
        return hit(
            ".gitconfig",
            "the user's git configuration: every repository's git commands run what it names",
        );
    }
    if let Some(name) = SHELL_STARTUP.iter().find(|n| *n == last) {
        return hit(name, "a shell runs it when it starts");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries() {
        for (path, want) in [
            ("/w/.git/config", Some(".git/config")),
            ("/w/.git", Some(".git")),
            ("/w/sub/.git", Some(".git")),
            ("/w/.git/HEAD", Some(".git")),
            ("/w/.git/info/attributes", Some(".git")),
            ("/w/.git/hooks", Some(".git/hooks")),
            ("/w/.git/hooks/pre-commit", Some(".git/hooks")),
            ("/w/.git/modules/lib/config", Some(".git/config")),
            (
                "/w/.git/modules/lib/hooks/post-checkout",
                Some(".git/hooks"),
            ),
            ("/w/.git/worktrees/x/config.worktree", Some(".git/config")),
            ("/w/.GIT/Config", Some(".git/config")),
            ("/w/.git./config", Some(".git/config")),
            ("/w/．git/config", Some(".git/config")),
            ("/home/u/.gitconfig", Some(".gitconfig")),
            ("/home/u/.config/git/config", Some(".config/git")),
            ("/home/u/.config/git", Some(".config/git")),
            ("/home/u/.bashrc", Some(".bashrc")),
            ("/home/u/.Profile", Some(".profile")),
            ("/home/u/.zshenv", Some(".zshenv")),
            // not code-carrying
            ("/w/notes.txt", None),
            ("/w/config", None),
            ("/w/hooks/pre-commit", None),
            ("/w/.gitignore", None),
            ("/w/.gitattributes", None),
            ("/w/.gitmodules", None),
            ("/w/repo.git/config", None),
            ("/w/.bashrc.bak", None),
            ("/w/.bashrc/x", None),
            ("/home/u/.config/gitx/config", None),
            ("/", None),
        ] {
            assert_eq!(
                check(path).map(|h| h.entry),
                want.map(str::to_owned),
                "{path}"
            );
        }
    }

    #[test]
    fn the_rule_reason_and_warning_say_why() {
        let hit = check("/w/.git/config").unwrap();
        assert_eq!(hit.rule(), "code-carrying:.git/config");
        assert!(
            hit.reason()
                .starts_with("changing this file makes later commands run code")
        );
        let w = hit.warning("/w/.git/config");
        assert!(
            w.contains("/w/.git/config") && w.contains("core.fsmonitor"),
            "{w}"
        );
    }
}
