//! The job shim (`glovebox job-shim`): `glovebox_sandbox::shim` containing one job's shell in
//! the account's walls (`Walls`: namespaces or seccomp, its network) and the job's Landlock
//! domain (`SandboxPlan::for_job`: the roots and the job's own temporary directory), with no
//! input (or, for an interactive job, the FIFO the executor writes its input to), and the
//! executor's end of the shim's stdin as its lifeline.

use std::path::PathBuf;

use glovebox_sandbox::SandboxPlan;
use glovebox_sandbox::shim::{Input, Lifeline};
use glovebox_sandbox::walls::Walls;

pub use glovebox_sandbox::shim::{EXIT_SANDBOX_FAILED, EXIT_SPAWN_FAILED};

/// What the executor tells a shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimConfig {
    /// The account's roots (full access).
    pub roots: Vec<PathBuf>,
    /// The job's own temporary directory (`TMPDIR`).
    pub tmp: PathBuf,
    /// The exact command line the approver saw.
    pub command: String,
    /// The account's walls beyond its files.
    pub walls: Walls,
    /// Where the shim reports a cap the job reached.
    pub report: Option<PathBuf>,
    /// An interactive job's input (`None`: it reads nothing).
    pub stdin_fifo: Option<PathBuf>,
}

/// Runs the shim; returns the exit code the process ends with.
pub fn run(config: ShimConfig) -> i32 {
    glovebox_sandbox::shim::run(glovebox_sandbox::shim::ShimConfig {
        plan: SandboxPlan::for_job(&config.roots, &config.tmp),
        walls: Some(config.walls),
        report: config.report,
        env: None,
        program: PathBuf::from(super::SHELL),
        args: vec!["-c".to_owned(), config.command],
        cwd: None,
        input: config.stdin_fifo.map_or(Input::Null, Input::Fifo),
        lifeline: Lifeline::Stdin,
    })
}
