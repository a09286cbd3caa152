//! The web console: a page for approvers (and account owners) served by the broker under
//! `/console`, shipped inside the binary (`console/assets/`, no build step, nothing from the
//! network), that talks to the broker over the same WebSocket approver protocol as
//! `glovebox approve`: the page's socket is served by `connection::serve`, as an approver
//! connection of the account whose credential the session stands for.
//!
//! Who may use it: whoever holds a login link, which `glovebox console` mints with the account's
//! approver credential (`console_login` on an approver connection) and which works once, for a
//! minute (`console/sessions.rs`); in system mode `glovebox console --system` mints it over the
//! approve socket, so the credential is the OS user who ran it, the account's owner. Using it sets
//! a session cookie (`HttpOnly`, `SameSite=Strict`, path `/console`) that stands for that
//! credential until logout, twelve hours, or the credential's rotation (or the owner's loss of
//! the account). Without a live session every route but the login answers 401 and says
//! nothing about any account.
//!
//! A request that carries a token (`Authorization`, or a `bearer.` WebSocket subprotocol) gets
//! 403 whatever the token: an agent's token opens nothing here.
//!
//! What keeps other pages out, since a browser sends the cookie for any page on the same site
//! (`http://127.0.0.1:<any port>` is the same site as the broker):
//! - the Host must be a loopback name (`127.0.0.1`, `localhost`, `[::1]`), so a rebinding DNS
//!   name cannot make the console same-origin with an attacker's page;
//! - the WebSocket upgrade and every POST need an `Origin` equal to the console's own (and a
//!   `Sec-Fetch-Site`, when the browser sends one, of `same-origin`), so no other origin's page
//!   can open the socket or submit a form: no CSRF, no cross-site WebSocket hijacking;
//! - every response carries a strict Content-Security-Policy (scripts and styles from the console
//!   itself only, no inline code, Trusted Types required, no framing) and `nosniff`,
//!   `Referrer-Policy: same-origin`, `no-store`.

pub mod sessions;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::app::App;
pub use sessions::{Console, LOGIN_TTL, SESSION_TTL};

/// The session cookie's name.
pub const COOKIE: &str = "glovebox_console";

/// The Content-Security-Policy of every console response.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; \
     require-trusted-types-for 'script'; trusted-types 'none'";

const INDEX_HTML: &str = include_str!("console/assets/index.html");
const APP_JS: &str = include_str!("console/assets/app.js");
const APP_CSS: &str = include_str!("console/assets/app.css");

/// The console's routes, each behind the Host check and with the security headers.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/console", get(|| async { redirect("/console/") }))
        .route("/console/", get(index))
        .route("/console/app.js", get(app_js))
        .route("/console/app.css", get(app_css))
        .route("/console/login", get(login))
        .route("/console/logout", post(logout))
        .route("/console/ws", get(socket))
        .layer(axum::middleware::from_fn(guard))
        .with_state(app)
}

/// Refuses a Host that is not a loopback name, and adds the security headers to every answer.
async fn guard(request: Request, next: Next) -> Response {
    let mut response = if loopback_host(request.headers()).is_none() {
        plain(
            StatusCode::FORBIDDEN,
            "the console answers only on 127.0.0.1, localhost or [::1]\n",
        )
    } else if carries_token(request.headers()) {
        tracing::warn!("refused a console request that carried a token");
        plain(
            StatusCode::FORBIDDEN,
            "the console takes no tokens: sign in with the link `glovebox console` prints\n",
        )
    } else {
        next.run(request).await
    };
    let h = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        // not `no-referrer`: with it, Chromium sends `Origin: null` on the console's own form
        // POSTs, which the origin check then refuses
        ("referrer-policy", "same-origin"),
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
        (
            "permissions-policy",
            "camera=(), microphone=(), geolocation=(), usb=(), payment=()",
        ),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether the request presents a token (an agent's, or anyone's): the console is reached with
/// its session cookie only, so a token here is refused outright rather than ignored.
fn carries_token(headers: &HeaderMap) -> bool {
    headers.contains_key(header::AUTHORIZATION)
        || headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim().starts_with("bearer."))
}

