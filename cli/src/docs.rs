//! `glovebox completions SHELL` and `glovebox man`: shell completions and the man page, generated
//! from the same clap definition the binary parses with, for packages (`deploy/build-assets.sh`).

use std::io::Write;
use std::process::ExitCode;

/// The shells completions are made for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// `command` without its hidden subcommands (the service entry points `up` starts, and these
/// two): clap_complete would offer them otherwise.
fn public(command: &clap::Command) -> clap::Command {
    let mut out = clap::Command::new(NAME)
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(
            command
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .cloned(),
        );
    if let Some(about) = command.get_about() {
        out = out.about(about.clone());
    }
    out
}

const NAME: &str = "glovebox";

/// Writes the completion script for `shell` to stdout.
pub fn completions(command: clap::Command, shell: Shell) -> anyhow::Result<ExitCode> {
    let mut command = public(&command);
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut command, NAME, &mut buf);
    write_stdout(&buf)
}

/// Writes the man page (roff) to stdout.
pub fn man(command: clap::Command) -> anyhow::Result<ExitCode> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(public(&command)).render(&mut buf)?;
    write_stdout(&buf)
}

fn write_stdout(bytes: &[u8]) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // A closed pipe (`glovebox man | head`) ends it quietly, as every client command does.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.into()),
    }
}
