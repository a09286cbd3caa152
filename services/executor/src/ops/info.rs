//! `file_info`: what `stat` says of a file or directory, without reading it. A read of its path
//! like any other: planned as one (so a refused path reveals nothing, not even whether it
//! exists), the object opened (`O_PATH`, no links) and checked to be the one planned, and a
//! regular file with other names refused as its content would be.

use glovebox_proto::tools::FileInfoParams;
use glovebox_proto::v1::TicketBody;
use rustix::fs::{FileType, OFlags, Stat};
use serde_json::{Value, json};

use crate::approved::open_planned;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileInfoParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let (path, _fd, stat, planned) = open_planned(ctx, &p.path, ticket, OFlags::PATH)?;
    fsio::refuse_other_names(&stat, planned.links, &p.path)?;
    Ok(Done::new(&describe(&path, &stat), 0))
}

/// The result for the object at `path` whose status is `stat`. Pure.
pub fn describe(path: &str, stat: &Stat) -> Value {
    let kind = match fsio::file_type(stat) {
        FileType::RegularFile => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "char_device",
        FileType::BlockDevice => "block_device",
        FileType::Unknown => "unknown",
    };
    let mode = stat.st_mode & 0o7777;
    json!({
        "path": path,
        "type": kind,
        "size": stat.st_size.max(0),
        "mode": format!("{mode:04o}"),
        "permissions": permissions(mode),
        "uid": stat.st_uid,
        "gid": stat.st_gid,
        "links": stat.st_nlink,
        "modified": utc(stat.st_mtime, stat.st_mtime_nsec),
        "accessed": utc(stat.st_atime, stat.st_atime_nsec),
        "changed": utc(stat.st_ctime, stat.st_ctime_nsec),
    })
}

/// `rwxr-xr-x`, as `ls -l` shows the permission bits (setuid, setgid and sticky included).
fn permissions(mode: u32) -> String {
    let mut out = String::with_capacity(9);
    for (shift, special, set, unset) in [
        (6, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (mode >> shift) & 0o7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => set,
            (false, true) => unset,
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    out
}

/// A time as RFC 3339 in UTC, to the nanosecond (empty if out of range).
fn utc(secs: i64, nanos: impl TryInto<u32>) -> String {
    chrono::DateTime::from_timestamp(secs, nanos.try_into().unwrap_or(0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approved::read_plan;
    use crate::testing::{Fixture, ticket_for};
    use glovebox_proto::ErrorCode;

    fn info(f: &Fixture, path: &str) -> Result<Value, OpError> {
        let plan = read_plan(&f.ctx(), path)?;
        let p = FileInfoParams { path: path.into() };
        execute(&f.ctx(), &p, &ticket_for(&plan)).map(|d| d.value())
    }

    #[test]
    fn describes_files_directories_and_what_a_link_leads_to() {
        use std::os::unix::fs::PermissionsExt;
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "hello").unwrap();
        std::fs::set_permissions(f.work.join("a.txt"), std::fs::Permissions::from_mode(0o640))
            .unwrap();
        std::fs::create_dir(f.work.join("sub")).unwrap();
        std::os::unix::fs::symlink("a.txt", f.work.join("link")).unwrap();
        let a = info(&f, "a.txt").unwrap();
        assert_eq!(a["type"], "file");
        assert_eq!(a["size"], 5);
        assert_eq!(a["mode"], "0640");
        assert_eq!(a["permissions"], "rw-r-----");
        assert_eq!(a["links"], 1);
        assert!(a["modified"].as_str().unwrap().ends_with('Z'), "{a}");
        assert_eq!(info(&f, "sub").unwrap()["type"], "directory");
        let link = info(&f, "link").unwrap();
        assert_eq!(
            link["path"],
            f.path("a.txt"),
            "a link is described where it leads"
        );
        assert_eq!(link["type"], "file");
    }

    #[test]
    fn refuses_what_a_content_read_refuses() {
        let f = Fixture::new();
        assert_eq!(info(&f, "missing").unwrap_err().code, ErrorCode::NotFound);
        std::os::unix::fs::symlink("nowhere", f.work.join("dangling")).unwrap();
        assert_eq!(
            info(&f, "dangling").unwrap_err().code,
            ErrorCode::InvalidParams
        );
        // A file with another name (outside the policy's view) is not described.
        std::fs::write(f.root.join("secret"), "s").unwrap();
        std::fs::hard_link(f.root.join("secret"), f.work.join("alias")).unwrap();
        assert_eq!(info(&f, "alias").unwrap_err().code, ErrorCode::Denied);
        // Swapped after it was planned: refused as changed.
        std::fs::write(f.work.join("b"), "b").unwrap();
        let plan = read_plan(&f.ctx(), "b").unwrap();
        std::fs::write(f.work.join("b2"), "other").unwrap();
        std::fs::rename(f.work.join("b2"), f.work.join("b")).unwrap();
        let p = FileInfoParams { path: "b".into() };
        assert_eq!(
            execute(&f.ctx(), &p, &ticket_for(&plan)).unwrap_err().code,
            ErrorCode::Changed
        );
    }

    #[test]
    fn permission_bits_read_as_ls_shows_them() {
        assert_eq!(permissions(0o755), "rwxr-xr-x");
        assert_eq!(permissions(0o4755), "rwsr-xr-x");
        assert_eq!(permissions(0o2644), "rw-r-Sr--");
        assert_eq!(permissions(0o1777), "rwxrwxrwt");
        assert_eq!(permissions(0o000), "---------");
    }
}
