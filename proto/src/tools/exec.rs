//! Parameters of the exec job tools: `exec_run` starts a command and returns a job id at once;
//! `exec_status`, `exec_tail`, `exec_kill` and `exec_stat` address the account's jobs.

use super::invalid::{InvalidParams, invalid_params};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest command line, in bytes.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Default and largest run time of a job, in seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 300;
pub const MAX_TIMEOUT_S: u64 = 3600;
/// Default and largest number of lines `exec_tail` returns per stream.
pub const DEFAULT_TAIL_LINES: usize = 50;
pub const MAX_TAIL_LINES: usize = 1000;

/// Parameters of `exec_run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRunParams {
    /// The command line, run by `/bin/sh -c`.
    pub command: String,
    /// Working directory; defaults to the account's workdir.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds before the job is killed (default 300, at most 3600).
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// Keep the job's standard input open for `exec_input` (otherwise it reads nothing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
}

/// Largest input one `exec_input` sends, in bytes.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
/// Most lines one `exec_input` to a shell or an interpreter may send (each one is judged).
pub const MAX_INPUT_LINES: usize = 100;

/// Parameters of `exec_input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecInputParams {
    /// A job started with `interactive`.
    pub job_id: String,
    /// Text to write to the job's standard input (include the final newline a prompt waits
    /// for); up to 64 KiB.
    #[serde(default)]
    pub input: String,
    /// Close the job's standard input afterwards (end of input).
    #[serde(default)]
    pub close: bool,
}

/// Parameters of `exec_status` and `exec_kill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobParams {
    /// The id `exec_run` returned.
    pub job_id: String,
}

/// Which output stream(s) `exec_tail` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
    #[default]
    Both,
}

/// Parameters of `exec_tail`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecTailParams {
    pub job_id: String,
    #[serde(default)]
    pub stream: Stream,
    /// The last N lines (default 50, at most 1000). Ignored when `since` is given.
    #[serde(default)]
    pub lines: Option<usize>,
    /// Return output from this byte offset of the stream on (as reported by earlier calls).
    #[serde(default)]
    pub since: Option<u64>,
}

/// Parameters of `exec_stat` (none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecStatParams {}

pub(crate) fn check_command(command: &str) -> Result<(), InvalidParams> {
    if command.trim().is_empty() {
        return Err("command must not be empty".into());
    }
    if command.contains('\0') {
        return Err("command must not contain NUL bytes".into());
    }
    if command.len() > MAX_COMMAND_BYTES {
        return Err(invalid_params!(
            "command is {} bytes, more than the {MAX_COMMAND_BYTES} allowed",
            command.len()
        ));
    }
    Ok(())
}

pub(crate) fn check_job_id(id: &str) -> Result<(), InvalidParams> {
    if crate::call_id::is_valid_id(id) {
        Ok(())
    } else {
        Err("job_id is not a job id".into())
    }
}
