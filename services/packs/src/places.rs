//! Where a pack server runs and what it may reach: the account's pack home (its `HOME`), the
//! caches its tools share with the user (npm's and XDG's, pinned to the user's real ones so
//! `npx` does not download again per pack), a private temporary directory per pack, a bounded
//! stderr log per pack, and the directory its command is installed in. The paths are computed
//! here; the pack's shim applies them as its Landlock domain.

use std::path::{Component, Path, PathBuf};

/// The names of directories that hold commands, whose parent is the installation (`/opt/x/bin`
/// → `/opt/x`; `node_modules/.bin` → `node_modules`; pyenv's `shims` → `~/.pyenv`).
const BIN_DIRS: &[&str] = &["bin", "sbin", ".bin", "shims"];

/// The places of one account's pack host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    /// The user's real home (whose caches are shared).
    pub user_home: PathBuf,
    /// `HOME` of every pack of the account: `<user home>/.local/share/glovebox/pack-home/<id>`.
    pub pack_home: PathBuf,
    /// npm's cache (`npm_config_cache`): `<user home>/.npm`.
    pub npm_cache: PathBuf,
    /// `XDG_CACHE_HOME`: the user's, or `<user home>/.cache`.
    pub xdg_cache: PathBuf,
    /// Where each pack's stderr log is kept: `<pack home>/logs`.
    pub logs: PathBuf,
    /// The pack host's private temporary directory (each pack gets one below it).
    pub tmp: PathBuf,
}

impl Places {
    /// The places of `account`'s pack host for a user whose home is `user_home` (and whose
    /// `XDG_CACHE_HOME` is `xdg_cache`, if set to an absolute path), with its temporary
    /// directory `tmp`.
    pub fn new(account: &str, user_home: &Path, xdg_cache: Option<&Path>, tmp: &Path) -> Places {
        let pack_home = user_home
            .join(".local/share/glovebox/pack-home")
            .join(account);
        Places {
            user_home: user_home.to_owned(),
            logs: pack_home.join("logs"),
            pack_home,
            npm_cache: user_home.join(".npm"),
            xdg_cache: xdg_cache
                .filter(|p| p.is_absolute())
                .map_or_else(|| user_home.join(".cache"), Path::to_owned),
            tmp: tmp.to_owned(),
        }
    }

    /// The same places, with a pack home of this glovebox's own (`<account>-<8 hex digits of
    /// its state directory>`): two glovebox instances with an account of the same id never share
    /// a pack home or logs. A pack home of the old shared form (`<account>`) is taken over once
    /// by the first instance that finds it.
    pub fn of_state(mut self, account: &str, state_dir: &Path) -> Places {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(state_dir.as_os_str().as_encoded_bytes());
        let own = self
            .pack_home
            .with_file_name(format!("{account}-{}", &hex::encode(digest)[..8]));
        if self.pack_home.is_dir() && !own.exists() {
            let _ = std::fs::rename(&self.pack_home, &own);
        }
        self.logs = own.join("logs");
        self.pack_home = own;
        self
    }

    /// The same places with the pack home `dir`, made for this account (system mode). A user
    /// without a home directory of its own (a service identity) keeps its tools' caches there.
    pub fn in_pack_home(mut self, dir: &Path) -> Places {
        if !self.user_home.is_dir() {
            self.user_home = dir.to_owned();
            self.npm_cache = dir.join(".npm");
            self.xdg_cache = dir.join(".cache");
        }
        self.logs = dir.join("logs");
        self.pack_home = dir.to_owned();
        self
    }

    /// The `HOME` and data directory of pack `name`: `<pack home>/packs/<name>`, its own (no pack
    /// reaches another's, nor the stderr logs beside them).
    pub fn pack_data(&self, name: &str) -> PathBuf {
        self.pack_home.join("packs").join(name)
    }

    /// The temporary directory of pack `name`.
    pub fn pack_tmp(&self, name: &str) -> PathBuf {
        self.tmp.join(name)
    }

    /// The stderr log of pack `name`.
    pub fn log(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{name}.stderr.log"))
    }
}

