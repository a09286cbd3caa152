//! `glovebox approve`'s stdin: whether it can still bring an answer, and, on a terminal, the
//! single-key mode it is read in. [`KeyMode`] switches canonical input and echo off so a key
//! arrives as soon as it is pressed, and puts the terminal's own mode back when dropped — on
//! return, on error and while a panic unwinds. Ctrl-C stays the terminal's: it raises SIGINT,
//! which `approve` handles.
//!
//! The choices (which flags, what counts as closed) are pure functions; the rest is the IO edge.

use std::os::fd::AsFd;

use rustix::termios::{LocalModes, OptionalActions, SpecialCodeIndex, Termios};

/// What `approve` says (and fails with) when stdin cannot bring an answer.
pub const STDIN_CLOSED: &str = "stdin is closed: glovebox approve needs a terminal, or a pipe that stays open, \
     to answer asks";

/// The terminal on stdin in single-key mode until dropped, when its previous mode is restored.
#[derive(Debug)]
pub struct KeyMode(());

/// The terminal's mode before [`KeyMode`] changed it, while it is changed.
static SAVED: std::sync::Mutex<Option<Termios>> = std::sync::Mutex::new(None);

impl KeyMode {
    /// Switches the terminal on stdin to single keys; `None` if stdin is not a terminal.
    pub fn enable() -> std::io::Result<Option<KeyMode>> {
        let stdin = std::io::stdin();
        if !rustix::termios::isatty(&stdin) {
            return Ok(None);
        }
        let saved = rustix::termios::tcgetattr(&stdin)?;
        let keys = single_keys(&saved);
        *SAVED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(saved);
        let mode = KeyMode(());
        rustix::termios::tcsetattr(&stdin, OptionalActions::Now, &keys)?;
        Ok(Some(mode))
    }
}

impl Drop for KeyMode {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts the terminal's mode back if [`KeyMode`] changed it: when it is dropped, and before the
/// process exits without unwinding (stdout closed, see `out::line`).
pub fn restore() {
    let saved = SAVED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(saved) = saved {
        let _ = rustix::termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &saved);
    }
}

/// `mode` with each key delivered as it is pressed (one byte is enough for a read).
pub fn single_keys(mode: &Termios) -> Termios {
    let mut keys = mode.clone();
    keys.local_modes = single_key_local_modes(keys.local_modes);
    keys.special_codes[SpecialCodeIndex::VMIN] = 1;
    keys.special_codes[SpecialCodeIndex::VTIME] = 0;
    keys
}

/// The local modes of single-key mode: no canonical mode (no lines), no echo, keys taken
/// literally (no Ctrl-V or Ctrl-O processing); signals (Ctrl-C, Ctrl-Z) as they were.
pub fn single_key_local_modes(modes: LocalModes) -> LocalModes {
    modes
        .difference(LocalModes::ICANON | LocalModes::ECHO | LocalModes::ECHONL | LocalModes::IEXTEN)
}

/// What stdin is, as far as closing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinKind {
    /// No stdin at all (descriptor 0 closed).
    Missing,
    /// `/dev/null`: at its end from the start.
    DevNull,
    /// A regular file: it ends once read, long before any ask.
    File,
    /// A terminal, a pipe, a socket: it brings input while it stays open.
    Stream,
}

/// Whether stdin can no longer bring an answer: it is [`StdinKind::Missing`], `/dev/null` or a
/// file, or its other end is gone (`hung_up`: a pipe whose writers all closed it, a terminal
/// hung up).
pub fn is_closed(kind: StdinKind, hung_up: bool) -> bool {
    match kind {
        StdinKind::Missing | StdinKind::DevNull | StdinKind::File => true,
        StdinKind::Stream => hung_up,
    }
}

/// Whether stdin is closed now (see [`is_closed`]).
pub fn stdin_is_closed() -> bool {
    let stdin = std::io::stdin();
    let kind = match rustix::fs::fstat(&stdin) {
        Err(_) => StdinKind::Missing,
        Ok(stat) => {
            let file_type = rustix::fs::FileType::from_raw_mode(stat.st_mode);
            let null = file_type == rustix::fs::FileType::CharacterDevice
                && (
                    rustix::fs::major(stat.st_rdev),
                    rustix::fs::minor(stat.st_rdev),
                ) == (1, 3);
            match file_type {
                _ if null => StdinKind::DevNull,
                rustix::fs::FileType::RegularFile => StdinKind::File,
                _ => StdinKind::Stream,
            }
        }
    };
    is_closed(kind, hung_up(stdin.as_fd()))
}

/// Whether the other end of `fd` is gone, without reading from it.
fn hung_up(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&zero)) {
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::HUP | PollFlags::NVAL | PollFlags::ERR),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_keys_turn_off_lines_and_echo_but_keep_signals() {
        // a terminal's usual local modes (what `stty sane` sets)
        let sane = LocalModes::ISIG
            | LocalModes::ICANON
            | LocalModes::IEXTEN
            | LocalModes::ECHO
            | LocalModes::ECHOE
            | LocalModes::ECHOK
            | LocalModes::ECHOCTL
            | LocalModes::ECHOKE;
        let keys = single_key_local_modes(sane);
        for off in [
            LocalModes::ICANON,
            LocalModes::ECHO,
            LocalModes::IEXTEN,
            LocalModes::ECHONL,
        ] {
            assert!(!keys.contains(off), "{off:?}");
        }
        assert!(
            keys.contains(LocalModes::ISIG),
            "Ctrl-C still raises SIGINT"
        );
        // a terminal whose signals were off keeps them off
        assert!(!single_key_local_modes(LocalModes::ICANON).contains(LocalModes::ISIG));
    }

    #[test]
    fn stdin_is_closed_when_it_cannot_bring_an_answer() {
        for (kind, hung_up, closed) in [
            (StdinKind::Missing, false, true),
            (StdinKind::DevNull, false, true),
            (StdinKind::File, false, true),
            (StdinKind::Stream, false, false),
            // a pipe whose writer is gone, a terminal hung up
            (StdinKind::Stream, true, true),
        ] {
            assert_eq!(is_closed(kind, hung_up), closed, "{kind:?} {hung_up}");
        }
    }
}
