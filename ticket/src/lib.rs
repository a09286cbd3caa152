//! Gate-signed tickets: the only authority an executor acts on.
//!
//! A ticket is an encoded `TicketBody` plus an HMAC-SHA256 over exactly those bytes. Each account
//! has its own key, derived from the gate's master key, and the supervisor hands an executor only
//! its own account's key: an executor can verify tickets for its account and nothing else.
//! Pure: the caller supplies the clock.

use glovebox_proto::v1::{Ticket, TicketBody};
use hmac::{Hmac, Mac};
use prost::Message;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Length of the master key and of derived account keys, in bytes.
pub const KEY_BYTES: usize = 32;
/// How long a ticket stays valid after signing.
pub const TICKET_TTL_MS: u64 = 30_000;

/// Milliseconds since the Unix epoch: the clock the gate reads to set a ticket's expiry and the
/// executor reads to check it (everything else here takes the time as an argument). `None` when
/// the system clock is before 1970: each side then fails closed in its own direction (the gate
/// signs as of 0, so the ticket is already expired; the executor checks as of the end of time).
pub fn now_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}

/// Why a ticket was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("ticket signature does not verify")]
    BadSignature,
    #[error("ticket body is malformed")]
    Malformed,
    #[error("ticket expired")]
    Expired,
    #[error("ticket is for {field} {got:?}, not {want:?}")]
    Mismatch {
        field: &'static str,
        got: String,
        want: String,
    },
    #[error("key must be {KEY_BYTES} bytes")]
    BadKey,
}

/// A secret key (master or per account). Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct Key([u8; KEY_BYTES]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

impl Key {
    pub fn from_bytes(bytes: &[u8]) -> Result<Key, TicketError> {
        let arr: [u8; KEY_BYTES] = bytes.try_into().map_err(|_| TicketError::BadKey)?;
        Ok(Key(arr))
    }

    pub fn as_bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    /// Derives the key of one account from the master key.
    pub fn derive_account_key(&self, account: &str) -> Key {
        let mut mac = self.mac();
        mac.update(b"glovebox.v1.account-ticket-key\0");
        mac.update(account.as_bytes());
        let out = mac.finalize().into_bytes();
        let mut key = [0u8; KEY_BYTES];
        key.copy_from_slice(&out);
        Key(key)
    }

    /// A keyed digest of `data`: binds content in a plan without revealing a hash that could be
    /// used to test guesses of the content.
    pub fn tag(&self, data: &[u8]) -> Vec<u8> {
        let mut mac = self.mac();
        mac.update(b"glovebox.v1.content-tag\0");
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail for 32 bytes.
        match <HmacSha256 as Mac>::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts any key length"),
        }
    }
}

/// Signs a ticket body with an account key.
pub fn sign(key: &Key, body: &TicketBody) -> Ticket {
    let bytes = body.encode_to_vec();
    let mut mac = key.mac();
    mac.update(&bytes);
    Ticket {
        body: bytes,
        mac: mac.finalize().into_bytes().to_vec(),
    }
}

/// Verifies a ticket's MAC and expiry and checks it is for this account, call and tool.
/// Returns the body for the caller to compare subjects against what it opens.
pub fn verify(
    key: &Key,
    ticket: &Ticket,
    now_ms: u64,
    account: &str,
    call_id: &str,
    tool: &str,
) -> Result<TicketBody, TicketError> {
    let mut mac = key.mac();
    mac.update(&ticket.body);
    mac.verify_slice(&ticket.mac)
        .map_err(|_| TicketError::BadSignature)?;
    let body = TicketBody::decode(ticket.body.as_slice()).map_err(|_| TicketError::Malformed)?;
    if now_ms >= body.expires_at_ms {
        return Err(TicketError::Expired);
    }
    for (field, got, want) in [
        ("account", &body.account, account),
        ("call", &body.call_id, call_id),
        ("tool", &body.tool, tool),
    ] {
        if got != want {
            return Err(TicketError::Mismatch {
                field,
                got: got.clone(),
                want: want.to_owned(),
            });
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::v1::{Domain, Subject};

    fn master() -> Key {
        Key::from_bytes(&[7u8; KEY_BYTES]).unwrap()
    }

    fn body() -> TicketBody {
        TicketBody {
            account: "alice".into(),
            call_id: "c1".into(),
            tool: "file_read".into(),
            subjects: vec![Subject {
                domain: Domain::Read as i32,
                path: "/w/a".into(),
                state: None,
            }],
            content_tag: vec![],
            expires_at_ms: 1_000,
            approval: "auto".into(),
            hidden_globs: Vec::new(),
        }
    }

    #[test]
    fn round_trip() {
        let key = master().derive_account_key("alice");
        let t = sign(&key, &body());
        assert_eq!(
            verify(&key, &t, 999, "alice", "c1", "file_read").unwrap(),
            body()
        );
    }

    #[test]
    fn refusals() {
        let key = master().derive_account_key("alice");
        let t = sign(&key, &body());
        let v = |k: &Key, t: &Ticket, now, acct, call, tool| verify(k, t, now, acct, call, tool);
        assert_eq!(
            v(&key, &t, 1_000, "alice", "c1", "file_read"),
            Err(TicketError::Expired)
        );
        assert!(matches!(
            v(&key, &t, 0, "bob", "c1", "file_read"),
            Err(TicketError::Mismatch {
                field: "account",
                ..
            })
        ));
        assert!(matches!(
            v(&key, &t, 0, "alice", "c2", "file_read"),
            Err(TicketError::Mismatch { field: "call", .. })
        ));
        assert!(matches!(
            v(&key, &t, 0, "alice", "c1", "file_write"),
            Err(TicketError::Mismatch { field: "tool", .. })
        ));
        // another account's key does not verify it
        let bob = master().derive_account_key("bob");
        assert_eq!(
            v(&bob, &t, 0, "alice", "c1", "file_read"),
            Err(TicketError::BadSignature)
        );
        // a flipped body byte or MAC byte does not verify
        let mut tampered = t.clone();
        tampered.body[3] ^= 1;
        assert_eq!(
            v(&key, &tampered, 0, "alice", "c1", "file_read"),
            Err(TicketError::BadSignature)
        );
        let mut tampered = t.clone();
        tampered.mac[0] ^= 1;
        assert_eq!(
            v(&key, &tampered, 0, "alice", "c1", "file_read"),
            Err(TicketError::BadSignature)
        );
        let mut short = t;
        short.mac.truncate(16);
        assert_eq!(
            v(&key, &short, 0, "alice", "c1", "file_read"),
            Err(TicketError::BadSignature)
        );
    }

    #[test]
    fn account_keys_differ_and_debug_redacts() {
        let m = master();
        assert_ne!(
            m.derive_account_key("a").as_bytes(),
            m.derive_account_key("b").as_bytes()
        );
        assert_eq!(format!("{m:?}"), "Key(<redacted>)");
        assert_eq!(Key::from_bytes(&[0u8; 5]).unwrap_err(), TicketError::BadKey);
    }
}
