//! The strong wall around a contained program: its own user, mount and (unless it may use the
//! network) network namespace, in which the places where a user's Unix sockets live — `/tmp`,
//! `/var/tmp`, `/dev/shm`, `/run` (with `/run/user/<uid>`) and the home directory — are empty
//! tmpfs, so the session bus, ssh-agent, tmux, X11, docker and IDE sockets cannot even be named.
//! What the program was given (its roots, the pack's installs, sockets granted by path) is bound
//! back at the same path; a read-only grant is bound read-only.
//!
//! - `/tmp` is the program's own writable, size-capped tmpfs: its `TMPDIR`, gone when it ends.
//! - The other masks are tiny read-only tmpfs holding only the mount points of what was kept.
//! - `network: none` is a network namespace with no interface up (no TCP, UDP or DNS anywhere);
//!   `loopback` is one with only its own `lo` up: servers the program starts itself, nothing of
//!   the machine's (not its loopback services either).
//! - The user id is mapped to itself, so files, `id` and ownership checks look as outside; a job
//!   of root is `nobody` outside instead, its roots idmapped ([`crate::rootless`]).
//!
//! [`layout`] (which masks, which binds) is pure; [`isolate`] does it, and must run in a
//! single-threaded process before its Landlock domain is applied (Landlock forbids mounting).
//! Where the kernel refuses a namespace (no unprivileged user namespaces), the caller falls back
//! to the seccomp wall ([`crate::seccomp`]) and says so.

use std::path::{Path, PathBuf};

use rustix::fd::{AsFd, OwnedFd};
use rustix::mount::{
    MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, mount, mount_change,
    mount_remount, move_mount, open_tree,
};
use rustix::thread::{UnshareFlags, unshare_unsafe};

/// What a contained program may do on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// Whatever the machine's network allows.
    #[default]
    Any,
    /// Its own loopback only (a private network namespace with `lo` up).
    Loopback,
    /// Nothing: no TCP, no UDP (so no DNS), no raw sockets.
    None,
}

impl Network {
    pub fn name(self) -> &'static str {
        match self {
            Network::Any => "any",
            Network::Loopback => "loopback",
            Network::None => "none",
        }
    }

    /// The stricter of two (`none` over `loopback` over `any`): an account's network under a
    /// managed cap.
    pub fn at_most(self, cap: Network) -> Network {
        let rank = |n: Network| match n {
            Network::Any => 0,
            Network::Loopback => 1,
            Network::None => 2,
        };
        if rank(cap) > rank(self) { cap } else { self }
    }

    pub fn parse(text: &str) -> Option<Network> {
        match text {
            "any" => Some(Network::Any),
            "loopback" => Some(Network::Loopback),
            "none" => Some(Network::None),
            _ => None,
        }
    }
}

/// The private `/tmp`'s size when none is configured.
pub const DEFAULT_TMP_SIZE: u64 = 1 << 30;
/// The size of each other mask: enough for the mount points of what is kept.
const MASK_SIZE: &str = "size=1m,nr_inodes=4096,mode=0755";

/// A path the program keeps under a mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub path: PathBuf,
    pub writable: bool,
}

/// What to hide and what to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    /// Directories covered by private tmpfs (see [`default_masks`]).
    pub masks: Vec<PathBuf>,
    /// Everything the program was granted; what lies under a mask is bound back.
    pub keep: Vec<Kept>,
    /// The private `/tmp`'s size in bytes.
    pub tmp_size: u64,
    pub network: Network,
    /// For a caller that is root: the unprivileged uid and gid its uid 0 is outside
    /// ([`crate::rootless`]); `None`: the caller's own ids, mapped to themselves.
    pub root_as: Option<(u32, u32)>,
}

/// The private temporary directory: always `/tmp` (the first default mask).
pub const PRIVATE_TMP: &str = "/tmp";

