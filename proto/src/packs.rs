//! Pack tools on the wire: how a pack's tool is named for agents (`<pack>__<tool>`), how a
//! server's input schema is made safe to list, and the digest that binds a call's parameters to
//! its ticket. Pure and table-tested.
//!
//! A pack name is 1 to 32 characters of `[A-Za-z0-9_-]` that neither starts nor ends with `_` nor
//! holds `__`, and is not `client` (client tools are `client__<name>`); so an exposed name splits
//! at its first `__` into exactly one pack and one tool. A tool whose exposed name would not be
//! wire-safe or would exceed 64 characters is reported as an error by the pack host, never
//! renamed: the name an agent calls is the name the server has.

use sha2::{Digest, Sha256};

/// Longest pack name.
pub const MAX_PACK_NAME: usize = 32;
/// What separates a pack's name from its tool's in an exposed name.
pub const SEPARATOR: &str = "__";
/// Largest input schema listed as the server gave it, in bytes of JSON; a bigger one is replaced.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Deepest input schema listed as the server gave it; a deeper one is replaced.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Longest tool description listed, in bytes (longer ones are cut on a character boundary).
pub const MAX_DESCRIPTION_BYTES: usize = 4 * 1024;

/// Why a pack's tool cannot be offered to agents: its pack's name, or its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unoffered {
    #[error("a pack name must be 1 to {MAX_PACK_NAME} characters")]
    PackNameLength,
    #[error("a pack name may hold only letters, digits, `_` and `-`")]
    PackNameCharacters,
    #[error("a pack name may not start or end with `_` or hold `__`")]
    PackNameUnderscores,
    #[error("`client` is reserved for client tools")]
    PackNameReserved,
    #[error(
        "tool {tool:?} cannot be offered: `{pack}{SEPARATOR}<tool>` must be at most 64 characters of [A-Za-z0-9_-]"
    )]
    ToolName { pack: String, tool: String },
}

/// Why a pack name cannot be used.
pub fn check_pack_name(name: &str) -> Result<(), Unoffered> {
    if name.is_empty() || name.len() > MAX_PACK_NAME {
        return Err(Unoffered::PackNameLength);
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(Unoffered::PackNameCharacters);
    }
    if name.starts_with('_') || name.ends_with('_') || name.contains(SEPARATOR) {
        return Err(Unoffered::PackNameUnderscores);
    }
    if name == crate::client_tools::PREFIX.trim_end_matches('_') {
        return Err(Unoffered::PackNameReserved);
    }
    Ok(())
}

/// The name agents call a pack's tool by, or why it has none.
pub fn exposed_name(pack: &str, tool: &str) -> Result<String, Unoffered> {
    check_pack_name(pack)?;
    let name = format!("{pack}{SEPARATOR}{tool}");
    if tool.is_empty() || !crate::tools::params::is_wire_safe_name(&name) {
        return Err(Unoffered::ToolName {
            pack: pack.to_owned(),
            tool: tool.to_owned(),
        });
    }
    Ok(name)
}

/// What the gate judges of a call of pack tool `exposed`: the tool, then each of its path
/// arguments as the executor resolved them (`paths`), and the tool's facts.
pub fn plan_of(
    exposed: &str,
    facts: crate::v1::PackFacts,
    paths: Vec<crate::v1::Subject>,
) -> crate::v1::Plan {
    let mut subjects = vec![crate::v1::Subject {
        domain: crate::v1::Domain::Tool as i32,
        path: exposed.to_owned(),
        state: None,
    }];
    subjects.extend(paths);
    crate::v1::Plan {
        subjects,
        content_tag: Vec::new(),
        pack: Some(facts),
    }
}

/// Whether a pack tool's `result` is one its server marked an error (`isError: true`).
pub fn is_error_result(result: &serde_json::Value) -> bool {
    result.get("isError").and_then(serde_json::Value::as_bool) == Some(true)
}

/// The error code and reason of a pack call's result row when the pack's server answered with
/// its own error (`isError`): the call is answered as the server gave it, and audited as an error.
pub const SERVER_ERROR_CODE: &str = "tool_error";
pub const SERVER_ERROR_REASON: &str = "the pack's server answered with an error (isError)";

/// The pack and tool of an exposed pack tool name; `None` for a built-in or client tool, or a
/// name no pack tool could have.
pub fn split_name(name: &str) -> Option<(&str, &str)> {
    let (pack, tool) = name.split_once(SEPARATOR)?;
    (check_pack_name(pack).is_ok()
        && !tool.is_empty()
        && crate::tools::params::is_wire_safe_name(name))
    .then_some((pack, tool))
}

