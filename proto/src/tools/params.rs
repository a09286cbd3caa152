//! The built-in tools' parameters: [`Tool`], each tool's parameter type (its JSON schema derived
//! from the same type), [`ToolParams`] and their checks, and the limits they are checked against.
//! What each tool is (name, description, parser) is the catalog's (`catalog.rs`), which builds on
//! these types; `tools.rs` puts the two together.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::exec::{
    self, ExecInputParams, ExecRunParams, ExecStatParams, ExecTailParams, JobParams,
};
use super::invalid::{InvalidParams, invalid_params};

/// Longest path a client may name, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Largest content `file_write` accepts, in bytes.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Largest file `file_read` returns, in bytes.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;
/// Most entries `file_list` returns.
pub const MAX_LIST_ENTRIES: usize = 1000;
/// Deepest `file_list` recursion.
pub const MAX_LIST_DEPTH: u32 = 5;
/// Most matches or names `file_grep` and `file_find` return.
pub const MAX_SEARCH_RESULTS: u32 = 1000;
/// Longest time `file_grep` and `file_find` may take, in milliseconds.
pub const MAX_SEARCH_MILLIS: u64 = 10_000;
/// Longest search pattern or glob, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// Most globs one search may carry.
pub const MAX_GLOBS: usize = 64;
/// Most paths one `file_read_many` may name.
pub const MAX_READ_MANY_PATHS: usize = 100;
/// Most bytes of content one `file_read_many` returns, all files together.
pub const MAX_READ_MANY_BYTES: u64 = 4 * 1024 * 1024;
/// Largest image or audio file `file_read_media` returns, in bytes.
pub const MAX_MEDIA_BYTES: u64 = 5 * 1024 * 1024;
/// Deepest `file_tree`.
pub const MAX_TREE_DEPTH: u32 = 10;
/// Most entries `file_tree` returns.
pub const MAX_TREE_ENTRIES: u32 = 10_000;
/// Most lines `file_head_tail` returns.
pub const MAX_HEAD_TAIL_LINES: u32 = 10_000;

/// A built-in tool. The set is closed: unknown names are refused, never passed through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    FileRead,
    FileList,
    FileWrite,
    FileEdit,
    FileGrep,
    FileFind,
    FileCount,
    FileHeadTail,
    FileDelete,
    FileMove,
    FileInfo,
    FileRoots,
    FileMkdir,
    FileReadMany,
    FileReadMedia,
    FileTree,
    ExecRun,
    ExecStatus,
    ExecTail,
    ExecKill,
    ExecStat,
    ExecInput,
}

/// Parameters of `file_read`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileReadParams {
    /// File to read; relative paths resolve against the account's workdir.
    pub path: String,
    /// First line to return, counting from 1. Set it (or `limit`) to read part of a file
    /// bigger than 1 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Most lines to return (the reply is still cut at 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// Parameters of `file_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileListParams {
    /// Directory to list; defaults to the account's workdir.
    #[serde(default = "workdir")]
    pub path: String,
    /// How many levels to descend: 1 (the default) lists the directory itself, at most 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// Whether each entry has its size and modification time (the default); false lists names
    /// and types only, which is faster for a large directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<bool>,
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

/// Most edits one `file_edit` may carry.
pub const MAX_EDITS: usize = 100;

/// Parameters of `file_edit`: one replacement (`old_string`, `new_string`), or several (`edits`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEditParams {
    /// Existing text file to edit.
    pub path: String,
    /// The exact text to replace (not empty); or give `edits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_string: Option<String>,
    /// The text to put in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_string: Option<String>,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
    /// Several replacements, applied in order, each to the text the ones before it made (at most
    /// 100): all apply or nothing is written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<FileEditChange>,
    /// Return the diff without writing anything.
    #[serde(default)]
    pub dry_run: bool,
}

/// One replacement of a `file_edit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEditChange {
    /// The exact text to replace (not empty).
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

