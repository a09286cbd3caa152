//! The client-tools WebSocket protocol (`/v1/client-tools`), wire-compatible with the loomcycle
//! client-tools protocol v1: providers (a browser extension, an IDE) register tools of their own,
//! and agents of the same account call them as `client__<name>`. Frames and their pure parser.

use serde::{Deserialize, Serialize};

/// Subprotocols a provider may offer; the server echoes the one offered.
pub const SUBPROTOCOLS: [&str; 2] = ["loomcycle.client-tools.v1", "glovebox.client-tools.v1"];
/// The prefix agents see on client tools.
pub const PREFIX: &str = "client__";
/// Longest description kept, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Most tools one connection may register.
pub const MAX_TOOLS_PER_CONNECTION: usize = 128;

/// A tool a provider offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_schema")]
    pub input_schema: serde_json::Value,
}

fn empty_schema() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

/// A frame a provider sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProviderFrame {
    /// Registers (or, sent again, replaces) the connection's tool set.
    Hello {
        #[serde(default)]
        client: Option<String>,
        #[serde(default)]
        tools: Vec<ClientToolSpec>,
    },
    Result {
        call_id: String,
        ok: bool,
        #[serde(default)]
        output: Option<serde_json::Value>,
        #[serde(default)]
        error: Option<String>,
    },
    Ping,
    Pong,
}

/// A frame the server sends to a provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToProviderFrame {
    HelloOk {
        connection_id: String,
        accepted: Vec<String>,
    },
    Invoke {
        call_id: String,
        tool: String,
        input: serde_json::Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
    },
    Ping,
    Pong,
    Error {
        message: String,
    },
}

impl ToProviderFrame {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_else(|_| r#"{"type":"error","message":"could not encode frame"}"#.to_owned())
    }
}

/// Parses one text frame from a provider.
pub fn parse_provider_frame(text: &str) -> Result<ProviderFrame, String> {
    serde_json::from_str(text).map_err(|e| format!("invalid client-tools frame: {e}"))
}

/// Whether `name` may be registered: `[A-Za-z0-9_-]`, and `client__<name>` fits 64 characters.
pub fn is_valid_bare_name(name: &str) -> bool {
    !name.is_empty() && crate::tools::is_wire_safe_name(&exposed_name(name))
}

/// The name agents see for a provider's tool.
pub fn exposed_name(bare: &str) -> String {
    format!("{PREFIX}{bare}")
}

/// The provider's name for a tool agents call, if it is a client tool.
pub fn bare_name(exposed: &str) -> Option<&str> {
    exposed
        .strip_prefix(PREFIX)
        .filter(|b| is_valid_bare_name(b))
}

/// Keeps the valid, first-seen tools of a hello (others are dropped, not registered).
pub fn accept_tools(tools: Vec<ClientToolSpec>) -> Vec<ClientToolSpec> {
    let mut accepted: Vec<ClientToolSpec> = Vec::new();
    for mut tool in tools {
        if accepted.len() >= MAX_TOOLS_PER_CONNECTION {
            break;
        }
        if !is_valid_bare_name(&tool.name) || accepted.iter().any(|t| t.name == tool.name) {
            continue;
        }
        crate::display::truncate_at_char(&mut tool.description, MAX_DESCRIPTION_BYTES);
        if !tool.input_schema.is_object() {
            tool.input_schema = empty_schema();
        }
        accepted.push(tool);
    }
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        assert!(is_valid_bare_name("browser_read_page"));
        assert!(is_valid_bare_name(&"x".repeat(56)));
        for bad in [
            "",
            "browser.read_page",
            "client:x",
            "a b",
            "ü",
            &"x".repeat(57),
        ] {
            assert!(!is_valid_bare_name(bad), "{bad:?}");
        }
        assert_eq!(exposed_name("click"), "client__click");
        assert_eq!(bare_name("client__click"), Some("click"));
        assert_eq!(bare_name("click"), None);
        assert_eq!(bare_name("client__a.b"), None);
    }

    #[test]
    fn hello_keeps_valid_unique_tools() {
        let frame = parse_provider_frame(
            r#"{"type":"hello","client":"ext","tools":[
                {"name":"click","description":"Click","input_schema":{"type":"object"}},
                {"name":"browser.read_page"},
                {"name":"click","description":"again"},
                {"name":"fill","input_schema":"nonsense"}]}"#,
        )
        .unwrap();
        let ProviderFrame::Hello { tools, client } = frame else {
            panic!()
        };
        assert_eq!(client.as_deref(), Some("ext"));
        let accepted = accept_tools(tools);
        let names: Vec<&str> = accepted.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["click", "fill"]);
        assert_eq!(accepted[0].description, "Click");
        assert_eq!(accepted[1].input_schema, json!({"type": "object"}));
    }

    #[test]
    fn results_pings_and_garbage() {
        assert_eq!(
            parse_provider_frame(r#"{"type":"result","call_id":"c1","ok":false,"error":"nope"}"#)
                .unwrap(),
            ProviderFrame::Result {
                call_id: "c1".into(),
                ok: false,
                output: None,
                error: Some("nope".into())
            }
        );
        assert_eq!(
            parse_provider_frame(r#"{"type":"ping"}"#).unwrap(),
            ProviderFrame::Ping
        );
        assert!(parse_provider_frame(r#"{"type":"invoke"}"#).is_err());
        assert!(parse_provider_frame("nope").is_err());
        let invoke = ToProviderFrame::Invoke {
            call_id: "c".into(),
            tool: "click".into(),
            input: json!({}),
            run_id: None,
            agent_id: None,
        };
        assert_eq!(
            invoke.to_json(),
            r#"{"type":"invoke","call_id":"c","tool":"click","input":{}}"#
        );
    }
}
