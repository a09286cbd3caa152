//! The built-in tools: their wire names, descriptions, parameter types and JSON schemas.
//!
//! Parameters are parsed by deserializing into these types (unknown fields refused), and the
//! schema advertised to clients is derived from the same types, so the two cannot drift apart.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest path a client may name, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Largest content `file_write` accepts, in bytes.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Largest file `file_read` returns, in bytes.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;
/// Most entries `file_list` returns.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// A built-in tool. The set is closed: unknown names are refused, never passed through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    FileRead,
    FileList,
    FileWrite,
}

impl Tool {
    pub const ALL: [Tool; 3] = [Tool::FileRead, Tool::FileList, Tool::FileWrite];

    pub fn name(self) -> &'static str {
        match self {
            Tool::FileRead => "file_read",
            Tool::FileList => "file_list",
            Tool::FileWrite => "file_write",
        }
    }

    pub fn from_name(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    pub fn description(self) -> &'static str {
        match self {
            Tool::FileRead => {
                "Read a UTF-8 text file (up to 1 MiB). Relative paths resolve against the account's workdir."
            }
            Tool::FileList => {
                "List a directory's entries with type, size and modification time (up to 1000 entries)."
            }
            Tool::FileWrite => {
                "Create or replace a text file. The user may be asked to approve the change after seeing a diff."
            }
        }
    }

    /// The JSON schema of the tool's parameters.
    pub fn input_schema(self) -> serde_json::Value {
        let schema = match self {
            Tool::FileRead => schemars::schema_for!(FileReadParams),
            Tool::FileList => schemars::schema_for!(FileListParams),
            Tool::FileWrite => schemars::schema_for!(FileWriteParams),
        };
        schema.to_value()
    }

    /// Parses and validates the parameters of a call to this tool.
    pub fn parse_params(self, params: &serde_json::Value) -> Result<ToolParams, String> {
        fn parse<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> Result<T, String> {
            T::deserialize(v).map_err(|e| e.to_string())
        }
        let parsed = match self {
            Tool::FileRead => ToolParams::FileRead(parse(params)?),
            Tool::FileList => ToolParams::FileList(parse(params)?),
            Tool::FileWrite => ToolParams::FileWrite(parse(params)?),
        };
        parsed.validate()?;
        Ok(parsed)
    }
}

/// Parameters of `file_read`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileReadParams {
    /// File to read; relative paths resolve against the account's workdir.
    pub path: String,
}

/// Parameters of `file_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileListParams {
    /// Directory to list; defaults to the account's workdir.
    #[serde(default = "workdir")]
    pub path: String,
}

fn workdir() -> String {
    ".".to_owned()
}

/// Parameters of `file_write`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWriteParams {
    /// File to create or replace; missing parent directories are created.
    pub path: String,
    /// The complete new content (UTF-8 text, up to 1 MiB).
    pub content: String,
}

/// Validated parameters of one call.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolParams {
    FileRead(FileReadParams),
    FileList(FileListParams),
    FileWrite(FileWriteParams),
}

impl ToolParams {
    fn validate(&self) -> Result<(), String> {
        match self {
            ToolParams::FileRead(p) => check_path(&p.path),
            ToolParams::FileList(p) => check_path(&p.path),
            ToolParams::FileWrite(p) => {
                check_path(&p.path)?;
                if p.content.len() > MAX_WRITE_BYTES {
                    return Err(format!(
                        "content is {} bytes, more than the {MAX_WRITE_BYTES} allowed",
                        p.content.len()
                    ));
                }
                Ok(())
            }
        }
    }
}

fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("path must not be empty".to_owned());
    }
    if path.contains('\0') {
        return Err("path must not contain NUL bytes".to_owned());
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "path is {} bytes, more than the {MAX_PATH_BYTES} allowed",
            path.len()
        ));
    }
    Ok(())
}

/// Whether `name` is a wire-safe tool name: `[a-zA-Z0-9_-]{1,64}`.
pub fn is_wire_safe_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_tool_has_a_wire_safe_name_and_an_object_schema() {
        for tool in Tool::ALL {
            assert!(is_wire_safe_name(tool.name()), "{}", tool.name());
            assert_eq!(Tool::from_name(tool.name()), Some(tool));
            let schema = tool.input_schema();
            assert_eq!(schema["type"], "object", "{}", tool.name());
            assert_eq!(schema["additionalProperties"], false, "{}", tool.name());
        }
    }

    #[test]
    fn schema_required_fields_match_the_parser() {
        let schema = Tool::FileWrite.input_schema();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let mut required = required;
        required.sort_unstable();
        assert_eq!(required, ["content", "path"]);
        assert!(Tool::FileWrite.parse_params(&json!({"path": "a"})).is_err());
        assert!(
            Tool::FileWrite
                .parse_params(&json!({"path": "a", "content": ""}))
                .is_ok()
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = Tool::FileRead
            .parse_params(&json!({"path": "a", "follow": true}))
            .unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }

    #[test]
    fn bad_paths_are_refused() {
        for bad in ["", "a\0b"] {
            assert!(
                Tool::FileRead
                    .parse_params(&json!({ "path": bad }))
                    .is_err(),
                "{bad:?}"
            );
        }
        let long = "a".repeat(MAX_PATH_BYTES + 1);
        assert!(
            Tool::FileRead
                .parse_params(&json!({ "path": long }))
                .is_err()
        );
        assert!(Tool::FileRead.parse_params(&json!({ "path": 5 })).is_err());
        assert!(Tool::FileRead.parse_params(&json!("path")).is_err());
    }

    #[test]
    fn oversized_write_is_refused() {
        let content = "x".repeat(MAX_WRITE_BYTES + 1);
        let err = Tool::FileWrite
            .parse_params(&json!({"path": "a", "content": content}))
            .unwrap_err();
        assert!(err.contains("allowed"), "{err}");
    }

    #[test]
    fn list_defaults_to_the_workdir() {
        let p = Tool::FileList.parse_params(&json!({})).unwrap();
        assert_eq!(p, ToolParams::FileList(FileListParams { path: ".".into() }));
    }

    #[test]
    fn wire_safe_names() {
        assert!(is_wire_safe_name("client__browser_read_page"));
        for bad in ["", "a.b", "client:x", "a b", "ä", &"x".repeat(65)] {
            assert!(!is_wire_safe_name(bad), "{bad:?}");
        }
    }
}
