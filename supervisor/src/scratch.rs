//! The scratch directories of an account's services in `/tmp`:
//! `glovebox-jobs-<account>-<pid>-<random>` (an executor's, where jobs without namespaces get
//! their `TMPDIR`) and `glovebox-packs-<account>-<pid>-<random>` (a pack host's, where each pack
//! gets its temporary directory). Each is made 0700 by its service and removed when it stops; one
//! whose process is gone (killed) is swept by the account's next service of that kind and by
//! `up` when it stops. Only this user's directories are ever removed, never following links.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// Which service's scratch directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Jobs,
    Packs,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Kind::Jobs => "glovebox-jobs-",
            Kind::Packs => "glovebox-packs-",
        }
    }
}

/// Where scratch directories go.
pub const TMP: &str = "/tmp";

/// Creates this process's scratch directory of `kind` for `account`, after sweeping the stale
/// ones of dead processes.
pub fn make(kind: Kind, account: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    sweep(Path::new(TMP), kind, account);
    let dir = PathBuf::from(format!(
        "{TMP}/{}{account}-{}-{}",
        kind.prefix(),
        std::process::id(),
        hex::encode(glovebox_config::random_bytes::<8>()?)
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}

/// The process that made a scratch directory of `kind` for `account` named `name`
/// (`<prefix><account>-<pid>-<16 hex digits>`); `None` for any other name.
fn owner(name: &str, kind: Kind, account: &str) -> Option<u32> {
    let rest = name
        .strip_prefix(kind.prefix())?
        .strip_prefix(account)?
        .strip_prefix('-')?;
    let (pid, random) = rest.split_once('-')?;
    let hex = random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    (hex && digits).then(|| pid.parse().ok()).flatten()
}

/// Removes the directories in `tmp` that are `account`'s scratch directories of `kind`, this
/// user's, whose process no longer runs. One whose process id was taken again is kept (never one
/// in use).
pub fn sweep(tmp: &Path, kind: Kind, account: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let uid = rustix::process::geteuid().as_raw();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| owner(name, kind, account))
        else {
            continue;
        };
        let path = entry.path();
        let ours = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            // Removes what is inside without following links.
            if let Err(error) = std::fs::remove_dir_all(&path) {
                tracing::warn!(dir = %path.display(), %error, "could not remove a stale scratch directory");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_scratch_directory_names_its_account_and_process() {
        let random = "0123456789abcdef";
        let owner = |name: &str, account| owner(name, Kind::Jobs, account);
        assert_eq!(
            owner(&format!("glovebox-jobs-a-42-{random}"), "a"),
            Some(42)
        );
        // Another account's, even one whose name starts with this one's.
        assert_eq!(owner(&format!("glovebox-jobs-a-b-42-{random}"), "a"), None);
        assert_eq!(owner(&format!("glovebox-jobs-ab-42-{random}"), "a"), None);
        assert_eq!(
            owner(&format!("glovebox-jobs-a-b-42-{random}"), "a-b"),
            Some(42)
        );
        // Not a name this executor makes.
        for name in [
            "glovebox-jobs-a-42".to_owned(),
            format!("glovebox-jobs-a--{random}"),
            format!("glovebox-jobs-a-4x2-{random}"),
            format!("glovebox-jobs-a-42-{random}0"),
            "glovebox-jobs-a-42-0123456789abcdeg".to_owned(),
            format!("glovebox-jobs-a-99999999999-{random}"),
            format!("other-a-42-{random}"),
        ] {
            assert_eq!(owner(&name, "a"), None, "{name}");
        }
    }

    #[test]
    fn only_scratch_directories_of_gone_processes_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let random = "0123456789abcdef";
        // A process id above the kernel's largest (4194304) never runs.
        let gone = tmp.path().join(format!("glovebox-jobs-a-4194305-{random}"));
        let running = tmp
            .path()
            .join(format!("glovebox-jobs-a-{}-{random}", std::process::id()));
        let other_account = tmp.path().join(format!("glovebox-jobs-b-4194305-{random}"));
        let not_scratch = tmp.path().join("glovebox-jobs-a-4194305-keep");
        for dir in [&gone, &running, &other_account, &not_scratch] {
            std::fs::create_dir(dir).unwrap();
        }
        // What a dead executor's job left, with a link out that must not be followed.
        let outside = tmp.path().join("outside.txt");
        std::fs::write(&outside, "kept").unwrap();
        std::fs::create_dir(gone.join("job-1")).unwrap();
        std::os::unix::fs::symlink(&outside, gone.join("job-1/link")).unwrap();
        // A file with a scratch directory's name is not a directory: kept.
        let file = tmp.path().join(format!("glovebox-jobs-a-4194306-{random}"));
        std::fs::write(&file, "").unwrap();
        // Another user's directory of that name (only root can make one here): kept, never
        // emptied on their behalf.
        let another_users = tmp.path().join(format!("glovebox-jobs-a-4194307-{random}"));
        std::fs::create_dir(&another_users).unwrap();
        std::fs::write(another_users.join("theirs"), "").unwrap();
        let mut must_stay = vec![&running, &other_account, &not_scratch, &file, &outside];
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::lchown(&another_users, Some(65534), Some(65534)).unwrap();
            must_stay.push(&another_users);
        }

        sweep(tmp.path(), Kind::Jobs, "a");
        assert!(!gone.exists());
        for kept in must_stay {
            assert!(kept.exists(), "{}", kept.display());
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
    }

    #[test]
    fn a_pack_hosts_directory_is_told_from_an_executors() {
        let random = "0123456789abcdef";
        let name = format!("glovebox-packs-a-42-{random}");
        assert_eq!(owner(&name, Kind::Packs, "a"), Some(42));
        assert_eq!(owner(&name, Kind::Jobs, "a"), None);
    }
}