/// Where a user's sockets live: `/tmp` (first: the private `TMPDIR`), `/var/tmp`, `/dev/shm`,
/// `/run` and the `home` directory.
pub fn default_masks(home: Option<&Path>) -> Vec<PathBuf> {
    let mut masks: Vec<PathBuf> = [PRIVATE_TMP, "/var/tmp", "/dev/shm", "/run"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Some(home) = home.filter(|h| h.is_absolute() && h.parent().is_some()) {
        masks.push(home.to_owned());
    }
    masks
}

/// The mounts to make, decided without touching anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub masks: Vec<PathBuf>,
    /// Bound back after masking, outermost first.
    pub binds: Vec<Kept>,
}

/// Which masks apply and which kept paths are bound back:
/// - a mask inside another mask, or equal to or inside a *writable* kept path (a root that is
///   all of `/tmp` or the home directory), is dropped: the program was given that place;
/// - a kept path equal to or above a mask (a read grant on `/run` or `/`) is not bound back:
///   the mask wins;
/// - a kept path inside another kept path is covered by the outer one's bind (recursive), and
///   takes its writability from it only if it is read-only itself.
pub fn layout(masks: &[PathBuf], keep: &[Kept]) -> Layout {
    let mut chosen: Vec<PathBuf> = Vec::new();
    for mask in masks {
        let inside_mask = masks.iter().any(|m| m != mask && mask.starts_with(m));
        let given = keep.iter().any(|k| k.writable && mask.starts_with(&k.path));
        if !inside_mask && !given && !chosen.contains(mask) {
            chosen.push(mask.clone());
        }
    }
    let mut binds: Vec<Kept> = keep
        .iter()
        .filter(|k| chosen.iter().any(|m| k.path.starts_with(m) && k.path != *m))
        .cloned()
        .collect();
    binds.sort_by(|a, b| a.path.cmp(&b.path).then(b.writable.cmp(&a.writable)));
    binds.dedup_by(|later, earlier| later.path == earlier.path);
    let outer: Vec<Kept> = binds.clone();
    binds.retain(|k| {
        !outer
            .iter()
            .any(|o| o.path != k.path && k.path.starts_with(&o.path) && (o.writable || !k.writable))
    });
    Layout {
        masks: chosen,
        binds,
    }
}

/// Whether `path` is a directory; `None` if it does not exist (nothing to keep). Any other
/// failure to look (a directory on the way the caller may not enter) is an error: what was
/// granted must not go missing silently.
fn existing(path: &Path) -> Result<Option<bool>, IsolateError> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(Some(meta.is_dir())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(IsolateError::Io {
            step: format!("look at {}", path.display()),
            error,
        }),
    }
}

/// A detached copy of the mounts at `path`, recursive.
fn clone_tree(path: &Path) -> Result<OwnedFd, IsolateError> {
    step(
        open_tree(
            rustix::fs::CWD,
            path,
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_RECURSIVE,
        ),
        || format!("keep {}", path.display()),
    )
}

/// The paths of `kept` that lie in no other of them.
fn outermost<'a>(kept: impl Iterator<Item = &'a Kept> + Clone) -> Vec<&'a Kept> {
    let all: Vec<&Kept> = kept.clone().collect();
    let mut out: Vec<&Kept> = Vec::new();
    for k in kept {
        let inside_another = all
            .iter()
            .any(|o| o.path != k.path && k.path.starts_with(&o.path));
        if !inside_another && !out.iter().any(|o| o.path == k.path) {
            out.push(k);
        }
    }
    out
}

/// Why the namespaces could not be made.
#[derive(Debug, thiserror::Error)]
pub enum IsolateError {
    #[error("the kernel refused a user namespace ({0}): unprivileged user namespaces are off")]
    Unshare(rustix::io::Errno),
    #[error("{step}: {errno}")]
    Step {
        step: String,
        errno: rustix::io::Errno,
    },
    #[error("{step}: {error}")]
    Io { step: String, error: std::io::Error },
}

