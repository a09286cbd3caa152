//! An OTLP collector for tests and benchmarks: a tonic server on a loopback port implementing
//! the collector's TraceService and MetricsService with `opentelemetry-proto`'s types ([`start`]),
//! or an HTTP server taking the same messages as protobuf bodies ([`start_http`]), keeping every
//! export request it receives.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

/// What the collector received.
#[derive(Clone, Default)]
pub struct Collector {
    pub traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    pub metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if let Ok(mut t) = self.traces.lock() {
            t.push(request.into_inner());
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        if let Ok(mut m) = self.metrics.lock() {
            m.push(request.into_inner());
        }
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// Starts a collector on a free loopback port; returns it and its endpoint URL.
pub async fn start() -> (Collector, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let c = Collector::default();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(c.clone()))
            .add_service(MetricsServiceServer::new(c.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (c, format!("http://{addr}"))
}

/// Starts a collector that takes OTLP over HTTP (protobuf bodies on `/v1/traces` and
/// `/v1/metrics`) on a free loopback port; returns it and its base URL.
pub async fn start_http() -> (Collector, String) {
    use axum::body::Bytes;
    use axum::extract::State;
    use axum::routing::post;
    use prost::Message as _;

    async fn traces(State(c): State<Collector>, body: Bytes) -> axum::http::StatusCode {
        match ExportTraceServiceRequest::decode(body) {
            Ok(request) => {
                if let Ok(mut t) = c.traces.lock() {
                    t.push(request);
                }
                axum::http::StatusCode::OK
            }
            Err(_) => axum::http::StatusCode::BAD_REQUEST,
        }
    }
    async fn metrics(State(c): State<Collector>, body: Bytes) -> axum::http::StatusCode {
        match ExportMetricsServiceRequest::decode(body) {
            Ok(request) => {
                if let Ok(mut m) = c.metrics.lock() {
                    m.push(request);
                }
                axum::http::StatusCode::OK
            }
            Err(_) => axum::http::StatusCode::BAD_REQUEST,
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let c = Collector::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .with_state(c.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (c, format!("http://{addr}"))
}

/// An endpoint where nothing listens (a port bound and released): a collector that is down.
pub async fn down() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}