/// The facts of pack tool `name` in a listing of its pack host (its server's read-only hint, the
/// file that configured it): what deciding or explaining a call of it needs. `None` for a
/// built-in or client tool, or a pack tool not listed.
pub fn facts_of(listed: &crate::v1::ListPacksResponse, name: &str) -> Option<crate::v1::PackFacts> {
    split_name(name)?;
    listed
        .tools
        .iter()
        .find(|t| t.name == name)
        .map(|t| crate::v1::PackFacts {
            read_only: t.read_only,
            origin: t.origin.clone(),
        })
}

/// The digest a pack tool's ticket carries (as its `content_tag`): SHA-256 of the call's
/// parameters exactly as the gate judged them, so the pack host calls the tool with nothing else.
pub fn params_digest(params_json: &str) -> Vec<u8> {
    Sha256::digest(params_json.as_bytes()).to_vec()
}

/// The key a project pack's trust is stored and looked up by: every field of its
/// [`TrustSubject`](crate::v1::TrustSubject) (workdir, name, command, arguments, environment as
/// written, working directory, network), length-prefixed so no two subjects share a key. A change
/// of any of them asks again.
pub fn trust_key(subject: &crate::v1::TrustSubject) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(b"glovebox.v1.pack-trust");
    for single in [
        &subject.workdir,
        &subject.pack,
        &subject.command,
        &subject.cwd,
        &subject.network,
    ] {
        field(single.as_bytes());
    }
    for list in [&subject.args, &subject.env] {
        field(&(list.len() as u64).to_le_bytes());
        for item in list {
            field(item.as_bytes());
        }
    }
    // Only an HTTP pack has one: a stdio pack's key stays what it was before HTTP packs existed.
    if !subject.url.is_empty() {
        field(b"url");
        field(subject.url.as_bytes());
    }
    // Likewise grants: a pack without any keeps its key.
    for (name, list) in [
        (&b"read"[..], &subject.read),
        (&b"write"[..], &subject.write),
    ] {
        if !list.is_empty() {
            field(name);
            field(&(list.len() as u64).to_le_bytes());
            for item in list {
                field(item.as_bytes());
            }
        }
    }
    hex::encode(h.finalize())
}

/// An input schema a client can always list: a JSON object whose `type` is `object`, at most
/// [`MAX_SCHEMA_BYTES`] and [`MAX_SCHEMA_DEPTH`] deep. Anything else is replaced by an open
/// object schema that says why (the server still validates its own arguments).
pub fn sanitize_schema(schema: &serde_json::Value) -> serde_json::Value {
    match object_schema(schema) {
        Ok(schema) => schema,
        Err(why) => serde_json::json!({
            "type": "object",
            "properties": {},
            "description": format!("the server's input schema was not listed: {why}"),
        }),
    }
}

/// A tool's output schema as clients may be shown it (they check results against it): the same
/// rules as [`sanitize_schema`], and `None` (no output schema) for one that breaks them.
pub fn sanitize_output_schema(schema: &serde_json::Value) -> Option<serde_json::Value> {
    object_schema(schema).ok()
}

/// `schema` as an object schema within the bounds, or why not.
fn object_schema(schema: &serde_json::Value) -> Result<serde_json::Value, &'static str> {
    let object = schema.as_object().ok_or("it is not a JSON object")?;
    match object.get("type") {
        None => {}
        Some(serde_json::Value::String(t)) if t == "object" => {}
        Some(_) => return Err("its type is not \"object\""),
    }
    if object.get("properties").is_some_and(|p| !p.is_object()) {
        return Err("its properties are not an object");
    }
    if object.get("required").is_some_and(|r| {
        !r.as_array()
            .is_some_and(|a| a.iter().all(|n| n.is_string()))
    }) {
        return Err("its required is not a list of names");
    }
    if depth(schema) > MAX_SCHEMA_DEPTH {
        return Err("it is nested too deeply");
    }
    if serde_json::to_string(schema).map_or(usize::MAX, |s| s.len()) > MAX_SCHEMA_BYTES {
        return Err("it is too large");
    }
    if refers_elsewhere(schema) {
        return Err("it refers to another document");
    }
    let mut object = object.clone();
    object.insert("type".into(), "object".into());
    Ok(serde_json::Value::Object(object))
}

