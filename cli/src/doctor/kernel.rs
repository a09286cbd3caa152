//! Kernel features: the Landlock ABI and its signal and abstract-socket scopes, `no_new_privs`,
//! and the cgroup hierarchy. The facts come from [`glovebox_sandbox::probe`]; each check here is
//! pure.

use glovebox_sandbox::probe::{KernelSupport, Landlock};

use super::finding::Finding;

const LSM_FIX: &str = "boot a kernel built with CONFIG_SECURITY_LANDLOCK=y and `landlock` in its \
                       lsm= list (e.g. lsm=landlock,lockdown,yama,integrity,apparmor,bpf on the \
                       kernel command line)";

/// The Landlock ABI: the executor's and every job's outer boundary.
pub fn landlock(landlock: Landlock) -> Finding {
    const CHECK: &str = "landlock";
    match landlock {
        Landlock::NotImplemented => Finding::fail(
            CHECK,
            "this kernel has no Landlock: executors and jobs run without their sandbox (the gate's \
             policy is the only line)",
            LSM_FIX,
        ),
        Landlock::NotEnabled => Finding::fail(
            CHECK,
            "Landlock is built in but not enabled at boot: executors and jobs run without their \
             sandbox",
            LSM_FIX,
        ),
        Landlock::Available { abi } if abi < 4 => Finding::warn(
            CHECK,
            format!(
                "ABI {abi}: files are confined, but a pack with `network: none` cannot be \
                 enforced (ABI 4) and refuses to start"
            ),
            "upgrade to Linux 6.7 or newer (Landlock ABI 4)",
        ),
        Landlock::Available { abi } => Finding::ok(CHECK, format!("ABI {abi}")),
    }
}

/// The signal and abstract-socket scopes (ABI 6) keep a job's signals inside the job.
pub fn scopes(landlock: Landlock) -> Finding {
    const CHECK: &str = "landlock scopes";
    match landlock {
        Landlock::Available { abi } if abi >= 6 => Finding::ok(
            CHECK,
            "signals and abstract Unix sockets stay inside each job (ABI 6)",
        ),
        Landlock::Available { abi } => Finding::warn(
            CHECK,
            format!(
                "ABI {abi} has no scopes: a job can signal processes of its user outside the job \
                 and reach abstract Unix sockets"
            ),
            "upgrade to Linux 6.12 or newer (Landlock ABI 6)",
        ),
        _ => Finding::fail(CHECK, "no Landlock, so no scopes", LSM_FIX),
    }
}

/// The walls beyond the file system a job's shim raises here: namespaces, or the seccomp
/// fallback with the kernel's reason (the Unix-socket wall holds either way; `loopback` becomes
/// `none`, and granted sockets open every Unix socket).
pub fn walls(in_force: &glovebox_sandbox::walls::InForce) -> Finding {
    use glovebox_sandbox::walls::InForce;
    const CHECK: &str = "walls";
    match in_force {
        InForce::Namespaces => Finding::ok(
            CHECK,
            "namespaces: a job's user sockets cannot be named, its /tmp is private and capped, \
             its network is its account's",
        ),
        InForce::Seccomp { why } => Finding::warn(
            CHECK,
            format!(
                "seccomp ({why}): jobs make no Unix socket of their own, `network: loopback` is \
                 none, a granted socket opens every socket, /tmp is not capped"
            ),
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or \
             kernel.apparmor_restrict_unprivileged_userns=0 where AppArmor restricts them)",
        ),
    }
}

pub fn no_new_privs(supported: bool) -> Finding {
    const CHECK: &str = "no_new_privs";
    if supported {
        Finding::ok(CHECK, "set and kept across exec")
    } else {
        Finding::fail(
            CHECK,
            "prctl(PR_SET_NO_NEW_PRIVS) failed: a service or job could gain privileges through a \
             setuid binary",
            "run on Linux 3.5 or newer, outside a seccomp filter that refuses prctl",
        )
    }
}

/// How cgroups are mounted, from `/proc/self/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cgroups {
    /// cgroup2 at /sys/fs/cgroup.
    Unified,
    /// cgroup v1 controllers and a cgroup2 hierarchy beside them (e.g. /sys/fs/cgroup/unified).
    Hybrid(String),
    /// Only cgroup v1.
    Legacy,
    None,
}