impl FileEditParams {
    /// The replacements, in order: the one of `old_string` and `new_string`, or `edits`.
    pub fn changes(&self) -> Vec<FileEditChange> {
        match (&self.old_string, &self.new_string) {
            (Some(old), Some(new)) => vec![FileEditChange {
                old_string: old.clone(),
                new_string: new.clone(),
                replace_all: self.replace_all,
            }],
            _ => self.edits.clone(),
        }
    }
}

/// Parameters of `file_grep`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileGrepParams {
    /// The regular expression (Rust regex syntax), or the text to find when `literal` is set.
    pub pattern: String,
    /// File or directory to search; defaults to the account's workdir.
    #[serde(default = "workdir")]
    pub path: String,
    /// Treat `pattern` as plain text.
    #[serde(default)]
    pub literal: bool,
    /// Match case-insensitively.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Globs on paths below `path` that select files (`*.rs`); a leading `!` excludes (`!target/**`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub globs: Vec<String>,
    /// Also search hidden files and directories.
    #[serde(default)]
    pub hidden: bool,
    /// Do not honour `.gitignore` and `.ignore` files.
    #[serde(default)]
    pub no_ignore: bool,
    /// Most matching lines to return (default 200, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<u32>,
    /// Time cap in milliseconds (default and most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Parameters of `file_find`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileFindParams {
    /// Globs matched against each entry's name (`*.rs`, `Cargo.toml`); any one may match.
    pub names: Vec<String>,
    /// Directory to search; defaults to the account's workdir.
    #[serde(default = "workdir")]
    pub path: String,
    /// Also look in hidden directories and at hidden names.
    #[serde(default)]
    pub hidden: bool,
    /// Do not honour `.gitignore` and `.ignore` files.
    #[serde(default)]
    pub no_ignore: bool,
    /// Most paths to return (default 200, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<u32>,
    /// Time cap in milliseconds (default and most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Parameters of `file_count`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileCountParams {
    /// File to count.
    pub path: String,
}

/// Parameters of `file_head_tail`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileHeadTailParams {
    /// Text file to read.
    pub path: String,
    /// How many lines (default 10, at most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<u32>,
    /// The last lines instead of the first.
    #[serde(default)]
    pub tail: bool,
}

/// Parameters of `file_delete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileDeleteParams {
    /// File, directory or symbolic link to move to the trash (a link itself, never its target).
    pub path: String,
}

/// Parameters of `file_move`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileMoveParams {
    /// What to move (a link itself, never its target).
    pub source: String,
    /// The new path; it must not exist yet.
    pub destination: String,
}

/// Parameters of `file_info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileInfoParams {
    /// File or directory to describe (symbolic links are followed; the result's path is where
    /// they led).
    pub path: String,
}

/// Parameters of `file_roots` (none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRootsParams {}

/// Parameters of `file_mkdir`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileMkdirParams {
    /// Directory to create, with any missing parents; one that exists already is left as it is.
    pub path: String,
}

/// Parameters of `file_read_many`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileReadManyParams {
    /// Text files to read (1 to 100); relative paths resolve against the account's workdir.
    pub paths: Vec<String>,
}

/// Parameters of `file_read_media`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileReadMediaParams {
    /// Image (PNG, JPEG, GIF, WebP) or audio file (WAV, MP3, OGG, FLAC) to read, up to 5 MiB; its
    /// type is read from its bytes, never from its name.
    pub path: String,
}

/// Parameters of `file_tree`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileTreeParams {
    /// Directory at the top of the tree; defaults to the account's workdir.
    #[serde(default = "workdir")]
    pub path: String,
    /// How many levels to show (default 3, at most 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// Globs of names to leave out, with everything below them (`node_modules`, `*.pyc`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Also show hidden files and directories.
    #[serde(default)]
    pub hidden: bool,
    /// Do not honour `.gitignore` and `.ignore` files.
    #[serde(default)]
    pub no_ignore: bool,
    /// Most entries to return (default 1000, at most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u32>,
    /// Time cap in milliseconds (default and most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Validated parameters of one call. Serialized, they are the tool's parameters object itself:
