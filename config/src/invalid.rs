//! [`Invalid`]: why a value of glovebox's files or flags cannot be used. The message names the
//! field and what it may hold; the caller adds where the value came from (a file and its line).

/// A value glovebox's files or flags may not hold, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl From<String> for Invalid {
    fn from(message: String) -> Invalid {
        Invalid(message)
    }
}

impl From<&str> for Invalid {
    fn from(message: &str) -> Invalid {
        Invalid(message.to_owned())
    }
}

/// `format!` into an [`Invalid`].
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::Invalid(format!($($arg)*))
    };
}
pub(crate) use invalid;
