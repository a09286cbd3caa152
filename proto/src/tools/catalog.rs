//! The tool catalog: one entry per built-in tool with every fact about it — wire name,
//! description, hints, parameter schema and parser, the policy domains its plan holds (in order),
//! and whether it walks a tree (so listings and searches must hide the account's read denies).
//! The broker lists tools from it, the gate checks plans and builds tickets from it, the executor
//! is tested against it. Tools known only at run time (client tools and pack tools) are
//! described by [`ToolInfo`], the same facts without the static parser, and their plans' shape by
//! [`plan_shape`].

use super::invalid::InvalidParams;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::exec::{ExecInputParams, ExecRunParams, ExecStatParams, ExecTailParams, JobParams};
use super::params::{
    FileCountParams, FileDeleteParams, FileEditParams, FileFindParams, FileGrepParams,
    FileHeadTailParams, FileInfoParams, FileListParams, FileMkdirParams, FileMoveParams,
    FileReadManyParams, FileReadMediaParams, FileReadParams, FileRootsParams, FileTreeParams,
    FileWriteParams, Tool, ToolParams,
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
/// Adds without changing or removing anything that exists.
const ADDS: Hints = Hints {
    read_only: false,
    destructive: false,
};

/// One built-in tool.
pub struct Entry {
    pub tool: Tool,
    pub name: &'static str,
    pub description: &'static str,
    pub hints: Hints,
    /// The domains of the subjects of this tool's plan, in order (the first of each kind, for a
    /// tool whose plan repeats them).
    pub domains: &'static [Domain],
    /// What a plan of this tool must hold, or the gate denies it: exactly `domains`, or for a
    /// tool of several paths or lines, as many as it names.
    pub shape: PlanShape,
    /// Whether the tool walks a tree (listings and searches), so its ticket carries the
    /// account's read denies for the walk to hide.
    pub walks: bool,
    pub schema: fn() -> schemars::Schema,
    pub parse: fn(&serde_json::Value) -> Result<ToolParams, InvalidParams>,
    /// The same, from the parameters' text.
    pub parse_text: fn(&str) -> Result<ToolParams, InvalidParams>,
    /// The fields every successful result has, with their JSON types, that the tool's MCP
    /// `outputSchema` declares (results may have more).
    pub output: &'static [(&'static str, &'static str)],
    /// The fields every successful result also has, with their JSON types, that the
    /// `outputSchema` leaves out and the description names. MCP clients check every result
    /// against the `outputSchema`, and the official Python SDK's validator makes a sub-validator
    /// for each declared property on every call: about 4 µs each alone, up to 8 µs in a
    /// client's live call loop (three left out made a 4 KiB read about 5% faster). So the tools
    /// that read — a file's text, a listing, a search — declare only what they found and whether
    /// it is complete (`truncated`, `timed_out`), as the MCP filesystem server declares only a
    /// file's text; the path and the counts stay in `structuredContent` (and on the text block's
    /// first line), undeclared.
    pub undeclared: &'static [(&'static str, &'static str)],
}

/// The dialect the output schemas name (`$schema`). The keywords they use (`type`,
/// `properties`, `required`) mean the same in every dialect, and draft-07 is the one the MCP
/// reference servers' schemas name; left unnamed, a schema is read as 2020-12, which the Python
/// SDK's validator checks each result against at about one and a half times the cost (60 against
/// 38 µs for `file_read`'s, on every call a client makes).
const OUTPUT_SCHEMA_DIALECT: &str = "http://json-schema.org/draft-07/schema#";

impl Entry {
    /// The JSON schema of the tool's result (MCP `outputSchema`): an object with [`Entry::output`]'s
    /// fields required and typed, open to others, in [`OUTPUT_SCHEMA_DIALECT`].
    pub fn output_schema(&self) -> serde_json::Value {
        let properties: serde_json::Map<String, serde_json::Value> = self
            .output
            .iter()
            .map(|(name, ty)| ((*name).to_owned(), serde_json::json!({ "type": ty })))
            .collect();
        let required: Vec<&str> = self.output.iter().map(|(name, _)| *name).collect();
        serde_json::json!({
            "$schema": OUTPUT_SCHEMA_DIALECT,
            "type": "object",
            "properties": properties,
            "required": required,
        })
    }

    /// Whether `result` has every field of [`Entry::output`] and [`Entry::undeclared`] with its
    /// type.
    pub fn result_conforms(&self, result: &serde_json::Value) -> bool {
        self.output.iter().chain(self.undeclared).all(|(name, ty)| {
            result.get(name).is_some_and(|v| match *ty {
                "string" => v.is_string(),
                "integer" => v.is_u64() || v.is_i64(),
                "boolean" => v.is_boolean(),
                "array" => v.is_array(),
                "object" => v.is_object(),
                _ => false,
            })
        })
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("name", &self.name).finish()
    }
}

/// The schema of a tool's parameters, in the portable subset every MCP client accepts: no
/// `format` outside the JSON Schema standard (schemars writes `uint64`), and an optional field is
/// its type alone (it may be left out) rather than a type-or-null union; no `$ref`s.
fn schema<T: JsonSchema>() -> schemars::Schema {
    schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .with_transform(schemars::transform::RestrictFormats::default())
        .with_transform(schemars::transform::RecursiveTransform(drop_null_type))
        .into_generator()
        .into_root_schema_for::<T>()
}

/// `"type": ["integer", "null"]` → `"type": "integer"`, `anyOf: [S, {"type": "null"}]` → S, and
/// no `"default": null`.
fn drop_null_type(schema: &mut schemars::Schema) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if object
        .get("default")
        .is_some_and(serde_json::Value::is_null)
    {
        object.remove("default");
    }
    if let Some(serde_json::Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            object.insert("type".to_owned(), only);
        }
    }
    let null = serde_json::json!({"type": "null"});
    if let Some(serde_json::Value::Array(alternatives)) = object.get("anyOf")
        && alternatives.len() == 2
        && alternatives.contains(&null)
        && let Some(serde_json::Value::Object(other)) =
            alternatives.iter().find(|a| **a != null).cloned()
    {
        object.remove("anyOf");
        for (k, v) in other {
            object.entry(k).or_insert(v);
        }
    }
}