/// the text the broker sends an executor is made from the parameters it checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolParams {
    FileRead(FileReadParams),
    FileList(FileListParams),
    FileWrite(FileWriteParams),
    FileEdit(FileEditParams),
    FileGrep(FileGrepParams),
    FileFind(FileFindParams),
    FileCount(FileCountParams),
    FileHeadTail(FileHeadTailParams),
    FileDelete(FileDeleteParams),
    FileMove(FileMoveParams),
    FileInfo(FileInfoParams),
    FileRoots(FileRootsParams),
    FileMkdir(FileMkdirParams),
    FileReadMany(FileReadManyParams),
    FileReadMedia(FileReadMediaParams),
    FileTree(FileTreeParams),
    ExecRun(ExecRunParams),
    ExecStatus(JobParams),
    ExecTail(ExecTailParams),
    ExecKill(JobParams),
    ExecStat(ExecStatParams),
    ExecInput(ExecInputParams),
}

impl ToolParams {
    /// The parameters object as JSON text (what [`Tool::parse_params_text`] reads back).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// A `file_read` of the whole file (no line range): the read an executor may make ahead of
    /// its verdict, and whose answer the gate may hand to the broker.
    pub fn reads_whole_file(&self) -> bool {
        matches!(self, ToolParams::FileRead(p) if p.offset.is_none() && p.limit.is_none())
    }

