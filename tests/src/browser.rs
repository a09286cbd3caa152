//! A real headless Chromium for the console's end-to-end tests, driven over the DevTools
//! protocol (CDP: JSON over a WebSocket) with the WebSocket client the tests already use, so no
//! browser-automation crate is needed. Clicks and key presses are dispatched as input events, so
//! the page sees them as a person's (trusted events), not as script calls.
//!
//! Chromium must be installed (Debian's `chromium`; `tests/run` installs it): a test that needs it
//! fails when it is missing, it never skips.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::WAIT;

/// The most Tab presses [`Page::tab_order`] makes before it gives up going round.
pub const MAX_TAB_STOPS: usize = 200;

/// A script expression: the controls shown (enabled, visible), in document order.
const CONTROLS: &str = "[...document.querySelectorAll('a[href], button, input, select, textarea, summary, \
     [tabindex]:not([tabindex=\"-1\"])')].filter((e) => !e.disabled && \
     e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden')";

/// A script function naming an element for focus checks: `#id`, else `tag "text"`.
const DESCRIBE: &str = "((e) => !e || e === document.body ? 'body' : e.id ? `#${e.id}` : \
     `${e.tagName.toLowerCase()} ${JSON.stringify((e.getAttribute('aria-label') || e.textContent || '').trim().slice(0, 60))}`)";

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The Chromium binary: `$GLOVEBOX_CHROMIUM`, else the first of `chromium`, `chromium-browser`,
/// `google-chrome` on `PATH`. Panics (the test fails) when there is none.
pub fn chromium_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GLOVEBOX_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "Chromium is not installed: the console tests need a real browser \
         (`apt-get install -y chromium`, as tests/run does)"
    );
}

/// Where the console tests keep their screenshots: `target/console-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let profile = crate::glovebox_bin();
    let target = profile
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A headless Chromium with a fresh profile, killed (with every process it started) on drop.
pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    port: u16,
}

