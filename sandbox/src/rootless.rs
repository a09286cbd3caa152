//! A job of root never runs as root. Where glovebox itself runs as root without an account's
//! `run_as` (dev mode as root), a job's shim puts it in a user namespace in which its uid 0 is an
//! unprivileged user outside (`nobody`): `/etc/shadow`, root's files and root's processes are
//! not its own. Its roots stay writable as before through idmapped mounts: on them the files
//! root owns are the job's, and what it creates belongs to root on disk.
//!
//! The user namespace is made by a throwaway child (a process cannot give its own new user
//! namespace a mapping to another user; its parent, still root outside, can), the roots are
//! cloned and idmapped while the shim is still root, and then the shim enters the namespace
//! ([`enter`]) before it makes its mount namespace ([`crate::isolate`]).

use std::io;
use std::path::Path;

use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::mount::{OpenTreeFlags, open_tree};

/// Who root's jobs are outside: `nobody` (from the password database, else 65534).
pub fn outside_identity() -> (u32, u32) {
    match nix::unistd::User::from_name("nobody") {
        Ok(Some(user)) => (user.uid.as_raw(), user.gid.as_raw()),
        _ => (65534, 65534),
    }
}

/// A user namespace whose uid and gid 0 are `uid` and `gid` outside. The caller must be root and
/// single-threaded (it forks).
pub fn mapped_user_namespace(uid: u32, gid: u32) -> io::Result<OwnedFd> {
    let (ready_read, ready_write) = rustix::pipe::pipe()?;
    // SAFETY: the caller is single-threaded; the child makes only system calls (no allocation,
    // no lock) and never returns: it waits to be killed.
    #[allow(unsafe_code)]
    let forked = unsafe { nix::unistd::fork() }.map_err(io::Error::from)?;
    match forked {
        nix::unistd::ForkResult::Child => {
            #[allow(unsafe_code)]
            // SAFETY: no `FILES` flag; this child has one thread.
            let made =
                unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWUSER) };
            let byte: &[u8] = if made.is_ok() { b"y" } else { b"n" };
            let _ = rustix::io::write(&ready_write, byte);
            loop {
                nix::unistd::pause();
            }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(ready_write);
            let result = (|| {
                let mut byte = [0u8; 1];
                rustix::io::read(&ready_read, &mut byte)?;
                if byte[0] != b'y' {
                    return Err(io::Error::other("the kernel refused a user namespace"));
                }
                let pid = child.as_raw();
                std::fs::write(format!("/proc/{pid}/uid_map"), format!("0 {uid} 1"))?;
                std::fs::write(format!("/proc/{pid}/gid_map"), format!("0 {gid} 1"))?;
                let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
                Ok(OwnedFd::from(ns))
            })();
            let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(child, None);
            result
        }
    }
}

/// A detached copy of the mounts at `path` (recursive) on which ids are mapped through
/// `userns`: root's files there are the namespace's uid 0. Needs root (in the initial user
/// namespace) and a file system that supports idmapped mounts (ext4, xfs, btrfs, tmpfs, …).
pub fn idmapped_tree(path: &Path, userns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let tree = open_tree(
        rustix::fs::CWD,
        path,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE,
    )?;
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: `mount_setattr(2)` with a valid descriptor, an empty NUL-terminated path, and a
    // pointer to a `mount_attr` that outlives the call, with its size.
    #[allow(unsafe_code)]
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_fd().as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(tree)
}

/// Enters `userns` as its uid and gid 0 (outside: the unprivileged user it maps them to), with
/// no supplementary groups, keeping the capabilities its uid 0 has inside it (to make the mount
/// namespace; dropped before the program starts).
pub fn enter(userns: BorrowedFd<'_>) -> io::Result<()> {
    rustix::thread::move_into_link_name_space(
        userns,
        Some(rustix::thread::LinkNameSpaceType::User),
    )?;
    nix::unistd::setgroups(&[]).map_err(io::Error::from)?;
    let zero_gid = nix::unistd::Gid::from_raw(0);
    let zero_uid = nix::unistd::Uid::from_raw(0);
    nix::unistd::setresgid(zero_gid, zero_gid, zero_gid).map_err(io::Error::from)?;
    nix::unistd::setresuid(zero_uid, zero_uid, zero_uid).map_err(io::Error::from)?;
    Ok(())
}
