//! glovebox's metrics: one set of OpenTelemetry instruments per process, read two ways — a
//! manual reader that [`render`] turns into Prometheus text (the broker's `/metrics`, with the
//! gate's text fetched over the gate link), and, when telemetry is on, a periodic OTLP export.
//!
//! Why the OpenTelemetry SDK and not a Prometheus client: the OTLP export needs its instruments
//! anyway, and a second registry would count everything twice; the SDK's manual reader (behind
//! its `experimental_metrics_custom_reader` flag) gives the same numbers to both. The text
//! format is small enough to write here ([`crate::prometheus`]).
//!
//! Labels are bounded: tools are named only when built in (`pack`, `client`, `other` otherwise),
//! verdicts, outcomes and approvals are closed sets. No account, path or parameter is a label.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use glovebox_config::telemetry::Telemetry;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, MeterProvider as _, UpDownCounter};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    InstrumentKind, ManualReader, PeriodicReader, Pipeline, SdkMeterProvider, Temporality,
};

/// How often metrics are exported over OTLP when telemetry is on.
pub const EXPORT_INTERVAL: Duration = Duration::from_secs(10);

/// Latency buckets, in seconds: a local call takes milliseconds, an ask up to minutes.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// The process's meter provider and the reader behind `/metrics`.
struct Provider {
    provider: SdkMeterProvider,
    reader: SharedReader,
}

static PROVIDER: OnceLock<Provider> = OnceLock::new();

/// A manual reader the provider and [`render`] share.
#[derive(Debug, Clone)]
struct SharedReader(Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// Sets up the process's metrics: always the reader behind [`render`], plus an OTLP exporter
/// when `settings` say telemetry is on. Call once, inside the tokio runtime, before any
/// instrument is used; a later call (or none: unit tests) leaves the first in place.
pub fn init(
    settings: Option<&Telemetry>,
    service: &str,
) -> Result<(), crate::install::TelemetryError> {
    let reader = SharedReader(Arc::new(ManualReader::builder().build()));
    let mut builder = SdkMeterProvider::builder().with_reader(reader.clone());
    if let Some(settings) = settings {
        builder = builder.with_resource(
            Resource::builder_empty()
                .with_service_name(service.to_owned())
                .with_attribute(KeyValue::new(
                    "service.namespace",
                    settings.service_namespace.clone(),
                ))
                .build(),
        );
        if let Some(endpoint) = settings.otlp_endpoint.as_deref() {
            let exporter = crate::export::metrics(settings, endpoint).map_err(|error| {
                crate::install::TelemetryError::MetricExporter {
                    endpoint: endpoint.to_owned(),
                    error,
                }
            })?;
            builder = builder.with_reader(
                PeriodicReader::builder(exporter)
                    .with_interval(EXPORT_INTERVAL)
                    .build(),
            );
        }
    }
    let _ = PROVIDER.set(Provider {
        provider: builder.build(),
        reader,
    });
    Ok(())
}

fn provider() -> &'static Provider {
    PROVIDER.get_or_init(|| {
        let reader = SharedReader(Arc::new(ManualReader::builder().build()));
        Provider {
            provider: SdkMeterProvider::builder()
                .with_reader(reader.clone())
                .build(),
            reader,
        }
    })
}

fn meter() -> Meter {
    provider().provider.meter("glovebox")
}

/// Stops the OTLP export (sending what was measured last); for a stopping service.
pub fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        let _ = p
            .provider
            .shutdown_with_timeout(crate::install::SHUTDOWN_TIMEOUT);
    }
}

/// This process's metrics in the Prometheus text format.
pub fn render() -> String {
    let mut rm = ResourceMetrics::default();
    match provider().reader.collect(&mut rm) {
        Ok(()) => crate::prometheus::render(&rm),
        Err(_) => String::new(),
    }
}

/// The broker's instruments.
#[derive(Debug)]
pub struct Broker {
    calls: Counter<u64>,
    call_seconds: Histogram<f64>,
    ask_seconds: Histogram<f64>,
    asks_pending: UpDownCounter<i64>,
    approver_connections: UpDownCounter<i64>,
    provider_connections: UpDownCounter<i64>,
    jobs_started: Counter<u64>,
}

/// The broker's instruments (made on first use).
pub fn broker() -> &'static Broker {
    static BROKER: OnceLock<Broker> = OnceLock::new();
    BROKER.get_or_init(|| {
        let m = meter();
        Broker {
            calls: m
                .u64_counter("glovebox_calls")
                .with_description("Calls finished, by tool, verdict and outcome")
                .build(),
            call_seconds: m
                .f64_histogram("glovebox_call_duration_seconds")
                .with_description("Time from a call's arrival to its answer")
                .with_unit("s")
                .with_boundaries(SECONDS_BUCKETS.to_vec())
                .build(),
            ask_seconds: m
                .f64_histogram("glovebox_ask_duration_seconds")
                .with_description("Time an ask waited for its approver, by how it ended")
                .with_unit("s")
                .with_boundaries(SECONDS_BUCKETS.to_vec())
                .build(),
            asks_pending: m
                .i64_up_down_counter("glovebox_asks_pending")
                .with_description("Asks waiting for an approver")
                .build(),
            approver_connections: m
                .i64_up_down_counter("glovebox_approver_connections")
                .with_description("Connected approvers")
                .build(),
            provider_connections: m
                .i64_up_down_counter("glovebox_provider_connections")
                .with_description("Connected client-tool providers")
                .build(),
            jobs_started: m
                .u64_counter("glovebox_jobs_started")
                .with_description("Background jobs started (exec_run)")
                .build(),
        }
    })
}