/// What a pack's server may read and execute besides system directories, given where its
/// command was found (`found`, absolute): the installation the command belongs to (the parent of
/// a `bin`-like directory, else the command's directory), unless that would reach `/`, a home
/// directory or its `.local` (a catch-all like `/usr/local`: `~/.local/bin/x` is no install of
/// `~/.local/share`, where keyrings and the packs' own homes are), or anything `protected`
/// (glovebox's state, the pack homes): then the command file alone.
pub fn install_grant(found: &Path, protected: &[PathBuf], homes: &[PathBuf]) -> PathBuf {
    let Some(dir) = found.parent() else {
        return found.to_owned();
    };
    let prefix = match dir.file_name().and_then(|n| n.to_str()) {
        Some(name) if BIN_DIRS.contains(&name) => dir.parent().unwrap_or(dir),
        _ => dir,
    };
    let reaches = |p: &PathBuf| p.starts_with(prefix);
    if prefix.components().all(|c| matches!(c, Component::RootDir))
        || protected.iter().any(reaches)
        || homes.iter().any(reaches)
        || homes.iter().any(|h| reaches(&h.join(".local")))
    {
        return found.to_owned();
    }
    prefix.to_owned()
}

/// Where a pack's `read` or `write` entry leads: `~/…` is under the user's home, then every link
/// is followed (what Landlock would grant); an entry that does not exist is taken as written.
pub fn grant_target(entry: &str, user_home: &Path) -> PathBuf {
    let written = match entry.strip_prefix("~/") {
        Some(rest) => user_home.join(rest),
        None => PathBuf::from(entry),
    };
    std::fs::canonicalize(&written).unwrap_or(written)
}

/// A `read` or `write` entry as an approver is shown it: as written, and where it leads when
/// that is elsewhere (a link in the project to `~/.ssh` is not what its name says).
pub fn shown_grant(entry: &str, user_home: &Path) -> String {
    let written = match entry.strip_prefix("~/") {
        Some(rest) => user_home.join(rest),
        None => PathBuf::from(entry),
    };
    let target = grant_target(entry, user_home);
    if target == written {
        entry.to_owned()
    } else {
        format!("{entry} (a link to {})", target.display())
    }
}