fn step<T>(
    result: rustix::io::Result<T>,
    what: impl FnOnce() -> String,
) -> Result<T, IsolateError> {
    result.map_err(|errno| IsolateError::Step {
        step: what(),
        errno,
    })
}

fn io_step<T>(
    result: std::io::Result<T>,
    what: impl FnOnce() -> String,
) -> Result<T, IsolateError> {
    result.map_err(|error| IsolateError::Io {
        step: what(),
        error,
    })
}

/// Makes the namespaces and mounts of `isolation` for the calling process (single-threaded, not
/// yet under Landlock). On success the process sees its private places; its working directory
/// is resolved again so that it lies in what was bound back.
pub fn isolate(isolation: &Isolation) -> Result<(), IsolateError> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let cwd = std::env::current_dir().ok();
    let net = if isolation.network == Network::Any {
        UnshareFlags::empty()
    } else {
        UnshareFlags::NEWNET
    };
    let layout = layout(&isolation.masks, &isolation.keep);
    let mut trees: Vec<Tree> = Vec::new();
    let idmapping = match isolation.root_as {
        Some(outside) if uid == 0 => {
            enter_as_unprivileged(isolation, &layout, outside, &mut trees)?;
            true
        }
        _ => false,
    };
    let flags = if idmapping {
        UnshareFlags::NEWNS | net
    } else {
        UnshareFlags::NEWUSER | UnshareFlags::NEWNS | net
    };
    // SAFETY: the flags hold no `FILES`, the one that would change which file descriptors other
    // threads see; the caller is single-threaded anyway.
    #[allow(unsafe_code)]
    unsafe { unshare_unsafe(flags) }.map_err(IsolateError::Unshare)?;
    if !idmapping {
        map_ids(uid, gid)?;
    }
    step(
        mount_change(
            "/",
            MountPropagationFlags::DOWNSTREAM | MountPropagationFlags::REC,
        ),
        || "make the mounts private".into(),
    )?;
    // Cloned before the masks cover them (for root's job, all of them were already).
    if !idmapping {
        clone_existing(layout.binds.iter(), &mut trees)?;
    }
    // Outer places first, so that a place inside another is bound onto it.
    trees.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    cover_masks(&layout.masks, isolation.tmp_size)?;
    for (kept, tree, is_dir) in &trees {
        bind_back(kept, tree.as_fd(), *is_dir)?;
    }
    seal_masks(&layout.masks)?;
    if isolation.network == Network::Loopback {
        io_step(crate::netdev::loopback_up(), || "bring up lo".into())?;
    }
    if let Some(cwd) = cwd {
        io_step(std::env::set_current_dir(&cwd), || {
            format!("enter {} again", cwd.display())
        })?;
    }
    Ok(())
}

/// A kept place's detached tree of mounts, to be bound back, and whether it is a directory.
type Tree = (Kept, OwnedFd, bool);

/// Root's job: makes the user namespace in which its uid 0 is `outside` (uid, gid); idmaps what
/// it may write and clones what it may only read into `trees` while the shim is still root (see
/// `rootless`), then enters that namespace.
fn enter_as_unprivileged(
    isolation: &Isolation,
    layout: &Layout,
    (outside_uid, outside_gid): (u32, u32),
    trees: &mut Vec<Tree>,
) -> Result<(), IsolateError> {
    let userns = io_step(
        crate::rootless::mapped_user_namespace(outside_uid, outside_gid),
        || "make a user namespace for root's job".into(),
    )?;
    for kept in outermost(isolation.keep.iter().filter(|k| k.writable)) {
        let Some(is_dir) = existing(&kept.path)? else {
            continue;
        };
        let tree = io_step(
            crate::rootless::idmapped_tree(&kept.path, userns.as_fd()),
            || format!("idmap {}", kept.path.display()),
        )?;
        trees.push((kept.clone(), tree, is_dir));
    }
    // What it may only read is cloned now too: once it is `nobody`, root's directories on the
    // way to it would not let it.
    clone_existing(layout.binds.iter().filter(|k| !k.writable), trees)?;
    io_step(crate::rootless::enter(userns.as_fd()), || {
        "enter root's job's user namespace".into()
    })
}