impl Broker {
    /// A finished call.
    pub fn call(&self, tool: &str, verdict: &str, outcome: &str, seconds: f64) {
        let tool = KeyValue::new("tool", tool_label(tool));
        self.calls.add(
            1,
            &[
                tool.clone(),
                KeyValue::new(
                    "verdict",
                    closed(verdict, &["allow", "ask", "deny", "none"]),
                ),
                KeyValue::new("outcome", closed(outcome, &["ok", "denied", "error"])),
            ],
        );
        self.call_seconds.record(seconds, &[tool]);
    }

    /// A finished ask and how it ended.
    pub fn ask(&self, approval: &'static str, seconds: f64) {
        self.ask_seconds
            .record(seconds, &[KeyValue::new("approval", approval)]);
    }

    /// An ask starts (`1`) or ends (`-1`) waiting.
    pub fn asks_pending(&self, delta: i64) {
        self.asks_pending.add(delta, &[]);
    }

    /// An approver connects (`1`) or goes (`-1`).
    pub fn approver_connections(&self, delta: i64) {
        self.approver_connections.add(delta, &[]);
    }

    /// A provider connects (`1`) or goes (`-1`).
    pub fn provider_connections(&self, delta: i64) {
        self.provider_connections.add(delta, &[]);
    }

    pub fn job_started(&self) {
        self.jobs_started.add(1, &[]);
    }
}

/// The gate's instruments.
#[derive(Debug)]
pub struct Gate {
    audit_queue: Gauge<u64>,
    audit_commit_seconds: Histogram<f64>,
    policy_reload_errors: Counter<u64>,
    answers_handed_over: Counter<u64>,
}

/// The gate's instruments (made on first use).
pub fn gate() -> &'static Gate {
    static GATE: OnceLock<Gate> = OnceLock::new();
    GATE.get_or_init(|| {
        let m = meter();
        Gate {
            audit_queue: m
                .u64_gauge("glovebox_audit_queue_depth")
                .with_description("Audit events waiting to be committed")
                .build(),
            audit_commit_seconds: m
                .f64_histogram("glovebox_audit_commit_duration_seconds")
                .with_description("Time to commit one batch of audit rows")
                .with_unit("s")
                .with_boundaries(SECONDS_BUCKETS.to_vec())
                .build(),
            policy_reload_errors: m
                .u64_counter("glovebox_policy_reload_errors")
                .with_description("Policy reloads that failed (the last good policy stays)")
                .build(),
            answers_handed_over: m
                .u64_counter("glovebox_answers_handed_over")
                .with_description(
                    "Reads made ahead whose answers the gate handed to the broker itself",
                )
                .build(),
        }
    })
}

impl Gate {
    /// Audit events waiting for the writer, as it last saw them.
    pub fn audit_queue(&self, depth: u64) {
        self.audit_queue.record(depth, &[]);
    }

    pub fn audit_commit(&self, seconds: f64) {
        self.audit_commit_seconds.record(seconds, &[]);
    }

    pub fn policy_reload_error(&self) {
        self.policy_reload_errors.add(1, &[]);
    }

    pub fn answer_handed_over(&self) {
        self.answers_handed_over.add(1, &[]);
    }
}

/// A tool as a label: built-in names as they are, anything else by kind, so an agent's made-up
/// names cannot grow the label set.
fn tool_label(tool: &str) -> String {
    if tool.starts_with("client__") {
        "client".to_owned()
    } else if tool.contains("__") {
        "pack".to_owned()
    } else if tool.len() <= 32
        && tool.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        && BUILTIN.get().is_some_and(|b| b.iter().any(|n| n == tool))
    {
        tool.to_owned()
    } else {
        "other".to_owned()
    }
}

static BUILTIN: OnceLock<Vec<String>> = OnceLock::new();

/// The built-in tool names that are labels of their own (the broker sets them once).
pub fn set_builtin_tools(names: impl IntoIterator<Item = String>) {
    let _ = BUILTIN.set(names.into_iter().collect());
}

fn closed(value: &str, allowed: &[&'static str]) -> &'static str {
    allowed
        .iter()
        .find(|a| **a == value)
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        set_builtin_tools(["file_read".to_owned()]);
        assert_eq!(tool_label("file_read"), "file_read");
        assert_eq!(tool_label("made_up"), "other");
        assert_eq!(tool_label("client__paint"), "client");
        assert_eq!(tool_label("git__status"), "pack");
        assert_eq!(closed("allow", &["allow"]), "allow");
        assert_eq!(closed("x\ny", &["allow"]), "other");
    }

    #[test]
    fn counts_reach_the_text() {
        set_builtin_tools(["file_read".to_owned()]);
        broker().call("file_read", "allow", "ok", 0.002);
        broker().call("file_read", "allow", "ok", 0.004);
        broker().asks_pending(1);
        gate().policy_reload_error();
        let text = render();
        assert!(
            text.contains(
                "glovebox_calls_total{outcome=\"ok\",tool=\"file_read\",verdict=\"allow\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains("glovebox_asks_pending 1"), "{text}");
        assert!(
            text.contains("glovebox_policy_reload_errors_total 1"),
            "{text}"
        );
        assert!(
            text.contains("glovebox_call_duration_seconds_count{tool=\"file_read\"} 2"),
            "{text}"
        );
    }
}
