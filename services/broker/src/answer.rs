//! A call's answer as the broker passes it on. A built-in tool's result comes from the executor
//! as JSON text; the broker checks that it is one well-formed JSON object and writes it into the
//! WebSocket frame as it came, rather than building it into a tree and writing the tree out
//! again (for a 1,000-entry listing that was most of the broker's work on the call). Where the
//! result is needed as a tree — the MCP endpoint's tables, the console's job tools — it is read
//! once, there.

use glovebox_proto::ErrorCode;
use glovebox_proto::ws::{RESULT_FRAME_PREFIX, ServerFrame, WireError};

/// A call's result.
#[derive(Debug, Clone, PartialEq)]
pub enum CallValue {
    /// Built by the broker or read from a backend that does not send JSON text.
    Tree(serde_json::Value),
    /// An executor's result: the text of one JSON object, made only by [`CallValue::from_text`].
    Text(CheckedText),
}

/// Text that [`CallValue::from_text`] found to be one JSON object that reads as a tree, and
/// the result's `table` when the executor sent it apart (a call that asked for tables: it is
/// not escaped into the text, and an MCP answer shows it as it came).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedText {
    text: String,
    table: Option<String>,
}

impl CheckedText {
    /// The text without the table, and the table.
    pub fn into_parts(self) -> (String, Option<String>) {
        (self.text, self.table)
    }

    /// The whole result's JSON text, the table written into it.
    fn into_whole(self) -> String {
        match self.table {
            Some(table) => glovebox_proto::tools::mcp_form::rows::with_table(&self.text, &table),
            None => self.text,
        }
    }
}

impl CallValue {
    /// `text` as a result, if it is one JSON object that reads as a tree
    /// ([`glovebox_proto::ws::reads_as_object`]: exactly the texts [`CallValue::into_tree`]
    /// reads, so no client is sent a frame it cannot read); `None` otherwise.
    pub fn from_text(text: String) -> Option<CallValue> {
        CallValue::from_parts(text, None)
    }

    /// [`CallValue::from_text`] of a result whose `table` came apart from `text`.
    pub fn from_parts(text: String, table: Option<String>) -> Option<CallValue> {
        glovebox_proto::ws::reads_as_object(&text)
            .then_some(CallValue::Text(CheckedText { text, table }))
    }

    /// The result as a tree (read from the text when it is text).
    pub fn into_tree(self) -> Result<serde_json::Value, WireError> {
        match self {
            CallValue::Tree(value) => Ok(value),
            CallValue::Text(text) => {
                serde_json::from_str(&text.into_whole()).map_err(|_| malformed())
            }
        }
    }
}

/// What the broker says when a backend's result cannot be passed on.
pub fn malformed() -> WireError {
    WireError::new(
        ErrorCode::Internal,
        "the executor returned a malformed result",
    )
}

/// The answer to one call, for the id the caller gave it.
#[derive(Debug)]
pub struct CallAnswer {
    pub call_id: String,
    pub outcome: Result<CallValue, WireError>,
}

impl CallAnswer {
    /// The `result` frame, its result read into a tree.
    pub fn into_frame(self) -> ServerFrame {
        match self.outcome.and_then(CallValue::into_tree) {
            Ok(value) => ServerFrame::ok(self.call_id, value),
            Err(error) => ServerFrame::failed(self.call_id, error),
        }
    }

