//! An account's `sandbox:` section: what its jobs and pack servers reach beyond their files.
//!
//! ```yaml
//! accounts:
//!   - id: alice
//!     workdir: /home/alice/work
//!     sandbox:
//!       network: loopback          # jobs: any | loopback (default) | none
//!       unix_sockets: [/run/user/1000/docker.sock]   # sockets jobs and packs may connect to
//!       tmp_mb: 1024               # each job's and pack's private /tmp
//!       processes: 512             # each job's processes at once
//!       memory_mb: 4096            # each job's resident memory, all its processes
//!       cpu_seconds: 3600          # each job's CPU time, all its processes
//! ```
//!
//! Jobs default to `loopback`: servers a job starts itself, nothing of the machine's or the
//! world's (a job reaches the network only where the account says so). Pure.

use crate::Invalid;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::mcp_json::Network;

/// The private `/tmp` of a job or pack server when `tmp_mb` is not set.
pub const DEFAULT_TMP_MB: u64 = 1024;
/// The largest `tmp_mb` (it is memory: a tmpfs).
pub const MAX_TMP_MB: u64 = 64 * 1024;
/// A job's caps when none are configured, and their largest values.
pub const DEFAULT_PROCESSES: u32 = 512;
pub const MAX_PROCESSES: u32 = 65536;
pub const DEFAULT_MEMORY_MB: u64 = 4096;
pub const MAX_MEMORY_MB: u64 = 1024 * 1024;
pub const DEFAULT_CPU_SECONDS: u64 = 3600;
pub const MAX_CPU_SECONDS: u64 = 7 * 24 * 3600;

/// The section as written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unix_sockets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
}

impl RawSandbox {
    pub fn is_empty(&self) -> bool {
        *self == RawSandbox::default()
    }
}

/// The section, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// The network of the account's jobs (each pack has its own).
    pub network: Network,
    /// Unix sockets outside their own that jobs and pack servers may connect to.
    pub unix_sockets: Vec<PathBuf>,
    /// Each private `/tmp`'s size.
    pub tmp_bytes: u64,
    /// Each job's processes at once, resident memory and CPU time.
    pub processes: u32,
    pub memory_bytes: u64,
    pub cpu_seconds: u64,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            network: Network::Loopback,
            unix_sockets: Vec::new(),
            tmp_bytes: DEFAULT_TMP_MB << 20,
            processes: DEFAULT_PROCESSES,
            memory_bytes: DEFAULT_MEMORY_MB << 20,
            cpu_seconds: DEFAULT_CPU_SECONDS,
        }
    }
}

impl Sandbox {
    /// Validates the section of the account at `at` (e.g. `accounts[0]`).
    pub fn validate(at: &str, raw: &RawSandbox) -> Result<Sandbox, Invalid> {
        let network = match raw.network.as_deref() {
            None => Network::Loopback,
            Some("any") => Network::Any,
            Some("loopback") => Network::Loopback,
            Some("none") => Network::None,
            Some(other) => {
                return Err(crate::invalid::invalid!(
                    "{at}.sandbox.network: expected any, loopback or none, got {other:?}"
                ));
            }
        };
        let mut unix_sockets = Vec::new();
        for s in &raw.unix_sockets {
            let path = PathBuf::from(s);
            let plain = path.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )
            });
            if !path.is_absolute() || !plain || path.parent().is_none() {
                return Err(crate::invalid::invalid!(
                    "{at}.sandbox.unix_sockets: expected the absolute path of a socket, got {s:?}"
                ));
            }
            unix_sockets.push(path);
        }
        let bounded = |field: &str, value: Option<u64>, default: u64, max: u64| {
            let value = value.unwrap_or(default);
            if (1..=max).contains(&value) {
                Ok(value)
            } else {
                Err(format!(
                    "{at}.sandbox.{field}: expected 1 to {max}, got {value}"
                ))
            }
        };
        let tmp_mb = bounded("tmp_mb", raw.tmp_mb, DEFAULT_TMP_MB, MAX_TMP_MB)?;
        let processes = bounded(
            "processes",
            raw.processes.map(u64::from),
            u64::from(DEFAULT_PROCESSES),
            u64::from(MAX_PROCESSES),
        )?;
        let memory_mb = bounded("memory_mb", raw.memory_mb, DEFAULT_MEMORY_MB, MAX_MEMORY_MB)?;
        let cpu_seconds = bounded(
            "cpu_seconds",
            raw.cpu_seconds,
            DEFAULT_CPU_SECONDS,
            MAX_CPU_SECONDS,
        )?;
        Ok(Sandbox {
            network,
            unix_sockets,
            tmp_bytes: tmp_mb << 20,
            processes: processes as u32,
            memory_bytes: memory_mb << 20,
            cpu_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn raw(yaml: &str) -> RawSandbox {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn jobs_default_to_their_own_loopback_and_a_gibibyte_of_tmp() {
        let s = Sandbox::validate("a", &RawSandbox::default()).unwrap();
        assert_eq!(s, Sandbox::default());
        assert_eq!(s.network, Network::Loopback);
        assert_eq!(s.tmp_bytes, 1 << 30);
    }

    #[test]
    fn a_section_is_read_and_checked() {
        let s = Sandbox::validate(
            "a",
            &raw("{network: none, unix_sockets: [/run/docker.sock], tmp_mb: 64, processes: 9, memory_mb: 3, cpu_seconds: 4}"),
        )
        .unwrap();
        assert_eq!(
            (s.processes, s.memory_bytes, s.cpu_seconds),
            (9, 3 << 20, 4)
        );
        assert_eq!(s.network, Network::None);
        assert_eq!(s.unix_sockets, [PathBuf::from("/run/docker.sock")]);
        assert_eq!(s.tmp_bytes, 64 << 20);
        for (yaml, says) in [
            (
                "{network: some}",
                "a.sandbox.network: expected any, loopback or none",
            ),
            ("{unix_sockets: [docker.sock]}", "a.sandbox.unix_sockets"),
            (
                "{unix_sockets: [/run/../home/a/s]}",
                "a.sandbox.unix_sockets",
            ),
            ("{unix_sockets: [/]}", "a.sandbox.unix_sockets"),
            ("{tmp_mb: 0}", "a.sandbox.tmp_mb: expected 1 to 65536"),
            ("{processes: 0}", "a.sandbox.processes: expected 1 to 65536"),
            ("{memory_mb: 0}", "a.sandbox.memory_mb: expected 1 to"),
            (
                "{cpu_seconds: 999999999}",
                "a.sandbox.cpu_seconds: expected 1 to 604800",
            ),
        ] {
            let e = Sandbox::validate("a", &raw(yaml)).unwrap_err();
            assert!(e.0.starts_with(says), "{yaml}: {e}");
        }
        assert!(serde_yaml::from_str::<RawSandbox>("{netwerk: any}").is_err());
    }
}
