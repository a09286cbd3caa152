//! The tool catalog: one entry per built-in tool with every fact about it — wire name,
//! description, hints, parameter schema and parser, the policy domains its plan holds (in order),
//! and whether it walks a tree (so listings and searches must hide the account's read denies).
//! The broker lists tools from it, the gate checks plans and builds tickets from it, the executor
//! is tested against it. Tools known only at run time (client tools and pack tools) are
//! described by [`ToolInfo`], the same facts without the static parser, and their plans' shape by
//! [`plan_shape`].

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::{
    ExecRunParams, ExecStatParams, ExecTailParams, FileCountParams, FileDeleteParams,
    FileEditParams, FileFindParams, FileGrepParams, FileHeadTailParams, FileListParams,
    FileMoveParams, FileReadParams, FileWriteParams, JobParams, Tool, ToolParams,
};
use crate::v1::Domain;

/// MCP's tool hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hints {
    /// Only looks (`readOnlyHint`).
    pub read_only: bool,
    /// May change or remove what exists (`destructiveHint`).
    pub destructive: bool,
}

const LOOKS: Hints = Hints {
    read_only: true,
    destructive: false,
};
const CHANGES: Hints = Hints {
    read_only: false,
    destructive: true,
};

/// One built-in tool.
pub struct Entry {
    pub tool: Tool,
    pub name: &'static str,
    pub description: &'static str,
    pub hints: Hints,
    /// The domains of the subjects of this tool's plan, in order: a plan that does not have
    /// exactly these is denied by the gate.
    pub domains: &'static [Domain],
    /// Whether the tool walks a tree (listings and searches), so its ticket carries the
    /// account's read denies for the walk to hide.
    pub walks: bool,
    pub schema: fn() -> schemars::Schema,
    pub parse: fn(&serde_json::Value) -> Result<ToolParams, String>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("name", &self.name).finish()
    }
}

fn schema<T: JsonSchema>() -> schemars::Schema {
    schemars::schema_for!(T)
}

fn parse<T: DeserializeOwned>(v: &serde_json::Value) -> Result<T, String> {
    T::deserialize(v).map_err(|e| e.to_string())
}

macro_rules! entry {
    ($tool:ident, $name:literal, $params:ty, $hints:expr, [$($domain:ident),*], walks: $walks:literal, $description:literal) => {
        Entry {
            tool: Tool::$tool,
            name: $name,
            description: $description,
            hints: $hints,
            domains: &[$(Domain::$domain),*],
            walks: $walks,
            schema: schema::<$params>,
            parse: |v| parse::<$params>(v).map(ToolParams::$tool),
        }
    };
}

/// Every built-in tool, in the order clients see them.
#[rustfmt::skip]
pub static ENTRIES: [Entry; 15] = [
    entry!(FileRead, "file_read", FileReadParams, LOOKS, [Read], walks: false,
        "Read a UTF-8 text file (up to 1 MiB), or a range of lines (offset, limit) of a bigger one. Relative paths resolve against the account's workdir."),
    entry!(FileList, "file_list", FileListParams, LOOKS, [Read], walks: true,
        "List a directory's entries with type, size and modification time, optionally to a depth of 5 (up to 1000 entries)."),
    entry!(FileWrite, "file_write", FileWriteParams, CHANGES, [Write], walks: false,
        "Create or replace a text file. The user may be asked to approve the change after seeing a diff."),
    entry!(FileEdit, "file_edit", FileEditParams, CHANGES, [Write], walks: false,
        "Replace an exact string in a text file (it must occur exactly once unless replace_all is set); returns the diff."),
    entry!(FileGrep, "file_grep", FileGrepParams, LOOKS, [Read], walks: true,
        "Search file contents for a regex or literal in a file or a directory tree, with glob filters, a result cap and a time cap."),
    entry!(FileFind, "file_find", FileFindParams, LOOKS, [Read], walks: true,
        "Find files and directories whose names match globs in a tree."),
    entry!(FileCount, "file_count", FileCountParams, LOOKS, [Read], walks: false,
        "Count the lines, words and bytes of a file."),
    entry!(FileHeadTail, "file_head_tail", FileHeadTailParams, LOOKS, [Read], walks: false,
        "Return the first or the last N lines of a text file."),
    entry!(FileDelete, "file_delete", FileDeleteParams, CHANGES, [Delete], walks: false,
        "Move a file or directory to the account's trash (never a permanent delete)."),
    // The source is removed from where it was and read into its new place; the destination is
    // written.
    entry!(FileMove, "file_move", FileMoveParams, CHANGES, [Delete, Read, Write], walks: false,
        "Move or rename a file or directory; never replaces an existing one."),
    // The exact command, then the directory it runs in (read).
    entry!(ExecRun, "exec_run", ExecRunParams, CHANGES, [Exec, Read], walks: false,
        "Start a shell command (/bin/sh -c) and return a job_id at once; the user may be asked to approve the exact command. Poll with exec_status and exec_tail."),
    entry!(ExecStatus, "exec_status", JobParams, LOOKS, [Job], walks: false,
        "State of a job: running, exited (with exit code), killed, or timed out."),
    entry!(ExecTail, "exec_tail", ExecTailParams, LOOKS, [Job], walks: false,
        "Output of a job: the last N lines of stdout and stderr, or everything since a byte offset."),
    entry!(ExecKill, "exec_kill", JobParams, CHANGES, [Job], walks: false,
        "Stop a job and every process it started (TERM, then KILL after a grace period)."),
    entry!(ExecStat, "exec_stat", ExecStatParams, LOOKS, [Job], walks: false,
        "List the account's jobs with their state."),
];

