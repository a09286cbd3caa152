//! The WebSocket API's JSON frames (`/v1/ws`) and their pure parser.
//!
//! Every frame is a JSON object with a `type` field. Parsing is separate from the socket so that
//! each malformed input has a unit test and a precise, client-visible error.

pub mod manage;
mod readable;

pub use readable::reads_as_object;

use serde::{Deserialize, Serialize};

use crate::ErrorCode;
use crate::call_id::{ClientCallId, MAX_ID_BYTES, NotACallId, is_valid_id};
pub use manage::ManageOp;

/// The subprotocol browsers and clients negotiate; the server echoes only this one.
pub const SUBPROTOCOL: &str = "glovebox.v1";
/// Prefix of the subprotocol entry that carries a bearer token for browsers.
pub const BEARER_PREFIX: &str = "bearer.";
/// The version of this protocol, sent in `hello_ok`.
pub const PROTOCOL_VERSION: u32 = 1;

/// What a connection does after `hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Invokes tools.
    Agent,
    /// Answers the account's asks.
    Approver,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Approver => "approver",
        }
    }
}

/// An approver's answer to an ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Once,
    Always,
    Deny,
}

/// A frame a client sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    Hello {
        role: Role,
    },
    Invoke {
        call_id: ClientCallId,
        tool: String,
        #[serde(default = "empty_object")]
        params: serde_json::Value,
        /// The result's collection as a table, the form glovebox's MCP surfaces show
        /// ([`crate::tools::mcp_form`]): a listing's, a find's or a search's result carries
        /// `table` in place of `entries` or `matches`. Made where the result is made, so nothing
        /// downstream reads and rewrites the rows; other tools' results are as they are.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tables: bool,
        /// Send the call's progress as `progress` frames before its `result` (a pack's server
        /// reports progress; built-in tools send none).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        progress: bool,
    },
    Answer {
        ask_id: String,
        decision: Decision,
        /// The approver was told the ask's preview was cut and allows it anyway: an ask whose
        /// preview was cut (`preview_cut`) is allowed only with this set (a deny needs nothing).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        confirm_cut: bool,
    },
    /// Withdraws a call of this connection: its pending ask is denied.
    Cancel {
        call_id: ClientCallId,
    },
    /// Switches the account's tools on or off (approver connections only).
    SetEnabled {
        enabled: bool,
    },
    /// Asks for a one-time login link to the web console, for this credential's account
    /// (approver connections that presented the credential itself only).
    ConsoleLogin {},
    /// An operation on the approver's own account (see [`manage`]); answered by a
    /// `manage_result` frame with the same `request_id`.
    Manage {
        request_id: String,
        op: ManageOp,
    },
    /// Calls tool `tool` of pack `pack`: the same call as `invoke` of `<pack>__<tool>`.
    PackInvoke {
        call_id: ClientCallId,
        pack: String,
        tool: String,
        #[serde(default = "empty_object")]
        args: serde_json::Value,
        /// As `invoke`'s.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        progress: bool,
    },
    /// Asks for the account's pack tools and the packs that failed (answered by `packs`).
    PacksList {},
}

impl ClientFrame {
    /// The frame as the JSON text a client sends, which [`parse_client_frame`] reads back.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// A tool as advertised in `hello_ok`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
    /// A pack tool's MCP hints, as its server gave them (untrusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// A pack tool's output schema, title and `_meta`, as its server gave them (sanitized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

/// MCP tool hints, in MCP's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    pub read_only_hint: bool,
    pub destructive_hint: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// A pack tool in the answer to `packs_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackToolSpec {
    /// `<pack>__<tool>`, the name `invoke` takes.
    pub name: String,
    pub pack: String,
    pub tool: String,
    pub description: String,
    pub input_schema: serde_json::Value,
    pub annotations: ToolAnnotations,
    /// `user` (the account's own mcp.json) or `project` (the workdir's).
    pub origin: String,
}

/// A pack and its state now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackStateSpec {
    pub pack: String,
    pub origin: String,
    pub state: String,
    /// Why it is not ready (untrusted text), or empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A pack that offers no tools now, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackErrorSpec {
    /// The pack (empty for a problem with a whole file).
    pub pack: String,
    pub origin: String,
    pub message: String,
}

