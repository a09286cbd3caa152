//! [`InvalidParams`]: why a built-in tool's parameters are refused.

/// Why a built-in tool's parameters are refused (answered as `invalid_params`); the message
/// names the parameter and what it may hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidParams(pub String);

impl From<&str> for InvalidParams {
    fn from(message: &str) -> InvalidParams {
        InvalidParams(message.to_owned())
    }
}

/// `format!` into an [`InvalidParams`].
macro_rules! invalid_params {
    ($($arg:tt)*) => {
        $crate::tools::invalid::InvalidParams(format!($($arg)*))
    };
}
pub(crate) use invalid_params;
