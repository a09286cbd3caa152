//! The executor's OS boundary: a Landlock ruleset that limits the executor and every job it starts
//! to the account's roots (full access), a few system directories commands need (read and
//! execute), `/dev` (read and write files) and `/tmp`. The gate decides inside the roots; Landlock
//! holds the outer line even if a verdict were wrong. Applied once, before any thread starts, so
//! that every thread and child inherits it; it also sets `no_new_privs`.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus,
};

/// The newest Landlock ABI this ruleset asks for; older kernels enforce what they can.
const ABI_WANTED: ABI = ABI::V5;

/// System directories jobs may read and execute from.
pub const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
    "/sys", "/run",
];
/// Directories jobs may write scratch files in.
pub const SYSTEM_SCRATCH: &[&str] = &["/tmp"];

/// What the ruleset grants, before it is applied. Pure data, so it can be shown and tested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    /// Full access: the account's roots, scratch space, and the executor's own runtime directory.
    pub full: Vec<PathBuf>,
    /// Read and execute.
    pub read: Vec<PathBuf>,
    /// Read and write existing files (device nodes).
    pub devices: Vec<PathBuf>,
}

impl SandboxPlan {
    /// The plan for an executor with these roots; `runtime` holds its socket.
    pub fn for_roots(roots: &[PathBuf], runtime: &Path) -> SandboxPlan {
        let mut full: Vec<PathBuf> = roots.to_vec();
        full.extend(SYSTEM_SCRATCH.iter().map(PathBuf::from));
        full.push(runtime.to_owned());
        SandboxPlan {
            full,
            read: SYSTEM_READ.iter().map(PathBuf::from).collect(),
            devices: vec![PathBuf::from("/dev")],
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

#[derive(Debug, thiserror::Error)]
#[error("apply the landlock ruleset: {0}")]
pub struct SandboxError(#[from] landlock::RulesetError);

fn rules(
    paths: &[PathBuf],
    access: BitFlags<AccessFs>,
) -> impl Iterator<Item = PathBeneath<PathFd>> + '_ {
    // Directories that do not exist on this machine (e.g. /lib32) are skipped.
    paths
        .iter()
        .filter_map(move |p| PathFd::new(p).ok().map(|fd| PathBeneath::new(fd, access)))
}

/// Restricts the calling thread (and every thread and process it starts later) to `plan`.
pub fn apply(plan: &SandboxPlan) -> Result<Enforcement, SandboxError> {
    let all = AccessFs::from_all(ABI_WANTED);
    let read = AccessFs::from_read(ABI_WANTED);
    let devices = read | AccessFs::WriteFile | AccessFs::IoctlDev;
    let status = Ruleset::default()
        .handle_access(all)?
        .create()?
        .add_rules(rules(&plan.full, all).map(Ok::<_, landlock::RulesetError>))?
        .add_rules(rules(&plan.read, read).map(Ok::<_, landlock::RulesetError>))?
        .add_rules(rules(&plan.devices, devices).map(Ok::<_, landlock::RulesetError>))?
        .restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
        RulesetStatus::NotEnforced => Enforcement::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_get_full_access_and_system_dirs_read() {
        let plan = SandboxPlan::for_roots(&[PathBuf::from("/home/a/w")], Path::new("/state/run"));
        assert_eq!(
            plan.full,
            [
                PathBuf::from("/home/a/w"),
                PathBuf::from("/tmp"),
                PathBuf::from("/state/run")
            ]
        );
        assert!(plan.read.contains(&PathBuf::from("/usr")));
        assert!(
            !plan
                .read
                .iter()
                .any(|p| p.starts_with("/home") || p.starts_with("/root"))
        );
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
        let (inside2, outside2) = (inside.clone(), outside.clone());
        let result = std::thread::spawn(move || {
            let plan =
                SandboxPlan::for_roots(std::slice::from_ref(&inside2), Path::new("/nonexistent"));
            let enforcement = apply(&plan).unwrap();
            (
                enforcement,
                std::fs::read_to_string(inside2.join("a")).ok(),
                std::fs::read_to_string(outside2.join("b")).map_err(|e| e.kind()),
            )
        })
        .join()
        .unwrap();
        match result.0 {
            Enforcement::None => {
                eprintln!("landlock not available on this kernel; nothing to check")
            }
            _ => {
                assert_eq!(result.1.as_deref(), Some("in"));
                assert_eq!(result.2, Err(std::io::ErrorKind::PermissionDenied));
            }
        }
        // the test thread itself was not restricted
        assert_eq!(std::fs::read_to_string(outside.join("b")).unwrap(), "out");
    }
}