/// Facts about the machine an agent acts on. Informational: it carries no authority.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientContext {
    pub os: String,
    pub arch: String,
    pub shell: String,
    pub cwd: String,
    pub sandbox_enabled: bool,
    pub timezone: String,
}

/// An error as a client sees it: a stable code, a message and, for denials, why and which rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl WireError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> WireError {
        WireError {
            code,
            message: message.into(),
            deny_reason: None,
            rule: None,
        }
    }

    pub fn denied(reason: impl Into<String>, rule: impl Into<String>) -> WireError {
        let reason = reason.into();
        WireError {
            code: ErrorCode::Denied,
            message: format!("denied: {reason}"),
            deny_reason: Some(reason),
            rule: Some(rule.into()),
        }
    }
}

/// One subject of an ask, as the approver sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AskSubject {
    /// `read`, `write`, `delete`, `exec` (the path is the command) or `job`.
    pub domain: String,
    pub path: String,
}

/// The display form of an ask (see `crate::display`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AskDisplay {
    pub tool: String,
    pub subjects: Vec<AskSubject>,
    pub preview: String,
}

impl AskDisplay {
    /// The display form of an ask's untrusted fields, and what in them could mislead (each
    /// finding once). An `exec` subject is a command; every other subject, and the tool name, is
    /// a path or a name; the preview is a preview.
    pub fn of(tool: &str, subjects: &[AskSubject], preview: &str) -> (AskDisplay, Vec<String>) {
        use crate::display::{Kind, reveal};
        let mut warnings: Vec<String> = Vec::new();
        let mut show = |s: &str, kind: Kind| {
            let r = reveal(s, kind);
            for w in r.warnings {
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
            r.text
        };
        let display = AskDisplay {
            tool: show(tool, Kind::Path),
            subjects: subjects
                .iter()
                .map(|s| AskSubject {
                    domain: s.domain.clone(),
                    path: show(
                        &s.path,
                        if s.domain == "exec" {
                            Kind::Command
                        } else {
                            Kind::Path
                        },
                    ),
                })
                .collect(),
            preview: show(preview, Kind::Preview),
        };
        (display, warnings)
    }
}

/// A frame the server sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    HelloOk {
        account: String,
        connection_id: String,
        role: Role,
        /// `desktop` or `web` (from the `profile` query parameter of the upgrade).
        profile: String,
        tools: Vec<ToolSpec>,
        context: ClientContext,
        /// [`PROTOCOL_VERSION`].
        #[serde(default)]
        protocol_version: u32,
        /// Approvers only: the audit's newest signed checkpoint (`<rows> rows, digest <hex>`),
        /// shown so that a rewrite of the audit would have to match what a person saw.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audit_checkpoint: Option<String>,
    },
    /// The tools this connection may call changed (a provider came or went, the account's tools
    /// were switched on or off): the whole new list, as in `hello_ok` (agent connections only).
    ToolsChanged { tools: Vec<ToolSpec> },
    Result {
        call_id: String,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<WireError>,
    },
    Ask {
        ask_id: String,
        call_id: String,
        account: String,
        /// The agent connection that made the call.
        connection_id: String,
        tool: String,
        subjects: Vec<AskSubject>,
        preview: String,
        expires_in_ms: u64,
        /// What to show the approver: the same fields with hidden characters made visible.
        display: AskDisplay,
        /// What in the fields could mislead, each finding once, joined by `; ` (e.g. `trailing
        /// whitespace in a path; a run of 240 spaces in a command`); absent when nothing was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warning: Option<String>,
        /// The preview is cut (a diff over its limit, a long tool input): part of what would be
        /// allowed is not shown, so allowing needs `confirm_cut` in the answer.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        preview_cut: bool,
    },
    /// The account's tools were switched on or off (the answer to `set_enabled`).
    Enabled { account: String, enabled: bool },
    /// The account went from no call in flight to some (`active: true`), or back.
    Activity { account: String, active: bool },
    /// An ask ended without an answer from this connection (`timeout`, `withdrawn`, `closed`, or
    /// `answered` by another approver of the account): approvers can stop showing it.
    AskClosed { ask_id: String, reason: String },
    /// The audit went from writable to failing (`healthy: false`: every call is refused until it
    /// is written again) or back (approver connections only, on each change).
    AuditHealth {
        healthy: bool,
        failures: u64,
        message: String,
    },
    /// A one-time login link to the web console: `path` on the broker's own address, usable
    /// once, within `expires_in_ms`.
    ConsoleLogin { path: String, expires_in_ms: u64 },
    /// A call's progress, as its pack's server reported it, for a call invoked with `progress`:
    /// in order, each before the call's `result` (some may be dropped for a client that reads
    /// slowly; the result never is).
    Progress {
        call_id: String,
        progress: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The answer to a `manage` frame.
    ManageResult {
        request_id: String,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<WireError>,
    },
    /// A frame-level problem (malformed JSON, unknown type); the connection stays open.
    Error { code: ErrorCode, message: String },
    /// The answer to `packs_list`: every pack tool, and every pack that failed (never silently
    /// absent).
    Packs {
        tools: Vec<PackToolSpec>,
        errors: Vec<PackErrorSpec>,
        /// Each pack and its state: `ready`, `starting`, `failed` (with why), `disabled`,
        /// `untrusted`.
        #[serde(default)]
        packs: Vec<PackStateSpec>,
    },
}