/// The entry of a built-in tool.
pub fn entry(tool: Tool) -> &'static Entry {
    // ENTRIES is in `Tool::ALL` order; the test below keeps it so.
    &ENTRIES[tool as usize]
}

/// The facts of any tool an account may call, built-in or known only at run time.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
    pub hints: Hints,
    /// See [`Entry::domains`].
    pub domains: Vec<Domain>,
}

impl ToolInfo {
    pub fn builtin(tool: Tool) -> ToolInfo {
        let e = tool.entry();
        ToolInfo {
            name: e.name.to_owned(),
            description: e.description.to_owned(),
            input_schema: (e.schema)().to_value(),
            hints: e.hints,
            domains: e.domains.to_vec(),
        }
    }

    /// A client tool lent by a provider, exposed as `client__<name>`; judged in the tools domain.
    pub fn client(name: &str, description: &str, input_schema: serde_json::Value) -> ToolInfo {
        ToolInfo {
            name: crate::client_tools::exposed_name(name),
            description: description.to_owned(),
            input_schema,
            hints: Hints::default(),
            domains: vec![Domain::Tool],
        }
    }

    /// A tool of an MCP tool pack, exposed as `<pack>__<tool>` (see [`crate::packs`]); its
    /// schema is sanitized and its description cut, so one server cannot break a client's list.
    /// Judged in the tools domain, with its path arguments as read or write subjects after it.
    pub fn pack(
        pack: &str,
        tool: &str,
        description: &str,
        input_schema: &serde_json::Value,
        hints: Hints,
    ) -> Result<ToolInfo, String> {
        Ok(ToolInfo {
            name: crate::packs::exposed_name(pack, tool)?,
            description: crate::packs::sanitize_description(description),
            input_schema: crate::packs::sanitize_schema(input_schema),
            hints,
            domains: vec![Domain::Tool],
        })
    }
}

/// What a plan of a tool must hold, for the gate to judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanShape {
    /// Exactly these domains, in order (a built-in tool's entry; a client tool's one subject).
    Exactly(&'static [Domain]),
    /// A pack tool: its name in the tools domain, then any number of read or write subjects (its
    /// path arguments).
    ToolThenPaths,
}

impl PlanShape {
    /// Whether `domains` (a plan's, in order) have this shape.
    pub fn fits(self, domains: &[Domain]) -> bool {
        match self {
            PlanShape::Exactly(want) => domains == want,
            PlanShape::ToolThenPaths => match domains.split_first() {
                Some((Domain::Tool, rest)) => rest
                    .iter()
                    .all(|d| matches!(d, Domain::Read | Domain::Write)),
                _ => false,
            },
        }
    }
}