fn parse<T: DeserializeOwned>(v: &serde_json::Value) -> Result<T, InvalidParams> {
    T::deserialize(v).map_err(|e| InvalidParams(without_type_names(&e.to_string())))
}

fn parse_text<T: DeserializeOwned>(text: &str) -> Result<T, InvalidParams> {
    serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => InvalidParams(without_type_names(&e.to_string())),
        _ => InvalidParams(format!("params are not JSON: {e}")),
    })
}

/// serde names the Rust type it expected (`expected struct FileReadParams`); a client knows it
/// as the tool's parameters object.
fn without_type_names(message: &str) -> String {
    match message.split_once("expected struct ") {
        Some((before, after)) => {
            let rest = after.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
            format!("{before}expected an object of the tool's parameters{rest}")
        }
        None => message.to_owned(),
    }
}

macro_rules! entry {
    ($tool:ident, $name:literal, $params:ty, $hints:expr, [$($domain:ident),*], walks: $walks:literal, $description:literal, output: $output:expr) => {
        entry!($tool, $name, $params, $hints, [$($domain),*], walks: $walks, $description, output: $output, undeclared: &[])
    };
    ($tool:ident, $name:literal, $params:ty, $hints:expr, [$($domain:ident),*], walks: $walks:literal, $description:literal, output: $output:expr, undeclared: $undeclared:expr) => {
        entry!($tool, $name, $params, $hints, [$($domain),*], walks: $walks, $description, output: $output, undeclared: $undeclared, shape: PlanShape::Exactly(&[$(Domain::$domain),*]))
    };
    ($tool:ident, $name:literal, $params:ty, $hints:expr, [$($domain:ident),*], walks: $walks:literal, $description:literal, output: $output:expr, undeclared: $undeclared:expr, shape: $shape:expr) => {
        Entry {
            tool: Tool::$tool,
            name: $name,
            description: $description,
            hints: $hints,
            domains: &[$(Domain::$domain),*],
            shape: $shape,
            walks: $walks,
            schema: schema::<$params>,
            parse: |v| parse::<$params>(v).map(ToolParams::$tool),
            parse_text: |t| parse_text::<$params>(t).map(ToolParams::$tool),
            output: $output,
            undeclared: $undeclared,
        }
    };
}

/// What every job tool but `exec_stat` returns.
const JOB: &[(&str, &str)] = &[("job_id", "string"), ("state", "string")];

