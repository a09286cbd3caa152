//! glovebox's telemetry exporter: the OpenTelemetry layer each service installs when telemetry is
//! on ([`install`]), the OTLP exporters it sends spans and metrics with ([`export`]), the
//! instruments ([`metrics`]) and their Prometheus text ([`prometheus`]). The trace context between
//! processes and the spans a call makes are `glovebox-trace`'s (re-exported here), which the wire
//! contracts use without this crate's exporter.

pub mod export;
pub mod install;
pub mod metrics;
pub mod prometheus;

pub use glovebox_trace::{TARGET, propagation, spans};
