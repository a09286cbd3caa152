//! Where the state directory and the accounts' roots may lie, checked by `up` before anything
//! starts and by the gate before it takes an account change (`glovebox account add|add-root|
//! set-workdir`), so an account the gate accepts is one the supervisor will start. A job may change everything under its account's roots (Landlock grants them whole),
//! so glovebox's own state must never be under any account's roots, trash or the directories it
//! may write; and a root must not hand an agent a whole home directory (with its `.ssh`, shell
//! startup files and browser profiles), the whole machine, or a secret on the floor. Pure: the
//! caller canonicalizes the paths and lists the home directories.

use std::path::{Path, PathBuf};

/// One account's writable places, canonical.
#[derive(Debug, Clone)]
pub struct AccountPlaces {
    pub id: glovebox_config::AccountId,
    pub roots: Vec<PathBuf>,
    pub trash: PathBuf,
}

/// Why `up` refuses to start.
pub fn check(state: &Path, accounts: &[AccountPlaces], homes: &[PathBuf]) -> Result<(), String> {
    for a in accounts {
        check_roots(state, &a.id, &a.roots, homes)?;
        if state.starts_with(&a.trash) {
            return Err(format!(
                "the state directory {} lies inside the trash {} of account {:?}, which its executor may change",
                state.display(),
                a.trash.display(),
                a.id
            ));
        }
    }
    Ok(())
}

/// Why account `id` may not have `roots` (canonical): the whole machine, a home directory, the
/// secret floor, or the state directory on either side of one.
pub fn check_roots(
    state: &Path,
    id: &str,
    roots: &[PathBuf],
    homes: &[PathBuf],
) -> Result<(), String> {
    for root in roots {
        let shown = root.display();
        if root == Path::new("/") {
            return Err(format!(
                "account {:?}: a root of / would give its agents the whole machine; list the project directories it needs in roots",
                id
            ));
        }
        if let Some(home) = homes.iter().find(|h| h.starts_with(root)) {
            return Err(format!(
                "account {:?}: root {shown} holds the home directory {} (with its .ssh, shell startup files and browser profiles); use a project directory inside it instead (run `glovebox up` there, or set roots)",
                id,
                home.display()
            ));
        }
        let text = root.to_string_lossy();
        if let Some(hit) = glovebox_policy::floor::check(&text, &[]) {
            return Err(format!(
                "account {:?}: root {shown} is on the secret floor ({}); agents may never have it",
                id, hit.entry
            ));
        }
        if state.starts_with(root) {
            return Err(format!(
                "the state directory {} lies inside root {shown} of account {:?}: its jobs could read and change glovebox's keys, tokens, policy and audit; choose a state directory outside every root (--state-dir)",
                state.display(),
                id
            ));
        }
        if root.starts_with(state) {
            return Err(format!(
                "account {:?}: root {shown} lies inside the state directory {}",
                id,
                state.display()
            ));
        }
    }
    Ok(())
}

/// [`check_roots`] on this machine, for the gate: `roots` as requested (made canonical here; one
/// that cannot be is left to the directory checks), the homes of `/etc/passwd`, `run_as`'s and
/// this process's `$HOME`.
pub fn check_roots_here(
    state: &Path,
    id: &str,
    roots: &[String],
    run_as: Option<&str>,
) -> Result<(), String> {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let roots: Vec<PathBuf> = roots.iter().map(|r| canonical(Path::new(r))).collect();
    let mut extra: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Some(user) = run_as.and_then(|n| nix::unistd::User::from_name(n).ok().flatten()) {
        extra.push(user.dir);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let homes: Vec<PathBuf> = homes(&passwd, &extra)
        .iter()
        .map(|h| canonical(h))
        .collect();
    check_roots(&canonical(state), id, &roots, &homes)
}

/// The home directories of the machine's people: root's, those of users with a uid from 1000
/// (per `/etc/passwd`), and `extra` (the supervisor's own `$HOME`, the `run_as` users').
pub fn homes(passwd: &str, extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = passwd
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let uid: u32 = fields.get(2)?.parse().ok()?;
            let home = fields.get(5)?;
            (uid == 0 || (1000..65534).contains(&uid)).then(|| PathBuf::from(home))
        })
        .chain(extra.iter().cloned())
        .filter(|h| h.is_absolute() && h != Path::new("/"))
        .collect();
    homes.sort();
    homes.dedup();
    homes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(roots: &[&str]) -> Vec<AccountPlaces> {
        vec![AccountPlaces {
            id: "alice".parse().unwrap(),
            roots: roots.iter().map(PathBuf::from).collect(),
            trash: PathBuf::from("/home/alice/.local/share/Trash"),
        }]
    }

    fn homes() -> Vec<PathBuf> {
        vec![PathBuf::from("/home/alice"), PathBuf::from("/root")]
    }

    #[test]
    fn table() {
        let state = Path::new("/home/alice/.local/state/glovebox");
        let cases: &[(&str, &[&str], Option<&str>)] = &[
            ("a project", &["/home/alice/project"], None),
            ("two projects", &["/home/alice/a", "/srv/b"], None),
            ("the whole machine", &["/"], Some("whole machine")),
            (
                "a home",
                &["/home/alice"],
                Some("home directory /home/alice"),
            ),
            ("all homes", &["/home"], Some("home directory /home/alice")),
            ("root's home", &["/root"], Some("home directory /root")),
            (
                "a secret",
                &["/home/alice/.ssh"],
                Some("secret floor (.ssh)"),
            ),
            ("a key dir", &["/home/alice/.gnupg"], Some("secret floor")),
            (
                "the state's parent",
                &["/home/alice/.local"],
                Some("lies inside root"),
            ),
            (
                "the state itself",
                &["/home/alice/.local/state/glovebox"],
                Some("lies inside root"),
            ),
            (
                "inside the state",
                &["/home/alice/.local/state/glovebox/accounts"],
                Some("lies inside the state directory"),
            ),
        ];
        for (name, roots, want) in cases {
            let got = check(state, &account(roots), &homes());
            match want {
                None => assert_eq!(got, Ok(()), "{name}"),
                Some(needle) => {
                    let e = got.expect_err(name);
                    assert!(e.contains(needle), "{name}: {e}");
                }
            }
        }
    }

    #[test]
    fn a_state_dir_in_a_workdir_or_a_trash_is_refused() {
        let roots = account(&["/home/alice/project"]);
        let e = check(Path::new("/home/alice/project/.state"), &roots, &homes()).unwrap_err();
        assert!(e.contains("jobs could read and change"), "{e}");
        let e = check(
            Path::new("/home/alice/.local/share/Trash/files/state"),
            &roots,
            &homes(),
        )
        .unwrap_err();
        assert!(e.contains("trash"), "{e}");
        // A state dir in /tmp is fine: no executor may write all of /tmp.
        assert_eq!(check(Path::new("/tmp/x/state"), &roots, &homes()), Ok(()));
        // A root with a shared prefix is not a parent.
        assert_eq!(
            check(Path::new("/srv/ab/state"), &account(&["/srv/a"]), &homes()),
            Ok(())
        );
    }

    #[test]
    fn homes_are_people_and_root_only() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
                      www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n\
                      alice:x:1000:1000::/home/alice:/bin/bash\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                      broken line\n";
        assert_eq!(
            super::homes(passwd, &[PathBuf::from("/home/alice"), PathBuf::from("/")]),
            vec![PathBuf::from("/home/alice"), PathBuf::from("/root")]
        );
    }
}
