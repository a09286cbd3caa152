//! The account's trash in the freedesktop.org layout: an entry moves (one `rename`, never a copy
//! and never a permanent delete) to `<trash>/files/<name>`, described by
//! `<trash>/info/<name>.trashinfo` (original path, percent-encoded, and the deletion date).
//! The info file is created exclusively first, which reserves the name.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use glovebox_proto::ErrorCode;
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

use crate::error::OpError;
use crate::fsio;

/// Names tried before giving up (`name`, `name.2`, `name.3`, ...).
const MAX_NAME_TRIES: u32 = 1000;

/// Where one trashed entry went, relative to the trash root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trashed {
    pub file: String,
    pub info: String,
}

/// Opens (creating if needed, mode 0700) the trash's `files/` and `info/` directories, without
/// following links below the canonical trash root.
fn open_trash(trash: &Path) -> Result<(OwnedFd, OwnedFd), OpError> {
    let fail = |what: &str| {
        OpError::new(
            ErrorCode::Internal,
            format!("the trash {what} cannot be used"),
        )
    };
    for sub in ["files", "info"] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(trash.join(sub))
            .map_err(|e| {
                tracing::warn!(error = %e, trash = %trash.display(), "cannot create the trash");
                fail("directory")
            })?;
    }
    let root = std::fs::canonicalize(trash)
        .ok()
        .and_then(|p| p.into_os_string().into_string().ok())
        .ok_or_else(|| fail("directory"))?;
    let files = fsio::open_no_links(&format!("{root}/files"), OFlags::RDONLY | OFlags::DIRECTORY)?;
    let info = fsio::open_no_links(&format!("{root}/info"), OFlags::RDONLY | OFlags::DIRECTORY)?;
    Ok((files, info))
}

/// Moves `name` in the directory `dir` (whose canonical path is `original`'s parent) to the trash.
pub fn put(trash: &Path, dir: &OwnedFd, name: &str, original: &str) -> Result<Trashed, OpError> {
    let (files, info) = open_trash(trash)?;
    let body = info_text(original, SystemTime::now());
    for i in 1..=MAX_NAME_TRIES {
        let candidate = if i == 1 {
            name.to_owned()
        } else {
            format!("{name}.{i}")
        };
        let info_name = format!("{candidate}.trashinfo");
        let fd = match fsio::open_beneath(
            &info,
            &info_name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(OpError::errno(e, "the trash")),
        };
        let unreserve = || {
            let _ = rustix::fs::unlinkat(&info, info_name.as_str(), AtFlags::empty());
        };
        let written = std::fs::File::from(fd)
            .write_all(body.as_bytes())
            .map_err(|e| OpError::io(e, "the trash"));
        if let Err(e) = written {
            unreserve();
            return Err(e);
        }
        match rustix::fs::renameat_with(
            dir,
            name,
            &files,
            candidate.as_str(),
            RenameFlags::NOREPLACE,
        ) {
            Ok(()) => {
                return Ok(Trashed {
                    file: format!("files/{candidate}"),
                    info: format!("info/{info_name}"),
                });
            }
            // A stray file without its info: try the next name.
            Err(rustix::io::Errno::EXIST) => unreserve(),
            Err(rustix::io::Errno::XDEV) => {
                unreserve();
                return Err(OpError::new(
                    ErrorCode::InvalidParams,
                    format!(
                        "{original} is on another file system than the trash; refusing to copy it or delete it permanently"
                    ),
                ));
            }
            Err(e) => {
                unreserve();
                return Err(OpError::errno(e, original));
            }
        }
    }
    Err(OpError::new(
        ErrorCode::Busy,
        format!("the trash already holds {MAX_NAME_TRIES} entries named {name}"),
    ))
}

/// The `.trashinfo` text for `original` deleted at `when` (UTC).
pub fn info_text(original: &str, when: SystemTime) -> String {
    format!(
        "[Trash Info]\nPath={}\nDeletionDate={}\n",
        percent_encode(original),
        date_time(when)
    )
}

fn percent_encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `YYYY-MM-DDThh:mm:ss` in UTC.
fn date_time(when: SystemTime) -> String {
    let secs = when
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn info_file_text() {
        let when = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            info_text("/w/a b%.txt", when),
            "[Trash Info]\nPath=/w/a%20b%25.txt\nDeletionDate=2023-11-14T22:13:20\n"
        );
        assert_eq!(date_time(UNIX_EPOCH), "1970-01-01T00:00:00");
        assert_eq!(
            date_time(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00"
        );
    }

    #[test]
    fn names_are_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let work = root.join("w");
        std::fs::create_dir(&work).unwrap();
        let trash = root.join("Trash");
        let wfd = fsio::open_no_links(work.to_str().unwrap(), OFlags::RDONLY | OFlags::DIRECTORY)
            .unwrap();
        for i in 0..3 {
            std::fs::write(work.join("a.txt"), format!("{i}")).unwrap();
            let t = put(&trash, &wfd, "a.txt", &format!("{}/a.txt", work.display())).unwrap();
            let want = if i == 0 {
                "a.txt".to_owned()
            } else {
                format!("a.txt.{}", i + 1)
            };
            assert_eq!(t.file, format!("files/{want}"));
            assert_eq!(
                std::fs::read_to_string(trash.join(&t.file)).unwrap(),
                format!("{i}")
            );
            let info = std::fs::read_to_string(trash.join(&t.info)).unwrap();
            assert!(
                info.contains(&format!("Path={}/a.txt\n", work.display())),
                "{info}"
            );
        }
        assert!(!work.join("a.txt").exists());
    }
}
