//! The walls a shim raises (`glovebox job-shim`, `glovebox pack-shim`), as its parent passes
//! them: the flags [`glovebox_sandbox::walls::Walls::to_args`] writes, read back here.

use std::path::PathBuf;

use glovebox_sandbox::caps::Caps;
use glovebox_sandbox::isolate::Network;
use glovebox_sandbox::walls::Walls;

#[derive(clap::Args, Debug, Clone)]
pub struct WallsArgs {
    /// any, loopback or none.
    #[arg(long, value_name = "NETWORK", default_value = "any", value_parser = parse_network)]
    network: Network,
    /// A Unix socket outside the program's own it may connect to (repeatable).
    #[arg(long = "unix-socket", value_name = "PATH")]
    unix_sockets: Vec<PathBuf>,
    /// The private /tmp's size in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = glovebox_sandbox::isolate::DEFAULT_TMP_SIZE)]
    tmp_size: u64,
    /// The seccomp wall instead of namespaces.
    #[arg(long)]
    no_namespaces: bool,
    /// Processes the program may have at once.
    #[arg(long, value_name = "N", default_value_t = Caps::default().processes)]
    processes: u32,
    /// Resident memory of all its processes.
    #[arg(long, value_name = "BYTES", default_value_t = Caps::default().memory_bytes)]
    memory_bytes: u64,
    /// CPU time of all its processes.
    #[arg(long, value_name = "SECONDS", default_value_t = Caps::default().cpu_seconds)]
    cpu_seconds: u64,
}

/// The walls of account `a`'s jobs and pack servers, as its executor and pack host are told. The
/// namespaces are tried unless `GLOVEBOX_NAMESPACES=off` (the seccomp wall, as on a kernel
/// without them).
pub fn account_walls(a: &glovebox_config::Account, namespaces: bool) -> Walls {
    Walls {
        network: glovebox_packs::wall_network(a.sandbox.network),
        unix_sockets: a.sandbox.unix_sockets.clone(),
        tmp_size: a.sandbox.tmp_bytes,
        namespaces,
        caps: Caps {
            processes: a.sandbox.processes,
            memory_bytes: a.sandbox.memory_bytes,
            cpu_seconds: a.sandbox.cpu_seconds,
        },
    }
}

/// Whether the environment allows namespaces (`GLOVEBOX_NAMESPACES=off` says no).
pub fn namespaces_allowed() -> bool {
    std::env::var("GLOVEBOX_NAMESPACES").map_or(true, |v| v != "off")
}

fn parse_network(text: &str) -> Result<Network, String> {
    Network::parse(text).ok_or_else(|| format!("expected any, loopback or none, got {text:?}"))
}

impl WallsArgs {
    pub fn into_walls(self) -> Walls {
        Walls {
            network: self.network,
            unix_sockets: self.unix_sockets,
            tmp_size: self.tmp_size,
            namespaces: !self.no_namespaces,
            caps: Caps {
                processes: self.processes,
                memory_bytes: self.memory_bytes,
                cpu_seconds: self.cpu_seconds,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Shim {
        #[command(flatten)]
        walls: WallsArgs,
    }

    #[test]
    fn what_a_parent_writes_is_what_the_shim_reads() {
        for walls in [
            Walls::default(),
            Walls {
                network: Network::Loopback,
                unix_sockets: vec![PathBuf::from("/run/docker.sock")],
                tmp_size: 12345,
                namespaces: false,
                caps: Caps {
                    processes: 7,
                    memory_bytes: 1 << 20,
                    cpu_seconds: 9,
                },
            },
            Walls {
                network: Network::None,
                ..Walls::default()
            },
        ] {
            let mut argv = vec![std::ffi::OsString::from("shim")];
            argv.extend(walls.to_args());
            let read = Shim::try_parse_from(argv).unwrap().walls.into_walls();
            assert_eq!(read, walls);
        }
    }
}
