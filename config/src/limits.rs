//! The `limits:` section of `glovebox.yaml`: what an administrator may tune about the front door
//! (the broker). Every field is optional; the broker's named constants are the defaults, so this
//! crate only checks that a value given is in range and gives it a type.
//!
//! ```yaml
//! limits:
//!   connections_per_account: 256    # WebSockets and HTTP connections an account holds at once
//!   connections_per_peer: 64        # connections a local user holds before authenticating
//!   calls_per_account: 8            # calls an account has running at once; more wait
//!   mcp_sessions_per_account: 64
//!   mcp_session_idle_secs: 600      # an MCP session unused this long ends
//!   header_timeout_secs: 10         # a request's headers, and an idle HTTP keep-alive connection
//!   hello_timeout_secs: 10          # a WebSocket's hello frame
//!   websocket_idle_secs: 300        # a WebSocket that sends nothing, not even a pong
//!   ask_timeout_secs: 25            # an ask nobody answers this long is denied (1 to 3600)
//! ```

use crate::Invalid;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Largest count any limit may be set to.
pub const MAX_COUNT_LIMIT: u64 = 1_000_000;
/// Longest any timeout may be set to.
pub const MAX_TIMEOUT_SECS: u64 = 86_400;
/// Longest an ask may wait for its approver (`ask_timeout_secs`, and `glovebox up
/// --ask-timeout-secs`): an agent's call waits that long.
pub const MAX_ASK_TIMEOUT_SECS: u64 = 3_600;

/// `limits:` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections_per_account: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections_per_peer: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_account: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_sessions_per_account: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_session_idle_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hello_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket_idle_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_timeout_secs: Option<u64>,
}

impl RawLimits {
    /// Whether nothing is set (the section is then not written).
    pub fn is_empty(&self) -> bool {
        *self == RawLimits::default()
    }
}

/// Validated limits: `None` means the broker's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub connections_per_account: Option<usize>,
    pub connections_per_peer: Option<usize>,
    pub calls_per_account: Option<usize>,
    pub mcp_sessions_per_account: Option<usize>,
    pub mcp_session_idle: Option<Duration>,
    pub header_timeout: Option<Duration>,
    pub hello_timeout: Option<Duration>,
    pub websocket_idle: Option<Duration>,
    /// How long an ask waits for its approver before it is denied (`glovebox up
    /// --ask-timeout-secs` wins over it).
    pub ask_timeout: Option<Duration>,
}

impl Limits {
    /// Checks every value given; the message names the field and the range expected.
    pub fn validate(raw: &RawLimits) -> Result<Limits, Invalid> {
        let count = |name: &str, v: Option<u64>| -> Result<Option<usize>, String> {
            match v {
                None => Ok(None),
                Some(n) if (1..=MAX_COUNT_LIMIT).contains(&n) => Ok(usize::try_from(n).ok()),
                Some(n) => Err(format!(
                    "limits.{name}: expected 1 to {MAX_COUNT_LIMIT}, got {n}"
                )),
            }
        };
        let secs = |name: &str, v: Option<u64>| -> Result<Option<Duration>, String> {
            match v {
                None => Ok(None),
                Some(n) if (1..=MAX_TIMEOUT_SECS).contains(&n) => Ok(Some(Duration::from_secs(n))),
                Some(n) => Err(format!(
                    "limits.{name}: expected 1 to {MAX_TIMEOUT_SECS} seconds, got {n}"
                )),
            }
        };
        Ok(Limits {
            connections_per_account: count("connections_per_account", raw.connections_per_account)?,
            connections_per_peer: count("connections_per_peer", raw.connections_per_peer)?,
            calls_per_account: count("calls_per_account", raw.calls_per_account)?,
            mcp_sessions_per_account: count(
                "mcp_sessions_per_account",
                raw.mcp_sessions_per_account,
            )?,
            mcp_session_idle: secs("mcp_session_idle_secs", raw.mcp_session_idle_secs)?,
            header_timeout: secs("header_timeout_secs", raw.header_timeout_secs)?,
            hello_timeout: secs("hello_timeout_secs", raw.hello_timeout_secs)?,
            websocket_idle: secs("websocket_idle_secs", raw.websocket_idle_secs)?,
            ask_timeout: ask_timeout(raw.ask_timeout_secs)?,
        })
    }
}

/// `ask_timeout_secs`, checked: 1 to [`MAX_ASK_TIMEOUT_SECS`].
fn ask_timeout(secs: Option<u64>) -> Result<Option<Duration>, Invalid> {
    match secs {
        None => Ok(None),
        Some(n) if (1..=MAX_ASK_TIMEOUT_SECS).contains(&n) => Ok(Some(Duration::from_secs(n))),
        Some(n) => Err(crate::invalid::invalid!(
            "limits.ask_timeout_secs: expected 1 to {MAX_ASK_TIMEOUT_SECS} seconds, got {n}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_in_range_get_their_type_and_others_are_named() {
        let raw = RawLimits {
            connections_per_account: Some(3),
            header_timeout_secs: Some(2),
            ..RawLimits::default()
        };
        let limits = Limits::validate(&raw).unwrap();
        assert_eq!(limits.connections_per_account, Some(3));
        assert_eq!(limits.header_timeout, Some(Duration::from_secs(2)));
        assert_eq!(limits.hello_timeout, None);
        for (raw, message) in [
            (
                RawLimits {
                    connections_per_peer: Some(0),
                    ..RawLimits::default()
                },
                "limits.connections_per_peer: expected 1 to 1000000, got 0",
            ),
            (
                RawLimits {
                    websocket_idle_secs: Some(MAX_TIMEOUT_SECS + 1),
                    ..RawLimits::default()
                },
                "limits.websocket_idle_secs: expected 1 to 86400 seconds, got 86401",
            ),
        ] {
            assert_eq!(Limits::validate(&raw).unwrap_err().0, message);
        }
        assert!(RawLimits::default().is_empty() && !raw.is_empty());
    }

    #[test]
    fn the_ask_timeout_is_one_second_to_an_hour() {
        for (secs, want) in [
            (None, Ok(None)),
            (Some(1), Ok(Some(Duration::from_secs(1)))),
            (Some(25), Ok(Some(Duration::from_secs(25)))),
            (Some(3600), Ok(Some(Duration::from_secs(3600)))),
            (
                Some(0),
                Err("limits.ask_timeout_secs: expected 1 to 3600 seconds, got 0".to_owned()),
            ),
            (
                Some(3601),
                Err("limits.ask_timeout_secs: expected 1 to 3600 seconds, got 3601".to_owned()),
            ),
        ] {
            let raw = RawLimits {
                ask_timeout_secs: secs,
                ..RawLimits::default()
            };
            assert_eq!(
                Limits::validate(&raw)
                    .map(|l| l.ask_timeout)
                    .map_err(|e| e.0),
                want,
                "{secs:?}"
            );
        }
    }
}
