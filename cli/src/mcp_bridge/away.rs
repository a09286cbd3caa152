//! What `glovebox mcp` does with its client's requests while no broker holds a handed-over
//! session for longer than [`super::handover`]'s patience: it reads them itself and answers each
//! at once, saying glovebox is not reachable (a tool call was not run), rather than leave the
//! client waiting for a broker that may not come back. When a broker is back the session is
//! handed to it again, between two requests.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// What a tool call made while glovebox is away is answered.
pub const UNREACHABLE: &str =
    "unavailable: glovebox is not reachable (is `glovebox up` running?); the call was not run";
/// The longest request line kept while waiting for its end; a longer one is dropped.
const MAX_PENDING: usize = 1024 * 1024;
/// How long a half-read request may wait for its end before the session is handed over.
const LINE_END_WAIT: Duration = Duration::from_secs(1);

/// The answer to one request line `line` while glovebox is away, with its newline; `None` for
/// a notification, a response or anything that is not JSON-RPC.
pub fn answer(line: &[u8]) -> Option<Vec<u8>> {
    let request: Value = serde_json::from_slice(line).ok()?;
    let id = request
        .get("id")
        .filter(|id| id.is_number() || id.is_string())?;
    let outcome = match request.get("method")?.as_str()? {
        "tools/call" => return Some(tool_error(id, UNREACHABLE)),
        "tools/list" => json!({"result": {"tools": []}}),
        "ping" => json!({"result": {}}),
        _ => json!({"error": {"code": -32603, "message": UNREACHABLE}}),
    };
    let mut answer = json!({"jsonrpc": "2.0", "id": id});
    if let (Value::Object(answer), Value::Object(outcome)) = (&mut answer, outcome) {
        answer.extend(outcome);
    }
    Some(as_line(&answer))
}

/// The line answering tool call `id` with a tool error whose text is `text`.
pub fn tool_error(id: &Value, text: &str) -> Vec<u8> {
    as_line(&json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {"content": [{"type": "text", "text": text}], "isError": true},
    }))
}

fn as_line(message: &Value) -> Vec<u8> {
    let mut bytes = message.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// The requests read while glovebox is away: the start of a line not yet ended.
#[derive(Default)]
pub struct Away {
    pending: Vec<u8>,
}

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    /// Time to try the broker again.
    Again,
    /// The client closed its stdin or its end of stdout: the session is over.
    ClientGone,
}

impl Away {
    /// Waits `wait`, meanwhile answering the client's requests if `answering` (otherwise they
    /// wait in the pipe for the next broker); ends early if the client goes.
    pub fn wait(&mut self, wait: Duration, answering: bool) -> Waited {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_for(left, answering) {
                Some(Waited::ClientGone) => return Waited::ClientGone,
                _ if left.is_zero() => return Waited::Again,
                _ => {}
            }
        }
    }

    /// Before handing the session over: finishes a request half read (waiting a little for its
    /// end), so the broker starts at the beginning of a line.
    pub fn settle(&mut self) -> Waited {
        let deadline = Instant::now() + LINE_END_WAIT;
        while !self.pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.pending.clear();
                break;
            }
            if self.read_for(left, true) == Some(Waited::ClientGone) {
                return Waited::ClientGone;
            }
        }
        Waited::Again
    }

    /// Waits up to `wait` for the client's end of stdout to close and, if `reading`, for stdin:
    /// reads what is there and answers every whole line. `None` when nothing came.
    fn read_for(&mut self, wait: Duration, reading: bool) -> Option<Waited> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
        // stdout for its closing alone (nobody would read an answer). stdin only when reading:
        // a client that closed it still has requests queued for the next broker.
        let mut polled = [
            PollFd::new(&stdout, PollFlags::empty()),
            PollFd::new(&stdin, PollFlags::IN),
        ];
        let watched = if reading {
            &mut polled[..]
        } else {
            &mut polled[..1]
        };
        let timeout = Timespec::try_from(wait).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        let _ = poll(watched, Some(&timeout));
        if polled[0]
            .revents()
            .intersects(PollFlags::ERR | PollFlags::HUP)
        {
            return Some(Waited::ClientGone);
        }
        if !reading
            || !polled[1]
                .revents()
                .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
        {
            return None;
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = match rustix::io::read(stdin.as_fd(), &mut chunk) {
            Ok(0) | Err(_) => return Some(Waited::ClientGone),
            Ok(n) => n,
        };
        self.pending.extend_from_slice(&chunk[..n]);
        let mut answers = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            answers.extend(answer(&line).unwrap_or_default());
        }
        if self.pending.len() > MAX_PENDING {
            self.pending.clear();
        }
        super::stdio::write_blocking(&answers);
        Some(Waited::Again)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(line: &str) -> Option<Value> {
        answer(line.as_bytes()).map(|a| {
            assert_eq!(a.last(), Some(&b'\n'));
            serde_json::from_slice(&a).unwrap()
        })
    }

    #[test]
    fn each_request_is_answered_as_its_method_needs_and_nothing_else_is() {
        let call = answered(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}"#);
        let call = call.unwrap();
        assert_eq!(call["id"], 3);
        assert_eq!(call["result"]["isError"], true);
        assert_eq!(call["result"]["content"][0]["text"], UNREACHABLE);
        let list = answered(r#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#).unwrap();
        assert_eq!(list["result"]["tools"], json!([]));
        assert_eq!(list["id"], "l");
        let ping = answered(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#).unwrap();
        assert_eq!(ping["result"], json!({}));
        let other = answered(r#"{"jsonrpc":"2.0","id":5,"method":"resources/list"}"#).unwrap();
        assert_eq!(other["error"]["code"], -32603);
        // Notifications, responses, odd ids and what is not JSON get no answer.
        for line in [
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":6,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            "not json",
            "",
        ] {
            assert_eq!(answered(line), None, "{line}");
        }
    }
}
