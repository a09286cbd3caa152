//! Real MCP clients for the end-to-end tests: the official Python SDK (`tests/mcp/driver.py`) and
//! TypeScript SDK (`tests/mcp/driver.mjs`), each over Streamable HTTP or through `glovebox mcp`
//! on stdio, driven one JSON command a line; the MCP Inspector's CLI mode; and a
//! loomcycle-style client-tools provider in Node (`tests/mcp/provider.mjs`, the `ws` package).
//!
//! The Python SDK comes from `pip install -r tests/mcp/requirements.txt`, the Node packages from
//! `npm ci --prefix tests`; `tests/run` does both. A missing one fails the test saying which.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::{Glovebox, WAIT};

/// Which SDK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sdk {
    Python,
    TypeScript,
}

/// How the client reaches glovebox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP at `/mcp` with the agent token.
    Http,
    /// `glovebox mcp` launched by the client.
    Stdio,
}

/// Every client the tests run, for checks that must hold for all of them.
pub const CLIENTS: [(Sdk, Transport); 4] = [
    (Sdk::Python, Transport::Http),
    (Sdk::Python, Transport::Stdio),
    (Sdk::TypeScript, Transport::Http),
    (Sdk::TypeScript, Transport::Stdio),
];

/// `tests/`.
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/node_modules`, or a panic that says how to install it.
pub fn node_modules() -> PathBuf {
    let dir = tests_dir().join("node_modules");
    assert!(
        dir.join("@modelcontextprotocol/sdk").is_dir() && dir.join("ws").is_dir(),
        "the Node packages of the end-to-end tests are missing: run `npm ci --prefix tests`"
    );
    dir
}

/// The MCP endpoint of a running glovebox.
pub fn mcp_url(g: &Glovebox) -> String {
    g.url.replace("ws://", "http://").replace("/v1/ws", "/mcp")
}

/// One running MCP client.
pub struct McpClient {
    pub label: String,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    /// Lines read while looking for another.
    unread: VecDeque<Value>,
    stderr_file: PathBuf,
}

impl McpClient {
    /// Starts `sdk`'s driver against `g` over `transport`, as the account whose agent `token`
    /// it is (the stdio bridge reads the default account's token from the state dir).
    pub fn start(g: &Glovebox, sdk: Sdk, transport: Transport, token: &str) -> McpClient {
        let (mode, a, b) = match transport {
            Transport::Http => ("http", mcp_url(g), token.to_owned()),
            Transport::Stdio => (
                "stdio",
                crate::glovebox_bin().display().to_string(),
                g.state.display().to_string(),
            ),
        };
        let label = format!("{sdk:?} SDK over {transport:?}");
        McpClient::spawn(sdk, [mode, &a, &b], &g.root(), label)
    }

    /// `sdk`'s driver talking to a server it starts itself (`command`, run in `cwd`), with no
    /// glovebox between: what a pack's results are compared with.
    pub fn direct(sdk: Sdk, command: &[String], cwd: &Path, logs: &Path) -> McpClient {
        let json = serde_json::to_string(command).unwrap();
        let cwd = cwd.display().to_string();
        let label = format!("{} directly with the {sdk:?} SDK", command[0]);
        McpClient::spawn(sdk, ["direct", &json, &cwd], logs, label)
    }

    fn spawn(sdk: Sdk, args: [&str; 3], logs: &Path, label: String) -> McpClient {
        let mcp = tests_dir().join("mcp");
        let (program, script) = match sdk {
            Sdk::Python => ("python3", mcp.join("driver.py")),
            Sdk::TypeScript => {
                node_modules();
                ("node", mcp.join("driver.mjs"))
            }
        };
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let stderr_file = logs.join(format!("mcp-client-{n}.log"));
        let stderr = std::fs::File::create(&stderr_file).unwrap();
        let mut child = tokio::process::Command::new(program)
            .arg(&script)
            .args(args)
            .current_dir(tests_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {program} for the {label}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        McpClient {
            label,
            child,
            stdin,
            lines,
            unread: VecDeque::new(),
            stderr_file,
        }
    }

    /// What the client wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    pub async fn send(&mut self, command: Value) {
        let line = format!("{command}\n");
        if let Err(e) = self.stdin.write_all(line.as_bytes()).await {
            panic!(
                "{}: the client is gone ({e}); stderr:\n{}",
                self.label,
                self.stderr()
            );
        }
    }

    /// The next line the client prints that `matches`, keeping the others for later.
    pub async fn next_where(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.unread.iter().position(&matches) {
            return self.unread.remove(i).unwrap();
        }
        loop {
            let line = tokio::time::timeout(WAIT, self.lines.next_line()).await;
            let line = match line {
                Ok(Ok(Some(line))) => line,
                _ => panic!(
                    "{}: no {what} (the client ended or took too long); stderr:\n{}",
                    self.label,
                    self.stderr()
                ),
            };
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|_| panic!("{}: not JSON: {line}", self.label));
            if matches(&value) {
                return value;
            }
            self.unread.push_back(value);
        }
    }

    /// The tool list: `{"names": [...], "tools": {name: {read_only, output_schema, input_schema}}}`.
    pub async fn list(&mut self) -> Value {
        self.send(json!({"op": "list"})).await;
        self.next_where("tool list", |v| v["op"] == "list").await
    }

    /// The tool names.
    pub async fn names(&mut self) -> Vec<String> {
        let list = self.list().await;
        list["names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    }

    /// Starts a call; its result comes with [`McpClient::result`].
    pub async fn start_call(&mut self, id: &str, tool: &str, args: Value) {
        self.send(json!({"op": "call", "id": id, "tool": tool, "args": args}))
            .await;
    }

    /// The result of call `id`: `{is_error, text, structured}` (or `{exception}`).
    pub async fn result(&mut self, id: &str) -> Value {
        self.next_where(&format!("result of {id}"), |v| {
            v["op"] == "call" && v["id"] == id
        })
        .await
    }

    pub async fn call(&mut self, id: &str, tool: &str, args: Value) -> Value {
        self.start_call(id, tool, args).await;
        self.result(id).await
    }

    /// Waits for `notifications/tools/list_changed`.
    pub async fn wait_change(&mut self) {
        self.send(json!({"op": "wait_change"})).await;
        self.next_where("tools/list_changed", |v| v["op"] == "changed")
            .await;
    }

    /// Ends the session; returns every line printed after the quit (`terminated`, `closed`).
    pub async fn quit(mut self) -> Vec<Value> {
        self.send(json!({"op": "quit"})).await;
        let closed = self.next_where("close", |v| v["op"] == "closed").await;
        let mut after: Vec<Value> = self.unread.drain(..).collect();
        after.push(closed);
        let status = tokio::time::timeout(WAIT, self.child.wait()).await;
        assert!(
            matches!(status, Ok(Ok(s)) if s.success()),
            "{}: exited with {status:?}; stderr:\n{}",
            self.label,
            self.stderr()
        );
        after
    }
}

/// Runs the MCP Inspector's CLI mode against `/mcp` with the bearer in `--header`; returns its
/// exit code, stdout (JSON) and stderr.
pub async fn inspector(g: &Glovebox, token: &str, args: &[&str]) -> (i32, String, String) {
    let build = node_modules().join("@modelcontextprotocol/inspector-cli/build");
    let header = format!("Authorization: Bearer {token}");
    let mut command = tokio::process::Command::new("node");
    command
        .arg(build.join("index.js"))
        .arg(mcp_url(g))
        .args(args);
    if !token.is_empty() {
        command.args(["--header", &header]);
    }
    // The CLI finds its own package.json relative to the working directory.
    let output = tokio::time::timeout(WAIT, command.current_dir(&build).output())
        .await
        .expect("the Inspector CLI finished")
        .expect("node runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A loomcycle-style provider (Node, `ws`) connected to `g`'s `/v1/client-tools` as the account
/// whose agent `token` it is.
pub struct NodeProvider {
    _child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl NodeProvider {
    pub fn start(g: &Glovebox, token: &str) -> NodeProvider {
        NodeProvider::start_with(g, token, true)
    }

    /// A provider that answers the broker's `ping` frames or, without `answers_pings`, only the
    /// WebSocket protocol's pings (as `ws` does by itself: loomcycle's unmodified host).
    pub fn start_with(g: &Glovebox, token: &str, answers_pings: bool) -> NodeProvider {
        let url = g.url.replace("/v1/ws", "/v1/client-tools");
        node_modules();
        let mode = if answers_pings {
            "answers-pings"
        } else {
            "protocol-pongs-only"
        };
        let mut child = tokio::process::Command::new("node")
            .arg(tests_dir().join("mcp/provider.mjs"))
            .args([url.as_str(), token, mode])
            .current_dir(tests_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        NodeProvider {
            _child: child,
            lines,
        }
    }

    /// Every frame the provider received in the next `window`, in order (pings included).
    pub async fn frames_within(&mut self, window: std::time::Duration) -> Vec<Value> {
        let until = tokio::time::Instant::now() + window;
        let mut frames = Vec::new();
        while let Ok(line) = tokio::time::timeout_at(until, self.lines.next_line()).await {
            match line.unwrap() {
                Some(line) => frames.push(serde_json::from_str(&line).unwrap()),
                None => break,
            }
        }
        frames
    }

    /// The next frame of `kind` the provider received.
    pub async fn next(&mut self, kind: &str) -> Value {
        loop {
            let line = tokio::time::timeout(WAIT, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("the provider saw no {kind}"))
                .unwrap()
                .unwrap_or_else(|| panic!("the provider ended before a {kind}"));
            let frame: Value = serde_json::from_str(&line).unwrap();
            if frame["type"] == kind {
                return frame;
            }
        }
    }
}