    /// The `result` frame's text; a text result is written into it as it came.
    pub fn into_json(self) -> String {
        match self.outcome {
            Ok(CallValue::Text(text)) => {
                let result = text.into_whole();
                // As `ServerFrame::to_json` writes a result: tag first (the bridge reads a frame
                // that starts so in one pass), then the id, `ok`, and the result.
                let id = serde_json::Value::String(self.call_id).to_string();
                let mut frame = String::with_capacity(result.len() + id.len() + 48);
                frame.push_str(RESULT_FRAME_PREFIX);
                frame.push_str(r#""call_id":"#);
                frame.push_str(&id);
                frame.push_str(r#","ok":true,"result":"#);
                frame.push_str(&result);
                frame.push('}');
                frame
            }
            outcome => CallAnswer {
                call_id: self.call_id,
                outcome,
            }
            .into_frame()
            .to_json(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(call_id: &str, outcome: Result<CallValue, WireError>) -> CallAnswer {
        CallAnswer {
            call_id: call_id.to_owned(),
            outcome,
        }
    }

    #[test]
    fn only_an_object_a_tree_reads_is_taken_as_a_result_text() {
        // (the whole table is `glovebox_proto::ws::reads_as_object`'s, and fuzzed)
        for (text, taken) in [
            (r#"{"content":"x","bytes":1}"#, true),
            (r#"[1,2]"#, false),
            (r#"{"a":1} x"#, false),
            (r#"{"n":1e999}"#, false),
        ] {
            assert_eq!(
                CallValue::from_text(text.to_owned()).is_some(),
                taken,
                "{text}"
            );
        }
    }

    #[test]
    fn a_text_result_is_written_as_the_tree_of_it_would_be() {
        let results = [
            json!({"content": "hello\n", "bytes": 6, "truncated": false}),
            json!({"entries": [{"name": "a\"b\\c\u{2028}", "size": 1}], "total": 1}),
            json!({"nested": {"deep": [[[]]], "n": -1.5e-7, "big": u64::MAX}}),
        ];
        let ids = ["c1", "quote\"id", "ünï/\\code"];
        for (result, id) in results.iter().zip(ids) {
            let text = serde_json::to_string(result).unwrap();
            let raw = answer(id, Ok(CallValue::from_text(text).unwrap()));
            let expected = ServerFrame::ok(id.to_owned(), result.clone()).to_json();
            assert_eq!(raw.into_json(), expected, "{id}");
            let parsed = read_frame(&expected).unwrap();
            assert_eq!(
                parsed,
                ServerFrame::ok(id.to_owned(), result.clone()),
                "{id}"
            );
        }
    }

    #[test]
    fn a_result_whose_table_came_apart_is_written_with_it() {
        let table = "type\tname\nfile\t\"a\\\"b\"\u{2028}\n";
        for (fields, whole) in [
            (
                r#"{"path":"/w","total":1}"#,
                json!({"path": "/w", "total": 1, "table": table}),
            ),
            ("{}", json!({"table": table})),
        ] {
            let value = CallValue::from_parts(fields.to_owned(), Some(table.to_owned())).unwrap();
            assert_eq!(value.clone().into_tree().unwrap(), whole);
            let frame = answer("c", Ok(value)).into_json();
            assert_eq!(
                read_frame(&frame).unwrap(),
                ServerFrame::ok("c".into(), whole.clone()),
                "{frame}"
            );
        }
        assert!(CallValue::from_parts("[1]".to_owned(), Some(table.to_owned())).is_none());
    }

    /// A frame as `glovebox mcp` reads it, as the enum would.
    fn read_frame(text: &str) -> serde_json::Result<ServerFrame> {
        glovebox_proto::ws::parse_bridge_frame(text)
            .and_then(glovebox_proto::ws::BridgeFrame::into_frame)
    }

    #[test]
    fn text_kept_as_it_came_still_reads_as_the_same_frame() {
        let text = " { \"b\" : [1, 2] , \"a\" : {\"x\": true} } ";
        let frame = answer("c", Ok(CallValue::from_text(text.to_owned()).unwrap())).into_json();
        assert!(frame.starts_with(RESULT_FRAME_PREFIX), "{frame}");
        assert_eq!(
            read_frame(&frame).unwrap(),
            ServerFrame::ok("c".into(), json!({"a": {"x": true}, "b": [1, 2]}))
        );
        let via_enum: ServerFrame = serde_json::from_str(&frame).unwrap();
        assert_eq!(via_enum, read_frame(&frame).unwrap());
    }

    #[test]
    fn trees_and_errors_go_as_before_and_a_text_no_tree_can_hold_is_an_error() {
        let tree = answer("t", Ok(CallValue::Tree(json!({"k": 1}))));
        assert_eq!(
            tree.into_json(),
            ServerFrame::ok("t".into(), json!({"k": 1})).to_json()
        );
        let error = WireError::new(ErrorCode::Denied, "no");
        let failed = answer("e", Err(error.clone()));
        assert_eq!(
            failed.into_json(),
            ServerFrame::failed("e".into(), error).to_json()
        );
        // A text taken as a result is one a tree reads, so its frame always reads.
        let kept = CallValue::from_text(r#"{"n":[1,-2,3.5e300,"\u00e9"]}"#.to_owned()).unwrap();
        let frame = answer("k", Ok(kept.clone())).into_json();
        assert_eq!(
            read_frame(&frame).unwrap(),
            ServerFrame::ok("k".into(), kept.into_tree().unwrap())
        );
    }
}