impl ServerFrame {
    pub fn ok(call_id: String, result: serde_json::Value) -> ServerFrame {
        ServerFrame::Result {
            call_id,
            ok: true,
            result: Some(result),
            error: None,
        }
    }

    pub fn failed(call_id: String, error: WireError) -> ServerFrame {
        ServerFrame::Result {
            call_id,
            ok: false,
            result: None,
            error: Some(error),
        }
    }

    pub fn to_json(&self) -> String {
        // Serializing these plain data types cannot fail; fall back to a fixed error frame anyway.
        serde_json::to_string(self).unwrap_or_else(|_| {
            r#"{"type":"error","code":"internal","message":"could not encode frame"}"#.to_owned()
        })
    }
}

/// Why a client frame was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    MalformedJson(String),
    NotAnObject,
    MissingType,
    UnknownType(String),
    InvalidFields { frame_type: String, detail: String },
    BadId(&'static str),
}

impl std::error::Error for FrameError {}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::MalformedJson(e) => write!(f, "malformed JSON frame: {e}"),
            FrameError::NotAnObject => f.write_str("frame must be a JSON object"),
            FrameError::MissingType => f.write_str("frame has no string field `type`"),
            FrameError::UnknownType(t) => write!(f, "unknown frame type {t:?}"),
            FrameError::InvalidFields { frame_type, detail } => {
                write!(f, "invalid {frame_type} frame: {detail}")
            }
            FrameError::BadId(which) => write!(
                f,
                "{which} must be 1 to {MAX_ID_BYTES} characters of [A-Za-z0-9._:-]"
            ),
        }
    }
}

const FRAME_TYPES: [&str; 9] = [
    "hello",
    "invoke",
    "answer",
    "cancel",
    "set_enabled",
    "console_login",
    "manage",
    "pack_invoke",
    "packs_list",
];

/// How every `result` frame the broker writes begins (its tag first, as [`ServerFrame::to_json`]
/// writes it): [`parse_bridge_frame`] reads a frame that begins so in one pass.
pub const RESULT_FRAME_PREFIX: &str = r#"{"type":"result","#;

/// The end of a call as `glovebox mcp` reads it: [`ServerFrame::Result`] with the result left as
/// its JSON text (checked to be JSON, not read into a tree), for whoever knows the call's tool to
/// present (`mcp_form::rows::present_text`: a listing's rows go straight into its table).
#[derive(Debug, Deserialize)]
pub struct CallEnd {
    #[serde(rename = "type")]
    _kind: serde::de::IgnoredAny,
    pub call_id: String,
    pub ok: bool,
    #[serde(default)]
    pub result: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    pub error: Option<WireError>,
}

impl CallEnd {
    pub fn failed(call_id: String, error: WireError) -> CallEnd {
        CallEnd {
            _kind: serde::de::IgnoredAny,
            call_id,
            ok: false,
            result: None,
            error: Some(error),
        }
    }

    /// A result read into a tree, its text written back from the tree.
    fn of_tree(
        call_id: String,
        ok: bool,
        result: Option<serde_json::Value>,
        error: Option<WireError>,
    ) -> CallEnd {
        CallEnd {
            _kind: serde::de::IgnoredAny,
            call_id,
            ok,
            result: result.and_then(|v| serde_json::value::to_raw_value(&v).ok()),
            error,
        }
    }
}

/// A frame from the server as `glovebox mcp` reads it.
#[derive(Debug)]
pub enum BridgeFrame {
    End(CallEnd),
    Other(ServerFrame),
}

