//! `glovebox mcp`'s stdio handover, the wire format both sides speak: the bridge hands its stdin
//! and stdout to the broker over the broker's Unix socket (an upgrade of `GET` [`PATH`] to
//! [`PROTOCOL`]), with the in-flight record ([`in_flight`]); [`fds`] drives the streams handed
//! over. The broker's side of the exchange is `glovebox_broker::mcp::handover`; the bridge's is
//! `glovebox`'s `mcp_bridge/handover.rs`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

pub mod fds;
pub mod in_flight;

/// The path of the handover.
pub const PATH: &str = "/v1/stdio";
/// The `Upgrade` protocol the bridge asks for.
pub const PROTOCOL: &str = "glovebox-stdio";
/// The longest [`Handover`] line, and the longest line the broker tells the bridge.
pub const MAX_LINE: usize = 64 * 1024;

/// What the bridge sends with its descriptors, on one line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Handover {
    /// The client's initialization, as [`Told::Initialized`] gave it, when the session is
    /// handed over again; `None` for a new session, which begins with the client's `initialize`.
    pub resume: Option<Box<RawValue>>,
}

/// What the broker tells the bridge, one JSON line each.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Told {
    /// Send the descriptors.
    Ready,
    /// The client's initialization (rmcp's `InitializeRequestParams`).
    Initialized(Box<RawValue>),
    /// The client closed its side: the session is over.
    Ended,
}

impl Told {
    /// The line that says it (JSON, then a newline).
    pub fn line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}
