//! How glovebox looks to an MCP client, the same through the broker's `/mcp` and through the
//! stdio bridge (`glovebox mcp`): the instructions and capabilities it announces, each tool as MCP
//! lists it (a built-in tool with its hints and output schema, a pack tool with its server's),
//! and a call's end as an MCP tool result (a denial or failure as a tool error the model can
//! read). Pure: no I/O, no broker state.

use std::sync::Arc;

use glovebox_proto::tools::{Tool, mcp_form};
use glovebox_proto::ws::{CallEnd, ToolSpec, WireError};
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ToolAnnotations};

/// What an MCP client is told about glovebox at initialization (`/mcp` and `glovebox mcp`).
pub const INSTRUCTIONS: &str = "File and command tools on the user's machine. Every call passes \
    the user's permission gate; a denied call returns an error that says why. exec_run returns a \
    job_id at once: poll exec_status and exec_tail. The tool list changes when the user's client \
    tools come and go or the user switches tools off (notifications/tools/list_changed).";

/// What `/mcp` and `glovebox mcp` announce: tools, and that their list changes.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .build()
}

/// One tool as MCP describes it; built-in tools carry read-only and destructive hints and an
/// output schema.
pub fn mcp_tool(
    name: &str,
    description: &str,
    input_schema: &serde_json::Value,
) -> rmcp::model::Tool {
    let schema = match input_schema {
        serde_json::Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let mut tool =
        rmcp::model::Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema));
    match Tool::from_name(name) {
        Some(t) => {
            if let serde_json::Value::Object(output) = mcp_form::output_schema(t) {
                tool.output_schema = Some(Arc::new(output));
            }
            tool.annotate(
                ToolAnnotations::new()
                    .read_only(t.is_read_only())
                    .destructive(t.is_destructive()),
            )
        }
        None => tool,
    }
}

/// A tool as an MCP client lists it, from its spec: a built-in tool's own form (see
/// [`mcp_tool`]), or a pack tool with its server's hints, output schema, title and `_meta` (each
/// sanitized by the broker when it was listed). `/mcp` and `glovebox mcp` list through this.
pub fn tool_of(t: &ToolSpec) -> rmcp::model::Tool {
    let mut tool = mcp_tool(&t.name, &t.description, &t.input_schema);
    if let Some(serde_json::Value::Object(output)) = &t.output_schema {
        tool.output_schema = Some(Arc::new(output.clone()));
    }
    if let Some(title) = &t.title {
        tool.title = Some(title.clone());
    }
    if let Some(serde_json::Value::Object(meta)) = &t.meta {
        tool.meta = Some(rmcp::model::MetaObject(meta.clone()));
    }
    match &t.annotations {
        // A pack tool: its server's hints.
        Some(a) => {
            let mut hints = ToolAnnotations::new()
                .read_only(a.read_only_hint)
                .destructive(a.destructive_hint);
            hints.idempotent_hint = a.idempotent_hint;
            hints.open_world_hint = a.open_world_hint;
            tool.annotate(hints)
        }
        None => tool,
    }
}

/// The end of a call of `tool` as an MCP tool result. A success is its JSON as text (a JSON
/// string, which is what client tools often return, is that text itself), and an object result
/// is also `structuredContent`; a built-in tool's collection goes as a table ([`mcp_form`], read
/// straight from the result's text). A denial or failure is a tool error whose text the model can
/// read: the code, what happened, and the rule that decided.
pub fn call_result(tool: &str, end: CallEnd) -> CallToolResult {
    match end {
        CallEnd {
            ok: true, result, ..
        } => {
            let text = result.as_deref().map_or("null", |r| r.get());
            match serde_json::from_str(text)
                .ok()
                .and_then(|v| pack_result(tool, &v))
            {
                Some(passed) => passed,
                None => success(tool, text),
            }
        }
        CallEnd {
            error: Some(error), ..
        } => CallToolResult::error(vec![ContentBlock::text(error_text(&error))]),
        _ => CallToolResult::error(vec![ContentBlock::text(
            "internal: the call produced no result",
        )]),
    }
}

/// A pack tool's result as its server gave it (the pack host bounded its size): its content
/// blocks (text, image, audio, resource links, embedded resources), `isError`,
/// `structuredContent` and `_meta`, passed through rather than wrapped as JSON text. `None` for
/// another tool, or a value that is not an MCP tool result.
pub fn pack_result(tool: &str, value: &serde_json::Value) -> Option<CallToolResult> {
    glovebox_proto::packs::split_name(tool)?;
    value.get("content")?.as_array()?;
    serde_json::from_value(value.clone()).ok()
}

/// A successful result of `tool`, `result` its JSON text, as an MCP tool result.
pub fn success(tool: &str, result: &str) -> CallToolResult {
    media_result(tool, result)
        .unwrap_or_else(|| read_as(mcp_form::rows::present_text(Tool::from_name(tool), result)))
}

/// A `file_read_media` result as MCP clients show media: an image or audio block with its MIME
/// type, then the rest (path, kind, type, size) as text and as structured content.
fn media_result(tool: &str, result: &str) -> Option<CallToolResult> {
    if Tool::from_name(tool) != Some(Tool::FileReadMedia) {
        return None;
    }
    let mut value: serde_json::Value = serde_json::from_str(result).ok()?;
    let data = match value.as_object_mut()?.remove("data")? {
        serde_json::Value::String(data) => data,
        _ => return None,
    };
    let mime = value.get("mime_type")?.as_str()?.to_owned();
    let block = match value.get("kind")?.as_str()? {
        "image" => ContentBlock::image(data, mime),
        "audio" => ContentBlock::audio(data, mime),
        _ => return None,
    };
    let mut out = CallToolResult::success(vec![block, ContentBlock::text(value.to_string())]);
    out.structured_content = Some(value);
    Some(out)
}

/// A result read for showing as a successful MCP tool result, or the error of one unreadable.
pub fn read_as(
    presented: serde_json::Result<(String, Option<serde_json::Value>)>,
) -> CallToolResult {
    match presented {
        Ok(presented) => shown(presented),
        Err(_) => CallToolResult::error(vec![ContentBlock::text(
            "internal: the call's result could not be read",
        )]),
    }
}

/// A presented result (its text and structured content) as a successful MCP tool result.
pub fn shown((text, structured): (String, Option<serde_json::Value>)) -> CallToolResult {
    let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
    out.structured_content = structured;
    out
}

/// `code: message (rule: …)`, naming the code once.
pub fn error_text(error: &WireError) -> String {
    let code = error.code.as_str();
    let message = error
        .deny_reason
        .as_deref()
        .unwrap_or(&error.message)
        .trim_start_matches(&format!("{code}: "));
    let mut text = format!("{code}: {message}");
    if let Some(rule) = &error.rule {
        text.push_str(&format!(" (rule: {rule})"));
    }
    text
}