    pub(super) fn validate(&self) -> Result<(), InvalidParams> {
        match self {
            ToolParams::FileRead(p) => {
                check_path(&p.path)?;
                if p.offset == Some(0) {
                    return Err("offset counts from 1".into());
                }
                if p.limit == Some(0) {
                    return Err("limit must be at least 1".into());
                }
                Ok(())
            }
            ToolParams::FileList(p) => {
                check_path(&p.path)?;
                check_range("depth", p.depth.map(u64::from), 1, MAX_LIST_DEPTH.into())
            }
            ToolParams::FileWrite(p) => {
                check_path(&p.path)?;
                check_size("content", &p.content, MAX_WRITE_BYTES)
            }
            ToolParams::FileEdit(p) => {
                check_path(&p.path)?;
                match (&p.old_string, &p.new_string, p.edits.is_empty()) {
                    (Some(_), Some(_), true) => {}
                    (None, None, false) if !p.replace_all => {}
                    (None, None, false) => {
                        return Err("with edits, replace_all goes in each edit".into());
                    }
                    (None, None, true) => {
                        return Err("give old_string and new_string, or edits".into());
                    }
                    (Some(_), Some(_), false) => {
                        return Err("give old_string and new_string, or edits, not both".into());
                    }
                    _ => return Err("old_string and new_string go together".into()),
                }
                if p.edits.len() > MAX_EDITS {
                    return Err(InvalidParams(format!("at most {MAX_EDITS} edits")));
                }
                let mut total = 0;
                for (i, c) in p.changes().iter().enumerate() {
                    if c.old_string.is_empty() {
                        return Err(InvalidParams(format!(
                            "edit {}: old_string must not be empty",
                            i + 1
                        )));
                    }
                    total += c.old_string.len() + c.new_string.len();
                }
                if total > 2 * MAX_WRITE_BYTES {
                    return Err(invalid_params!(
                        "the edits are {total} bytes, more than the {} allowed",
                        2 * MAX_WRITE_BYTES
                    ));
                }
                Ok(())
            }
            ToolParams::FileGrep(p) => {
                check_path(&p.path)?;
                if p.pattern.is_empty() {
                    return Err("pattern must not be empty".into());
                }
                check_size("pattern", &p.pattern, MAX_PATTERN_BYTES)?;
                check_globs(&p.globs)?;
                check_search_caps(p.max_results, p.timeout_ms)
            }
            ToolParams::FileFind(p) => {
                check_path(&p.path)?;
                if p.names.is_empty() {
                    return Err("names must hold at least one glob".into());
                }
                check_globs(&p.names)?;
                check_search_caps(p.max_results, p.timeout_ms)
            }
            ToolParams::FileCount(p) => check_path(&p.path),
            ToolParams::FileHeadTail(p) => {
                check_path(&p.path)?;
                check_range(
                    "lines",
                    p.lines.map(u64::from),
                    1,
                    MAX_HEAD_TAIL_LINES.into(),
                )
            }
            ToolParams::FileDelete(p) => check_path(&p.path),
            ToolParams::FileInfo(p) => check_path(&p.path),
            ToolParams::FileReadMedia(p) => check_path(&p.path),
            ToolParams::FileTree(p) => {
                check_path(&p.path)?;
                check_range("depth", p.depth.map(u64::from), 1, MAX_TREE_DEPTH.into())?;
                check_range(
                    "max_entries",
                    p.max_entries.map(u64::from),
                    1,
                    MAX_TREE_ENTRIES.into(),
                )?;
                check_globs(&p.exclude)?;
                check_range("timeout_ms", p.timeout_ms, 1, MAX_SEARCH_MILLIS)
            }
            ToolParams::FileMkdir(p) => check_path(&p.path),
            ToolParams::FileRoots(_) => Ok(()),
            ToolParams::FileReadMany(p) => {
                if p.paths.is_empty() || p.paths.len() > MAX_READ_MANY_PATHS {
                    return Err(InvalidParams(format!(
                        "paths must name 1 to {MAX_READ_MANY_PATHS} files"
                    )));
                }
                p.paths.iter().try_for_each(|path| check_path(path))
            }
            ToolParams::FileMove(p) => {
                check_path(&p.source)?;
                check_path(&p.destination)
            }
            ToolParams::ExecRun(p) => {
                exec::check_command(&p.command)?;
                if let Some(cwd) = &p.cwd {
                    check_path(cwd)?;
                }
                match p.timeout_s {
                    Some(t) if !(1..=exec::MAX_TIMEOUT_S).contains(&t) => Err(invalid_params!(
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
                    Some(n) if !(1..=exec::MAX_TAIL_LINES).contains(&n) => Err(invalid_params!(
                        "lines must be between 1 and {}",
                        exec::MAX_TAIL_LINES
                    )),
                    _ => Ok(()),
                }
            }
            ToolParams::ExecStat(_) => Ok(()),
            ToolParams::ExecInput(p) => {
                exec::check_job_id(&p.job_id)?;
                if p.input.is_empty() && !p.close {
                    return Err("give input, or close the job's input".into());
                }
                if p.input.contains('\0') {
                    return Err("input must not contain NUL bytes".into());
                }
                check_size("input", &p.input, exec::MAX_INPUT_BYTES)
            }
        }
    }
}

/// The result and time caps `file_grep` and `file_find` share.
fn check_search_caps(
    max_results: Option<u32>,
    timeout_ms: Option<u64>,
) -> Result<(), InvalidParams> {
    check_range(
        "max_results",
        max_results.map(u64::from),
        1,
        MAX_SEARCH_RESULTS.into(),
    )?;
    check_range("timeout_ms", timeout_ms, 1, MAX_SEARCH_MILLIS)
}

fn check_size(what: &str, text: &str, max: usize) -> Result<(), InvalidParams> {
    if text.len() > max {
        return Err(invalid_params!(
            "{what} is {} bytes, more than the {max} allowed",
            text.len()
        ));
    }
    Ok(())
}

fn check_range(what: &str, value: Option<u64>, min: u64, max: u64) -> Result<(), InvalidParams> {
    match value {
        Some(v) if !(min..=max).contains(&v) => Err(InvalidParams(format!(
            "{what} must be between {min} and {max}"
        ))),
        _ => Ok(()),
    }
}

fn check_globs(globs: &[String]) -> Result<(), InvalidParams> {
    if globs.len() > MAX_GLOBS {
        return Err(InvalidParams(format!(
            "at most {MAX_GLOBS} globs are allowed"
        )));
    }
    for g in globs {
        if g.is_empty() {
            return Err("a glob must not be empty".into());
        }
        check_size("a glob", g, MAX_PATTERN_BYTES)?;
    }
    Ok(())
}

fn check_path(path: &str) -> Result<(), InvalidParams> {
    if path.is_empty() {
        return Err("path must not be empty".into());
    }
    if path.contains('\0') {
        return Err("path must not contain NUL bytes".into());
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(invalid_params!(
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
