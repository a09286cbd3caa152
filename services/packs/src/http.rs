//! Reaching an HTTP pack: a server someone else runs, spoken to over MCP's Streamable HTTP
//! transport (rmcp's client on reqwest, TLS by rustls with the system's roots). Nothing is
//! started or confined here — the server is not ours — so what guards the account is what guards
//! every pack call: the gate's verdict, the ticket, the bounded result. The client follows no
//! redirect (a header may carry a token meant for this endpoint only), gives up connecting after
//! [`CONNECT_TIMEOUT`], and takes at most [`MAX_RESPONSE_BYTES`] in one response.

use std::time::Duration;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

/// How long connecting to an HTTP pack may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest response (a JSON body, or one server-sent event) read from an HTTP pack.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// Requests to one HTTP pack in flight at once (the pack's own call limit is lower).
const MAX_REQUESTS: usize = 16;

/// How long the probe that explains a failed start may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The transport to `url`, sending `headers` (already resolved) with every request, and the
/// client under it (for [`why_unreachable`]).
pub fn transport(
    url: &str,
    headers: Vec<(String, String)>,
) -> Result<
    (
        StreamableHttpClientTransport<reqwest::Client>,
        reqwest::Client,
    ),
    String,
> {
    // The client's own defaults, so every request — the MCP transport's and the probe's — sends
    // them (the file cannot name the transport's own headers; the config refuses them).
    let mut custom = http::HeaderMap::new();
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header {name:?} is not a valid header name"))?;
        let mut value = http::HeaderValue::from_str(&value)
            .map_err(|_| format!("header {name}: the value is not valid in a header"))?;
        value.set_sensitive(true);
        custom.insert(name, value);
    }
    install_crypto();
    let client = reqwest::Client::builder()
        .default_headers(custom)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|e| format!("an HTTP client: {e}"))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .max_concurrent_requests(MAX_REQUESTS)
        .max_sse_event_size(MAX_RESPONSE_BYTES);
    config.max_json_response_size = MAX_RESPONSE_BYTES;
    Ok((
        StreamableHttpClientTransport::with_client(client.clone(), config),
        client,
    ))
}

/// Why `url` could not be reached, when the MCP client's own error does not say (it keeps only
/// the outer message): one GET with the same client and headers, and the innermost cause of its
/// failure (refused, a name that does not resolve, an untrusted certificate) or a refusing
/// status. `None` when the endpoint answers.
pub async fn why_unreachable(client: &reqwest::Client, url: &str) -> Option<String> {
    match client.get(url).timeout(PROBE_TIMEOUT).send().await {
        Ok(r) if matches!(r.status().as_u16(), 401 | 403) => Some(format!(
            "the server refused the request (HTTP {}): check the pack's headers and their secrets",
            r.status().as_u16()
        )),
        Ok(_) => None,
        Err(e) => {
            let mut cause: &dyn std::error::Error = &e;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            Some(cause.to_string())
        }
    }
}

/// Makes ring rustls's process-wide crypto provider (once; a provider already installed stays).
fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
