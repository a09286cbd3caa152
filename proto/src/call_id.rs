//! [`ClientCallId`]: the id a client gives a call, as the front door checked it (the frame
//! parser's rule, [`is_valid_id`], which lives here) and carried typed from there. It is a label the client is
//! answered by (and the audit keeps as `client_call_id`), never what tickets and rows are keyed
//! on: the broker gives every call its own id, so two calls that reuse a label never merge.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::{new_id, new_ordered_id};

/// Longest call or ask id, in bytes.
pub const MAX_ID_BYTES: usize = 128;

/// Whether `id` is acceptable as a call or ask id (and a request's, and a session's).
pub fn is_valid_id(id: &str) -> bool {
    (1..=MAX_ID_BYTES).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// A client's id of one call: 1 to [`MAX_ID_BYTES`] characters of `[A-Za-z0-9._:-]`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

    /// A new id for a call this process makes on an agent's behalf (the bridge's, `/mcp`'s):
    /// `prefix` and a suffix that sorts in the order the ids were made ([`new_ordered_id`]).
    /// `prefix` is one of this crate's callers' words, of the id's characters.
    pub fn ordered(prefix: &'static str) -> ClientCallId {
        ClientCallId::made(new_ordered_id(prefix))
    }

    /// As [`ClientCallId::ordered`], with a random suffix ([`new_id`]).
    pub fn random(prefix: &'static str) -> ClientCallId {
        ClientCallId::made(new_id(prefix))
    }

    fn made(id: String) -> ClientCallId {
        debug_assert!(is_valid_id(&id), "{id:?}");
        ClientCallId(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl Serialize for ClientCallId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Read from a frame, an id is checked: a frame with a bad one is refused whole.
impl<'de> Deserialize<'de> for ClientCallId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ClientCallId::parse(String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
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
            let text = serde_json::to_string(bad).unwrap();
            assert!(
                serde_json::from_str::<ClientCallId>(&text).is_err(),
                "{bad:?}"
            );
        }
        let read: ClientCallId = serde_json::from_str(r#""c-1""#).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), r#""c-1""#);
    }

    #[test]
    fn made_ids_are_valid_for_every_prefix_in_use() {
        for prefix in ["stdio", "mcp-call", "console", "cli"] {
            assert!(is_valid_id(ClientCallId::ordered(prefix).as_str()));
            assert!(is_valid_id(ClientCallId::random(prefix).as_str()));
        }
        assert!(ClientCallId::ordered("stdio") < ClientCallId::ordered("stdio"));
    }
}
