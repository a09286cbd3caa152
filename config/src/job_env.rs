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
//! - other loaders and runtimes: `GCONV_PATH`, `PERL5LIB`, `PERLLIB`, `RUBYLIB`, `NODE_PATH`,
//!   `JAVA_TOOL_OPTIONS`, `_JAVA_OPTIONS`, `JDK_JAVA_OPTIONS`, `PYTHONUSERBASE`,
//!   `PYTHONWARNINGS`, `PYTHONBREAKPOINT`, `RUSTC_WRAPPER`, `RUSTC`, `CARGO_*` (but
//!   `CARGO_HOME`, `CARGO_TARGET_DIR`, `CARGO_TERM_COLOR`), `NPM_CONFIG_*`;
//! - programs other tools start: `EDITOR`, `VISUAL`, `PAGER`, `MANPAGER`, `LESSOPEN`,
//!   `LESSCLOSE`, `BROWSER`, `SHELL`, `ZDOTDIR`, `HISTFILE`;
//! - where a tool's configuration or the user's sockets are: `XDG_*` (runtime and config
//!   directories), `SSH_AUTH_SOCK`, `SSH_ASKPASS`, `DBUS_*`, `DISPLAY`, `WAYLAND_DISPLAY`,
//!   `XAUTHORITY`, `DOCKER_HOST`, `TMUX`, `TMUX_TMPDIR`, `GNUPGHOME`, `GPG_AGENT_INFO`,
//!   `KRB5CCNAME`.
//!
//! Names are compared without regard to case (`ld_preload` is `LD_PRELOAD`: some programs read
//! either), and the refusal says what the variable does.
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
    (
        "CARGO_",
        "configures cargo, which can name programs to run (runners, linkers, wrappers)",
    ),
    (
        "NPM_CONFIG_",
        "configures npm, which can name programs to run (script-shell, node-options)",
    ),
    (
        "XDG_",
        "points at where programs find their configuration, data or the user's sockets",
    ),
    ("DBUS_", "points at a message bus, a way out of the sandbox"),
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
    ("GCONV_PATH", "makes the C library load other code"),
    ("PERL5LIB", "makes perl load other modules"),
    ("PERLLIB", "makes perl load other modules"),
    ("RUBYLIB", "makes ruby load other libraries"),
    ("NODE_PATH", "makes node load other modules"),
    (
        "JAVA_TOOL_OPTIONS",
        "adds options, such as agents to load, to every JVM",
    ),
    (
        "_JAVA_OPTIONS",
        "adds options, such as agents to load, to every JVM",
    ),
    (
        "JDK_JAVA_OPTIONS",
        "adds options, such as agents to load, to every JVM",
    ),
    (
        "PYTHONUSERBASE",
        "makes python import other code when it starts",
    ),
    ("PYTHONWARNINGS", "makes python import modules named in it"),
    (
        "PYTHONBREAKPOINT",
        "makes python run the callable named in it",
    ),
    ("RUSTC_WRAPPER", "names a program cargo runs"),
    ("RUSTC", "names a program cargo runs"),
    ("EDITOR", "names a program other tools run"),
    ("VISUAL", "names a program other tools run"),
    ("PAGER", "names a program other tools run"),
    ("MANPAGER", "names a program other tools run"),
    ("LESSOPEN", "names a program less runs"),
    ("LESSCLOSE", "names a program less runs"),
    ("BROWSER", "names a program other tools run"),
    ("SHELL", "names the shell other tools run"),
    ("ZDOTDIR", "names where zsh finds the files it runs"),
    ("HISTFILE", "names a file the shell writes"),
    ("SSH_AUTH_SOCK", "points at the user's ssh-agent"),
    ("SSH_ASKPASS", "names a program ssh runs"),
    ("DISPLAY", "points at the user's X server"),
    ("WAYLAND_DISPLAY", "points at the user's Wayland compositor"),
    ("XAUTHORITY", "points at the user's X credentials"),
    ("DOCKER_HOST", "points at a docker daemon"),
    ("TMUX", "points at the user's tmux server"),
    (
        "TMUX_TMPDIR",
        "points at where the user's tmux server listens",
    ),
    ("GNUPGHOME", "points at the user's GnuPG keys and agent"),
    ("GPG_AGENT_INFO", "points at the user's GnuPG agent"),
    ("KRB5CCNAME", "points at the user's Kerberos credentials"),
];

/// Names a refused prefix covers that only say where a tool keeps its own files.
const EXCEPTIONS: &[&str] = &["CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_TERM_COLOR"];

/// Why `name` may not be passed to jobs, or `None` if it may. Case does not matter.
pub fn refusal(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_uppercase();
    if EXCEPTIONS.contains(&name.as_str()) {
        return None;
    }
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
            "RUSTUP_TOOLCHAIN",
            "JAVA_HOME",
            "CARGO_HOME",
            "cargo_target_dir",
        ] {
            assert_eq!(refusal(name), None, "{name}");
        }
    }

    #[test]
    fn every_name_the_attacks_used_is_refused_in_any_case_with_its_reason() {
        for name in [
            "ld_preload",
            "Ld_Preload",
            "git_dir",
            "GCONV_PATH",
            "PERL5LIB",
            "RUBYLIB",
            "NODE_PATH",
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "PYTHONUSERBASE",
            "PYTHONWARNINGS",
            "ZDOTDIR",
            "LESSOPEN",
            "SSH_AUTH_SOCK",
            "DBUS_SESSION_BUS_ADDRESS",
            "XDG_RUNTIME_DIR",
            "XDG_CONFIG_HOME",
            "EDITOR",
            "PAGER",
            "HISTFILE",
            "cargo_target_x86_64_unknown_linux_gnu_runner",
            "npm_config_script_shell",
        ] {
            for spelt in [name.to_owned(), name.to_lowercase(), name.to_uppercase()] {
                let why = refusal(&spelt);
                assert!(why.is_some_and(|w| !w.is_empty()), "{spelt}");
            }
        }
        assert_eq!(
            refusal("ssh_auth_sock"),
            Some("points at the user's ssh-agent")
        );
    }
}