/// Largest `_meta` of a tool passed on, as JSON.
pub const MAX_META_BYTES: usize = 4 * 1024;
/// Longest tool title passed on.
pub const MAX_TITLE_BYTES: usize = 256;

/// A tool's `_meta` as clients may be shown it: a JSON object within [`MAX_META_BYTES`] and
/// [`MAX_SCHEMA_DEPTH`], else none.
pub fn sanitize_meta(meta: &serde_json::Value) -> Option<serde_json::Value> {
    let small = serde_json::to_string(meta).is_ok_and(|s| s.len() <= MAX_META_BYTES);
    (meta.is_object() && small && depth(meta) <= MAX_SCHEMA_DEPTH).then(|| meta.clone())
}

/// A tool's title on one line, without control characters, at most [`MAX_TITLE_BYTES`]; none
/// when nothing is left.
pub fn sanitize_title(title: &str) -> Option<String> {
    let mut text: String = title
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned();
    if crate::display::truncate_at_char(&mut text, MAX_TITLE_BYTES) {
        text.push('…');
    }
    (!text.is_empty()).then_some(text)
}

/// Whether any `$ref` in the schema points outside it (a client would fetch it).
fn refers_elsewhere(value: &serde_json::Value) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("$ref")
                    .is_some_and(|r| !r.as_str().is_some_and(|r| r.starts_with('#')))
                {
                    return true;
                }
                stack.extend(m.values());
            }
            serde_json::Value::Array(a) => stack.extend(a.iter()),
            _ => {}
        }
    }
    false
}

