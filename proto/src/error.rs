//! The stable error codes clients see, and their wire strings. Services carry them in-band
//! (`ToolError`), never as gRPC statuses, so a code means the same on every path.

use serde::{Deserialize, Serialize};

/// A stable, client-visible error code. Internal causes go to logs, never to the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Denied,
    InvalidParams,
    UnknownTool,
    NotFound,
    TooLarge,
    Binary,
    Changed,
    Timeout,
    NoClient,
    ClientDisconnected,
    /// A client tool's provider answered that the call failed.
    ClientError,
    /// The client withdrew the call before it ran (or stopped waiting for a client tool, or a
    /// pack tool's server was told to stop).
    Cancelled,
    Unavailable,
    Busy,
    Internal,
}

impl ErrorCode {
    /// Every code, for tables and tests.
    pub const ALL: [ErrorCode; 15] = [
        ErrorCode::Denied,
        ErrorCode::InvalidParams,
        ErrorCode::UnknownTool,
        ErrorCode::NotFound,
        ErrorCode::TooLarge,
        ErrorCode::Binary,
        ErrorCode::Changed,
        ErrorCode::Timeout,
        ErrorCode::NoClient,
        ErrorCode::ClientDisconnected,
        ErrorCode::ClientError,
        ErrorCode::Cancelled,
        ErrorCode::Unavailable,
        ErrorCode::Busy,
        ErrorCode::Internal,
    ];

    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Denied => "denied",
            ErrorCode::InvalidParams => "invalid_params",
            ErrorCode::UnknownTool => "unknown_tool",
            ErrorCode::NotFound => "not_found",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Binary => "binary",
            ErrorCode::Changed => "changed",
            ErrorCode::Timeout => "timeout",
            ErrorCode::NoClient => "no_client",
            ErrorCode::ClientDisconnected => "client_disconnected",
            ErrorCode::ClientError => "client_error",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Busy => "busy",
            ErrorCode::Internal => "internal",
        }
    }

    /// The outcome a call's `result` audit row gives a call that failed with this code: the
    /// one rule for both writers of result rows (the broker, and an executor for a built-in call).
    pub fn result_outcome(self) -> crate::audit_row::Outcome {
        use crate::audit_row::Outcome;
        match self {
            ErrorCode::Denied => Outcome::Denied,
            _ => Outcome::Error,
        }
    }

    /// Parses a wire string; unknown strings are `None` so callers can fail closed.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Builds the in-band error message the executor returns over gRPC.
pub fn tool_error(code: ErrorCode, message: impl Into<String>) -> crate::v1::ToolError {
    crate::v1::ToolError {
        code: code.as_str().to_owned(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip_and_match_serde() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!(ErrorCode::parse("DENIED"), None);
        assert_eq!(ErrorCode::parse(""), None);
    }

    #[test]
    fn only_a_denial_is_a_denied_result() {
        for code in ErrorCode::ALL {
            let want = if code == ErrorCode::Denied {
                "denied"
            } else {
                "error"
            };
            assert_eq!(code.result_outcome().as_str(), want, "{code}");
        }
    }
}
