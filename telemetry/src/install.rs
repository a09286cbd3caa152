//! Installing the process's tracing subscriber: logs to stderr as before, plus a slot for the
//! OpenTelemetry layer that [`Slot::start`] fills when telemetry is on. With telemetry off the
//! slot stays empty: no OpenTelemetry layer, no exporter, no thread, and the spans made only for
//! export (those of [`TARGET`], which the logs leave out) are not made at all.
//!
//! Export never holds up a call: finished spans go to a bounded queue ([`MAX_QUEUED_SPANS`];
//! when it is full, spans are dropped) that a background thread sends in batches, each export
//! given at most [`EXPORT_TIMEOUT`](crate::export::EXPORT_TIMEOUT).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use glovebox_config::telemetry::Telemetry;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};
use tracing::span;
use tracing::subscriber::Interest;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::Registry;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::TARGET;

/// Finished spans waiting for export; more are dropped.
pub const MAX_QUEUED_SPANS: usize = 2048;
/// Spans sent in one export.
pub const MAX_EXPORT_BATCH: usize = 512;
/// How often the queue is sent.
pub const EXPORT_DELAY: Duration = Duration::from_millis(500);
/// How long a stopping service waits to send what is queued.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

type OtelLayer = tracing_opentelemetry::OpenTelemetryLayer<Registry, SdkTracer>;

/// Where the OpenTelemetry layer goes once telemetry starts. It passes on only spans of
/// [`TARGET`], never events: what is exported is exactly what this crate's spans carry.
#[derive(Clone, Default)]
pub struct Slot {
    layer: Arc<OnceLock<OtelLayer>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("installed", &self.is_installed())
            .finish()
    }
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("build the OTLP exporter for {endpoint}: {error}")]
    Exporter {
        endpoint: String,
        error: crate::export::ExportError,
    },
    #[error("build the OTLP metric exporter for {endpoint}: {error}")]
    MetricExporter {
        endpoint: String,
        error: crate::export::ExportError,
    },
    #[error("telemetry was already started in this process")]
    AlreadyStarted,
}

/// Stops the tracer provider (sending what is queued, for at most [`SHUTDOWN_TIMEOUT`]) when
/// dropped. Drop it while the async runtime still runs.
#[derive(Debug)]
pub struct Guard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        }
    }
}

/// Installs the global subscriber: `log_filter` (an `EnvFilter` directive string) for the logs
/// on stderr, and an empty [`Slot`]. glovebox's own spans are kept out of the log lines.
pub fn init(log_filter: &str, ansi: bool) -> Slot {
    let (subscriber, slot) = subscriber(log_filter, ansi);
    let _ = subscriber.try_init();
    slot
}

/// What [`init`] installs, and its slot.
fn subscriber(
    log_filter: &str,
    ansi: bool,
) -> (impl tracing::Subscriber + Send + Sync + 'static, Slot) {
    let slot = Slot::default();
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.target() != TARGET
        }));
    // The telemetry spans are at info; a quieter log filter must not switch them off.
    let filter = tracing_subscriber::EnvFilter::new(format!("{log_filter},{TARGET}=info"));
    let subscriber = tracing_subscriber::registry()
        .with(slot.clone())
        .with(filter)
        .with(logs);
    (subscriber, slot)
}

impl Slot {
    /// Whether the OpenTelemetry layer is installed.
    pub fn is_installed(&self) -> bool {
        self.layer.get().is_some()
    }

    /// Starts exporting as `service` (`glovebox-gate`, …) when `settings` say telemetry is on;
    /// `None` when it is off. Must run inside a tokio runtime (the gRPC exporter's channel).
    pub fn start(
        &self,
        settings: &Telemetry,
        service: &str,
    ) -> Result<Option<Guard>, TelemetryError> {
        let Some(endpoint) = settings.otlp_endpoint.as_deref() else {
            return Ok(None);
        };
        let exporter =
            crate::export::spans(settings, endpoint).map_err(|error| TelemetryError::Exporter {
                endpoint: endpoint.to_owned(),
                error,
            })?;
        let batches = BatchConfigBuilder::default()
            .with_max_queue_size(MAX_QUEUED_SPANS)
            .with_max_export_batch_size(MAX_EXPORT_BATCH)
            .with_scheduled_delay(EXPORT_DELAY)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batches)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                settings.sample_ratio,
            ))))
            .with_resource(resource(settings, service))
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("glovebox"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false);
        self.layer
            .set(layer)
            .map_err(|_| TelemetryError::AlreadyStarted)?;
        tracing::info!(
            endpoint,
            protocol = settings.protocol.name(),
            service,
            namespace = %settings.service_namespace,
            sample_ratio = settings.sample_ratio,
            "telemetry: exporting traces over OTLP"
        );
        Ok(Some(Guard {
            provider: Some(provider),
        }))
    }
}

/// The resource every span of `service` carries: `service.name`, `service.namespace`.
fn resource(settings: &Telemetry, service: &str) -> Resource {
    Resource::builder_empty()
        .with_service_name(service.to_owned())
        .with_attribute(KeyValue::new(
            "service.namespace",
            settings.service_namespace.clone(),
        ))
        .build()
}

/// Whether the OpenTelemetry layer hears about a span.
fn exported(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span() && meta.target() == TARGET
}

impl Layer<Registry> for Slot {
    /// Spans of [`TARGET`] are asked about each time (see [`Self::enabled`]); the rest are the
    /// other layers' to decide.
    fn register_callsite(&self, meta: &'static tracing::Metadata<'static>) -> Interest {
        match meta.target() == TARGET {
            true => Interest::sometimes(),
            false => Interest::always(),
        }
    }

    /// A span of [`TARGET`] is made only once the OpenTelemetry layer is installed: nothing else
    /// reads it (the logs leave it out), and each call's would be made, entered on every poll and
    /// dropped for nothing.
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: Context<'_, Registry>) -> bool {
        meta.target() != TARGET || self.is_installed()
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, Registry>) {
        if let Some(layer) = self.layer.get()
            && exported(attrs.metadata())
        {
            layer.on_new_span(attrs, id, ctx);
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, Registry>) {
        if let Some(layer) = self.layer.get()
            && is_exported(id, &ctx)
        {
            layer.on_record(id, values, ctx);
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, Registry>) {
        if let Some(layer) = self.layer.get()
            && is_exported(id, &ctx)
        {
            layer.on_enter(id, ctx);
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, Registry>) {
        if let Some(layer) = self.layer.get()
            && is_exported(id, &ctx)
        {
            layer.on_exit(id, ctx);
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, Registry>) {
        if let Some(layer) = self.layer.get()
            && is_exported(&id, &ctx)
        {
            layer.on_close(id, ctx);
        }
    }
}

fn is_exported(id: &span::Id, ctx: &Context<'_, Registry>) -> bool {
    ctx.metadata(id).is_some_and(exported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_made_only_for_export_are_made_only_once_exporting() {
        let (subscriber, slot) = subscriber("info", false);
        tracing::subscriber::with_default(subscriber, || {
            // Telemetry off: a call's span is not made; the spans the logs use are.
            assert!(crate::spans::call("alice", "file_read").is_disabled());
            assert!(!tracing::info_span!("logged").is_disabled());
            // Telemetry on (a tracer with no exporter): the same callsite makes its span.
            let provider = SdkTracerProvider::builder().build();
            let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
            assert!(slot.layer.set(layer).is_ok());
            assert!(!crate::spans::call("alice", "file_read").is_disabled());
        });
    }
}