fn depth(value: &serde_json::Value) -> usize {
    // Iterative, so a hostile schema cannot exhaust the stack while it is measured.
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        if d > MAX_SCHEMA_DEPTH {
            break;
        }
        match v {
            serde_json::Value::Object(m) => stack.extend(m.values().map(|c| (c, d + 1))),
            serde_json::Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// A description cut to [`MAX_DESCRIPTION_BYTES`] on a character boundary.
pub fn sanitize_description(description: &str) -> String {
    let mut text = description.to_owned();
    if crate::display::truncate_at_char(&mut text, MAX_DESCRIPTION_BYTES) {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pack_tools_facts_come_from_the_listing_and_no_other_tool_has_any() {
        let listed = crate::v1::ListPacksResponse {
            tools: vec![crate::v1::PackTool {
                name: "fs__read".into(),
                read_only: true,
                origin: "user".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let facts = facts_of(&listed, "fs__read").unwrap();
        assert!(facts.read_only && facts.origin == "user");
        for other in ["fs__write", "file_read", "client__read", "__read", "fs__"] {
            assert_eq!(facts_of(&listed, other), None, "{other}");
        }
    }

    #[test]
    fn output_schemas_meta_and_titles_pass_only_within_bounds() {
        let good = json!({"type": "object", "properties": {"sum": {"type": "number"}}});
        assert_eq!(sanitize_output_schema(&good), Some(good.clone()));
        for bad in [
            json!("string"),
            json!({"type": "array"}),
            json!({"properties": 7}),
            json!({"$ref": "http://evil/schema"}),
            json!({"x": "y".repeat(MAX_SCHEMA_BYTES)}),
        ] {
            assert_eq!(sanitize_output_schema(&bad), None, "{bad}");
        }
        assert_eq!(
            sanitize_meta(&json!({"ui": {"x": 1}})),
            Some(json!({"ui": {"x": 1}}))
        );
        assert_eq!(sanitize_meta(&json!([1])), None);
        assert_eq!(
            sanitize_meta(&json!({"x": "y".repeat(MAX_META_BYTES)})),
            None
        );
        assert_eq!(
            sanitize_title(" Get\nsum\u{1b}[31m "),
            Some("Get sum [31m".into())
        );
        assert_eq!(sanitize_title("\n"), None);
        let long = sanitize_title(&"t".repeat(1000)).unwrap();
        assert!(long.len() <= MAX_TITLE_BYTES + 3, "{}", long.len());
    }

    #[test]
    fn pack_names() {
        for good in ["github", "my-db", "a_b", "x1"] {
            assert!(check_pack_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "_a",
            "a_",
            "a__b",
            "client",
            "a.b",
            "a b",
            "ä",
            &"x".repeat(33),
        ] {
            assert!(check_pack_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn exposed_names_fit_or_are_refused_never_mangled() {
        assert_eq!(
            exposed_name("github", "get_file").unwrap(),
            "github__get_file"
        );
        assert_eq!(exposed_name("e", "get-sum").unwrap(), "e__get-sum");
        for (pack, tool) in [
            ("github", ""),
            ("github", "get.file"),
            ("github", "get file"),
            ("github", "ünïcode"),
            ("github", &"t".repeat(57)),
            ("client", "x"),
        ] {
            assert!(exposed_name(pack, tool).is_err(), "{pack} {tool}");
        }
        // 6 + 2 + 56 = 64 fits exactly.
        assert!(exposed_name("github", &"t".repeat(56)).is_ok());
    }

    #[test]
    fn names_split_at_the_first_separator() {
        assert_eq!(split_name("github__get_file"), Some(("github", "get_file")));
        assert_eq!(split_name("db__a__b"), Some(("db", "a__b")));
        for not_a_pack_tool in [
            "file_read",
            "client__shot",
            "__x",
            "a__",
            "_a__x",
            "a b__x",
            "x__y z",
        ] {
            assert_eq!(split_name(not_a_pack_tool), None, "{not_a_pack_tool}");
        }
    }

    #[test]
    fn schemas_are_made_listable() {
        let good = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(sanitize_schema(&good), good);
        let local = json!({"type": "object", "$defs": {"p": {"type": "string"}},
                           "properties": {"a": {"$ref": "#/$defs/p"}}, "required": ["a"]});
        assert_eq!(sanitize_schema(&local), local);
        assert_eq!(
            sanitize_schema(&json!({"properties": {}})),
            json!({"type": "object", "properties": {}})
        );
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let big = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        for bad in [
            json!("object"),
            json!(["type"]),
            json!(null),
            json!({"type": "array"}),
            json!({"type": ["object", "null"]}),
            deep,
            big,
            json!({"type": "object", "properties": 7}),
            json!({"type": "object", "required": "a"}),
            json!({"type": "object", "properties": {"a": {"$ref": "http://evil/a.json"}}}),
        ] {
            let s = sanitize_schema(&bad);
            assert_eq!(s["type"], "object", "{bad}");
            assert!(
                s["description"]
                    .as_str()
                    .unwrap()
                    .starts_with("the server's input schema was not listed"),
                "{s}"
            );
        }
    }

    #[test]
    fn descriptions_are_cut_on_a_character_boundary() {
        assert_eq!(sanitize_description("short"), "short");
        let long = "é".repeat(MAX_DESCRIPTION_BYTES);
        let cut = sanitize_description(&long);
        assert!(cut.len() <= MAX_DESCRIPTION_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn a_trust_key_changes_with_every_field_and_never_collides_by_moving_bytes() {
        let base = crate::v1::TrustSubject {
            workdir: "/w".into(),
            pack: "p".into(),
            command: "node".into(),
            args: vec!["a".into(), "b".into()],
            env: vec!["T=${secret:t}".into()],
            cwd: "/w".into(),
            network: "any".into(),
            url: String::new(),
            read: Vec::new(),
            write: Vec::new(),
        };
        let key = trust_key(&base);
        assert_eq!(key, trust_key(&base.clone()));
        let mut variants = Vec::new();
        let mut v = base.clone();
        v.command = "nodejs".into();
        variants.push(v);
        let mut v = base.clone();
        v.args = vec!["ab".into()];
        variants.push(v);
        let mut v = base.clone();
        v.args = vec!["a".into(), "b".into(), String::new()];
        variants.push(v);
        let mut v = base.clone();
        v.env = vec!["T=${secret:u}".into()];
        variants.push(v);
        let mut v = base.clone();
        v.network = "none".into();
        variants.push(v);
        let mut v = base.clone();
        v.workdir = "/w2".into();
        variants.push(v);
        let mut v = base.clone();
        v.cwd = "/w/sub".into();
        variants.push(v);
        let mut v = base.clone();
        v.pack = "q".into();
        variants.push(v);
        let mut v = base.clone();
        v.read = vec!["/opt/models".into()];
        variants.push(v);
        let mut v = base.clone();
        v.write = vec!["/opt/models".into()];
        variants.push(v);
        for v in variants {
            assert_ne!(trust_key(&v), key, "{v:?}");
        }
    }

    #[test]
    fn the_digest_changes_with_any_byte_of_the_parameters() {
        assert_eq!(params_digest("{}"), params_digest("{}"));
        assert_ne!(params_digest(r#"{"a":1}"#), params_digest(r#"{"a":2}"#));
        assert_eq!(params_digest("").len(), 32);
    }
}