impl Browser {
    pub fn launch() -> Browser {
        use std::os::unix::process::CommandExt;
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(chromium_bin())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-extensions",
                "--disable-sync",
                "--password-store=basic",
                "--use-mock-keychain",
                "--mute-audio",
                "--window-size=1280,800",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {}: {e}", chromium_bin().display()));
        let port_file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + WAIT;
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            {
                break port;
            }
            assert!(
                Instant::now() < deadline,
                "Chromium did not open its DevTools port"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Browser {
            child,
            _profile: profile,
            port,
        }
    }

    /// The browser's first tab, ready to be driven.
    pub async fn page(&self) -> Page {
        let deadline = Instant::now() + WAIT;
        let ws_url = loop {
            let (status, _, body) = crate::http_request(
                &format!("http://127.0.0.1:{}", self.port),
                "GET",
                "/json/list",
                &[],
                "",
            )
            .await;
            let pages: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let url = pages.as_array().and_then(|list| {
                list.iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str())
                    .map(str::to_owned)
            });
            if let (200, Some(url)) = (status, url) {
                break url;
            }
            assert!(Instant::now() < deadline, "Chromium lists no page: {body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // Chromium names `localhost`, which may resolve to ::1; it listens on 127.0.0.1.
        let path = ws_url.split_once("/devtools/").map_or("", |(_, p)| p);
        let ws_url = format!("ws://127.0.0.1:{}/devtools/{path}", self.port);
        let (socket, _) = tokio_tungstenite::connect_async(ws_url.as_str())
            .await
            .expect("connect to the page's DevTools socket");
        let mut page = Page {
            socket,
            next_id: 1,
            events: VecDeque::new(),
        };
        page.call("Page.enable", json!({})).await;
        page.call("Runtime.enable", json!({})).await;
        page.viewport(1280, 800).await;
        page
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// One tab, over its DevTools socket.
pub struct Page {
    socket: Socket,
    next_id: u64,
    /// Events received while waiting for a command's answer.
    events: VecDeque<Value>,
}

impl Page {
    /// Sends a DevTools command and returns its result; panics on a protocol error.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({ "id": id, "method": method, "params": params });
        self.socket
            .send(Message::Text(message.to_string().into()))
            .await
            .unwrap();
        loop {
            let msg = self.receive().await;
            if msg["id"] == id {
                if let Some(e) = msg.get("error") {
                    panic!("{method} failed: {e}");
                }
                return msg["result"].clone();
            }
            self.events.push_back(msg);
        }
    }

    async fn receive(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(WAIT, self.socket.next())
                .await
                .expect("timed out waiting for Chromium")
                .expect("Chromium closed the DevTools socket")
                .expect("DevTools socket error");
            if let Message::Text(t) = msg {
                return serde_json::from_str(t.as_str()).unwrap();
            }
        }
    }

    /// Waits for the event `method` (one that arrived already counts).
    async fn event(&mut self, method: &str) -> Value {
        if let Some(i) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.remove(i).unwrap_or_default();
        }
        loop {
            let msg = self.receive().await;
            if msg["method"] == method {
                return msg;
            }
            self.events.push_back(msg);
        }
    }

    /// Runs `source` in every document this tab loads from now on, before the page's own
    /// scripts (DevTools' own injection: the page's Content-Security-Policy does not apply).
    pub async fn before_each_document(&mut self, source: &str) {
        self.call(
            "Page.addScriptToEvaluateOnNewDocument",
            json!({ "source": source }),
        )
        .await;
    }

    /// Navigates and waits until the page has loaded.
    pub async fn goto(&mut self, url: &str) {
        self.events.clear();
        let r = self.call("Page.navigate", json!({ "url": url })).await;
        assert!(r.get("errorText").is_none(), "navigate to {url}: {r}");
        self.event("Page.loadEventFired").await;
    }

    /// Forgets the events received so far (before an action whose own events are awaited).
    pub fn forget_events(&mut self) {
        self.events.clear();
    }

    /// Waits until a page has loaded since [`Page::forget_events`] (a form submitted, a link
    /// followed), so that nothing is evaluated in a page on its way out.
    pub async fn loaded(&mut self) {
        self.event("Page.loadEventFired").await;
    }

    /// Evaluates `expression` in the page (promises awaited) and returns its value.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await;
        if let Some(e) = r.get("exceptionDetails") {
            panic!("evaluating {expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is truthy; returns its value. Panics with `what` after WAIT.
    pub async fn wait_for(&mut self, what: &str, expression: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.eval(expression).await;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the page says:\n{}",
                self.text("body").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The visible text of the first element matching `selector` ("" if none).
    pub async fn text(&mut self, selector: &str) -> String {
        let expr = format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.innerText : ''; }})()",
            json!(selector)
        );
        self.eval(&expr)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Whether the first element matching `selector` exists and is shown.
    pub async fn visible(&mut self, selector: &str) -> bool {
        let expr = format!(
            "(() => {{ const e = document.querySelector({}); return !!e && e.getClientRects().length > 0; }})()",
            json!(selector)
        );
        self.eval(&expr).await == Value::Bool(true)
    }

    /// Clicks the middle of the first element matching `selector` with the mouse.
    pub async fn click(&mut self, selector: &str) {
        let expr = format!(
            "(() => {{ const e = document.querySelector({}); if (!e) return null; \
             e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
             return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
            json!(selector)
        );
        let at = self.eval(&expr).await;
        let (x, y) = match at.as_array().map(|a| (a[0].as_f64(), a[1].as_f64())) {
            Some((Some(x), Some(y))) => (x, y),
            _ => panic!(
                "no element {selector} to click; the page says:\n{}",
                self.text("body").await
            ),
        };
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
            )
            .await;
        }
    }

    /// Presses and releases one letter key, as a keyboard would.
    pub async fn press(&mut self, key: char) {
        let upper = key.to_ascii_uppercase();
        let common = json!({
            "key": key.to_string(),
            "code": format!("Key{upper}"),
            "windowsVirtualKeyCode": upper as u32,
        });
        let mut down = common.clone();
        down["type"] = json!("keyDown");
        down["text"] = json!(key.to_string());
        let mut up = common;
        up["type"] = json!("keyUp");
        self.call("Input.dispatchKeyEvent", down).await;
        self.call("Input.dispatchKeyEvent", up).await;
    }

    /// Presses Tab, as a keyboard would; returns a description of what has focus then: its id,
    /// else its tag and text (`body` when focus left the page's controls).
    pub async fn tab(&mut self) -> String {
        for kind in ["rawKeyDown", "keyUp"] {
            self.call(
                "Input.dispatchKeyEvent",
                json!({ "type": kind, "key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9 }),
            )
            .await;
        }
        self.eval(&format!("{DESCRIBE}(document.activeElement)"))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// What a keyboard reaches with Tab from the first control, in order, until focus comes
    /// back round; and, beside it, every control shown (enabled, visible) in document order.
    /// Equal lists mean every action is reachable by Tab, in the order it appears.
    pub async fn tab_order(&mut self) -> (Vec<String>, Vec<String>) {
        let shown: Vec<String> =
            serde_json::from_value(self.eval(&format!("{CONTROLS}.map({DESCRIBE})")).await)
                .unwrap();
        let first = self
            .eval(&format!(
                "(() => {{ const c = {CONTROLS}; if (!c.length) return ''; c[0].focus(); \
                 return {DESCRIBE}(document.activeElement); }})()"
            ))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut reached = vec![first.clone()];
        for _ in 0..MAX_TAB_STOPS {
            let now = self.tab().await;
            if now == first || now == "body" {
                break;
            }
            reached.push(now);
        }
        (reached, shown)
    }

    /// The serious and critical accessibility violations axe-core (from `tests/node_modules`,
    /// put into the page over DevTools, never served by the console) finds in the page as it is:
    /// one line per rule with the elements it names.
    pub async fn accessibility_violations(&mut self) -> Vec<String> {
        let path = crate::mcp_clients::tests_dir().join("node_modules/axe-core/axe.min.js");
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `npm ci --prefix tests`", path.display()));
        if self.eval("typeof window.axe").await != json!("object") {
            self.eval(&source).await;
        }
        let found = self
            .eval(
                "axe.run(document, { resultTypes: ['violations'], runOnly: { type: 'tag', values: \
                 ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'] } }) \
                 .then((r) => r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical') \
                 .map((v) => `${v.impact} ${v.id}: ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`))",
            )
            .await;
        serde_json::from_value(found).unwrap()
    }

    /// Focuses the element and types `text` into it (focused by script, so that a layout still
    /// settling cannot send the text elsewhere).
    pub async fn type_into(&mut self, selector: &str, text: &str) {
        let focus = format!(
            "(() => {{ const e = document.querySelector({}); if (!e) return false; e.focus(); \
             return document.activeElement === e; }})()",
            json!(selector)
        );
        assert_eq!(
            self.eval(&focus).await,
            json!(true),
            "cannot focus {selector}"
        );
        self.call("Input.insertText", json!({ "text": text })).await;
    }

    /// Sets the window's size (CSS pixels).
    pub async fn viewport(&mut self, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )
        .await;
    }

    /// Saves a PNG of what the page shows to `screenshot_dir()/<name>.png`.
    pub async fn screenshot(&mut self, name: &str) -> PathBuf {
        let r = self
            .call("Page.captureScreenshot", json!({ "format": "png" }))
            .await;
        let png = decode_base64(r["data"].as_str().expect("screenshot data"));
        let path = screenshot_dir().join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// The cookies the browser holds for `url`.
    pub async fn cookies(&mut self, url: &str) -> Vec<Value> {
        let r = self
            .call("Network.getCookies", json!({ "urls": [url] }))
            .await;
        r["cookies"].as_array().cloned().unwrap_or_default()
    }
}

/// Standard base64 (with padding), as DevTools sends screenshots.
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a') as u32 + 26,
            b'0'..=b'9' => (c - b'0') as u32 + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for chunk in text.as_bytes().chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|c| *c != b'=').collect();
        let mut n = 0u32;
        for (i, c) in data.iter().enumerate() {
            n |= value(*c) << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..data.len().saturating_sub(1)]);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes() {
        assert_eq!(super::decode_base64("aGVsbG8="), b"hello");
        assert_eq!(super::decode_base64("aGk="), b"hi");
        assert_eq!(super::decode_base64("YWJj"), b"abc");
        assert_eq!(super::decode_base64(""), b"");
    }
}