/// Every built-in tool, in the order clients see them.
#[rustfmt::skip]
pub static ENTRIES: [Entry; 22] = [
    entry!(FileRead, "file_read", FileReadParams, LOOKS, [Read], walks: false,
        "Read a UTF-8 text file (up to 1 MiB), or a range of lines (offset, limit) of a bigger one. Relative paths resolve against the account's workdir. Its result also has path, bytes, lines and total_lines.",
        output: &[("content", "string"), ("truncated", "boolean")],
        undeclared: &[("path", "string"), ("bytes", "integer"), ("lines", "integer")]),
    entry!(FileList, "file_list", FileListParams, LOOKS, [Read], walks: true,
        "List a directory's entries with type, size and modification time (or, with details false, names and types only: faster for a large directory), optionally to a depth of 5 (up to 1000 entries). Its result also has path and total.",
        output: &[("entries", "array"), ("truncated", "boolean")],
        undeclared: &[("path", "string"), ("total", "integer")]),
    entry!(FileWrite, "file_write", FileWriteParams, CHANGES, [Write], walks: false,
        "Create or replace a text file. The user may be asked to approve the change after seeing a diff.",
        output: &[("path", "string"), ("bytes", "integer"), ("created", "boolean")]),
    entry!(FileEdit, "file_edit", FileEditParams, CHANGES, [Write], walks: false,
        "Replace an exact string in a text file (it must occur exactly once unless replace_all is set), or make several replacements in order (edits: all apply or nothing is written); returns the diff. With dry_run, returns the diff and writes nothing.",
        output: &[("path", "string"), ("replacements", "integer"), ("bytes", "integer"), ("diff", "string"), ("diff_truncated", "boolean"), ("dry_run", "boolean")]),
    entry!(FileGrep, "file_grep", FileGrepParams, LOOKS, [Read], walks: true,
        "Search file contents for a regex or literal in a file or a directory tree, with glob filters, a result cap and a time cap. Its result also has path and count.",
        output: &[("matches", "array"), ("truncated", "boolean"), ("timed_out", "boolean")],
        undeclared: &[("path", "string"), ("count", "integer")]),
    entry!(FileFind, "file_find", FileFindParams, LOOKS, [Read], walks: true,
        "Find files and directories whose names match globs in a tree. Its result also has path and count.",
        output: &[("entries", "array"), ("truncated", "boolean"), ("timed_out", "boolean")],
        undeclared: &[("path", "string"), ("count", "integer")]),
    entry!(FileCount, "file_count", FileCountParams, LOOKS, [Read], walks: false,
        "Count the lines, words and bytes of a file.",
        output: &[("path", "string"), ("lines", "integer"), ("words", "integer"), ("bytes", "integer")]),
    entry!(FileHeadTail, "file_head_tail", FileHeadTailParams, LOOKS, [Read], walks: false,
        "Return the first or the last N lines of a text file. Its result also has path and lines.",
        output: &[("content", "string"), ("truncated", "boolean")],
        undeclared: &[("path", "string"), ("lines", "integer")]),
    entry!(FileDelete, "file_delete", FileDeleteParams, CHANGES, [Delete], walks: false,
        "Move a file or directory to the account's trash (never a permanent delete).",
        output: &[("path", "string"), ("type", "string"), ("trashed_as", "string"), ("trash_info", "string")]),
    // The source is removed from where it was and read into its new place; the destination is
    // written.
    entry!(FileMove, "file_move", FileMoveParams, CHANGES, [Delete, Read, Write], walks: false,
        "Move or rename a file or directory; never replaces an existing one.",
        output: &[("source", "string"), ("destination", "string")]),
    entry!(FileInfo, "file_info", FileInfoParams, LOOKS, [Read], walks: false,
        "Describe a file or directory without reading it: type, size, permissions, owner, links, and modification, access and change times (links are followed; path is where they led).",
        output: &[("path", "string"), ("type", "string"), ("size", "integer"), ("mode", "string"), ("modified", "string")]),
    // What the account may work in: its own facts, no path judged.
    entry!(FileRoots, "file_roots", FileRootsParams, LOOKS, [Account], walks: false,
        "List the directories this account may work in (its roots) and its working directory; paths outside every root are refused.",
        output: &[("workdir", "string"), ("roots", "array")]),
    entry!(FileMkdir, "file_mkdir", FileMkdirParams, ADDS, [Write], walks: false,
        "Create a directory and any missing parents (like mkdir -p); one that exists already is left as it is.",
        output: &[("path", "string"), ("created", "boolean")]),
    // One read per path ([`plan_shape`]: as many as it names).
    entry!(FileReadMany, "file_read_many", FileReadManyParams, LOOKS, [Read], walks: false,
        "Read several UTF-8 text files (up to 100, each up to 1 MiB, 4 MiB in all) in one call; each path is judged as a read, and one refused refuses the call. Each file comes back with its content, or with why it could not be read (not found, binary, too large).",
        output: &[("files", "array")], undeclared: &[],
        shape: PlanShape::Reads(crate::tools::params::MAX_READ_MANY_PATHS)),
    entry!(FileReadMedia, "file_read_media", FileReadMediaParams, LOOKS, [Read], walks: false,
        "Read an image (PNG, JPEG, GIF, WebP) or audio file (WAV, MP3, OGG, FLAC) of up to 5 MiB, its type read from its bytes: MCP clients get it as an image or audio block; the WebSocket result has it base64 in data.",
        output: &[("path", "string"), ("kind", "string"), ("mime_type", "string"), ("bytes", "integer")]),
    entry!(FileTree, "file_tree", FileTreeParams, LOOKS, [Read], walks: true,
        "A directory's tree as nested entries (name, type, children), to a depth of 10 (default 3), leaving out names matching exclude globs and what .gitignore ignores; at most 10000 entries (truncated says it was cut). Links are counted, never followed. Its result also has path, count, hidden and links.",
        output: &[("tree", "array"), ("truncated", "boolean"), ("timed_out", "boolean")],
        undeclared: &[("path", "string"), ("count", "integer")]),
    // The exact command, then the directory it runs in (read).
    entry!(ExecRun, "exec_run", ExecRunParams, CHANGES, [Exec, Read], walks: false,
        "Start a shell command (/bin/sh -c) and return a job_id at once; the user may be asked to approve the exact command. Poll with exec_status and exec_tail.",
        output: JOB),
    entry!(ExecStatus, "exec_status", JobParams, LOOKS, [Job], walks: false,
        "State of a job: running, exited (with exit code), killed, or timed out.",
        output: JOB),
    entry!(ExecTail, "exec_tail", ExecTailParams, LOOKS, [Job], walks: false,
        "Output of a job: the last N lines of stdout and stderr, or everything since a byte offset.",
        output: JOB),
    entry!(ExecKill, "exec_kill", JobParams, CHANGES, [Job], walks: false,
        "Stop a job and every process it started (TERM, then KILL after a grace period).",
        output: JOB),
    entry!(ExecStat, "exec_stat", ExecStatParams, LOOKS, [Job], walks: false,
        "List the account's jobs with their state.",
        output: &[("jobs", "array")]),
    // The job; to a shell or an interpreter, each line then as a command with the job's working
    // directory ([`plan_shape`]).
    entry!(ExecInput, "exec_input", ExecInputParams, CHANGES, [Job], walks: false,
        "Write text to the standard input of a job started with interactive (a REPL, a prompt), and optionally close it; read what it answers with exec_tail and since. To a shell or an interpreter each line is a command the user may be asked to approve; to anything else it goes under the job's approval.",
        output: &[("job_id", "string"), ("written", "integer"), ("closed", "boolean")], undeclared: &[],
        shape: PlanShape::JobThenCommands(crate::tools::exec::MAX_INPUT_LINES)),
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
    ) -> Result<ToolInfo, crate::packs::Unoffered> {
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
    /// One to this many reads (`file_read_many`).
    Reads(usize),
    /// A job, then up to this many commands each with its working directory (a read):
    /// `exec_input`'s lines to a shell or an interpreter.
    JobThenCommands(usize),
}

