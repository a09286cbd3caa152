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
/// The version of this protocol, sent in `hello_ok`.
pub const PROTOCOL_VERSION: u32 = 1;

/// A tool a provider offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_schema", deserialize_with = "null_is_empty")]
    pub input_schema: serde_json::Value,
}

fn empty_schema() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

/// `"input_schema": null` means the same as no schema.
fn null_is_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<serde_json::Value, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(if v.is_null() { empty_schema() } else { v })
}

/// A tool of a hello that was not registered, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejected {
    pub name: String,
    pub reason: String,
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
        /// Tools of the hello that were not registered, each with the reason.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rejected: Vec<Rejected>,
        /// [`PROTOCOL_VERSION`].
        protocol_version: u32,
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
    !name.is_empty() && crate::tools::params::is_wire_safe_name(&exposed_name(name))
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

/// What a hello registers: its valid, first-seen tools (each with its schema made a valid
/// object schema, see [`object_schema`]), and the rest with the reason they were dropped.
pub fn accept_tools(tools: Vec<ClientToolSpec>) -> (Vec<ClientToolSpec>, Vec<Rejected>) {
    let mut accepted: Vec<ClientToolSpec> = Vec::new();
    let mut rejected: Vec<Rejected> = Vec::new();
    let mut reject = |name: &str, reason: String| {
        let mut name = name.to_owned();
        crate::display::truncate_at_char(&mut name, 128);
        rejected.push(Rejected { name, reason });
    };
    for mut tool in tools {
        if accepted.len() >= MAX_TOOLS_PER_CONNECTION {
            let reason = format!("a connection registers at most {MAX_TOOLS_PER_CONNECTION} tools");
            reject(&tool.name, reason);
            continue;
        }
        if !is_valid_bare_name(&tool.name) {
            let reason = "names are 1 to 56 characters of [A-Za-z0-9_-]".to_owned();
            reject(&tool.name, reason);
            continue;
        }
        if accepted.iter().any(|t| t.name == tool.name) {
            reject(&tool.name, "registered twice in one hello".to_owned());
            continue;
        }
        tool.input_schema = match object_schema(tool.input_schema) {
            Ok(schema) => schema,
            Err(reason) => {
                reject(&tool.name, reason);
                continue;
            }
        };
        crate::display::truncate_at_char(&mut tool.description, MAX_DESCRIPTION_BYTES);
        accepted.push(tool);
    }
    (accepted, rejected)
}

/// A provider's input schema as a schema every MCP client accepts: a JSON object whose `type` is
/// `"object"` (added when absent: a call's input is always an object), whose `properties`, if
/// any, is an object of schemas, and whose `required`, if any, lists strings. A schema of
/// anything but an object (`{"type": "string"}`) cannot describe a call's input: refused.
pub fn object_schema(schema: serde_json::Value) -> Result<serde_json::Value, String> {
    let serde_json::Value::Object(mut map) = schema else {
        return Err("input_schema must be a JSON object".to_owned());
    };
    match map.get("type") {
        None => {
            map.insert("type".to_owned(), "object".into());
        }
        Some(serde_json::Value::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(format!(
                "input_schema must describe an object (\"type\": \"object\"), not {other}"
            ));
        }
    }
    if let Some(properties) = map.get("properties") {
        let valid = properties
            .as_object()
            .is_some_and(|p| p.values().all(|s| s.is_object() || s.is_boolean()));
        if !valid {
            return Err("input_schema.properties must be an object of schemas".to_owned());
        }
    }
    if let Some(required) = map.get("required") {
        let valid = required
            .as_array()
            .is_some_and(|r| r.iter().all(serde_json::Value::is_string));
        if !valid {
            return Err("input_schema.required must be a list of property names".to_owned());
        }
    }
    Ok(serde_json::Value::Object(map))
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
                {"name":"fill","input_schema":null},
                {"name":"bad","input_schema":"nonsense"}]}"#,
        )
        .unwrap();
        let ProviderFrame::Hello { tools, client } = frame else {
            panic!()
        };
        assert_eq!(client.as_deref(), Some("ext"));
        let (accepted, rejected) = accept_tools(tools);
        let names: Vec<&str> = accepted.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["click", "fill"]);
        assert_eq!(accepted[0].description, "Click");
        assert_eq!(accepted[1].input_schema, json!({"type": "object"}));
        let rejected: Vec<&str> = rejected.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(rejected, ["browser.read_page", "click", "bad"]);
    }

    /// Schemas providers really send, and what MCP clients get (SDKs refuse a tool list with
    /// one schema that is not an object schema).
    #[test]
    fn every_accepted_schema_is_an_object_schema() {
        let props = json!({"url": {"type": "string"}});
        let cases = [
            (json!({}), Ok(json!({"type": "object"}))),
            (
                json!({"properties": props}),
                Ok(json!({"type": "object", "properties": props})),
            ),
            (
                json!({"type": "object", "properties": props, "required": ["url"]}),
                Ok(json!({"type": "object", "properties": props, "required": ["url"]})),
            ),
            (
                json!({"type": "object", "properties": {"x": true}}),
                Ok(json!({"type": "object", "properties": {"x": true}})),
            ),
            (json!({"type": "string"}), Err("describe an object")),
            (
                json!({"type": ["object", "null"]}),
                Err("describe an object"),
            ),
            (json!({"properties": []}), Err("properties")),
            (json!({"properties": {"x": 1}}), Err("properties")),
            (json!({"required": "url"}), Err("required")),
            (json!({"required": [1]}), Err("required")),
            (json!("nonsense"), Err("JSON object")),
            (json!([]), Err("JSON object")),
        ];
        for (schema, want) in cases {
            let got = object_schema(schema.clone());
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{schema}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{schema}: {got}"),
                (got, want) => panic!("{schema}: got {got:?}, want {want:?}"),
            }
        }
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
