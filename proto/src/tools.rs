//! The built-in tools: their parameter types and JSON schemas, and `Tool`, whose facts (name,
//! description, hints, schema, parser, plan domains) come from the one table in `catalog`.
//!
//! Parameters are parsed by deserializing into these types (unknown fields refused), and the
//! schema advertised to clients is derived from the same types, so the two cannot drift apart.

pub mod catalog;
pub mod exec;
pub mod explain;
mod invalid;
pub mod mcp_form;
pub mod params;

pub use exec::{ExecInputParams, ExecRunParams, ExecStatParams, ExecTailParams, JobParams, Stream};
pub use invalid::InvalidParams;
pub use params::*;

impl Tool {
    pub const ALL: [Tool; 22] = [
        Tool::FileRead,
        Tool::FileList,
        Tool::FileWrite,
        Tool::FileEdit,
        Tool::FileGrep,
        Tool::FileFind,
        Tool::FileCount,
        Tool::FileHeadTail,
        Tool::FileDelete,
        Tool::FileMove,
        Tool::FileInfo,
        Tool::FileRoots,
        Tool::FileMkdir,
        Tool::FileReadMany,
        Tool::FileReadMedia,
        Tool::FileTree,
        Tool::ExecRun,
        Tool::ExecStatus,
        Tool::ExecTail,
        Tool::ExecKill,
        Tool::ExecStat,
        Tool::ExecInput,
    ];