/// The shape a plan of the tool named `name` must have, for any tool the gate judges (a
/// built-in tool's entry, a client tool's single tools-domain subject, a pack tool's name and
/// paths); `None` for a name no tool has.
pub fn plan_shape(name: &str) -> Option<PlanShape> {
    if crate::client_tools::bare_name(name).is_some() {
        return Some(PlanShape::Exactly(&[Domain::Tool]));
    }
    if crate::packs::split_name(name).is_some() {
        return Some(PlanShape::ToolThenPaths);
    }
    Tool::from_name(name).map(|t| PlanShape::Exactly(t.entry().domains))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_tool_order_and_names_are_wire_safe_and_unique() {
        for (i, tool) in Tool::ALL.iter().enumerate() {
            assert_eq!(ENTRIES[i].tool, *tool, "entry {i}");
            assert_eq!(Tool::from_name(ENTRIES[i].name), Some(*tool));
        }
        let mut names: Vec<&str> = ENTRIES.iter().map(|e| e.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ENTRIES.len());
        for e in &ENTRIES {
            assert!(super::super::is_wire_safe_name(e.name), "{}", e.name);
            assert!(!e.domains.is_empty(), "{}", e.name);
            assert!(!(e.hints.read_only && e.hints.destructive), "{}", e.name);
            // A tool that only looks plans no write, delete or exec.
            if e.hints.read_only {
                assert!(
                    e.domains
                        .iter()
                        .all(|d| matches!(d, Domain::Read | Domain::Job)),
                    "{}",
                    e.name
                );
            }
            // Only tools that walk trees are told what to hide.
            if e.walks {
                assert_eq!(e.domains, &[Domain::Read], "{}", e.name);
            }
            let schema = (e.schema)().to_value();
            assert_eq!(schema["type"], "object", "{}", e.name);
        }
    }

    #[test]
    fn plan_shapes_cover_built_in_client_and_pack_tools_only() {
        use Domain::*;
        assert_eq!(
            plan_shape("file_move"),
            Some(PlanShape::Exactly(&[Delete, Read, Write][..]))
        );
        assert_eq!(
            plan_shape("client__screenshot"),
            Some(PlanShape::Exactly(&[Tool][..]))
        );
        assert_eq!(
            plan_shape("github__get_file"),
            Some(PlanShape::ToolThenPaths)
        );
        assert_eq!(plan_shape("client__"), None);
        assert_eq!(plan_shape("rm_rf"), None);
        assert_eq!(plan_shape("a b__c"), None);
        let info = ToolInfo::client("screenshot", "d", serde_json::json!({"type": "object"}));
        assert_eq!(info.name, "client__screenshot");
        assert_eq!(info.domains, vec![Tool]);
        #[rustfmt::skip]
        let cases: &[(PlanShape, &[Domain], bool)] = &[
            (PlanShape::ToolThenPaths, &[Tool],               true),
            (PlanShape::ToolThenPaths, &[Tool, Read, Write],  true),
            (PlanShape::ToolThenPaths, &[],                   false),
            (PlanShape::ToolThenPaths, &[Read, Tool],         false),
            (PlanShape::ToolThenPaths, &[Tool, Tool],         false),
            (PlanShape::ToolThenPaths, &[Tool, Exec],         false),
            (PlanShape::ToolThenPaths, &[Tool, Delete],       false),
            (PlanShape::Exactly(&[Tool]), &[Tool],            true),
            (PlanShape::Exactly(&[Tool]), &[Tool, Read],      false),
        ];
        for (shape, domains, fits) in cases {
            assert_eq!(shape.fits(domains), *fits, "{shape:?} {domains:?}");
        }
    }

    #[test]
    fn a_pack_tool_is_listed_sanitized_or_reported() {
        let hints = Hints {
            read_only: true,
            destructive: false,
        };
        let info =
            ToolInfo::pack("github", "get_file", "d", &serde_json::json!("bad"), hints).unwrap();
        assert_eq!(info.name, "github__get_file");
        assert_eq!(info.input_schema["type"], "object");
        assert_eq!(info.domains, vec![Domain::Tool]);
        assert!(ToolInfo::pack("github", "get.file", "d", &serde_json::json!({}), hints).is_err());
    }
}