impl BridgeFrame {
    /// The frame as the `ServerFrame` enum reads it: a result's text read into a tree (an error
    /// if no tree holds it, as the enum refuses such a frame).
    pub fn into_frame(self) -> serde_json::Result<ServerFrame> {
        match self {
            BridgeFrame::Other(frame) => Ok(frame),
            BridgeFrame::End(CallEnd {
                call_id,
                ok,
                result,
                error,
                ..
            }) => Ok(ServerFrame::Result {
                call_id,
                ok,
                result: result.map(|r| serde_json::from_str(r.get())).transpose()?,
                error,
            }),
        }
    }
}

/// Parses one text frame from the server, leaving a result's JSON as text. A `result` frame as
/// the broker writes it (its tag first), the frame that carries big payloads, is read in one pass
/// straight into a [`CallEnd`]: serde reads an internally tagged enum by first copying the whole
/// frame into a buffer of its own and then reading that again, which for a listing of a thousand
/// entries was most of `glovebox mcp`'s work. Every other text goes the usual way. Either way,
/// [`BridgeFrame::into_frame`] gives what the `ServerFrame` enum reads (tested, fuzzed).
pub fn parse_bridge_frame(text: &str) -> serde_json::Result<BridgeFrame> {
    if text.starts_with(RESULT_FRAME_PREFIX) {
        return serde_json::from_str(text).map(BridgeFrame::End);
    }
    Ok(match serde_json::from_str(text)? {
        ServerFrame::Result {
            call_id,
            ok,
            result,
            error,
        } => BridgeFrame::End(CallEnd::of_tree(call_id, ok, result, error)),
        other => BridgeFrame::Other(other),
    })
}

/// Parses one text frame from a client.
pub fn parse_client_frame(text: &str) -> Result<ClientFrame, FrameError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| FrameError::MalformedJson(e.to_string()))?;
    let object = value.as_object().ok_or(FrameError::NotAnObject)?;
    let frame_type = object
        .get("type")
        .and_then(|t| t.as_str())
        .ok_or(FrameError::MissingType)?;
    if !FRAME_TYPES.contains(&frame_type) {
        return Err(FrameError::UnknownType(truncate(frame_type, 64)));
    }
    let frame_type = frame_type.to_owned();
    // A call's id is checked as it is read (`ClientCallId`'s `Deserialize`).
    let frame = ClientFrame::deserialize(value).map_err(|e| {
        let detail = e.to_string();
        if detail == NotACallId.to_string() {
            FrameError::BadId("call_id")
        } else {
            FrameError::InvalidFields { frame_type, detail }
        }
    })?;
    match &frame {
        ClientFrame::Answer { ask_id, .. } if !is_valid_id(ask_id) => {
            Err(FrameError::BadId("ask_id"))
        }
        ClientFrame::Manage { request_id, .. } if !is_valid_id(request_id) => {
            Err(FrameError::BadId("request_id"))
        }
        ClientFrame::Manage { op, .. } => match op.check() {
            Ok(()) => Ok(frame),
            Err(detail) => Err(FrameError::InvalidFields {
                frame_type: "manage".into(),
                detail,
            }),
        },
        _ => Ok(frame),
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    s.chars().take(max_chars).collect()
}

