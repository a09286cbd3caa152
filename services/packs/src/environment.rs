//! The environment a pack server starts with, and nothing else of the pack host's: `HOME` (the
//! pack's own directory in the account's pack home), `PATH` (the owner's login shell's), `TMPDIR`, the shared caches, the
//! locale and user names, then the pack's own `env`, whose references are resolved here at spawn
//! time (`${secret:NAME}` from the values the gate handed over, `${env:NAME}` from the host's
//! environment, only the names the account's `pack_env` allows and only in the account's own
//! `mcp.json`). An HTTP pack's headers are resolved the same way ([`pack_headers`]). Values are
//! never logged.

use std::collections::BTreeMap;
use std::time::Duration;

use glovebox_config::mcp_json::{Origin, PackDef, Piece, Template};

use crate::places::Places;

/// Variables of the host's environment a pack inherits as they are.
const INHERITED: &[&str] = &[
    "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TERM",
];
/// The `PATH` a pack gets when the login shell cannot say.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// How long the owner's login shell may take to print its `PATH`.
pub const LOGIN_SHELL_TIMEOUT: Duration = Duration::from_secs(5);

/// The pack host's environment, and the names of it `${env:NAME}` may read.
#[derive(Debug, Clone, Copy)]
pub struct HostEnv<'a> {
    pub all: &'a BTreeMap<String, String>,
    /// The account's `pack_env`.
    pub readable: &'a [String],
}

impl HostEnv<'_> {
    /// The value of `name` for a `${env:NAME}` reference, if it is set and readable.
    fn readable(&self, name: &str) -> Option<&String> {
        self.readable
            .iter()
            .any(|r| r == name)
            .then(|| self.all.get(name))
            .flatten()
    }
}

/// A value the pack's environment needs that is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Secret(String),
    /// Not set, or not one of the names the account lets packs read (`pack_env`).
    Env(String),
    /// A project's pack names a variable of glovebox's environment: never given.
    EnvOfProject(String),
}

/// The environment of pack `def`: the base variables, then its own (`secrets` holds the values
/// of the secrets it names that the gate has). Fails with every reference that has no value.
pub fn pack_env(
    def: &PackDef,
    places: &Places,
    login_path: &str,
    host_env: &HostEnv<'_>,
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, Vec<Missing>> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for name in INHERITED {
        if let Some(v) = host_env.all.get(*name) {
            env.insert((*name).to_owned(), v.clone());
        }
    }
    let home = places.pack_data(&def.name).display().to_string();
    env.insert("HOME".into(), home);
    env.insert("PATH".into(), login_path.to_owned());
    env.insert(
        "TMPDIR".into(),
        places.pack_tmp(&def.name).display().to_string(),
    );
    env.insert(
        "npm_config_cache".into(),
        places.npm_cache.display().to_string(),
    );
    env.insert(
        "XDG_CACHE_HOME".into(),
        places.xdg_cache.display().to_string(),
    );
    let own = resolve_all(def, &def.env, host_env, secrets)?;
    env.extend(own);
    Ok(env.into_iter().collect())
}

