//! Which environment variables a job may inherit (`job_env` in `glovebox.yaml`): never one that
//! makes a job's start-up run code the command did not name, or points git somewhere else.
//!
//! An exactly allowed command is only as safe as what runs before and around it. These names are
//! refused when the configuration is validated (and dropped if they reach an executor anyway):
//! - `GIT_*`: git's directory, configuration and helpers (`GIT_DIR`, `GIT_CONFIG_GLOBAL`,
//!   `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`, `GIT_SSH_COMMAND`, `GIT_EXTERNAL_DIFF`, ...);
//! - `LD_*`: the dynamic loader (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `LD_AUDIT`, ...);
//! - `BASH_FUNC_*`: shell functions bash imports from the environment;
//! - the job's shell: `BASH_ENV`, `ENV` (files a shell runs at start), `SHELLOPTS`, `BASHOPTS`,
//!   `PS4`, `PROMPT_COMMAND`, `IFS`, `CDPATH`, `GLOBIGNORE`;
//! - interpreters' start-up: `PYTHONSTARTUP`, `PYTHONPATH`, `PYTHONHOME` (`sitecustomize`),
//!   `PERL5OPT`, `RUBYOPT`, `NODE_OPTIONS` (`-M`, `-r`, `--require`).
//!
//! Every job also gets `GIT_CONFIG_NOSYSTEM=1` (the executor sets it), so git reads the user's
//! and the repository's configuration, not the system's.

/// Name prefixes refused, with what such a variable does.
const PREFIXES: &[(&str, &str)] = &[
    (
        "GIT_",
        "redirects git (its directory, configuration or helpers)",
    ),
    (
        "LD_",
        "makes the dynamic loader load or look for other code",
    ),
    ("BASH_FUNC_", "defines shell functions that bash imports"),
];

/// Names refused, with what the variable does.
const NAMES: &[(&str, &str)] = &[
    ("BASH_ENV", "names a file the shell runs when it starts"),
    ("ENV", "names a file the shell runs when it starts"),
    ("SHELLOPTS", "changes how the shell runs"),
    ("BASHOPTS", "changes how the shell runs"),
    (
        "PS4",
        "is expanded, and so can run commands, when the shell traces",
    ),
    ("PROMPT_COMMAND", "is run by the shell"),
    ("IFS", "changes how the shell splits words"),
    ("CDPATH", "changes where `cd` goes"),
    ("GLOBIGNORE", "changes what the shell's globs match"),
    ("PYTHONSTARTUP", "makes python run a file when it starts"),
    (
        "PYTHONPATH",
        "makes python import other code when it starts (sitecustomize)",
    ),
    ("PYTHONHOME", "makes python load another standard library"),
    (
        "PERL5OPT",
        "adds options, such as modules to load, to every perl",
    ),
    (
        "RUBYOPT",
        "adds options, such as libraries to require, to every ruby",
    ),
    (
        "NODE_OPTIONS",
        "adds options, such as modules to require, to every node",
    ),
];

/// Why `name` may not be passed to jobs, or `None` if it may.
pub fn refusal(name: &str) -> Option<&'static str> {
    PREFIXES
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .or_else(|| NAMES.iter().find(|(n, _)| *n == name))
        .map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_and_allowed_names() {
        for name in [
            "GIT_DIR",
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_COUNT",
            "GIT_SSH_COMMAND",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "BASH_FUNC_ls%%",
            "BASH_ENV",
            "ENV",
            "SHELLOPTS",
            "BASHOPTS",
            "PS4",
            "PROMPT_COMMAND",
            "IFS",
            "CDPATH",
            "PYTHONSTARTUP",
            "PYTHONPATH",
            "PERL5OPT",
            "NODE_OPTIONS",
        ] {
            assert!(refusal(name).is_some(), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "TERM",
            "CARGO_HOME",
            "RUSTUP_HOME",
            "GITHUB_TOKEN",
            "ENVIRONMENT",
            "git_dir",
        ] {
            assert_eq!(refusal(name), None, "{name}");
        }
    }
}