impl PlanShape {
    /// Whether `domains` (a plan's, in order) have this shape.
    pub fn fits(self, domains: &[Domain]) -> bool {
        match self {
            PlanShape::Exactly(want) => domains == want,
            PlanShape::JobThenCommands(most) => match domains.split_first() {
                Some((Domain::Job, rest)) => {
                    rest.len() <= 2 * most
                        && rest
                            .chunks(2)
                            .all(|pair| pair == [Domain::Exec, Domain::Read])
                }
                _ => false,
            },
            PlanShape::Reads(most) => {
                (1..=most).contains(&domains.len()) && domains.iter().all(|d| *d == Domain::Read)
            }
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
    Tool::from_name(name).map(|t| t.entry().shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entrys_shape_admits_its_own_domains() {
        for e in &ENTRIES {
            assert!(e.shape.fits(e.domains), "{}", e.name);
            assert_eq!(plan_shape(e.name), Some(e.shape), "{}", e.name);
        }
    }

    #[test]
    fn a_read_many_plan_is_one_to_the_most_reads_and_nothing_else() {
        let shape = plan_shape("file_read_many").unwrap();
        assert!(shape.fits(&[Domain::Read]));
        assert!(shape.fits(&vec![
            Domain::Read;
            crate::tools::params::MAX_READ_MANY_PATHS
        ]));
        assert!(!shape.fits(&vec![
            Domain::Read;
            crate::tools::params::MAX_READ_MANY_PATHS + 1
        ]));
        assert!(!shape.fits(&[]));
        assert!(!shape.fits(&[Domain::Read, Domain::Write]));
        assert!(!shape.fits(&[Domain::Account]));
    }

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
                        .all(|d| matches!(d, Domain::Read | Domain::Job | Domain::Account)),
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

    /// Every parameter schema is in the subset portable clients accept (the MCP Inspector's
    /// `--strict` flags non-standard formats and null unions).
    #[test]
    fn schemas_use_only_portable_keywords() {
        fn walk(name: &str, at: &str, v: &serde_json::Value) {
            match v {
                serde_json::Value::Object(map) => {
                    if let Some(format) = map.get("format") {
                        panic!("{name} {at}: format {format}");
                    }
                    assert!(!map.contains_key("$ref"), "{name} {at}: $ref");
                    assert!(
                        !map.get("default").is_some_and(|d| d.is_null()),
                        "{name} {at}: default null"
                    );
                    if let Some(t) = map.get("type") {
                        assert!(t.is_string(), "{name} {at}: type {t}");
                        assert_ne!(t, "null", "{name} {at}");
                    }
                    for (k, v) in map {
                        walk(name, &format!("{at}/{k}"), v);
                    }
                }
                serde_json::Value::Array(items) => {
                    for (i, v) in items.iter().enumerate() {
                        walk(name, &format!("{at}/{i}"), v);
                    }
                }
                _ => {}
            }
        }
        for e in &ENTRIES {
            walk(e.name, "", &(e.schema)().to_value());
        }
        let tail = (entry(Tool::ExecTail).schema)().to_value();
        assert_eq!(tail["properties"]["stream"]["enum"][0], "stdout");
        let read = (ENTRIES[0].schema)().to_value();
        assert_eq!(read["properties"]["offset"]["type"], "integer");
        assert_eq!(read["properties"]["offset"]["minimum"], 0);
    }

    #[test]
    fn parameter_errors_name_no_rust_type() {
        let err = Tool::FileRead
            .parse_params(&serde_json::json!("a.txt"))
            .unwrap_err();
        assert_eq!(
            err.0,
            "invalid type: string \"a.txt\", expected an object of the tool's parameters"
        );
        let err = Tool::FileRead
            .parse_params(&serde_json::json!({}))
            .unwrap_err();
        assert_eq!(err.0, "missing field `path`");
    }

    /// How a description introduces the fields the output schema leaves out.
    const ALSO_NAMED: &str = "Its result also has ";

    #[test]
    fn output_schemas_require_what_results_have() {
        let read = Tool::FileRead.entry();
        let schema = read.output_schema();
        assert_eq!(schema["$schema"], OUTPUT_SCHEMA_DIALECT);
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["content"]["type"], "string");
        assert_eq!(schema["properties"]["truncated"]["type"], "boolean");
        assert_eq!(
            schema["required"],
            serde_json::json!(["content", "truncated"])
        );
        let result = serde_json::json!({"path": "/w/a", "content": "x", "bytes": 1, "lines": 1,
            "total_lines": null, "truncated": false});
        assert!(read.result_conforms(&result));
        let mut wrong = result.clone();
        wrong["bytes"] = "1".into();
        assert!(!read.result_conforms(&wrong));
        wrong = result;
        wrong.as_object_mut().unwrap().remove("content");
        assert!(!read.result_conforms(&wrong));
        for e in &ENTRIES {
            assert!(!e.output.is_empty(), "{}", e.name);
            // the fields left out of the schema are not in it, and the description's last
            // sentence names them
            let properties = &e.output_schema()["properties"];
            let named = e
                .description
                .split_once(ALSO_NAMED)
                .map(|(_, rest)| rest.split([' ', ',', '.']).collect::<Vec<_>>());
            assert_eq!(named.is_some(), !e.undeclared.is_empty(), "{}", e.name);
            for (name, _) in e.undeclared {
                assert!(properties.get(name).is_none(), "{} {name}", e.name);
                assert!(
                    named.as_ref().is_some_and(|words| words.contains(name)),
                    "{} {name}",
                    e.name
                );
            }
            for (name, ty) in e.output.iter().chain(e.undeclared) {
                assert_eq!(
                    e.output
                        .iter()
                        .chain(e.undeclared)
                        .filter(|(n, _)| n == name)
                        .count(),
                    1,
                    "{} {name}",
                    e.name
                );
                assert!(
                    ["string", "integer", "boolean", "array", "object"].contains(ty),
                    "{} {ty}",
                    e.name
                );
            }
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