/// Clones the tree of each place of `kept` that exists into `trees`.
fn clone_existing<'a>(
    kept: impl Iterator<Item = &'a Kept>,
    trees: &mut Vec<Tree>,
) -> Result<(), IsolateError> {
    for kept in kept {
        if let Some(is_dir) = existing(&kept.path)? {
            trees.push((kept.clone(), clone_tree(&kept.path)?, is_dir));
        }
    }
    Ok(())
}

/// Covers each mask that is a directory with a tmpfs of its own: the first, `/tmp`, is the
/// program's writable `TMPDIR` of `tmp_size` bytes (at least a page); the others are tiny.
fn cover_masks(masks: &[PathBuf], tmp_size: u64) -> Result<(), IsolateError> {
    for (i, mask) in masks.iter().enumerate() {
        if !mask.is_dir() {
            continue;
        }
        let data = if i == 0 && mask == Path::new(PRIVATE_TMP) {
            format!("size={},mode=1777", tmp_size.max(4096))
        } else {
            MASK_SIZE.to_owned()
        };
        let data = io_step(
            std::ffi::CString::new(data).map_err(std::io::Error::other),
            || "tmpfs options".into(),
        )?;
        step(
            mount(
                "tmpfs",
                mask,
                "tmpfs",
                MountFlags::NOSUID | MountFlags::NODEV,
                Some(data.as_c_str()),
            ),
            || format!("cover {}", mask.display()),
        )?;
    }
    Ok(())
}

/// Makes the masks after the first read-only, once what was kept is bound back: they hold only
/// mount points.
fn seal_masks(masks: &[PathBuf]) -> Result<(), IsolateError> {
    for mask in masks.iter().skip(1).filter(|m| m.is_dir()) {
        step(
            mount_remount(
                mask,
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::RDONLY,
                MASK_SIZE,
            ),
            || format!("make {} read-only", mask.display()),
        )?;
    }
    Ok(())
}

/// Maps the caller's user and group to themselves in its new user namespace.
fn map_ids(uid: u32, gid: u32) -> Result<(), IsolateError> {
    for (file, text) in [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ] {
        io_step(std::fs::write(file, text), || format!("write {file}"))?;
    }
    Ok(())
}

