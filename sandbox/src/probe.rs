//! What the running kernel offers glovebox's boundary, found without confining the caller: the
//! probe runs in a thread of its own that sets only `no_new_privs` (no Landlock domain) and ends.

use landlock::{LandlockStatus, RestrictSelf};

/// Landlock on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landlock {
    /// Not built into the kernel.
    NotImplemented,
    /// Built in, not enabled at boot.
    NotEnabled,
    /// The ABI version (the highest this build knows when the kernel's is newer).
    Available { abi: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSupport {
    pub landlock: Landlock,
    /// Whether `prctl(PR_SET_NO_NEW_PRIVS)` took effect.
    pub no_new_privs: bool,
}

/// Probes the kernel from a short-lived thread (so the caller keeps its own privileges).
pub fn kernel_support() -> KernelSupport {
    let probe = std::thread::spawn(|| RestrictSelf::default().apply());
    match probe.join() {
        Ok(Ok(status)) => KernelSupport {
            landlock: match status.landlock {
                LandlockStatus::NotImplemented => Landlock::NotImplemented,
                LandlockStatus::NotEnabled => Landlock::NotEnabled,
                LandlockStatus::Available { effective_abi, .. } => Landlock::Available {
                    abi: effective_abi as u8,
                },
            },
            no_new_privs: status.no_new_privs,
        },
        // Only the prctl can fail here.
        _ => KernelSupport {
            landlock: Landlock::NotImplemented,
            no_new_privs: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_leaves_the_caller_unconfined() {
        let nnp = || {
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("NoNewPrivs:"))
                .map(|v| v.trim().to_owned())
        };
        let before = nnp();
        let support = kernel_support();
        assert!(support.no_new_privs, "{support:?}");
        // Only the probe's thread got no_new_privs, not this one.
        assert_eq!(nnp(), before);
    }
}
