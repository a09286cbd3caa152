//! Bearer authentication: the token from `Authorization: Bearer` or from the subprotocol list
//! (`glovebox.v1, bearer.<token>`, for browsers), compared by SHA-256 in constant time.
//! The account a connection acts for comes from here and nowhere else.

use axum::http::HeaderMap;
use glovebox_proto::ws::bearer_from_subprotocols;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Known token hashes and the account each authenticates.
#[derive(Debug, Clone, Default)]
pub struct TokenTable {
    entries: Vec<([u8; 32], String)>,
}

/// A request's credentials, as offered.
#[derive(Debug, PartialEq, Eq)]
pub struct Offered<'a> {
    pub token: Option<&'a str>,
    /// Whether the client offered the `glovebox.v1` subprotocol (to be echoed).
    pub wants_subprotocol: bool,
}

impl TokenTable {
    pub fn new(entries: Vec<([u8; 32], String)>) -> TokenTable {
        TokenTable { entries }
    }

    /// The account whose token this is. Every entry is compared, so timing says nothing about
    /// which accounts exist.
    pub fn authenticate(&self, token: &str) -> Option<&str> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (known, account) in &self.entries {
            if bool::from(known.ct_eq(&hash)) {
                found = Some(account.as_str());
            }
        }
        found
    }
}

/// The account a request's bearer token authenticates as.
pub fn account_of(tokens: &TokenTable, headers: &HeaderMap) -> Option<String> {
    offered(headers)
        .token
        .and_then(|t| tokens.authenticate(t))
        .map(str::to_owned)
}

/// The answer to a request without a valid token: it says nothing about which accounts exist.
pub fn unauthorized() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::UNAUTHORIZED,
        "missing or invalid bearer token\n",
    )
        .into_response()
}

/// Reads the bearer token a WebSocket upgrade request offers.
pub fn offered(headers: &HeaderMap) -> Offered<'_> {
    let (proto_token, wants_subprotocol) = headers
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(bearer_from_subprotocols)
        .unwrap_or((None, false));
    let header_token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    Offered {
        token: header_token.or(proto_token),
        wants_subprotocol,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TokenTable {
        TokenTable::new(vec![
            (Sha256::digest(b"alice-token").into(), "alice".into()),
            (Sha256::digest(b"bob-token").into(), "bob".into()),
        ])
    }

    #[test]
    fn tokens_map_to_their_account_only() {
        let t = table();
        assert_eq!(t.authenticate("alice-token"), Some("alice"));
        assert_eq!(t.authenticate("bob-token"), Some("bob"));
        for bad in ["", "alice", "alice-token ", "ALICE-TOKEN", "bob-token\0"] {
            assert_eq!(t.authenticate(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn header_beats_subprotocol() {
        let mut h = HeaderMap::new();
        h.insert(
            "sec-websocket-protocol",
            "glovebox.v1, bearer.p".parse().unwrap(),
        );
        assert_eq!(
            offered(&h),
            Offered {
                token: Some("p"),
                wants_subprotocol: true
            }
        );
        h.insert("authorization", "Bearer h".parse().unwrap());
        assert_eq!(offered(&h).token, Some("h"));
        let empty = HeaderMap::new();
        assert_eq!(
            offered(&empty),
            Offered {
                token: None,
                wants_subprotocol: false
            }
        );
        let mut basic = HeaderMap::new();
        basic.insert("authorization", "Basic YTpi".parse().unwrap());
        assert_eq!(offered(&basic).token, None);
    }
}
