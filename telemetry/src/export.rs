//! The OTLP exporters for traces and metrics, over the transport the settings name: gRPC
//! (tonic, plain text, for a local collector) or HTTP with protobuf bodies (reqwest; `https://`
//! verified against the system's roots by rustls). Over HTTP the endpoint is the collector's base
//! address and each signal goes to its path (`/v1/traces`, `/v1/metrics`), as the OTLP
//! specification says for `OTEL_EXPORTER_OTLP_ENDPOINT`. The HTTP client follows no redirect
//! (an `OTEL_EXPORTER_OTLP_HEADERS` credential is for that collector only) and gives each export
//! at most [`EXPORT_TIMEOUT`].

use std::time::Duration;

use glovebox_config::telemetry::{Protocol, Telemetry};
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig, WithHttpConfig};

/// How long one export may take before it is given up.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// Why an exporter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("start the HTTP client's thread: {0}")]
    ClientThread(std::io::Error),
    #[error("the HTTP client's thread panicked")]
    ClientPanicked,
    #[error("build the HTTP client: {0}")]
    Client(reqwest::Error),
    #[error(transparent)]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Where a signal goes: the endpoint itself over gRPC, `<endpoint><path>` over HTTP.
pub fn signal_endpoint(endpoint: &str, protocol: Protocol, path: &str) -> String {
    match protocol {
        Protocol::Grpc => endpoint.to_owned(),
        Protocol::HttpProtobuf => format!("{}{path}", endpoint.trim_end_matches('/')),
    }
}

/// The span exporter for `endpoint`.
pub fn spans(settings: &Telemetry, endpoint: &str) -> Result<SpanExporter, ExportError> {
    let built = match settings.protocol {
        Protocol::Grpc => SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
        Protocol::HttpProtobuf => SpanExporter::builder()
            .with_http()
            .with_http_client(http_client()?)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(signal_endpoint(endpoint, settings.protocol, "/v1/traces"))
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
    };
    Ok(built?)
}

/// The metric exporter for `endpoint`.
pub fn metrics(settings: &Telemetry, endpoint: &str) -> Result<MetricExporter, ExportError> {
    let built = match settings.protocol {
        Protocol::Grpc => MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
        Protocol::HttpProtobuf => MetricExporter::builder()
            .with_http()
            .with_http_client(http_client()?)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(signal_endpoint(endpoint, settings.protocol, "/v1/metrics"))
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
    };
    Ok(built?)
}

/// A blocking HTTP client for the exporters' own threads. reqwest's blocking client runs a
/// runtime of its own, which must not be made inside the service's async runtime: it is built
/// on a thread of its own.
fn http_client() -> Result<reqwest::blocking::Client, ExportError> {
    // rustls needs a process-wide crypto provider; one already installed stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    std::thread::Builder::new()
        .name("otlp-http-client".into())
        .spawn(|| {
            reqwest::blocking::Client::builder()
                .timeout(EXPORT_TIMEOUT)
                .connect_timeout(EXPORT_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
        })
        .map_err(ExportError::ClientThread)?
        .join()
        .map_err(|_| ExportError::ClientPanicked)?
        .map_err(ExportError::Client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_signals_go_to_their_paths_and_grpc_to_the_endpoint() {
        for (endpoint, protocol, path, want) in [
            (
                "http://127.0.0.1:4317",
                Protocol::Grpc,
                "/v1/traces",
                "http://127.0.0.1:4317",
            ),
            (
                "https://c.example:4318",
                Protocol::HttpProtobuf,
                "/v1/traces",
                "https://c.example:4318/v1/traces",
            ),
            (
                "https://c.example:4318/otlp/",
                Protocol::HttpProtobuf,
                "/v1/metrics",
                "https://c.example:4318/otlp/v1/metrics",
            ),
        ] {
            assert_eq!(signal_endpoint(endpoint, protocol, path), want);
        }
    }
}
