//! The arguments several commands share: the state directory, an account to act as, system
//! mode's layout. Each command's own arguments are defined beside the code that runs it.

use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct StateArgs {
    /// State directory (default: $XDG_STATE_HOME/glovebox, or ~/.local/state/glovebox).
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
}

/// Which account `glovebox enable|disable` switches.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SwitchArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// The account (default: the only one; required with --system).
    #[arg(long)]
    pub(crate) account: Option<String>,
    /// The system service's account (`glovebox up --system`; run as root).
    #[arg(long)]
    pub(crate) system: bool,
    /// With --system: where its sockets are (default: /run/glovebox).
    #[arg(long, value_name = "DIR", requires = "system")]
    pub(crate) runtime_dir: Option<PathBuf>,
}

/// System mode's layout, as `up --system` hands it to the gate and the broker.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct LayoutArgs {
    /// System mode: the runtime directory with the sockets (`/run/glovebox`).
    #[arg(long, value_name = "DIR", requires = "config")]
    pub(crate) runtime_dir: Option<PathBuf>,
    /// System mode: `glovebox.yaml` (`/etc/glovebox/glovebox.yaml`).
    #[arg(long, value_name = "FILE", requires = "runtime_dir")]
    pub(crate) config: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// Account to act as (default: the only account, or the one named after this user).
    #[arg(long)]
    pub(crate) account: Option<String>,
    /// Broker WebSocket URL (default: the one the running `glovebox up` wrote to the state dir).
    #[arg(long)]
    pub(crate) url: Option<String>,
}
