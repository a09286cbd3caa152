//! The end-to-end tests, one binary (one link): each module starts the real `glovebox up` and
//! talks to it over its real sockets (see `glovebox_e2e`).

mod accounts;
mod approve;
mod boundary;
mod calls;
mod client_tools;
mod console;
mod console_a11y;
mod console_approvals;
mod console_packs;
mod exec;
mod file_ops;
mod fleet;
mod hiding;
mod identity;
mod limits;
mod mcp;
mod packs;
mod packs_real;
mod paths;
mod policy;
mod principals;
mod profiles;
mod protocol;
mod runtime_accounts;
mod services;
mod stdio_handover;
mod system_mode;
mod telemetry;
mod walls;