/// Finds `command` as `execvp` would: a name with a `/` is taken as it is (relative to `cwd`),
/// any other is looked up in `path` (the `PATH` the pack gets).
pub fn find_command(command: &str, path: &str, cwd: &Path) -> Option<PathBuf> {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = cwd.join(command);
        return executable(&p).then_some(p);
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| cwd.join(d).join(command))
        .find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_of_an_account() {
        let p = Places::new("alice", Path::new("/home/a"), None, Path::new("/tmp/gp"));
        assert_eq!(
            p.pack_home,
            Path::new("/home/a/.local/share/glovebox/pack-home/alice")
        );
        assert_eq!(p.npm_cache, Path::new("/home/a/.npm"));
        assert_eq!(p.xdg_cache, Path::new("/home/a/.cache"));
        assert_eq!(p.pack_tmp("github"), Path::new("/tmp/gp/github"));
        assert!(p.log("github").starts_with(&p.pack_home));
        // a pack's own home holds neither the logs nor another pack's home
        let github = p.pack_data("github");
        assert!(github.starts_with(&p.pack_home));
        assert!(!p.log("github").starts_with(&github));
        assert!(!p.pack_data("gitlab").starts_with(&github));
        let q = Places::new("a", Path::new("/h"), Some(Path::new("/c")), Path::new("/t"));
        assert_eq!(q.xdg_cache, Path::new("/c"));
        let r = Places::new(
            "a",
            Path::new("/h"),
            Some(Path::new("rel")),
            Path::new("/t"),
        );
        assert_eq!(r.xdg_cache, Path::new("/h/.cache"));
    }

    #[test]
    fn a_pack_home_made_for_the_account_holds_the_caches_of_a_user_without_a_home() {
        let dir = tempfile::tempdir().unwrap();
        let made = dir.path().join("packs-a");
        let homeless = Places::new("a", &dir.path().join("nonexistent"), None, Path::new("/t"))
            .in_pack_home(&made);
        assert_eq!(homeless.pack_home, made);
        assert_eq!(homeless.user_home, made);
        assert!(homeless.npm_cache.starts_with(&made) && homeless.xdg_cache.starts_with(&made));
        assert!(homeless.log("p").starts_with(&made) && homeless.pack_data("p").starts_with(&made));
        // A user with a home keeps sharing its caches.
        let housed = Places::new("a", dir.path(), None, Path::new("/t")).in_pack_home(&made);
        assert_eq!(housed.npm_cache, dir.path().join(".npm"));
        assert_eq!(housed.pack_home, made);
    }

    #[test]
    fn each_state_directory_has_its_own_pack_home_and_takes_over_the_old_one_once() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let old = home.join(".local/share/glovebox/pack-home/a");
        std::fs::create_dir_all(old.join("kept")).unwrap();
        let first = Places::new("a", home, None, Path::new("/t")).of_state("a", Path::new("/s1"));
        let second = Places::new("a", home, None, Path::new("/t")).of_state("a", Path::new("/s2"));
        assert_ne!(first.pack_home, second.pack_home);
        assert!(
            first.pack_home.join("kept").is_dir(),
            "the old home moved to the first"
        );
        assert!(!old.exists());
        assert!(first.log("p").starts_with(&first.pack_home));
        let name = first
            .pack_home
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(name.starts_with("a-") && name.len() == 10, "{name}");
        // the same state directory finds the same home again
        let again = Places::new("a", home, None, Path::new("/t")).of_state("a", Path::new("/s1"));
        assert_eq!(again.pack_home, first.pack_home);
    }

    #[test]
    fn the_installation_of_a_command_is_readable_but_never_a_home_or_the_state() {
        let protected = [PathBuf::from("/home/a/.local/state/glovebox")];
        let homes = [PathBuf::from("/home/a"), PathBuf::from("/root")];
        #[rustfmt::skip]
        let cases: &[(&str, &str)] = &[
            ("/usr/bin/node",                                  "/usr"),
            ("/opt/node/bin/node",                             "/opt/node"),
            ("/w/node_modules/.bin/mcp-server-everything",     "/w/node_modules"),
            ("/root/.pyenv/versions/3.11.7/bin/python3",       "/root/.pyenv/versions/3.11.7"),
            ("/srv/tools/server",                              "/srv/tools"),
            ("/bin/sh",                                        "/bin/sh"),
            ("/home/a/bin/tool",                               "/home/a/bin/tool"),
            ("/home/a/.local/bin/tool",                        "/home/a/.local/bin/tool"),
            ("/home/a/tools/x",                                "/home/a/tools"),
            ("/home/a/.local/share/pipx/venvs/t/bin/t",        "/home/a/.local/share/pipx/venvs/t"),
        ];
        for (found, grant) in cases {
            assert_eq!(
                install_grant(Path::new(found), &protected, &homes),
                Path::new(grant),
                "{found}"
            );
        }
        // With glovebox's state elsewhere, `~/.local` (`share/keyrings`, the pack homes) is still
        // never granted for a command in `~/.local/bin`.
        assert_eq!(
            install_grant(Path::new("/home/a/.local/bin/tool"), &[], &homes),
            Path::new("/home/a/.local/bin/tool")
        );
        // Nor is anything holding a protected place.
        let pack_homes = [PathBuf::from("/srv/tools/glovebox-packs")];
        assert_eq!(
            install_grant(Path::new("/srv/tools/server"), &pack_homes, &homes),
            Path::new("/srv/tools/server")
        );
    }

    #[test]
    fn a_grant_is_where_its_links_lead_and_is_shown_so() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join("w")).unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), home.join("w/innocent")).unwrap();
        let innocent = home.join("w/innocent").display().to_string();
        assert_eq!(grant_target(&innocent, &home), home.join(".ssh"));
        assert_eq!(
            shown_grant(&innocent, &home),
            format!("{innocent} (a link to {})", home.join(".ssh").display())
        );
        assert_eq!(grant_target("~/.ssh", &home), home.join(".ssh"));
        assert_eq!(shown_grant("~/.ssh", &home), "~/.ssh");
        assert_eq!(
            grant_target("/no/such/dir", &home),
            Path::new("/no/such/dir")
        );
        assert_eq!(shown_grant("/no/such/dir", &home), "/no/such/dir");
    }

    #[test]
    fn commands_are_found_like_execvp_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::write(bin.join("plain"), "not executable").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("/nonexistent:{}", bin.display());
        assert_eq!(find_command("tool", &path, dir.path()), Some(tool.clone()));
        assert_eq!(find_command("plain", &path, dir.path()), None);
        assert_eq!(find_command("nothere", &path, dir.path()), None);
        assert_eq!(find_command("bin/tool", "", dir.path()), Some(tool));
    }
}
