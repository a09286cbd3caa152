//! glovebox's OS boundary: the Landlock domains of executors, their jobs and pack servers, and
//! the shim ([`shim`]) that contains a job or a pack server and every process it starts.
//!
//! - The executor's own domain (applied once, before the runtime starts, so every later thread
//!   and child inherits it; only the launcher thread, started just before to fork job shims,
//!   stays outside it — see the executor's `jobs::launcher`): full access to the account's roots, its trash, its private scratch
//!   directory and its socket directory; read and execute on system directories and on the
//!   glovebox binary (to start job shims); `/dev` files.
//! - A job's domain (applied by the job's shim, see `jobs::shim`): only the roots, the job's own
//!   temporary directory, read and execute on system directories, and a few harmless device
//!   nodes without device ioctls — not the trash, not the executor's sockets, not all of /tmp.
//!   Its scopes (Landlock ABI 6) keep signals and abstract Unix sockets inside the job, and
//!   Landlock's ptrace rule keeps it from tracing (or reading `/proc/<pid>/environ|mem|fd|root`
//!   of) any process outside it: the executor, the gate, the broker, other executors.
//!
//! - A pack server's domain (applied by its shim): the account's roots, the pack's own home and
//!   the caches its tools share (npm's, XDG's), the directory its command is installed in (read
//!   and execute), a private temporary directory, system directories and harmless devices; with
//!   `network: none`, no TCP connect or bind (Landlock ABI 4).
//!
//! Beyond the file system, the shim raises [`walls`] first: private namespaces where the kernel
//! allows them ([`isolate`]: the user's sockets unnameable, a size-capped private `/tmp`, the
//! network as the account says), else a [`seccomp`] filter (no Unix socket of the program's own
//! making, no network families).
//!
//! The gate decides inside the roots; Landlock holds the outer line even if a verdict were wrong.
//! Restricting also sets `no_new_privs`.

pub mod caps;
pub mod isolate;
mod netdev;
pub mod probe;
pub mod procs;
pub mod rootless;
pub mod seccomp;
pub mod shim;
pub mod walls;

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
    Scope,
};

/// The newest Landlock ABI these rulesets ask for (6: signal and abstract-socket scopes); older
/// kernels enforce what they can, and say so.
const ABI_WANTED: ABI = ABI::V6;

/// System directories the executor and jobs may read and execute from.
pub const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
    "/sys", "/run",
];
/// The device nodes a job may read and write (no device ioctls): nothing that reaches a
/// terminal, a disk or the user's session.
pub const JOB_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// What a ruleset grants, before it is applied. Pure data, so it can be shown and tested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    /// Full access.
    pub full: Vec<PathBuf>,
    /// Read and execute.
    pub read: Vec<PathBuf>,
    /// Read and write existing files (device nodes).
    pub devices: Vec<PathBuf>,
    /// Whether device ioctls are allowed on `devices`.
    pub device_ioctls: bool,
    /// Whether TCP connect and bind are allowed (false: none at all, Landlock ABI 4).
    pub network: bool,
    /// The program's own temporary directory (one of `full`), which the private `/tmp`
    /// replaces where namespaces stand (see [`walls`]).
    pub scratch: Option<PathBuf>,
}

impl SandboxPlan {
    /// The executor's plan: its account's `roots`, its `scratch` directory (where job temporary
    /// directories live), its socket directory `runtime`, and the `binary` it starts job shims
    /// from.
    pub fn for_executor(
        roots: &[PathBuf],
        scratch: &Path,
        runtime: &Path,
        binary: &Path,
    ) -> SandboxPlan {
        let mut full: Vec<PathBuf> = roots.to_vec();
        full.push(scratch.to_owned());
        full.push(runtime.to_owned());
        let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        read.push(binary.to_owned());
        SandboxPlan {
            full,
            read,
            devices: vec![PathBuf::from("/dev")],
            device_ioctls: true,
            network: true,
            scratch: None,
        }
    }