/// An HTTP pack's headers, their references resolved; fails with every reference that has no
/// value.
pub fn pack_headers(
    def: &PackDef,
    host_env: &HostEnv<'_>,
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, Vec<Missing>> {
    resolve_all(def, &def.headers, host_env, secrets)
}

/// Each `(name, template)` of `def` with its template's references replaced by their values.
/// `host_env` holds only the variables the account lets packs read; a project's pack reads none.
fn resolve_all(
    def: &PackDef,
    templates: &[(String, Template)],
    host_env: &HostEnv<'_>,
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, Vec<Missing>> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for (name, template) in templates {
        let mut value = String::new();
        for piece in &template.pieces {
            match piece {
                Piece::Literal(text) => value.push_str(text),
                Piece::Secret(s) => match secrets.get(s) {
                    Some(v) => value.push_str(v),
                    None => missing.push(Missing::Secret(s.clone())),
                },
                Piece::Env(e) if def.origin == Origin::Project => {
                    missing.push(Missing::EnvOfProject(e.clone()))
                }
                Piece::Env(e) => match host_env.readable(e) {
                    Some(v) => value.push_str(v),
                    None => missing.push(Missing::Env(e.clone())),
                },
            }
        }
        out.push((name.clone(), value));
    }
    if !missing.is_empty() {
        missing.dedup();
        return Err(missing);
    }
    Ok(out)
}

/// What a pack error says about missing values.
pub fn describe_missing(missing: &[Missing], account: &str) -> String {
    let mut parts = Vec::new();
    for m in missing {
        parts.push(match m {
            Missing::Secret(name) => format!(
                "waiting for credential {name:?}: set it with `glovebox secret set --account {account} {name}`"
            ),
            Missing::Env(name) => format!(
                "environment variable {name} (referenced as ${{env:{name}}}) is not set for \
                 glovebox or not one packs may read: the administrator lists those in the \
                 account's pack_env in glovebox.yaml"
            ),
            Missing::EnvOfProject(name) => format!(
                "a project's pack cannot read glovebox's environment (${{env:{name}}}): only \
                 the account's own mcp.json can, for the names its pack_env allows"
            ),
        });
    }
    parts.join("; ")
}

/// The `PATH` of `shell` run as a login shell (what the owner's terminal would have), or
/// [`DEFAULT_PATH`] if it cannot say within [`LOGIN_SHELL_TIMEOUT`].
pub async fn login_path(shell: &str, home: &std::path::Path) -> String {
    let run = tokio::process::Command::new(shell)
        .args(["-l", "-c", "printf %s \"$PATH\""])
        .env_clear()
        .env("HOME", home)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(LOGIN_SHELL_TIMEOUT, run).await {
        Ok(Ok(out)) if out.status.success() => {
            let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if path.is_empty() || path.contains('\n') {
                DEFAULT_PATH.to_owned()
            } else {
                path
            }
        }
        _ => DEFAULT_PATH.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_config::mcp_json::{Origin, parse};
    use std::path::Path;

    fn def(env: &str) -> PackDef {
        def_of(env, Origin::User)
    }

    fn def_of(env: &str, origin: Origin) -> PackDef {
        let text = format!(r#"{{"mcpServers": {{"p": {{"command": "x", "env": {env}}}}}}}"#);
        let parsed = parse(&text, Path::new("m.json"), origin, Path::new("/w"));
        assert_eq!(parsed.errors, []);
        parsed.packs[0].clone()
    }

    /// The host's environment with `readable` names for `${env:}`.
    fn host<'a>(all: &'a BTreeMap<String, String>, readable: &'a [String]) -> HostEnv<'a> {
        HostEnv { all, readable }
    }

    fn places() -> Places {
        Places::new("a", Path::new("/home/a"), None, Path::new("/tmp/gp"))
    }

    #[test]
    fn the_pack_gets_its_own_variables_and_the_base_nothing_else() {
        let host: BTreeMap<String, String> = [
            ("LANG", "C.UTF-8"),
            ("HOME", "/root"),
            ("AWS_SECRET_ACCESS_KEY", "nope"),
            ("REGION", "eu"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        let secrets: BTreeMap<String, String> = [("tok".to_owned(), "s3cr3t".to_owned())].into();
        let readable = ["REGION".to_owned()];
        let env = pack_env(
            &def(r#"{"T": "Bearer ${secret:tok}", "R": "${env:REGION}", "M": "ro"}"#),
            &places(),
            "/usr/bin:/bin",
            &super::HostEnv {
                all: &host,
                readable: &readable,
            },
            &secrets,
        )
        .unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("T"), Some("Bearer s3cr3t"));
        assert_eq!(get("R"), Some("eu"));
        assert_eq!(get("M"), Some("ro"));
        assert_eq!(get("LANG"), Some("C.UTF-8"));
        assert_eq!(
            get("HOME"),
            Some("/home/a/.local/share/glovebox/pack-home/a/packs/p")
        );
        assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
        assert_eq!(get("TMPDIR"), Some("/tmp/gp/p"));
        assert_eq!(get("npm_config_cache"), Some("/home/a/.npm"));
        assert_eq!(get("AWS_SECRET_ACCESS_KEY"), None);
    }

    #[test]
    fn env_references_read_only_allowed_names_and_never_from_a_project() {
        let all: BTreeMap<String, String> = [("REGION", "eu"), ("AWS_SECRET_ACCESS_KEY", "nope")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        let readable = ["REGION".to_owned()];
        let resolve = |env: &str, origin: Origin| {
            pack_env(
                &def_of(env, origin),
                &places(),
                "/bin",
                &host(&all, &readable),
                &BTreeMap::new(),
            )
        };
        // set but not allowed: as if unset, and said so
        let e = resolve(r#"{"K": "${env:AWS_SECRET_ACCESS_KEY}"}"#, Origin::User).unwrap_err();
        assert_eq!(e, [Missing::Env("AWS_SECRET_ACCESS_KEY".into())]);
        assert!(describe_missing(&e, "a").contains("pack_env"));
        // a project's pack reads none, not even an allowed one
        let e = resolve(r#"{"R": "${env:REGION}"}"#, Origin::Project).unwrap_err();
        assert_eq!(e, [Missing::EnvOfProject("REGION".into())]);
        assert!(
            describe_missing(&e, "a").contains("a project's pack cannot read"),
            "{e:?}"
        );
        assert!(resolve(r#"{"R": "${env:REGION}"}"#, Origin::User).is_ok());
    }

    #[test]
    fn every_missing_reference_is_named() {
        let e = pack_env(
            &def(r#"{"T": "${secret:tok}", "R": "${env:REGION}"}"#),
            &places(),
            "/bin",
            &host(&BTreeMap::new(), &[]),
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            [Missing::Env("REGION".into()), Missing::Secret("tok".into())]
        );
        let text = describe_missing(&e, "alice");
        assert!(text.contains("waiting for credential \"tok\""), "{text}");
        assert!(
            text.contains("glovebox secret set --account alice tok"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_login_shell_says_its_path_and_a_missing_one_falls_back() {
        let p = login_path("/bin/sh", Path::new("/nonexistent")).await;
        assert!(!p.is_empty() && !p.contains('\n'), "{p}");
        assert_eq!(
            login_path("/nonexistent/shell", Path::new("/")).await,
            DEFAULT_PATH
        );
    }
}
