//! W3C trace context between glovebox's processes, in gRPC metadata (`traceparent`).
//!
//! [`Traced`] wraps a client channel: inside a traced call it makes a client span
//! (`rpc.system=grpc`, `rpc.service`, `rpc.method`) and injects its context into the request's
//! headers. [`ServerLayer`] goes on each tonic server: a request that carries a context gets a
//! server span, the child of the caller's. Outside a traced call (health checks, polls, admin
//! commands) and with telemetry off, neither makes a span or sends a header. Only glovebox's own
//! authenticated peers speak these channels; the broker never takes a context from an agent.

use std::task::{Context, Poll};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Instrument;
use tracing::instrument::Instrumented;

use crate::TARGET;

/// A client channel whose requests carry the current trace context.
#[derive(Debug, Clone)]
pub struct Traced<S> {
    inner: S,
}

impl<S> Traced<S> {
    pub fn new(inner: S) -> Traced<S> {
        Traced { inner }
    }
}

impl<S, B> tower::Service<http::Request<B>> for Traced<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let span = if in_trace() {
            let (service, method) = rpc_names(request.uri().path());
            let span = client_span(&service, &method);
            // Entering the span makes its context current (the OpenTelemetry layer attaches it).
            let _entered = span.enter();
            inject(request.headers_mut());
            drop(_entered);
            span
        } else {
            tracing::Span::none()
        };
        self.inner.call(request).instrument(span)
    }
}

impl<S> Traced<S> {
    /// The channel under the tracing, for requests that carry their context themselves
    /// ([`message_client_span`]).
    pub fn untraced(&self) -> &S {
        &self.inner
    }
}

fn client_span(service: &str, method: &str) -> tracing::Span {
    tracing::info_span!(
        target: TARGET,
        "grpc client",
        otel.name = %format_args!("{service}/{method}"),
        otel.kind = "client",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    )
}

fn server_span(service: &str, method: &str) -> tracing::Span {
    tracing::info_span!(
        target: TARGET,
        "grpc server",
        otel.name = %format_args!("{service}/{method}"),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    )
}

/// For a request sent as a message on a long-lived stream: inside a traced call, the client
/// span of `service`/`method` (as [`Traced`] makes for an RPC of its own) and its context to put
/// in the message; outside one, no span and nothing to send.
pub fn message_client_span(
    service: &str,
    method: &str,
) -> (tracing::Span, std::collections::HashMap<String, String>) {
    let mut carrier = std::collections::HashMap::new();
    if !in_trace() {
        return (tracing::Span::none(), carrier);
    }
    let span = client_span(service, method);
    let _entered = span.enter();
    TraceContextPropagator::new().inject_context(&opentelemetry::Context::current(), &mut carrier);
    drop(_entered);
    (span, carrier)
}

/// The server span of a request that came as a message carrying `carrier` (from
/// [`message_client_span`]), the child of its caller's; none if it carries no valid context.
pub fn message_server_span(
    service: &str,
    method: &str,
    carrier: &std::collections::HashMap<String, String>,
) -> tracing::Span {
    if !carrier.contains_key("traceparent") {
        return tracing::Span::none();
    }
    let parent = TraceContextPropagator::new().extract(carrier);
    if !parent.span().span_context().is_valid() {
        return tracing::Span::none();
    }
    let _attached = parent.attach();
    server_span(service, method)
}

/// The tower layer for tonic servers: a server span per request that carries a trace context.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerLayer;

impl<S> tower::Layer<S> for ServerLayer {
    type Service = ServerTrace<S>;

    fn layer(&self, inner: S) -> ServerTrace<S> {
        ServerTrace { inner }
    }
}

/// See [`ServerLayer`].
#[derive(Debug, Clone)]
pub struct ServerTrace<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for ServerTrace<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let span = match extract(request.headers()) {
            Some(parent) => {
                let (service, method) = rpc_names(request.uri().path());
                // Made while the caller's context is current, so it is the caller's child.
                let _attached = parent.attach();
                server_span(&service, &method)
            }
            None => tracing::Span::none(),
        };
        self.inner.call(request).instrument(span)
    }
}

/// Whether the current OpenTelemetry context is a (remote or local) span's: a traced call.
/// `future` with the trace context current here, for a task of its own: what it asks of other
/// services stays in the caller's trace (a spawned task does not inherit it).
pub fn in_current_trace<F: std::future::Future>(
    future: F,
) -> opentelemetry::context::WithContext<F> {
    opentelemetry::context::FutureExt::with_current_context(future)
}

fn in_trace() -> bool {
    opentelemetry::Context::current()
        .span()
        .span_context()
        .is_valid()
}

/// Writes the current context's `traceparent` (and `tracestate`) into `headers`.
fn inject(headers: &mut http::HeaderMap) {
    TraceContextPropagator::new().inject_context(
        &opentelemetry::Context::current(),
        &mut HeaderInjector(headers),
    );
}

/// The caller's context, if the request carries a valid one.
fn extract(headers: &http::HeaderMap) -> Option<opentelemetry::Context> {
    if !headers.contains_key("traceparent") {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// `("glovebox.v1.Gate", "Decide")` from `/glovebox.v1.Gate/Decide`; bounded, so a strange path
/// cannot make a large attribute.
pub fn rpc_names(path: &str) -> (String, String) {
    let path = path.trim_start_matches('/');
    let (service, method) = path.split_once('/').unwrap_or((path, ""));
    let cut = |s: &str| s.chars().take(96).collect::<String>();
    (cut(service), cut(method))
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_names_split_the_path() {
        assert_eq!(
            rpc_names("/glovebox.v1.Gate/Decide"),
            ("glovebox.v1.Gate".to_owned(), "Decide".to_owned())
        );
        assert_eq!(rpc_names("/odd"), ("odd".to_owned(), String::new()));
        let long = format!("/{}/m", "s".repeat(500));
        assert_eq!(rpc_names(&long).0.len(), 96);
    }

    #[test]
    fn no_context_means_no_header_and_no_parent() {
        let mut headers = http::HeaderMap::new();
        inject(&mut headers);
        assert!(headers.is_empty(), "nothing is sent outside a trace");
        assert!(extract(&headers).is_none());
        headers.insert("traceparent", http::HeaderValue::from_static("garbage"));
        assert!(extract(&headers).is_none(), "an invalid context is ignored");
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        );
        let cx = extract(&headers).unwrap();
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }
}