    /// Everything glovebox knows about this tool, from the one catalog.
    pub fn entry(self) -> &'static catalog::Entry {
        catalog::entry(self)
    }

    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// Whether the tool only looks (an MCP `readOnlyHint`).
    pub fn is_read_only(self) -> bool {
        self.entry().hints.read_only
    }

    /// Whether the tool may change or remove what exists (an MCP `destructiveHint`).
    pub fn is_destructive(self) -> bool {
        self.entry().hints.destructive
    }

    pub fn from_name(name: &str) -> Option<Tool> {
        catalog::ENTRIES
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.tool)
    }

    pub fn description(self) -> &'static str {
        self.entry().description
    }

    /// The JSON schema of the tool's parameters.
    pub fn input_schema(self) -> serde_json::Value {
        (self.entry().schema)().to_value()
    }

    /// Parses and validates the parameters of a call to this tool.
    pub fn parse_params(self, params: &serde_json::Value) -> Result<ToolParams, InvalidParams> {
        let parsed = (self.entry().parse)(params)?;
        parsed.validate()?;
        Ok(parsed)
    }

    /// [`Tool::parse_params`] from the parameters' text, read straight into their type (no JSON
    /// tree in between): how an executor reads a call's `params_json`.
    pub fn parse_params_text(self, params: &str) -> Result<ToolParams, InvalidParams> {
        let parsed = (self.entry().parse_text)(params)?;
        parsed.validate()?;
        Ok(parsed)
    }
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
        assert!(err.0.contains("unknown field"), "{err}");
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
        assert!(err.0.contains("allowed"), "{err}");
    }

    #[test]
    fn list_defaults_to_the_workdir() {
        let p = Tool::FileList.parse_params(&json!({})).unwrap();
        assert_eq!(
            p,
            ToolParams::FileList(FileListParams {
                path: ".".into(),
                depth: None,
                details: None
            })
        );
    }

    #[test]
    fn limits_are_checked() {
        let bad = [
            (Tool::FileList, json!({"depth": 6})),
            (Tool::FileList, json!({"depth": 0})),
            (Tool::FileRead, json!({"path": "a", "offset": 0})),
            (Tool::FileRead, json!({"path": "a", "limit": 0})),
            (
                Tool::FileEdit,
                json!({"path": "a", "old_string": "", "new_string": "x"}),
            ),
            (Tool::FileEdit, json!({"path": "a"})),
            (Tool::FileEdit, json!({"path": "a", "old_string": "x"})),
            (
                Tool::FileEdit,
                json!({"path": "a", "old_string": "x", "new_string": "y",
                       "edits": [{"old_string": "a", "new_string": "b"}]}),
            ),
            (
                Tool::FileEdit,
                json!({"path": "a", "edits": [{"old_string": "", "new_string": "b"}]}),
            ),
            (
                Tool::FileEdit,
                json!({"path": "a", "replace_all": true,
                       "edits": [{"old_string": "a", "new_string": "b"}]}),
            ),
            (
                Tool::FileEdit,
                json!({"path": "a", "edits": vec![json!({"old_string": "a", "new_string": "b"}); MAX_EDITS + 1]}),
            ),
            (
                Tool::FileEdit,
                json!({"path": "a", "edits": [
                    {"old_string": "a".repeat(MAX_WRITE_BYTES), "new_string": "b".repeat(MAX_WRITE_BYTES)},
                    {"old_string": "c", "new_string": "d"}]}),
            ),
            (Tool::FileGrep, json!({"pattern": ""})),
            (Tool::FileGrep, json!({"pattern": "x", "max_results": 1001})),
            (
                Tool::FileGrep,
                json!({"pattern": "x", "timeout_ms": 10_001}),
            ),
            (Tool::FileGrep, json!({"pattern": "x", "globs": [""]})),
            (Tool::FileFind, json!({"names": []})),
            (Tool::FileHeadTail, json!({"path": "a", "lines": 10_001})),
            (Tool::FileMove, json!({"source": "a"})),
        ];
        for (tool, params) in bad {
            assert!(
                tool.parse_params(&params).is_err(),
                "{} {params}",
                tool.name()
            );
        }
        let good = [
            (Tool::FileList, json!({"depth": 5})),
            (
                Tool::FileRead,
                json!({"path": "a", "offset": 3, "limit": 2}),
            ),
            (
                Tool::FileEdit,
                json!({"path": "a", "old_string": "x", "new_string": "", "replace_all": true}),
            ),
            (
                Tool::FileEdit,
                json!({"path": "a", "dry_run": true, "edits": [
                    {"old_string": "x", "new_string": "y"},
                    {"old_string": "y", "new_string": "z", "replace_all": true}]}),
            ),
            (
                Tool::FileGrep,
                json!({"pattern": "x", "globs": ["*.rs", "!target/**"], "literal": true}),
            ),
            (Tool::FileFind, json!({"names": ["*.rs"]})),
            (Tool::FileCount, json!({"path": "a"})),
            (
                Tool::FileHeadTail,
                json!({"path": "a", "lines": 3, "tail": true}),
            ),
            (Tool::FileDelete, json!({"path": "a"})),
            (Tool::FileMove, json!({"source": "a", "destination": "b"})),
        ];
        for (tool, params) in good {
            assert!(
                tool.parse_params(&params).is_ok(),
                "{} {params}",
                tool.name()
            );
        }
    }

    /// What a broker sends an executor (`to_json` of the checked parameters) reads back, from
    /// its text, as the same parameters; and the text form reads a client's object as the tree
    /// form does.
    #[test]
    fn checked_parameters_read_back_from_their_text() {
        let examples = [
            (
                Tool::FileRead,
                json!({"path": "a", "offset": 3, "limit": 2}),
            ),
            (Tool::FileList, json!({"depth": 2, "details": false})),
            (Tool::FileWrite, json!({"path": "a", "content": "x\n"})),
            (
                Tool::FileEdit,
                json!({"path": "a", "edits": [{"old_string": "x", "new_string": "y"}]}),
            ),
            (Tool::FileGrep, json!({"pattern": "x", "globs": ["*.rs"]})),
            (Tool::FileFind, json!({"names": ["*.rs"]})),
            (Tool::FileCount, json!({"path": "a"})),
            (
                Tool::FileHeadTail,
                json!({"path": "a", "lines": 3, "tail": true}),
            ),
            (Tool::FileDelete, json!({"path": "a"})),
            (Tool::FileMove, json!({"source": "a", "destination": "b"})),
            (Tool::FileInfo, json!({"path": "a"})),
            (Tool::FileRoots, json!({})),
            (Tool::FileMkdir, json!({"path": "d"})),
            (Tool::FileReadMany, json!({"paths": ["a", "b"]})),
            (Tool::FileReadMedia, json!({"path": "a.png"})),
            (
                Tool::FileTree,
                json!({"depth": 2, "exclude": ["target"], "hidden": true}),
            ),
            (Tool::ExecRun, json!({"command": "ls -la", "timeout_s": 5})),
            (Tool::ExecStatus, json!({"job_id": "job-1"})),
            (Tool::ExecTail, json!({"job_id": "job-1", "lines": 5})),
            (Tool::ExecKill, json!({"job_id": "job-1"})),
            (Tool::ExecStat, json!({})),
            (
                Tool::ExecInput,
                json!({"job_id": "job-1", "input": "y\n", "close": true}),
            ),
        ];
        for tool in Tool::ALL {
            assert!(
                examples.iter().any(|(t, _)| *t == tool),
                "no example for {}",
                tool.name()
            );
        }
        for (tool, params) in examples {
            let checked = tool.parse_params(&params).unwrap();
            let from_text = tool.parse_params_text(&params.to_string()).unwrap();
            assert_eq!(from_text, checked, "{}", tool.name());
            let sent = checked.to_json().unwrap();
            assert_eq!(tool.parse_params_text(&sent).unwrap(), checked, "{sent}");
        }
        // The text form refuses what the tree form refuses, and says when it is not JSON.
        let unknown = Tool::FileRead.parse_params_text(r#"{"path": "a", "mode": 1}"#);
        assert!(unknown.unwrap_err().0.contains("unknown field"));
        let traversal = Tool::FileRead.parse_params_text(r#"{"path": "a\u0000b"}"#);
        assert!(traversal.is_err());
        let not_json = Tool::FileRead.parse_params_text("{path").unwrap_err().0;
        assert!(not_json.starts_with("params are not JSON"), "{not_json}");
        let typed = Tool::FileRead
            .parse_params_text(r#"{"path": 5}"#)
            .unwrap_err()
            .0;
        assert!(!typed.contains("FileReadParams"), "{typed}");
    }

    #[test]
    fn every_tool_only_looks_only_adds_or_may_change_things() {
        for tool in Tool::ALL {
            let only_adds = tool == Tool::FileMkdir;
            assert_eq!(
                tool.is_read_only() || only_adds,
                !tool.is_destructive(),
                "{}",
                tool.name()
            );
            assert!(!(tool.is_read_only() && only_adds), "{}", tool.name());
        }
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