    /// One job's plan: the account's `roots` and the job's own temporary directory `tmp`.
    pub fn for_job(roots: &[PathBuf], tmp: &Path) -> SandboxPlan {
        let mut full: Vec<PathBuf> = roots.to_vec();
        full.push(tmp.to_owned());
        SandboxPlan {
            full,
            read: SYSTEM_READ.iter().map(PathBuf::from).collect(),
            devices: JOB_DEVICES.iter().map(PathBuf::from).collect(),
            device_ioctls: false,
            network: true,
            scratch: Some(tmp.to_owned()),
        }
    }

    /// A pack server's plan: full access to `full` (the account's roots, the pack's home, its
    /// shared caches, its temporary directory), read and execute on system directories and on
    /// `read` (where its command is installed), harmless devices, and the network only if
    /// `network`.
    pub fn for_pack(full: &[PathBuf], read: &[PathBuf], network: bool) -> SandboxPlan {
        let mut all_read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        all_read.extend(read.iter().cloned());
        SandboxPlan {
            full: full.to_vec(),
            read: all_read,
            devices: JOB_DEVICES.iter().map(PathBuf::from).collect(),
            device_ioctls: false,
            network,
            scratch: None,
        }
    }
}

/// How the boundary ended up on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    Full,
    Partial,
    /// The kernel has no Landlock: only the gate and OS permissions stand.
    None,
}

impl Enforcement {
    pub fn describe(&self) -> &'static str {
        match self {
            Enforcement::Full => "landlock=fully_enforced",
            Enforcement::Partial => "landlock=partially_enforced",
            Enforcement::None => "landlock=not_available",
        }
    }
}

/// What a restriction achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub enforcement: Enforcement,
    /// Whether the kernel enforces the signal and abstract-socket scopes (Landlock ABI 6 or
    /// newer): then a domain's processes cannot signal anything outside it.
    pub scoped: bool,
    /// The Landlock ABI the kernel offers (0 without Landlock).
    pub abi: u8,
    /// Whether a plan without network is enforced (Landlock ABI 4 or newer); `true` when the plan
    /// allows the network.
    pub network_enforced: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("apply the landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("open / for a landlock rule: {0}")]
    Root(#[from] landlock::PathFdError),
}

fn rules(
    paths: &[PathBuf],
    access: BitFlags<AccessFs>,
) -> impl Iterator<Item = Result<PathBeneath<PathFd>, landlock::RulesetError>> + '_ {
    // Paths that do not exist on this machine (e.g. /lib32) are skipped. A rule on a file (the
    // binary, a device node) may only carry file rights.
    paths.iter().filter_map(move |p| {
        let fd = PathFd::new(p).ok()?;
        let access = if p.is_dir() {
            access
        } else {
            access & AccessFs::from_file(ABI_WANTED)
        };
        Some(Ok(PathBeneath::new(fd, access)))
    })
}

fn abi_number(status: &LandlockStatus) -> u8 {
    match status {
        LandlockStatus::Available { effective_abi, .. } => *effective_abi as u8,
        _ => 0,
    }
}

/// Restricts the calling thread (and every thread and process it starts later) to `plan`, with
/// the signal and abstract-socket scopes where the kernel has them.
pub fn apply(plan: &SandboxPlan) -> Result<Applied, SandboxError> {
    let all = AccessFs::from_all(ABI_WANTED);
    let read = AccessFs::from_read(ABI_WANTED);
    let mut devices = read | AccessFs::WriteFile;
    if plan.device_ioctls {
        devices |= AccessFs::IoctlDev;
    }
    let mut ruleset = Ruleset::default()
        .handle_access(all)?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)?;
    if !plan.network {
        // Handled and never granted: no TCP port can be connected to or bound.
        ruleset = ruleset.handle_access(AccessNet::from_all(ABI_WANTED))?;
    }
    let status = ruleset
        .create()?
        .add_rules(rules(&plan.full, all))?
        .add_rules(rules(&plan.read, read))?
        .add_rules(rules(&plan.devices, devices))?
        .restrict_self()?;
    let abi = abi_number(&status.landlock);
    let enforcement = match status.ruleset {
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
        RulesetStatus::NotEnforced => Enforcement::None,
    };
    Ok(Applied {
        scoped: abi >= ABI::V6 as u8 && enforcement != Enforcement::None,
        network_enforced: plan.network
            || (abi >= ABI::V4 as u8 && enforcement != Enforcement::None),
        enforcement,
        abi,
    })
}

