//! [`ClientCallId`]: the id a client gives a call, as the front door checked it (the frame
//! parser's rule, [`is_valid_id`]) and carried typed from there. It is a label the client is
//! answered by (and the audit keeps as `client_call_id`), never what tickets and rows are keyed
//! on: the broker gives every call its own id, so two calls that reuse a label never merge.

use std::fmt;

use crate::ws::{MAX_ID_BYTES, is_valid_id};

/// A client's id of one call: 1 to [`MAX_ID_BYTES`] characters of `[A-Za-z0-9._:-]`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClientCallId(String);

/// Why a client's call id was refused (its text is not repeated: it may be anything).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call_id must be 1 to {MAX_ID_BYTES} characters of [A-Za-z0-9._:-]")]
pub struct NotACallId;

impl ClientCallId {
    /// Checks `id`.
    pub fn parse(id: String) -> Result<ClientCallId, NotACallId> {
        if is_valid_id(&id) {
            Ok(ClientCallId(id))
        } else {
            Err(NotACallId)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for ClientCallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ClientCallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_call_id_is_what_the_frame_parser_takes() {
        let longest = "x".repeat(MAX_ID_BYTES);
        for ok in ["c1", "1", "mcp-call:7.a_b", longest.as_str()] {
            assert_eq!(ClientCallId::parse(ok.to_owned()).unwrap().as_str(), ok);
        }
        let too_long = "x".repeat(MAX_ID_BYTES + 1);
        for bad in ["", "a b", "a\nb", "\u{1b}[2J", "é", too_long.as_str()] {
            assert_eq!(
                ClientCallId::parse(bad.to_owned()),
                Err(NotACallId),
                "{bad:?}"
            );
            assert!(!is_valid_id(bad));
        }
    }
}
