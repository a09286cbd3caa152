//! Managed policy: the directory and each `*.yaml` in it owned by root (or, in user mode, the
//! state's owner), writable by nobody else, not a symlink, and compiling with the real policy
//! compiler as the managed layer.

use std::path::Path;

use glovebox_policy::{Inputs, Policy, RawPolicy, Source};

use super::files::{self, Facts, Kind, Rule, Who};
use super::finding::{Finding, Level};

/// What the policy directory and its files must be: owned by one of `owners`, no group or other
/// write, not a symlink.
pub fn rule(kind: Kind, owners: &[Who], missing: (Level, &str)) -> Rule {
    Rule {
        kind,
        owners: owners.to_vec(),
        group: None,
        allowed: 0o755,
        required: 0,
        missing: (missing.0, missing.1.to_owned()),
    }
}

/// The gate reads `*.yaml` and `*.yml` of the managed directories.
pub fn is_policy_file(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "yaml" || x == "yml")
}

/// Checks one managed file: its facts, then (when they are right) whether `text` compiles as the
/// managed layer of an account whose workdir is `workdir`.
pub fn file(
    path: &Path,
    facts: &Facts,
    owners: &[Who],
    text: Option<&str>,
    workdir: &str,
) -> Finding {
    let found = files::check(path, facts, &rule(Kind::File, owners, (Level::Ok, "gone")));
    if found.level != Level::Ok {
        return found;
    }
    let check = format!("policy {}", path.display());
    let Some(text) = text else {
        return Finding::fail(
            check,
            "cannot be read",
            format!("check the permissions of {}", path.display()),
        );
    };
    match compile(path, text, workdir) {
        Ok(warnings) if warnings.is_empty() => {
            Finding::ok(check, format!("compiles ({})", found.finding))
        }
        Ok(warnings) => Finding::warn(
            check,
            format!("compiles with warnings: {}", warnings.join("; ")),
            format!("edit {}", path.display()),
        ),
        Err(e) => Finding::fail(
            check,
            e,
            "fix the file, then check it again: glovebox doctor",
        ),
    }
}

/// Compiles `text` as the only managed file over a new account's default policy.
pub fn compile(path: &Path, text: &str, workdir: &str) -> Result<Vec<String>, String> {
    let name = path.display().to_string();
    let raw = RawPolicy::parse(text).map_err(|e| format!("{name}: {e}"))?;
    let policy = Policy::compile_layers(&Inputs {
        workdir: workdir.to_owned(),
        protected: Vec::new(),
        roots: vec![workdir.to_owned()],
        managed: vec![Source::new(name.clone(), raw, 0)],
        account: Source::new("permissions.yaml", RawPolicy::default_for_new_account(), 0),
        project: None,
    })
    .map_err(|e| format!("{name}: {e}"))?;
    Ok(policy.warnings().iter().map(|w| w.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASELINE: &str = include_str!("../../../deploy/etc/policy.d/00-baseline.yaml");

    fn facts(kind: Kind, mode: u32, uid: u32) -> Facts {
        Facts {
            kind,
            mode,
            uid,
            gid: 0,
        }
    }

    #[test]
    fn a_managed_file_is_root_owned_not_writable_by_others_and_compiles() {
        let root = [Who::new(0, "root")];
        let path = Path::new("/etc/glovebox/policy.d/00-baseline.yaml");
        let table = [
            (facts(Kind::File, 0o644, 0), Some(BASELINE), Level::Ok, None),
            (facts(Kind::File, 0o755, 0), Some(BASELINE), Level::Ok, None),
            (
                facts(Kind::File, 0o666, 0),
                Some(BASELINE),
                Level::Fail,
                Some("chmod 644 /etc/glovebox/policy.d/00-baseline.yaml"),
            ),
            (
                facts(Kind::File, 0o664, 0),
                Some(BASELINE),
                Level::Fail,
                Some("chmod 644 /etc/glovebox/policy.d/00-baseline.yaml"),
            ),
            (
                facts(Kind::File, 0o644, 1000),
                Some(BASELINE),
                Level::Fail,
                Some("chown root /etc/glovebox/policy.d/00-baseline.yaml"),
            ),
            (
                facts(Kind::Symlink, 0o777, 0),
                Some(BASELINE),
                Level::Fail,
                None,
            ),
            (
                facts(Kind::File, 0o644, 0),
                Some("deny:\n  - read: [\n"),
                Level::Fail,
                None,
            ),
            (
                facts(Kind::File, 0o644, 0),
                Some("colour: blue\n"),
                Level::Fail,
                None,
            ),
        ];
        for (f, text, level, fix) in table {
            let got = file(path, &f, &root, text, "/home/a/w");
            assert_eq!(got.level, level, "{f:?} {text:?}: {got}");
            if let Some(fix) = fix {
                assert_eq!(got.fix.as_deref(), Some(fix), "{got}");
            }
        }
    }

    #[test]
    fn only_yaml_files_are_policy() {
        assert!(is_policy_file(Path::new("/p/10-x.yaml")));
        assert!(is_policy_file(Path::new("/p/10-x.yml")));
        assert!(!is_policy_file(Path::new("/p/README")));
        assert!(!is_policy_file(Path::new("/p/10-x.yaml.dpkg-old")));
    }
}
