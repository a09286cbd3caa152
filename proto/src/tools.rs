//! The built-in tools: their wire names, descriptions, parameter types and JSON schemas.
//!
//! Parameters are parsed by deserializing into these types (unknown fields refused), and the
//! schema advertised to clients is derived from the same types, so the two cannot drift apart.

pub mod exec;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use exec::{ExecRunParams, ExecStatParams, ExecTailParams, JobParams, Stream};

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
    ExecRun,
    ExecStatus,
    ExecTail,
    ExecKill,
    ExecStat,
}

impl Tool {
    pub const ALL: [Tool; 8] = [
        Tool::FileRead,
        Tool::FileList,
        Tool::FileWrite,
        Tool::ExecRun,
        Tool::ExecStatus,
        Tool::ExecTail,
        Tool::ExecKill,
        Tool::ExecStat,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tool::FileRead => "file_read",
            Tool::FileList => "file_list",
            Tool::FileWrite => "file_write",
            Tool::ExecRun => "exec_run",
            Tool::ExecStatus => "exec_status",
            Tool::ExecTail => "exec_tail",
            Tool::ExecKill => "exec_kill",
            Tool::ExecStat => "exec_stat",
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
            Tool::ExecRun => {
                "Start a shell command (/bin/sh -c) and return a job_id at once; the user may be asked to approve the exact command. Poll with exec_status and exec_tail."
            }
            Tool::ExecStatus => {
                "State of a job: running, exited (with exit code), killed, or timed out."
            }
            Tool::ExecTail => {
                "Output of a job: the last N lines of stdout and stderr, or everything since a byte offset."
            }
            Tool::ExecKill => {
                "Stop a job and every process it started (TERM, then KILL after a grace period)."
            }
            Tool::ExecStat => "List the account's jobs with their state.",
        }
    }

    /// The JSON schema of the tool's parameters.
    pub fn input_schema(self) -> serde_json::Value {
        let schema = match self {
            Tool::FileRead => schemars::schema_for!(FileReadParams),
            Tool::FileList => schemars::schema_for!(FileListParams),
            Tool::FileWrite => schemars::schema_for!(FileWriteParams),
            Tool::ExecRun => schemars::schema_for!(ExecRunParams),
            Tool::ExecStatus | Tool::ExecKill => schemars::schema_for!(JobParams),
            Tool::ExecTail => schemars::schema_for!(ExecTailParams),
            Tool::ExecStat => schemars::schema_for!(ExecStatParams),
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
            Tool::ExecRun => ToolParams::ExecRun(parse(params)?),
            Tool::ExecStatus => ToolParams::ExecStatus(parse(params)?),
            Tool::ExecTail => ToolParams::ExecTail(parse(params)?),
            Tool::ExecKill => ToolParams::ExecKill(parse(params)?),
            Tool::ExecStat => ToolParams::ExecStat(parse(params)?),
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
    ExecRun(ExecRunParams),
    ExecStatus(JobParams),
    ExecTail(ExecTailParams),
    ExecKill(JobParams),
    ExecStat(ExecStatParams),
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
            ToolParams::ExecRun(p) => {
                exec::check_command(&p.command)?;
                if let Some(cwd) = &p.cwd {
                    check_path(cwd)?;
                }
                match p.timeout_s {
                    Some(t) if !(1..=exec::MAX_TIMEOUT_S).contains(&t) => Err(format!(
                        "timeout_s must be between 1 and {}",
                        exec::MAX_TIMEOUT_S
                    )),
                    _ => Ok(()),
                }
            }
            ToolParams::ExecStatus(p) | ToolParams::ExecKill(p) => exec::check_job_id(&p.job_id),
            ToolParams::ExecTail(p) => {
                exec::check_job_id(&p.job_id)?;
                match p.lines {
                    Some(n) if !(1..=exec::MAX_TAIL_LINES).contains(&n) => Err(format!(
                        "lines must be between 1 and {}",
                        exec::MAX_TAIL_LINES
                    )),
                    _ => Ok(()),
                }
            }
            ToolParams::ExecStat(_) => Ok(()),
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
    fn exec_params() {
        let ok = Tool::ExecRun
            .parse_params(&json!({"command": "ls -la", "cwd": "src", "timeout_s": 5}))
            .unwrap();
        assert!(matches!(
            ok,
            ToolParams::ExecRun(ExecRunParams {
                timeout_s: Some(5),
                ..
            })
        ));
        for bad in [
            json!({"command": ""}),
            json!({"command": " \t\n"}),
            json!({"command": "a\u{0}b"}),
            json!({"command": "ls", "timeout_s": 0}),
            json!({"command": "ls", "timeout_s": 3601}),
            json!({"command": "x".repeat(exec::MAX_COMMAND_BYTES + 1)}),
            json!({"command": "ls", "env": {"A": "b"}}),
        ] {
            assert!(Tool::ExecRun.parse_params(&bad).is_err(), "{bad}");
        }
        assert!(
            Tool::ExecTail
                .parse_params(&json!({"job_id": "job-1", "lines": 0}))
                .is_err()
        );
        assert!(
            Tool::ExecTail
                .parse_params(&json!({"job_id": "job-1", "stream": "stdin"}))
                .is_err()
        );
        assert!(
            Tool::ExecKill
                .parse_params(&json!({"job_id": "a/b"}))
                .is_err()
        );
        assert!(Tool::ExecStat.parse_params(&json!({})).is_ok());
    }

    #[test]
    fn wire_safe_names() {
        assert!(is_wire_safe_name("client__browser_read_page"));
        for bad in ["", "a.b", "client:x", "a b", "ä", &"x".repeat(65)] {
            assert!(!is_wire_safe_name(bad), "{bad:?}");
        }
    }
}
