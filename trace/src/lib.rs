//! glovebox's trace context, without an exporter: the W3C trace context carried in gRPC metadata
//! between glovebox's processes ([`propagation`]) and the spans a call makes ([`spans`]). The
//! wire contracts (`glovebox-proto`) depend on this crate; only the services' binary installs an
//! exporter (`glovebox-telemetry`).
//!
//! Only spans of this crate's target ([`TARGET`]) are exported, and only with the attributes
//! [`spans`] and [`propagation`] give them: rpc.* names and glovebox.account, glovebox.tool,
//! glovebox.verdict, glovebox.approval, glovebox.outcome. No log event, no other span's fields,
//! never a parameter, a file's content, a command or a token.

pub mod propagation;
pub mod spans;

/// The tracing target of every exported span; nothing else reaches the OpenTelemetry layer.
pub const TARGET: &str = "glovebox_telemetry";