/// A ruleset of scopes only, created now and applied later with `restrict_self` (in a job's
/// shell, just before it starts): it nests a domain inside the job's, so the job cannot signal
/// the shim that contains it. Fails unless the kernel enforces the scopes.
///
/// It also handles `Refer` and grants it on `/`: a domain that does not handle `Refer` denies
/// every rename or link across directories (`EXDEV`, Landlock's rule for rulesets from before
/// `Refer` existed), which broke tools that move files between directories they may write
/// (uv's cache, `git`, build tools). The outer domain still grants `Refer` only where it grants
/// writing.
pub fn scopes_only() -> Result<RulesetCreated, SandboxError> {
    let root = PathFd::new("/")?;
    Ok(Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::Refer)?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)?
        .create()?
        .add_rule(PathBeneath::new(root, AccessFs::Refer))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executor_gets_its_roots_scratch_and_binary_and_never_all_of_tmp() {
        let plan = SandboxPlan::for_executor(
            &[PathBuf::from("/home/a/w")],
            Path::new("/tmp/glovebox-jobs-a-1"),
            Path::new("/state/run/exec-a"),
            Path::new("/opt/glovebox/bin/glovebox"),
        );
        assert_eq!(
            plan.full,
            [
                PathBuf::from("/home/a/w"),
                PathBuf::from("/tmp/glovebox-jobs-a-1"),
                PathBuf::from("/state/run/exec-a")
            ]
        );
        assert!(!plan.full.contains(&PathBuf::from("/tmp")));
        assert!(plan.read.contains(&PathBuf::from("/usr")));
        assert!(
            plan.read
                .contains(&PathBuf::from("/opt/glovebox/bin/glovebox"))
        );
        assert!(
            !plan
                .read
                .iter()
                .any(|p| p.starts_with("/home") || p.starts_with("/root"))
        );
    }

    #[test]
    fn a_job_gets_its_roots_and_own_tmp_and_harmless_devices_only() {
        let plan = SandboxPlan::for_job(&[PathBuf::from("/home/a/w")], Path::new("/t/job-1"));
        assert_eq!(
            plan.full,
            [PathBuf::from("/home/a/w"), PathBuf::from("/t/job-1")]
        );
        assert!(!plan.device_ioctls);
        assert!(plan.devices.contains(&PathBuf::from("/dev/null")));
        for never in ["/dev", "/dev/tty", "/dev/pts", "/dev/sda", "/dev/mem"] {
            assert!(!plan.devices.contains(&PathBuf::from(never)), "{never}");
        }
    }

    #[test]
    fn a_pack_gets_its_places_and_system_directories_and_no_network_when_told() {
        let plan = SandboxPlan::for_pack(
            &[PathBuf::from("/w"), PathBuf::from("/h/pack-home")],
            &[PathBuf::from("/opt/node")],
            false,
        );
        assert_eq!(
            plan.full,
            [PathBuf::from("/w"), PathBuf::from("/h/pack-home")]
        );
        assert!(plan.read.contains(&PathBuf::from("/usr")));
        assert!(plan.read.contains(&PathBuf::from("/opt/node")));
        assert!(!plan.network && !plan.device_ioctls);
        assert!(!plan.devices.contains(&PathBuf::from("/dev")));
        assert!(SandboxPlan::for_pack(&[], &[], true).network);
    }

    /// Tools move files between directories of the places they may write (uv's cache, cargo's
    /// target, git's objects): a rename across directories inside one full grant works.
    #[test]
    fn a_file_moves_between_directories_of_a_full_grant() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("cache/archive")).unwrap();
        std::fs::write(root.join("cache/f"), "x").unwrap();
        std::fs::create_dir_all(root.join("cache/.tmp/pkg")).unwrap();
        let full = vec![root.clone()];
        let moved = std::thread::spawn(move || {
            let applied = apply(&SandboxPlan::for_pack(&full, &[], true)).unwrap();
            (
                applied,
                std::fs::rename(root.join("cache/f"), root.join("cache/archive/f")),
                std::fs::rename(root.join("cache/.tmp"), root.join("cache/archive/pkg")),
            )
        })
        .join()
        .unwrap();
        assert!(moved.1.is_ok(), "{:?}: {:?}", moved.0, moved.1);
        assert!(moved.2.is_ok(), "{:?}: {:?}", moved.0, moved.2);
    }

    /// The same inside the inner domain every job and pack runs in (`scopes_only`), which once
    /// refused every rename across directories.
    #[test]
    fn a_file_moves_between_directories_inside_the_inner_domain_too() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("cache/archive")).unwrap();
        std::fs::write(root.join("cache/f"), "x").unwrap();
        std::fs::write(root.join("outside"), "x").unwrap();
        let full = vec![root.join("cache")];
        let moved = std::thread::spawn(move || {
            let applied = apply(&SandboxPlan::for_pack(&full, &[], true)).unwrap();
            if !applied.scoped {
                return None;
            }
            scopes_only().unwrap().restrict_self().unwrap();
            Some((
                std::fs::rename(root.join("cache/f"), root.join("cache/archive/f")),
                // still refused where the outer domain does not grant writing
                std::fs::rename(root.join("outside"), root.join("cache/archive/o")),
            ))
        })
        .join()
        .unwrap();
        let Some((inside, outside)) = moved else {
            eprintln!("landlock scopes not available on this kernel; nothing to check");
            return;
        };
        assert!(inside.is_ok(), "{inside:?}");
        assert!(outside.is_err(), "{outside:?}");
    }

    #[test]
    fn a_thread_without_network_cannot_connect_over_tcp() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (applied, connect, bind) = std::thread::spawn(move || {
            let applied = apply(&SandboxPlan::for_pack(&[], &[], false)).unwrap();
            (
                applied,
                std::net::TcpStream::connect(addr).map_err(|e| e.kind()),
                std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.kind()),
            )
        })
        .join()
        .unwrap();
        if applied.abi < 4 || applied.enforcement == Enforcement::None {
            eprintln!("landlock network rules not available on this kernel; nothing to check");
            return;
        }
        assert!(applied.network_enforced);
        assert_eq!(
            connect.map(|_| ()),
            Err(std::io::ErrorKind::PermissionDenied)
        );
        assert_eq!(bind.map(|_| ()), Err(std::io::ErrorKind::PermissionDenied));
        // The test thread itself was not restricted.
        std::net::TcpStream::connect(addr).unwrap();
    }

    #[test]
    fn a_sandboxed_thread_cannot_read_outside_its_roots() {
        let root = tempfile::tempdir_in("/var/tmp").unwrap();
        let inside = root.path().join("inside");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(inside.join("a"), "in").unwrap();
        std::fs::write(outside.join("b"), "out").unwrap();
        let in_tmp = tempfile::NamedTempFile::new_in("/tmp").unwrap();
        let in_tmp_path = in_tmp.path().to_owned();
        let (inside2, outside2) = (inside.clone(), outside.clone());
        let result = std::thread::spawn(move || {
            let plan =
                SandboxPlan::for_job(std::slice::from_ref(&inside2), Path::new("/nonexistent"));
            let applied = apply(&plan).unwrap();
            (
                applied,
                std::fs::read_to_string(inside2.join("a")).ok(),
                std::fs::read_to_string(outside2.join("b")).map_err(|e| e.kind()),
                std::fs::read_to_string(&in_tmp_path).map_err(|e| e.kind()),
            )
        })
        .join()
        .unwrap();
        match result.0.enforcement {
            Enforcement::None => {
                eprintln!("landlock not available on this kernel; nothing to check")
            }
            _ => {
                assert_eq!(result.1.as_deref(), Some("in"));
                assert_eq!(result.2, Err(std::io::ErrorKind::PermissionDenied));
                assert_eq!(
                    result.3,
                    Err(std::io::ErrorKind::PermissionDenied),
                    "all of /tmp is off limits"
                );
            }
        }
        // the test thread itself was not restricted
        assert_eq!(std::fs::read_to_string(outside.join("b")).unwrap(), "out");
    }
}
