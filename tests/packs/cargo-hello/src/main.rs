//! A tiny MCP server on stdio with no dependencies (so `cargo install` builds it offline in
//! seconds): answers `initialize`, `tools/list` (one tool, `hello`), `tools/call` and `ping`, one
//! JSON-RPC message a line. It reads requests only as far as the test needs: the method and id.

use std::io::{BufRead, Write};

/// The raw JSON text of the value of `"key":` in `line` (a number or a string), if any.
fn raw_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = line[at..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        let end = s.find('"')?;
        return Some(&rest[..end + 2]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let (Some(method), Some(id)) = (raw_value(&line, "method"), raw_value(&line, "id")) else {
            continue; // a notification
        };
        let result = match method {
            "\"initialize\"" => format!(
                r#"{{"protocolVersion":{},"capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"cargo-hello","version":"0.1.0"}}}}"#,
                raw_value(&line, "protocolVersion").unwrap_or("\"2025-06-18\"")
            ),
            "\"tools/list\"" => r#"{"tools":[{"name":"hello","description":"Says hello","inputSchema":{"type":"object","properties":{}},"annotations":{"readOnlyHint":true}}]}"#.to_owned(),
            "\"tools/call\"" => r#"{"content":[{"type":"text","text":"hello from a cargo-installed server"}]}"#.to_owned(),
            "\"ping\"" => "{}".to_owned(),
            _ => {
                let _ = writeln!(out, r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"method not found"}}}}"#);
                let _ = out.flush();
                continue;
            }
        };
        let _ = writeln!(out, r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
        let _ = out.flush();
    }
}