/// Extracts the bearer token from a `Sec-WebSocket-Protocol` header value, and whether the
/// glovebox subprotocol was offered.
pub fn bearer_from_subprotocols(header: &str) -> (Option<&str>, bool) {
    let mut token = None;
    let mut offered = false;
    for entry in header.split(',').map(str::trim) {
        if let Some(t) = entry.strip_prefix(BEARER_PREFIX) {
            token = Some(t);
        } else if entry == SUBPROTOCOL {
            offered = true;
        }
    }
    (token, offered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> ClientCallId {
        ClientCallId::parse(text.into()).unwrap()
    }
    use serde_json::json;

    fn check(text: &str, expected: Result<ClientFrame, &str>) {
        let got = parse_client_frame(text);
        match (got, expected) {
            (Ok(frame), Ok(want)) => assert_eq!(frame, want, "{text}"),
            (Err(err), Err(needle)) => {
                let msg = err.to_string();
                assert!(msg.contains(needle), "{text}: {msg:?} lacks {needle:?}")
            }
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn server_frames_parse_as_the_enum_reads_them() {
        let frames = [
            r#"{"type":"result","call_id":"c1","ok":true,"result":{"entries":[{"name":"a"}],"n":1}}"#,
            r#"{"ok":true,"call_id":"c2","type":"result","result":"text"}"#,
            r#"{"type":"result","call_id":"c3","ok":false,"error":{"code":"denied","message":"no","rule":"r"}}"#,
            r#"{"type":"result","call_id":"c4","ok":true,"result":null,"extra":[1,2]}"#,
            r#"{"type":"result","call_id":"c5","ok":true}"#,
            r#"{"type":"result","call_id":"c6","ok":true,"type":"ask"}"#,
            r#"{"type":"result","call_id":"c7","call_id":"c8","ok":true}"#,
            r#"{"type":"results","call_id":"c9","ok":true}"#,
            r#"{"type":"enabled","account":"a","enabled":true}"#,
            r#"{"type":"ask_closed","ask_id":"k","reason":"timeout"}"#,
            // Malformed: both refuse (a result no tree holds too, though the bridge keeps it
            // as text until it is read).
            r#"{"type":"result","call_id":"c","ok":true,"result":{"n":1e999}}"#,
            r#"{"type":"result","ok":true}"#,
            r#"{"type":"result","call_id":7,"ok":true}"#,
            r#"{"type":"result","call_id":"c","ok":true,"error":{"code":"no_such_code","message":"x"}}"#,
            r#"{"type":"nope"}"#,
            r#"{"type":"result","call_id":"c","ok":true"#,
            r#"["result"]"#,
            "",
        ];
        for text in frames {
            let want = serde_json::from_str::<ServerFrame>(text).ok();
            let got = parse_bridge_frame(text)
                .and_then(BridgeFrame::into_frame)
                .ok();
            assert_eq!(got, want, "{text}");
        }
        // The broker's frames are the ones read in one pass: their tag comes first.
        let written = ServerFrame::ok("c".into(), json!({"a": 1})).to_json();
        assert!(written.starts_with(RESULT_FRAME_PREFIX), "{written}");
        let failed = ServerFrame::failed("c".into(), WireError::new(ErrorCode::Denied, "no"));
        assert!(failed.to_json().starts_with(RESULT_FRAME_PREFIX));
        assert!(matches!(
            parse_bridge_frame(frames[0]),
            Ok(BridgeFrame::End(CallEnd {
                ok: true,
                result: Some(_),
                ..
            }))
        ));
    }

    #[test]
    fn parses_each_frame_type() {
        check(
            r#"{"type":"hello","role":"agent"}"#,
            Ok(ClientFrame::Hello { role: Role::Agent }),
        );
        check(
            r#"{"type":"hello","role":"approver"}"#,
            Ok(ClientFrame::Hello {
                role: Role::Approver,
            }),
        );
        check(
            r#"{"type":"invoke","call_id":"c-1","tool":"file_read","params":{"path":"a"}}"#,
            Ok(ClientFrame::Invoke {
                call_id: id("c-1"),
                tool: "file_read".into(),
                params: json!({"path":"a"}),
                tables: false,
                progress: false,
            }),
        );
        check(
            r#"{"type":"invoke","call_id":"c-1","tool":"file_list"}"#,
            Ok(ClientFrame::Invoke {
                call_id: id("c-1"),
                tool: "file_list".into(),
                params: json!({}),
                tables: false,
                progress: false,
            }),
        );
        // Anything but a boolean is refused, not read as "no".
        for odd in [r#""yes""#, "1", "null", "[]"] {
            check(
                &format!(
                    r#"{{"type":"invoke","call_id":"c-1","tool":"file_list","tables":{odd}}}"#
                ),
                Err("expected a boolean"),
            );
        }
        check(
            r#"{"type":"invoke","call_id":"c-1","tool":"file_list","tables":true}"#,
            Ok(ClientFrame::Invoke {
                call_id: id("c-1"),
                tool: "file_list".into(),
                params: json!({}),
                tables: true,
                progress: false,
            }),
        );
        check(
            r#"{"type":"answer","ask_id":"a1","decision":"always"}"#,
            Ok(ClientFrame::Answer {
                ask_id: "a1".into(),
                decision: Decision::Always,
                confirm_cut: false,
            }),
        );
    }

    #[test]
    fn client_frames_serialize_to_what_the_parser_reads() {
        let frames = [
            ClientFrame::Hello { role: Role::Agent },
            ClientFrame::Hello {
                role: Role::Approver,
            },
            ClientFrame::Invoke {
                call_id: id("cli-1f"),
                tool: "file_read".into(),
                params: json!({"path": "a", "n": [1, 2]}),
                tables: false,
                progress: false,
            },
            ClientFrame::Invoke {
                call_id: id("c"),
                tool: "file_list".into(),
                params: json!({}),
                tables: true,
                progress: false,
            },
            ClientFrame::Answer {
                ask_id: "ask-1".into(),
                decision: Decision::Deny,
                confirm_cut: false,
            },
            ClientFrame::Answer {
                ask_id: "ask-1".into(),
                decision: Decision::Once,
                confirm_cut: true,
            },
            ClientFrame::Cancel { call_id: id("c") },
            ClientFrame::SetEnabled { enabled: false },
            ClientFrame::ConsoleLogin {},
            ClientFrame::Manage {
                request_id: "r-1".into(),
                op: ManageOp::RevokeRule {
                    section: "commands".into(),
                    kind: "allow".into(),
                    pattern: "cargo test".into(),
                },
            },
            ClientFrame::PackInvoke {
                call_id: id("p"),
                pack: "github".into(),
                tool: "get_file".into(),
                args: json!({"path": "a"}),
                progress: true,
            },
            ClientFrame::PacksList {},
        ];
        for frame in frames {
            let text = frame.to_json().unwrap();
            assert_eq!(parse_client_frame(&text), Ok(frame), "{text}");
        }
        // the same JSON the clients spelled out by hand before
        let text = ClientFrame::Answer {
            ask_id: "ask-1".into(),
            decision: Decision::Always,
            confirm_cut: false,
        }
        .to_json()
        .unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            json!({"type": "answer", "ask_id": "ask-1", "decision": "always"})
        );
        assert_eq!(
            ClientFrame::Hello { role: Role::Agent }.to_json().unwrap(),
            r#"{"type":"hello","role":"agent"}"#
        );
    }

    #[test]
    fn pack_frames() {
        check(
            r#"{"type":"pack_invoke","call_id":"p1","pack":"e","tool":"echo"}"#,
            Ok(ClientFrame::PackInvoke {
                call_id: id("p1"),
                pack: "e".into(),
                tool: "echo".into(),
                args: json!({}),
                progress: false,
            }),
        );
        check(
            r#"{"type":"pack_invoke","call_id":"p1","pack":"e","tool":"echo","progress":true}"#,
            Ok(ClientFrame::PackInvoke {
                call_id: id("p1"),
                pack: "e".into(),
                tool: "echo".into(),
                args: json!({}),
                progress: true,
            }),
        );
        check(
            r#"{"type":"invoke","call_id":"p1","tool":"echo","progress":"yes"}"#,
            Err("expected a boolean"),
        );
        check(r#"{"type":"packs_list"}"#, Ok(ClientFrame::PacksList {}));
        check(
            r#"{"type":"packs_list","account":"bob"}"#,
            Err("unknown field `account`"),
        );
        check(
            r#"{"type":"pack_invoke","call_id":"a b","pack":"e","tool":"echo"}"#,
            Err("call_id must be"),
        );
        check(
            r#"{"type":"pack_invoke","call_id":"p","tool":"echo"}"#,
            Err("missing field `pack`"),
        );
    }

    #[test]
    fn malformed_json() {
        check("{", Err("malformed JSON"));
        check("", Err("malformed JSON"));
        check("\u{0}", Err("malformed JSON"));
    }

    #[test]
    fn not_an_object() {
        check("[1,2]", Err("JSON object"));
        check("\"hello\"", Err("JSON object"));
    }

    #[test]
    fn missing_or_non_string_type() {
        check(r#"{"role":"agent"}"#, Err("no string field `type`"));
        check(r#"{"type":5}"#, Err("no string field `type`"));
    }

    #[test]
    fn unknown_type() {
        check(r#"{"type":"rm_rf"}"#, Err("unknown frame type \"rm_rf\""));
        check(
            r#"{"type":"Hello","role":"agent"}"#,
            Err("unknown frame type"),
        );
    }

    #[test]
    fn bad_fields() {
        check(
            r#"{"type":"hello","role":"root"}"#,
            Err("invalid hello frame"),
        );
        check(r#"{"type":"hello"}"#, Err("missing field `role`"));
        check(
            r#"{"type":"hello","role":"agent","account":"bob"}"#,
            Err("unknown field `account`"),
        );
        check(
            r#"{"type":"answer","ask_id":"a","decision":"yes"}"#,
            Err("invalid answer frame"),
        );
        check(
            r#"{"type":"invoke","tool":"x"}"#,
            Err("missing field `call_id`"),
        );
    }

    #[test]
    fn manage_frames_are_checked() {
        check(
            r#"{"type":"manage","request_id":"r1","op":{"name":"list_rules"}}"#,
            Ok(ClientFrame::Manage {
                request_id: "r1".into(),
                op: ManageOp::ListRules {},
            }),
        );
        check(
            r#"{"type":"manage","request_id":"a b","op":{"name":"list_rules"}}"#,
            Err("request_id must be"),
        );
        check(
            r#"{"type":"manage","request_id":"r1","op":{"name":"job_kill","job_id":""}}"#,
            Err("invalid manage frame: job_id is empty"),
        );
        check(
            r#"{"type":"manage","request_id":"r1","op":{"name":"list_rules"},"account":"bob"}"#,
            Err("unknown field `account`"),
        );
        check(
            r#"{"type":"console_login"}"#,
            Ok(ClientFrame::ConsoleLogin {}),
        );
        check(
            r#"{"type":"console_login","account":"bob"}"#,
            Err("unknown field `account`"),
        );
    }

    #[test]
    fn bad_ids() {
        check(
            r#"{"type":"invoke","call_id":"","tool":"file_read"}"#,
            Err("call_id must be"),
        );
        check(
            r#"{"type":"invoke","call_id":"a b","tool":"file_read"}"#,
            Err("call_id must be"),
        );
        let long = "x".repeat(MAX_ID_BYTES + 1);
        check(
            &format!(r#"{{"type":"invoke","call_id":"{long}","tool":"file_read"}}"#),
            Err("call_id must be"),
        );
        check(
            r#"{"type":"answer","ask_id":"../x","decision":"once"}"#,
            Err("ask_id must be"),
        );
    }

    #[test]
    fn subprotocol_bearer() {
        assert_eq!(
            bearer_from_subprotocols("glovebox.v1, bearer.abc"),
            (Some("abc"), true)
        );
        assert_eq!(bearer_from_subprotocols("bearer.abc"), (Some("abc"), false));
        assert_eq!(bearer_from_subprotocols("glovebox.v1"), (None, true));
        assert_eq!(bearer_from_subprotocols(""), (None, false));
    }

    #[test]
    fn server_frames_serialize_with_type_tags() {
        let f = ServerFrame::failed("c".into(), WireError::denied("floor: .ssh", "floor:.ssh"));
        let v: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!(v["type"], "result");
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["code"], "denied");
        assert_eq!(v["error"]["deny_reason"], "floor: .ssh");
        assert_eq!(v["error"]["rule"], "floor:.ssh");
        assert!(v.get("result").is_none());
    }

    #[test]
    fn an_ask_display_reads_exec_subjects_as_commands_and_others_as_paths() {
        let subject = |domain: &str, path: &str| AskSubject {
            domain: domain.into(),
            path: path.into(),
        };
        let (display, warnings) = AskDisplay::of(
            "exec_run",
            &[
                subject("exec", "echo a\nrm -rf ~"),
                subject("read", "/w/a.txt\nb"),
                subject("write", "/w/notes.txt\u{A0}"),
            ],
            "--- a\n+++ b\n+x\ty\n",
        );
        assert_eq!(display.subjects[0].path, "echo a\nrm -rf ~");
        assert_eq!(display.subjects[1].path, "/w/a.txt⟨LF⟩b");
        assert_eq!(display.subjects[2].path, "/w/notes.txt⟨U+00A0⟩");
        assert_eq!(display.preview, "--- a\n+++ b\n+x\ty\n");
        assert_eq!(
            warnings,
            [
                "a command of 2 lines (each line runs as a command)",
                "a line break in a path",
                "a non-ASCII space (U+00A0) in a path",
                "trailing whitespace in a path",
            ]
        );
        let (_, none) = AskDisplay::of("file_write", &[subject("write", "/w/a.txt")], "+x\n");
        assert!(none.is_empty(), "{none:?}");
    }
}
