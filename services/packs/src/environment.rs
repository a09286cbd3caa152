//! The environment a pack server starts with, and nothing else of the pack host's: `HOME` (the
//! account's pack home), `PATH` (the owner's login shell's), `TMPDIR`, the shared caches, the
//! locale and user names, then the pack's own `env`, whose references are resolved here at spawn
//! time (`${secret:NAME}` from the values the gate handed over, `${env:NAME}` from the host's
//! environment). An HTTP pack's headers are resolved the same way ([`pack_headers`]). Values are
//! never logged.

use std::collections::BTreeMap;
use std::time::Duration;

use glovebox_config::mcp_json::{PackDef, Piece, Template};

use crate::places::Places;

/// Variables of the host's environment a pack inherits as they are.
const INHERITED: &[&str] = &[
    "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TERM",
];
/// The `PATH` a pack gets when the login shell cannot say.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// How long the owner's login shell may take to print its `PATH`.
pub const LOGIN_SHELL_TIMEOUT: Duration = Duration::from_secs(5);

/// A value the pack's environment needs that is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Secret(String),
    Env(String),
}

/// The environment of pack `def`: the base variables, then its own (`secrets` holds the values
/// of the secrets it names that the gate has). Fails with every reference that has no value.
pub fn pack_env(
    def: &PackDef,
    places: &Places,
    login_path: &str,
    host_env: &BTreeMap<String, String>,
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, Vec<Missing>> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for name in INHERITED {
        if let Some(v) = host_env.get(*name) {
            env.insert((*name).to_owned(), v.clone());
        }
    }
    let home = places.pack_home.display().to_string();
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
    let own = resolve_all(&def.env, host_env, secrets)?;
    env.extend(own);
    Ok(env.into_iter().collect())
}

/// An HTTP pack's headers, their references resolved; fails with every reference that has no
/// value.
pub fn pack_headers(
    def: &PackDef,
    host_env: &BTreeMap<String, String>,
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, Vec<Missing>> {
    resolve_all(&def.headers, host_env, secrets)
}

/// Each `(name, template)` with its template's references replaced by their values.
fn resolve_all(
    templates: &[(String, Template)],
    host_env: &BTreeMap<String, String>,
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
                Piece::Env(e) => match host_env.get(e) {
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
                "environment variable {name} is not set for glovebox (referenced as ${{env:{name}}})"
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
        let text = format!(r#"{{"mcpServers": {{"p": {{"command": "x", "env": {env}}}}}}}"#);
        let parsed = parse(&text, Path::new("m.json"), Origin::User, Path::new("/w"));
        assert_eq!(parsed.errors, []);
        parsed.packs[0].clone()
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
        let env = pack_env(
            &def(r#"{"T": "Bearer ${secret:tok}", "R": "${env:REGION}", "M": "ro"}"#),
            &places(),
            "/usr/bin:/bin",
            &host,
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
            Some("/home/a/.local/share/glovebox/pack-home/a")
        );
        assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
        assert_eq!(get("TMPDIR"), Some("/tmp/gp/p"));
        assert_eq!(get("npm_config_cache"), Some("/home/a/.npm"));
        assert_eq!(get("AWS_SECRET_ACCESS_KEY"), None);
    }

    #[test]
    fn every_missing_reference_is_named() {
        let e = pack_env(
            &def(r#"{"T": "${secret:tok}", "R": "${env:REGION}"}"#),
            &places(),
            "/bin",
            &BTreeMap::new(),
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
