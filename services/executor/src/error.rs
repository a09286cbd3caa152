//! An operation's failure: a stable code and a message safe to show the client, and the mapping
//! of the operating system's errors onto it.

use std::io::ErrorKind;

use glovebox_proto::ErrorCode;
use glovebox_proto::v1::ToolError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    pub code: ErrorCode,
    pub message: String,
}

impl OpError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> OpError {
        OpError {
            code,
            message: message.into(),
        }
    }

    pub fn changed(what: &str) -> OpError {
        OpError::new(
            ErrorCode::Changed,
            format!("{what} changed since it was approved"),
        )
    }

    /// Maps an IO error to a client-visible error without leaking more than the path the client
    /// gave (`what`).
    pub fn io(e: std::io::Error, what: &str) -> OpError {
        let code = match e.kind() {
            ErrorKind::NotFound => ErrorCode::NotFound,
            ErrorKind::PermissionDenied => ErrorCode::Denied,
            ErrorKind::NotADirectory | ErrorKind::IsADirectory | ErrorKind::InvalidInput => {
                ErrorCode::InvalidParams
            }
            ErrorKind::InvalidFilename => ErrorCode::InvalidParams,
            _ => ErrorCode::Internal,
        };
        let message = match code {
            ErrorCode::NotFound => format!("{what}: not found"),
            ErrorCode::Denied => format!("{what}: the operating system refused access"),
            ErrorCode::Internal => {
                tracing::warn!(error = %e, "file system error");
                format!("{what}: file system error")
            }
            _ => format!("{what}: {e}"),
        };
        OpError::new(code, message)
    }

    /// [`OpError::io`] for a raw errno; a symbolic link or a mount met where an open refuses them
    /// means the path changed since it was planned.
    pub fn errno(e: rustix::io::Errno, what: &str) -> OpError {
        if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::XDEV {
            return OpError::changed(what);
        }
        OpError::io(std::io::Error::from(e), what)
    }

    pub fn to_proto(&self) -> ToolError {
        glovebox_proto::error::tool_error(self.code, self.message.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_map_to_stable_codes() {
        use rustix::io::Errno;
        for (errno, code) in [
            (Errno::NOENT, ErrorCode::NotFound),
            (Errno::ACCESS, ErrorCode::Denied),
            (Errno::NOTDIR, ErrorCode::InvalidParams),
            (Errno::ISDIR, ErrorCode::InvalidParams),
            (Errno::LOOP, ErrorCode::Changed),
            (Errno::XDEV, ErrorCode::Changed),
            (Errno::IO, ErrorCode::Internal),
        ] {
            assert_eq!(OpError::errno(errno, "p").code, code, "{errno:?}");
        }
        let e = OpError::errno(Errno::IO, "/w/a");
        assert_eq!(e.message, "/w/a: file system error");
    }
}
