//! What the client commands print: a line to stdout that ends the process quietly when stdout
//! was closed (`glovebox call … | head`), and an error's chain of causes, each said once.

use std::io::Write;

/// Writes one line to stdout; a closed pipe ends the process at once with success (the reader
/// has what it wanted), never with a panic, and with the terminal's mode restored.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(e) = written
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        // Nothing unwinds past this: the terminal `approve` switched to single keys is put back
        // here.
        crate::client::terminal::restore();
        std::process::exit(0);
    }
}

/// `println!` for client commands (see [`line`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::out::line(format_args!("")) };
    ($($arg:tt)*) => { $crate::out::line(format_args!($($arg)*)) };
}

/// An error and its causes joined by ": ", leaving out a cause whose text the message before it
/// already holds (`read x: No such file or directory (os error 2)` is not followed by the same
/// words again).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_named_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let inner = anyhow::Error::new(io).context("/s/glovebox.yaml: No such file or directory");
        assert_eq!(
            error_chain(&inner),
            "/s/glovebox.yaml: No such file or directory"
        );
        let outer = inner.context("load the config");
        assert_eq!(
            error_chain(&outer),
            "load the config: /s/glovebox.yaml: No such file or directory"
        );
    }
}
