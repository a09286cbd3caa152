//! An operation's failure: a stable code and a message safe to show the client.

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

    pub fn to_proto(&self) -> ToolError {
        glovebox_proto::error::tool_error(self.code, self.message.clone())
    }
}