/// Makes a mount point for `kept` in its mask and moves its cloned tree there.
fn bind_back(
    kept: &Kept,
    tree: rustix::fd::BorrowedFd<'_>,
    is_dir: bool,
) -> Result<(), IsolateError> {
    let path = &kept.path;
    let point = if is_dir {
        std::fs::create_dir_all(path)
    } else {
        path.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::File::create(path).map(drop))
    };
    io_step(point, || {
        format!("make a mount point for {}", path.display())
    })?;
    step(
        move_mount(
            tree,
            "",
            rustix::fs::CWD,
            path,
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        ),
        || format!("bind {} back", path.display()),
    )?;
    if !kept.writable {
        // The flags the mount already has must be kept (they are locked in a user namespace).
        let held = rustix::fs::statvfs(path)
            .map(|s| s.f_flag)
            .unwrap_or(rustix::fs::StatVfsMountFlags::empty());
        let mut flags = MountFlags::BIND | MountFlags::RDONLY;
        for (has, flag) in [
            (rustix::fs::StatVfsMountFlags::NOSUID, MountFlags::NOSUID),
            (rustix::fs::StatVfsMountFlags::NODEV, MountFlags::NODEV),
            (rustix::fs::StatVfsMountFlags::NOEXEC, MountFlags::NOEXEC),
            (rustix::fs::StatVfsMountFlags::NOATIME, MountFlags::NOATIME),
            (
                rustix::fs::StatVfsMountFlags::NODIRATIME,
                MountFlags::NODIRATIME,
            ),
            (
                rustix::fs::StatVfsMountFlags::RELATIME,
                MountFlags::RELATIME,
            ),
        ] {
            if held.contains(has) {
                flags |= flag;
            }
        }
        step(mount_remount(path, flags, ""), || {
            format!("make {} read-only", path.display())
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn kept(path: &str, writable: bool) -> Kept {
        Kept {
            path: PathBuf::from(path),
            writable,
        }
    }

    fn paths(list: &[PathBuf]) -> Vec<&str> {
        list.iter().map(|p| p.to_str().unwrap()).collect()
    }

    #[test]
    fn the_masks_cover_where_sockets_live_and_the_home_directory() {
        let masks = default_masks(Some(Path::new("/home/a")));
        assert_eq!(
            paths(&masks),
            ["/tmp", "/var/tmp", "/dev/shm", "/run", "/home/a"]
        );
        assert_eq!(default_masks(Some(Path::new("/"))).len(), 4);
        assert_eq!(default_masks(None).len(), 4);
    }

    #[test]
    fn what_was_given_under_a_mask_is_bound_back_and_nothing_else() {
        let masks = default_masks(Some(Path::new("/home/a")));
        let l = layout(
            &masks,
            &[
                kept("/home/a/work", true),
                kept("/home/a/work/sub", true),
                kept("/home/a/.pyenv/versions/3.12", false),
                kept("/tmp/w", true),
                kept("/usr", false),
                kept("/run", false),
                kept("/run/user/1000/docker.sock", true),
            ],
        );
        assert_eq!(paths(&l.masks), paths(&masks));
        let binds: Vec<(&str, bool)> = l
            .binds
            .iter()
            .map(|k| (k.path.to_str().unwrap(), k.writable))
            .collect();
        assert_eq!(
            binds,
            [
                ("/home/a/.pyenv/versions/3.12", false),
                ("/home/a/work", true),
                ("/run/user/1000/docker.sock", true),
                ("/tmp/w", true),
            ]
        );
    }

    #[test]
    fn a_root_that_is_a_whole_mask_keeps_it_and_a_read_grant_above_a_mask_does_not() {
        let masks = default_masks(Some(Path::new("/home/a")));
        let l = layout(&masks, &[kept("/home/a", true), kept("/", false)]);
        assert_eq!(paths(&l.masks), ["/tmp", "/var/tmp", "/dev/shm", "/run"]);
        assert!(l.binds.is_empty(), "{l:?}");
        // A read-only place inside a writable root is covered by the root's bind; a writable one
        // inside a read-only grant needs its own.
        let l = layout(
            &masks,
            &[
                kept("/tmp/r", false),
                kept("/tmp/r/w", true),
                kept("/tmp/x", true),
                kept("/tmp/x/ro", false),
            ],
        );
        let binds: Vec<&str> = l.binds.iter().map(|k| k.path.to_str().unwrap()).collect();
        assert_eq!(binds, ["/tmp/r", "/tmp/r/w", "/tmp/x"]);
    }

    #[test]
    fn a_cap_only_ever_narrows_the_network() {
        use Network::{Any, Loopback, None};
        for (own, cap, result) in [
            (Any, Any, Any),
            (Any, Loopback, Loopback),
            (Any, None, None),
            (Loopback, Any, Loopback),
            (Loopback, None, None),
            (None, Any, None),
            (None, Loopback, None),
        ] {
            assert_eq!(own.at_most(cap), result, "{own:?} under {cap:?}");
        }
    }

    #[test]
    fn network_names_round_trip() {
        for n in [Network::Any, Network::Loopback, Network::None] {
            assert_eq!(Network::parse(n.name()), Some(n));
        }
        assert_eq!(Network::parse("some"), None);
    }
}
