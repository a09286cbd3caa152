//! The walls beyond the file system a shim raises around its program before Landlock: which Unix
//! sockets it can reach, its network, its private `/tmp`. The strong way ([`crate::isolate`]:
//! namespaces, so the user's sockets cannot even be named) where the kernel allows it; else the
//! seccomp wall ([`crate::seccomp`]: no Unix socket of its own making, no network families).
//! Never nothing: what stands is returned ([`InForce`]) and shown by `up`, `doctor` and
//! `/healthz` through [`probe`].

use std::path::{Path, PathBuf};

use crate::SandboxPlan;
use crate::isolate::{self, Isolation, Kept, Network};
use crate::seccomp::Refusals;

/// What the account or pack was given beyond its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walls {
    pub network: Network,
    /// Unix sockets outside the program's own that it may connect to, by path
    /// (`unix_sockets:`).
    pub unix_sockets: Vec<PathBuf>,
    /// The private `/tmp`'s size in bytes (namespaces only).
    pub tmp_size: u64,
    /// Whether to try namespaces at all (off: the seccomp wall, as on a kernel without them).
    pub namespaces: bool,
    /// Processes, memory and CPU time ([`crate::caps`]).
    pub caps: crate::caps::Caps,
}

impl Default for Walls {
    fn default() -> Self {
        Walls {
            network: Network::Any,
            unix_sockets: Vec::new(),
            tmp_size: isolate::DEFAULT_TMP_SIZE,
            namespaces: true,
            caps: crate::caps::Caps::default(),
        }
    }
}

/// Which wall stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InForce {
    /// Private user, mount (and network) namespaces.
    Namespaces,
    /// The seccomp wall, and why the namespaces could not be had.
    Seccomp { why: String },
}

impl InForce {
    /// What the seccomp filter refuses for `walls` under this wall.
    pub fn refusals(&self, walls: &Walls) -> Refusals {
        match self {
            // The namespaces already hide every socket outside; a network namespace without
            // interfaces stops every family, and the filter repeats it for `none`.
            InForce::Namespaces => Refusals {
                unix_sockets: false,
                network: walls.network == Network::None,
            },
            // A granted socket cannot be told from any other by a filter: with grants, Unix
            // sockets stay open (and `describe` says so). `loopback` cannot be told from the
            // world without a namespace: it is `none` here.
            InForce::Seccomp { .. } => Refusals {
                unix_sockets: walls.unix_sockets.is_empty(),
                network: walls.network != Network::Any,
            },
        }
    }

    /// Whether something other than Landlock already takes TCP away where `walls` ask it.
    pub fn network_walled(&self, walls: &Walls) -> bool {
        walls.network == Network::Any || self.refusals(walls).network
    }

    /// One line for `up`, `doctor` and `/healthz`, for a caller that is `root` or not: a job of
    /// root is `nobody` outside its namespaces, and stays root only where they were switched off.
    pub fn describe(&self, walls: &Walls, root: bool) -> String {
        let line = self.describe_walls(walls);
        match (root, self) {
            (false, _) => line,
            (true, InForce::Namespaces) => format!("{line} root_jobs=nobody"),
            (true, InForce::Seccomp { .. }) if walls.namespaces => {
                format!("{line} root_jobs=refused")
            }
            (true, InForce::Seccomp { .. }) => format!("{line} root_jobs=root"),
        }
    }

    /// Whether a job may start under this wall: a job of root needs its namespaces (where they
    /// were not switched off on purpose), which make it `nobody`.
    pub fn starts(&self, walls: &Walls, root: bool) -> bool {
        !(root && walls.namespaces && *self != InForce::Namespaces)
    }

    fn describe_walls(&self, walls: &Walls) -> String {
        let network = match (self, walls.network) {
            (InForce::Seccomp { .. }, Network::Loopback) => "none (loopback needs namespaces)",
            (_, n) => n.name(),
        };
        match self {
            InForce::Namespaces => format!("walls=namespaces network={network}"),
            InForce::Seccomp { why } if walls.unix_sockets.is_empty() => {
                format!("walls=seccomp network={network} ({why})")
            }
            InForce::Seccomp { why } => format!(
                "walls=seccomp unix_sockets=open network={network} (granted sockets need namespaces; {why})"
            ),
        }
    }
}

