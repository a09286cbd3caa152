//! Fuzzes what the broker's `/mcp` endpoint parses from a request body: a JSON-RPC message from
//! an MCP client (rmcp's `ClientJsonRpcMessage`), single or batched; any text is parsed or
//! refused, never a panic, and what parses serializes again.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp::model::ClientJsonRpcMessage;

fuzz_target!(|text: &str| {
    if let Ok(message) = serde_json::from_str::<ClientJsonRpcMessage>(text) {
        let again = serde_json::to_string(&message).expect("a parsed message serializes");
        assert!(serde_json::from_str::<ClientJsonRpcMessage>(&again).is_ok(), "{again}");
    }
    let _ = serde_json::from_str::<Vec<ClientJsonRpcMessage>>(text);
});