impl Cgroups {
    /// Reads the mount table's text (`/proc/self/mounts`).
    pub fn from_mounts(mounts: &str) -> Cgroups {
        let mut v2 = None;
        let mut v1 = false;
        for line in mounts.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(point), Some(kind)) = (fields.get(1), fields.get(2)) else {
                continue;
            };
            match *kind {
                "cgroup2" if v2.is_none() || *point == "/sys/fs/cgroup" => {
                    v2 = Some((*point).to_owned())
                }
                "cgroup" => v1 = true,
                _ => {}
            }
        }
        match v2 {
            Some(point) if point == "/sys/fs/cgroup" && !v1 => Cgroups::Unified,
            Some(point) => Cgroups::Hybrid(point),
            None if v1 => Cgroups::Legacy,
            None => Cgroups::None,
        }
    }
}

pub fn cgroups(cgroups: &Cgroups) -> Finding {
    const CHECK: &str = "cgroups";
    const FIX: &str = "boot with systemd.unified_cgroup_hierarchy=1 on the kernel command line";
    match cgroups {
        Cgroups::Unified => Finding::ok(CHECK, "cgroup v2 (unified) at /sys/fs/cgroup"),
        Cgroups::Hybrid(point) => Finding::ok(CHECK, format!("hybrid: cgroup v2 at {point}")),
        Cgroups::Legacy => Finding::warn(
            CHECK,
            "cgroup v1 only: the unit's resource limits (TasksMax, MemoryMax) are enforced \
             coarsely or not at all",
            FIX,
        ),
        Cgroups::None => Finding::warn(
            CHECK,
            "no cgroup hierarchy is mounted: the unit's resource limits do not apply",
            FIX,
        ),
    }
}

/// Every kernel check of `support` and the mount table.
pub fn checks(support: &KernelSupport, mounts: &str) -> Vec<Finding> {
    vec![
        landlock(support.landlock),
        scopes(support.landlock),
        no_new_privs(support.no_new_privs),
        cgroups(&Cgroups::from_mounts(mounts)),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::finding::Level;
    use super::*;

    #[test]
    fn landlock_and_scopes_by_abi() {
        let table = [
            (Landlock::NotImplemented, Level::Fail, Level::Fail),
            (Landlock::NotEnabled, Level::Fail, Level::Fail),
            (Landlock::Available { abi: 1 }, Level::Warn, Level::Warn),
            (Landlock::Available { abi: 4 }, Level::Ok, Level::Warn),
            (Landlock::Available { abi: 5 }, Level::Ok, Level::Warn),
            (Landlock::Available { abi: 6 }, Level::Ok, Level::Ok),
            (Landlock::Available { abi: 7 }, Level::Ok, Level::Ok),
        ];
        for (facts, abi_level, scope_level) in table {
            let (l, s) = (landlock(facts), scopes(facts));
            assert_eq!((l.level, s.level), (abi_level, scope_level), "{facts:?}");
            for f in [l, s] {
                assert_eq!(f.fix.is_some(), f.level != Level::Ok, "{f}");
            }
        }
        assert_eq!(
            landlock(Landlock::Available { abi: 7 }).to_string(),
            "OK landlock: ABI 7"
        );
    }

    #[test]
    fn no_new_privs_fails_only_when_unsupported() {
        assert_eq!(no_new_privs(true).level, Level::Ok);
        assert_eq!(no_new_privs(false).level, Level::Fail);
    }

    #[test]
    fn cgroup_hierarchies_from_the_mount_table() {
        let unified = "sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        let legacy = "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n";
        let table = [
            (unified, Cgroups::Unified, Level::Ok),
            (
                hybrid,
                Cgroups::Hybrid("/sys/fs/cgroup/unified".to_owned()),
                Level::Ok,
            ),
            (legacy, Cgroups::Legacy, Level::Warn),
            ("proc /proc proc rw 0 0\n", Cgroups::None, Level::Warn),
            ("", Cgroups::None, Level::Warn),
        ];
        for (mounts, kind, level) in table {
            assert_eq!(Cgroups::from_mounts(mounts), kind, "{mounts}");
            assert_eq!(cgroups(&kind).level, level, "{kind:?}");
        }
    }
}