impl Walls {
    /// The shim's flags for these walls (read back by the CLI's `WallsArgs`).
    pub fn to_args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--network".into(),
            self.network.name().into(),
            "--tmp-size".into(),
            self.tmp_size.to_string().into(),
        ];
        for socket in &self.unix_sockets {
            args.push("--unix-socket".into());
            args.push(socket.into());
        }
        if !self.namespaces {
            args.push("--no-namespaces".into());
        }
        for (flag, value) in [
            ("--processes", u64::from(self.caps.processes)),
            ("--memory-bytes", self.caps.memory_bytes),
            ("--cpu-seconds", self.caps.cpu_seconds),
        ] {
            args.push(flag.into());
            args.push(value.to_string().into());
        }
        args
    }

    /// Raises the walls for the calling process (single-threaded, not yet under Landlock) and
    /// adjusts `plan` to them: under namespaces the private `/tmp` is the program's, and its
    /// network is confined by its namespace instead of Landlock's port rules.
    pub fn raise(&self, plan: &mut SandboxPlan) -> InForce {
        plan.network = self.network == Network::Any;
        if !self.namespaces {
            return InForce::Seccomp {
                why: "namespaces switched off".into(),
            };
        }
        let home = home_directory();
        // The private /tmp replaces the program's scratch directory, which is not kept.
        let mut private = plan.clone();
        private.full.retain(|p| Some(p) != plan.scratch.as_ref());
        let isolation = Isolation {
            masks: isolate::default_masks(home.as_deref()),
            keep: self.kept(&private),
            tmp_size: self.tmp_size,
            network: self.network,
            root_as: rustix::process::geteuid()
                .is_root()
                .then(crate::rootless::outside_identity),
        };
        match isolate::isolate(&isolation) {
            Ok(()) => {
                *plan = private;
                plan.full.push(PathBuf::from(isolate::PRIVATE_TMP));
                plan.network = self.network != Network::None;
                InForce::Namespaces
            }
            Err(e) => InForce::Seccomp { why: e.to_string() },
        }
    }

    /// Everything the plan grants, the granted sockets, and the file behind `/etc/resolv.conf`
    /// (which may live in `/run`).
    fn kept(&self, plan: &SandboxPlan) -> Vec<Kept> {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
        let mut keep: Vec<Kept> = plan
            .full
            .iter()
            .chain(&self.unix_sockets)
            .map(|p| Kept {
                path: canonical(p),
                writable: true,
            })
            .collect();
        keep.extend(
            plan.read
                .iter()
                .chain(&plan.devices)
                .chain([&PathBuf::from("/etc/resolv.conf")])
                .map(|p| Kept {
                    path: canonical(p),
                    writable: false,
                }),
        );
        keep
    }
}

/// The caller's home directory, from the password database (never `$HOME`, which the caller's
/// parent chose).
fn home_directory() -> Option<PathBuf> {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.dir)
}

/// Which wall a shim raises for `walls` on this machine: unless namespaces are switched off,
/// `binary walls-probe` (which runs [`probe_in_child`]) is started by `run` the way shims are, and
/// tries them for real.
pub fn probe(
    walls: &Walls,
    binary: &Path,
    run: impl FnOnce(std::process::Command) -> std::io::Result<std::process::Output>,
) -> InForce {
    if !walls.namespaces {
        return InForce::Seccomp {
            why: "namespaces switched off".into(),
        };
    }
    let mut probe = std::process::Command::new(binary);
    probe
        .arg("walls-probe")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    match run(probe) {
        Ok(out) if out.status.success() => InForce::Namespaces,
        Ok(out) => InForce::Seccomp {
            why: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        },
        Err(e) => InForce::Seccomp {
            why: format!("the probe could not start: {e}"),
        },
    }
}

/// The child's half of [`probe`]: raises the walls of a loopback-only program with nothing kept,
/// prints why not if it cannot, and returns the exit code.
pub fn probe_in_child() -> i32 {
    let walls = Walls {
        network: Network::Loopback,
        ..Walls::default()
    };
    let mut plan = SandboxPlan::for_job(&[], Path::new("/nonexistent"));
    if let Err(e) = std::env::set_current_dir("/") {
        println!("enter /: {e}");
        return 1;
    }
    match walls.raise(&mut plan) {
        InForce::Namespaces => 0,
        InForce::Seccomp { why } => {
            println!("{why}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walls(network: Network, sockets: &[&str]) -> Walls {
        Walls {
            network,
            unix_sockets: sockets.iter().map(PathBuf::from).collect(),
            ..Walls::default()
        }
    }

    #[test]
    fn the_fallback_refuses_unix_sockets_unless_some_are_granted_and_says_so() {
        let fallback = InForce::Seccomp { why: "no".into() };
        let w = walls(Network::Any, &[]);
        assert_eq!(
            fallback.refusals(&w),
            Refusals {
                unix_sockets: true,
                network: false
            }
        );
        assert_eq!(
            fallback.describe(&w, false),
            "walls=seccomp network=any (no)"
        );
        let granted = walls(Network::Any, &["/run/docker.sock"]);
        assert!(!fallback.refusals(&granted).unix_sockets);
        assert!(
            fallback
                .describe(&granted, false)
                .contains("unix_sockets=open")
        );
    }

    #[test]
    fn a_job_of_root_starts_only_as_nobody_unless_namespaces_were_switched_off() {
        let w = walls(Network::Any, &[]);
        let refused = InForce::Seccomp { why: "no".into() };
        assert!(InForce::Namespaces.starts(&w, true));
        assert!(!refused.starts(&w, true));
        assert!(refused.starts(&w, false));
        assert!(refused.describe(&w, true).ends_with("root_jobs=refused"));
        assert!(
            InForce::Namespaces
                .describe(&w, true)
                .ends_with("root_jobs=nobody")
        );
        let off = Walls {
            namespaces: false,
            ..w
        };
        assert!(refused.starts(&off, true));
        assert!(refused.describe(&off, true).ends_with("root_jobs=root"));
    }

    #[test]
    fn loopback_without_namespaces_is_none() {
        let fallback = InForce::Seccomp { why: "no".into() };
        let w = walls(Network::Loopback, &[]);
        assert!(fallback.refusals(&w).network);
        assert!(fallback.network_walled(&w));
        assert!(
            fallback
                .describe(&w, false)
                .contains("network=none (loopback needs namespaces)")
        );
        // With namespaces the network namespace is the wall; the filter adds itself for none.
        assert!(!InForce::Namespaces.refusals(&w).network);
        assert!(
            InForce::Namespaces
                .refusals(&walls(Network::None, &[]))
                .network
        );
        assert!(!InForce::Namespaces.refusals(&w).unix_sockets);
    }
}