/// The request's Host if its name is a loopback name (port as given).
fn loopback_host(headers: &HeaderMap) -> Option<&str> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let name = match host.strip_prefix('[') {
        Some(rest) => {
            let (inside, after) = rest.split_once(']')?;
            if !(after.is_empty() || after.starts_with(':')) {
                return None;
            }
            return (inside == "::1" && port_ok(after)).then_some(host);
        }
        None => match host.split_once(':') {
            Some((name, port)) if port_ok(&format!(":{port}")) => name,
            Some(_) => return None,
            None => host,
        },
    };
    matches!(name, "127.0.0.1" | "localhost").then_some(host)
}

fn port_ok(colon_port: &str) -> bool {
    match colon_port.strip_prefix(':') {
        None => colon_port.is_empty(),
        Some(p) => !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// Whether a state-changing request (a POST, the WebSocket upgrade) comes from the console's own
/// origin: `Origin` equal to `http://<Host>` and, when sent, `Sec-Fetch-Site: same-origin`.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(host) = loopback_host(headers) else {
        return false;
    };
    let origin_ok = headers
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .is_some_and(|o| o.strip_prefix("http://") == Some(host));
    let fetch_site_ok = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v == "same-origin");
    origin_ok && fetch_site_ok
}

/// The session cookie's value, if the request carries one.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The live session the request's cookie stands for.
fn session(app: &App, headers: &HeaderMap) -> Option<sessions::Valid> {
    let value = cookie(headers)?;
    app.console
        .sessions
        .session(value, |who| app.still_authorized(who), Instant::now())
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

fn redirect(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// What a request without a live session gets: nothing about any account.
fn signed_out() -> Response {
    plain(
        StatusCode::UNAUTHORIZED,
        "not signed in: run `glovebox console` for a one-time login link\n",
    )
}

fn asset(
    app: &App,
    headers: &HeaderMap,
    content_type: &'static str,
    body: &'static str,
) -> Response {
    if session(app, headers).is_none() {
        return signed_out();
    }
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn index(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    asset(&app, &headers, "text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    asset(&app, &headers, "text/javascript; charset=utf-8", APP_JS)
}

async fn app_css(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    asset(&app, &headers, "text/css; charset=utf-8", APP_CSS)
}

/// Uses a login link: a session cookie and on to the console, or 401 for a link that is unknown,
/// used, expired, or whose credential was rotated since.
async fn login(
    State(app): State<Arc<App>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let token = query.get("t").map(String::as_str).unwrap_or_default();
    let redeemed =
        app.console
            .sessions
            .redeem(token, |who| app.still_authorized(who), Instant::now());
    let Some(value) = redeemed else {
        tracing::info!("a console login link was refused (unknown, used or expired)");
        return plain(
            StatusCode::UNAUTHORIZED,
            "this login link is unknown, used or expired: run `glovebox console` for a new one\n",
        );
    };
    tracing::info!("a console session started");
    let set = format!(
        "{COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_TTL.as_secs()
    );
    let mut response = redirect("/console/");
    if let Ok(v) = HeaderValue::from_str(&set) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// Ends the session (a form POST from the console itself only).
async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return cross_origin_refused();
    }
    let Some(value) = cookie(&headers) else {
        return signed_out();
    };
    if !app.console.sessions.end(value) {
        return signed_out();
    }
    let clear = format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
    let mut response = plain(StatusCode::OK, "signed out\n");
    if let Ok(v) = HeaderValue::from_str(&clear) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

fn cross_origin_refused() -> Response {
    tracing::warn!("refused a console request from another origin");
    plain(
        StatusCode::FORBIDDEN,
        "refused: this request did not come from the console's own page\n",
    )
}

/// The console page's WebSocket: the session's approver connection, served like any other.
async fn socket(
    State(app): State<Arc<App>>,
    method: Method,
    headers: HeaderMap,
    slot: Option<axum::Extension<Arc<crate::admission::Slot>>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(valid) = session(&app, &headers) else {
        return signed_out();
    };
    if method != Method::GET || !same_origin(&headers) {
        return cross_origin_refused();
    }
    let Ok(ws) = ws else {
        return plain(
            StatusCode::BAD_REQUEST,
            "a WebSocket upgrade was expected\n",
        );
    };
    // The session stands for an approver credential: the socket counts against its account,
    // as one that authenticated with the credential does (see `front_door`).
    if let Some(axum::Extension(slot)) = slot
        && let Err(refusal) = slot.claim(&valid.who.account)
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{refusal}\n"),
        )
            .into_response();
    }
    use crate::connection::{Entry, MAX_FRAME_BYTES, WS_BUFFER_BYTES, serve};
    ws.read_buffer_size(WS_BUFFER_BYTES)
        .write_buffer_size(WS_BUFFER_BYTES)
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| async move {
            let ended = Entry::Console(Box::pin(valid.ended.wait()));
            serve(
                app,
                valid.who,
                crate::profiles::Profile::Desktop,
                socket,
                ended,
            )
            .await;
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_loopback_names_are_served() {
        for ok in [
            "127.0.0.1:7420",
            "localhost:7420",
            "[::1]:7420",
            "127.0.0.1",
            "localhost",
        ] {
            let h = {
                let mut h = HeaderMap::new();
                h.insert(header::HOST, HeaderValue::from_str(ok).unwrap());
                h
            };
            assert_eq!(loopback_host(&h), Some(ok), "{ok}");
        }
        for bad in [
            "evil.example:7420",
            "127.0.0.1.evil.example",
            "localhost.:7420",
            "127.0.0.2:7420",
            "[::2]:7420",
            "[::1]x",
            "127.0.0.1:",
            "127.0.0.1:80:80",
            "127.0.0.1:7420x",
            "",
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_str(bad).unwrap());
            assert_eq!(loopback_host(&h), None, "{bad}");
        }
        assert_eq!(loopback_host(&HeaderMap::new()), None);
    }

    #[test]
    fn state_changes_need_the_console_s_own_origin() {
        let host = ("host", "127.0.0.1:7420");
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:7420")
        ])));
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:7420"),
            ("sec-fetch-site", "same-origin"),
        ])));
        for refused in [
            vec![host],
            // another port on the same host is the same site, but not the same origin
            vec![host, ("origin", "http://127.0.0.1:8000")],
            vec![host, ("origin", "http://localhost:7420")],
            vec![host, ("origin", "https://127.0.0.1:7420")],
            vec![host, ("origin", "null")],
            vec![
                host,
                ("origin", "http://127.0.0.1:7420"),
                ("sec-fetch-site", "same-site"),
            ],
            vec![
                ("host", "evil.example:7420"),
                ("origin", "http://evil.example:7420"),
            ],
        ] {
            assert!(!same_origin(&headers(&refused)), "{refused:?}");
        }
    }

    #[test]
    fn a_token_in_any_form_is_noticed() {
        assert!(carries_token(&headers(&[("authorization", "Bearer x")])));
        assert!(carries_token(&headers(&[(
            "sec-websocket-protocol",
            "glovebox.v1, bearer.abc"
        )])));
        assert!(!carries_token(&headers(&[(
            "sec-websocket-protocol",
            "glovebox.v1"
        )])));
        assert!(!carries_token(&headers(&[(
            "cookie",
            "glovebox_console=x"
        )])));
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        assert_eq!(
            cookie(&headers(&[("cookie", "a=1; glovebox_console=abc; b=2")])),
            Some("abc")
        );
        assert_eq!(
            cookie(&headers(&[
                ("cookie", "a=1"),
                ("cookie", "glovebox_console=x")
            ])),
            Some("x")
        );
        assert_eq!(
            cookie(&headers(&[("cookie", "xglovebox_console=abc")])),
            None
        );
        assert_eq!(cookie(&HeaderMap::new()), None);
    }

    #[test]
    fn the_policy_allows_no_inline_code_and_no_other_origin() {
        assert!(CSP.contains("script-src 'self';"));
        assert!(!CSP.contains("unsafe"));
        assert!(CSP.contains("frame-ancestors 'none'"));
        assert!(CSP.contains("default-src 'none'"));
        // the page itself has no inline script, style or handler
        let page = INDEX_HTML.to_ascii_lowercase();
        assert!(!page.contains("<script>"), "inline script");
        assert!(!page.contains("style="), "inline style");
        let handler = |w: &str| w.starts_with("on") && w.contains('=');
        assert!(!page.split_whitespace().any(handler), "inline handler");
        assert!(!page.contains("http://") && !page.contains("https://"));
        for forbidden in [
            "innerhtml",
            "outerhtml",
            "insertadjacenthtml",
            "eval(",
            "document.write",
        ] {
            assert!(
                !APP_JS.to_ascii_lowercase().contains(forbidden),
                "app.js uses {forbidden}"
            );
        }
    }
}
