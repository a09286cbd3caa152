//! The `client_tools:` section of `glovebox.yaml`: the operator's knobs of `/v1/client-tools`,
//! where providers (an IDE, a browser tab) offer tools to their account's agents. Each field is
//! optional, range-checked, and overridden by an environment variable of the process that reads
//! the file (`GLOVEBOX_CLIENT_TOOLS_ENABLED`, `_TIMEOUT_MS`, `_MAX_CONNECTIONS`,
//! `_MAX_FRAME_BYTES`), so a deployment can change one without editing the file.

use crate::Invalid;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The section as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientTools {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_frame_bytes: Option<u64>,
}

impl RawClientTools {
    /// Whether nothing is set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        *self == RawClientTools::default()
    }
}

/// The validated knobs, defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientTools {
    /// Off: `/v1/client-tools` answers 503 at the upgrade.
    pub enabled: bool,
    /// How long a call to a provider's tool may take.
    pub timeout: Duration,
    /// Providers one account may have connected at once.
    pub max_connections: usize,
    /// Largest frame a provider may send (a larger one closes its socket with 1009).
    pub max_frame_bytes: usize,
}

impl Default for ClientTools {
    fn default() -> ClientTools {
        ClientTools {
            enabled: true,
            timeout: Duration::from_secs(30),
            max_connections: 8,
            max_frame_bytes: 1024 * 1024,
        }
    }
}

const TIMEOUT_MS: (u64, u64) = (100, 600_000);
const MAX_CONNECTIONS: (u64, u64) = (1, 1024);
const MAX_FRAME_BYTES: (u64, u64) = (1024, 16 * 1024 * 1024);

impl ClientTools {
    /// Validates `raw`, each field overridden by its environment variable when `env` has it.
    /// The message names the field (or the variable) and what was expected.
    pub fn validate(
        raw: &RawClientTools,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ClientTools, Invalid> {
        let defaults = ClientTools::default();
        let from_env = |name: &str| -> Result<Option<u64>, String> {
            let var = format!("GLOVEBOX_CLIENT_TOOLS_{}", name.to_uppercase());
            match env(&var) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{var}: expected a whole number, got {v:?}")),
            }
        };
        let number = |name: &str, file: Option<u64>, (lo, hi): (u64, u64)| {
            let (value, source) = match from_env(name)? {
                Some(v) => (
                    Some(v),
                    format!("GLOVEBOX_CLIENT_TOOLS_{}", name.to_uppercase()),
                ),
                None => (file, format!("client_tools.{name}")),
            };
            match value {
                None => Ok(None),
                Some(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
                Some(n) => Err(format!("{source}: expected {lo} to {hi}, got {n}")),
            }
        };
        let enabled = match env("GLOVEBOX_CLIENT_TOOLS_ENABLED") {
            None => raw.enabled.unwrap_or(defaults.enabled),
            Some(v) => match v.trim() {
                "true" | "1" => true,
                "false" | "0" => false,
                other => {
                    return Err(crate::invalid::invalid!(
                        "GLOVEBOX_CLIENT_TOOLS_ENABLED: expected true or false, got {other:?}"
                    ));
                }
            },
        };
        let timeout = number("timeout_ms", raw.timeout_ms, TIMEOUT_MS)?
            .map_or(defaults.timeout, Duration::from_millis);
        let max_connections = number("max_connections", raw.max_connections, MAX_CONNECTIONS)?
            .map_or(defaults.max_connections, |n| n as usize);
        let max_frame_bytes = number("max_frame_bytes", raw.max_frame_bytes, MAX_FRAME_BYTES)?
            .map_or(defaults.max_frame_bytes, |n| n as usize);
        Ok(ClientTools {
            enabled,
            timeout,
            max_connections,
            max_frame_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_file_values_and_environment_overrides() {
        assert_eq!(
            ClientTools::validate(&RawClientTools::default(), no_env).unwrap(),
            ClientTools::default()
        );
        let raw = RawClientTools {
            enabled: Some(false),
            timeout_ms: Some(2500),
            max_connections: Some(3),
            max_frame_bytes: Some(4096),
        };
        let file = ClientTools::validate(&raw, no_env).unwrap();
        assert_eq!(
            file,
            ClientTools {
                enabled: false,
                timeout: Duration::from_millis(2500),
                max_connections: 3,
                max_frame_bytes: 4096
            }
        );
        let env = |k: &str| match k {
            "GLOVEBOX_CLIENT_TOOLS_ENABLED" => Some("true".to_owned()),
            "GLOVEBOX_CLIENT_TOOLS_MAX_CONNECTIONS" => Some("5".to_owned()),
            _ => None,
        };
        let both = ClientTools::validate(&raw, env).unwrap();
        assert_eq!((both.enabled, both.max_connections), (true, 5));
        assert_eq!(both.timeout, Duration::from_millis(2500));
    }

    #[test]
    fn out_of_range_and_malformed_values_name_their_source() {
        for (raw, env, want) in [
            (
                RawClientTools {
                    timeout_ms: Some(0),
                    ..Default::default()
                },
                None,
                "client_tools.timeout_ms: expected 100 to 600000, got 0",
            ),
            (
                RawClientTools {
                    max_frame_bytes: Some(1 << 30),
                    ..Default::default()
                },
                None,
                "client_tools.max_frame_bytes: expected 1024 to 16777216",
            ),
            (
                RawClientTools::default(),
                Some(("GLOVEBOX_CLIENT_TOOLS_MAX_CONNECTIONS", "0")),
                "GLOVEBOX_CLIENT_TOOLS_MAX_CONNECTIONS: expected 1 to 1024, got 0",
            ),
            (
                RawClientTools::default(),
                Some(("GLOVEBOX_CLIENT_TOOLS_TIMEOUT_MS", "soon")),
                "GLOVEBOX_CLIENT_TOOLS_TIMEOUT_MS: expected a whole number",
            ),
            (
                RawClientTools::default(),
                Some(("GLOVEBOX_CLIENT_TOOLS_ENABLED", "yes")),
                "GLOVEBOX_CLIENT_TOOLS_ENABLED: expected true or false",
            ),
        ] {
            let lookup = |k: &str| {
                env.filter(|(name, _)| *name == k)
                    .map(|(_, v)| v.to_owned())
            };
            let err = ClientTools::validate(&raw, lookup).unwrap_err();
            assert!(err.0.starts_with(want), "{err}");
        }
    }
}
