//! Gate-signed tickets: the only authority an executor acts on.
//!
//! A ticket is an encoded `TicketBody` plus an HMAC-SHA256 over exactly those bytes, labelled as a
//! ticket. Each account has its own [`AccountKey`], derived from the gate's [`MasterKey`], and the
//! supervisor hands an executor only its own account's key: an executor can verify tickets for
//! its account and nothing else. Pure but for [`now_ms`]: the caller supplies the time.

pub mod spent;
pub mod voucher;

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

/// The gate's master key: it derives each account's key and nothing else. Only the gate holds
/// it. Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct MasterKey([u8; KEY_BYTES]);

/// One account's ticket key: it signs (at the gate) and verifies (at that account's executor)
/// the account's tickets, and tags content in its plans. The supervisor hands an executor only
/// its own. Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct AccountKey([u8; KEY_BYTES]);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccountKey(<redacted>)")
    }
}

fn key_bytes(bytes: &[u8]) -> Result<[u8; KEY_BYTES], TicketError> {
    bytes.try_into().map_err(|_| TicketError::BadKey)
}

fn mac_with(key: &[u8; KEY_BYTES], label: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail for 32 bytes.
    let mut mac = match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts any key length"),
    };
    // Every use of a key is labelled, so no MAC made for one purpose passes for another.
    mac.update(label);
    mac
}

const ACCOUNT_KEY_LABEL: &[u8] = b"glovebox.v1.account-ticket-key\0";
const PACKS_KEY_LABEL: &[u8] = b"glovebox.v1.packs-ticket-key\0";
const TICKET_LABEL: &[u8] = b"glovebox.v1.ticket\0";
const CONTENT_TAG_LABEL: &[u8] = b"glovebox.v1.content-tag\0";

impl MasterKey {
    pub fn from_bytes(bytes: &[u8]) -> Result<MasterKey, TicketError> {
        Ok(MasterKey(key_bytes(bytes)?))
    }

    /// The key of one account.
    pub fn account_key(&self, account: &str) -> AccountKey {
        let mut mac = mac_with(&self.0, ACCOUNT_KEY_LABEL);
        mac.update(account.as_bytes());
        AccountKey(mac.finalize().into_bytes().into())
    }

    /// The key of one account's pack host: pack tool tickets are signed with it, so a pack host
    /// holds no key an executor accepts (and an executor none a pack host accepts).
    pub fn packs_key(&self, account: &str) -> AccountKey {
        let mut mac = mac_with(&self.0, PACKS_KEY_LABEL);
        mac.update(account.as_bytes());
        AccountKey(mac.finalize().into_bytes().into())
    }
}

impl AccountKey {
    pub fn from_bytes(bytes: &[u8]) -> Result<AccountKey, TicketError> {
        Ok(AccountKey(key_bytes(bytes)?))
    }

    /// The key's bytes, for the supervisor's handover to the executor.
    pub fn as_bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    /// A keyed digest of `data`: binds content in a plan without revealing a hash that could be
    /// used to test guesses of the content.
    pub fn tag(&self, data: &[u8]) -> Vec<u8> {
        let mut mac = mac_with(&self.0, CONTENT_TAG_LABEL);
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    }

    /// Signs a ticket body.
    pub fn sign(&self, body: &TicketBody) -> Ticket {
        let bytes = body.encode_to_vec();
        let mut mac = mac_with(&self.0, TICKET_LABEL);
        mac.update(&bytes);
        Ticket {
            body: bytes,
            mac: mac.finalize().into_bytes().to_vec(),
        }
    }

    /// Verifies a ticket's MAC and expiry and checks it is for the expected account, call and
    /// tool. Returns the body for the caller to compare subjects against what it opens.
    pub fn verify(
        &self,
        ticket: &Ticket,
        expected: &Expected<'_>,
    ) -> Result<TicketBody, TicketError> {
        let body = self.open(ticket)?;
        if expected.now_ms >= body.expires_at_ms {
            return Err(TicketError::Expired);
        }
        for (field, got, want) in [
            ("account", &body.account, expected.account),
            ("call", &body.call_id, expected.call_id),
            ("tool", &body.tool, expected.tool),
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

    /// The body of a ticket this key signed, whatever its age: proof that the gate allowed the
    /// call it names (the gate checks the rows of a call's end against it, after the call ran).
    /// Acting on a ticket needs [`AccountKey::verify`].
    pub fn open(&self, ticket: &Ticket) -> Result<TicketBody, TicketError> {
        let mut mac = mac_with(&self.0, TICKET_LABEL);
        mac.update(&ticket.body);
        mac.verify_slice(&ticket.mac)
            .map_err(|_| TicketError::BadSignature)?;
        TicketBody::decode(ticket.body.as_slice()).map_err(|_| TicketError::Malformed)
    }
}

/// What the executor expects of a ticket: the call it is asked to act on, and the time.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub account: &'a str,
    pub call_id: &'a str,
    pub tool: &'a str,
    pub now_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::v1::{Domain, Subject};

    fn master() -> MasterKey {
        MasterKey::from_bytes(&[7u8; KEY_BYTES]).unwrap()
    }

    fn expected<'a>(
        now_ms: u64,
        account: &'a str,
        call_id: &'a str,
        tool: &'a str,
    ) -> Expected<'a> {
        Expected {
            account,
            call_id,
            tool,
            now_ms,
        }
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
            pack: None,
            job_network: String::new(),
        }
    }

    #[test]
    fn round_trip() {
        let key = master().account_key("alice");
        let t = key.sign(&body());
        assert_eq!(
            key.verify(&t, &expected(999, "alice", "c1", "file_read"))
                .unwrap(),
            body()
        );
    }

    #[test]
    fn refusals() {
        let key = master().account_key("alice");
        let t = key.sign(&body());
        let v = |k: &AccountKey, t: &Ticket, now, acct, call, tool| {
            k.verify(t, &expected(now, acct, call, tool))
        };
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
        let bob = master().account_key("bob");
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
    fn open_ignores_age_but_not_the_signature() {
        let key = master().account_key("alice");
        let t = key.sign(&body());
        // long expired: still proof of what the gate allowed
        assert_eq!(key.open(&t).unwrap(), body());
        let mut tampered = t.clone();
        tampered.body[3] ^= 1;
        assert_eq!(key.open(&tampered), Err(TicketError::BadSignature));
        assert_eq!(
            master().account_key("bob").open(&t),
            Err(TicketError::BadSignature)
        );
        assert_eq!(
            master().packs_key("alice").open(&t),
            Err(TicketError::BadSignature)
        );
    }

    #[test]
    fn account_keys_differ_and_debug_redacts() {
        let m = master();
        assert_ne!(m.account_key("a").as_bytes(), m.account_key("b").as_bytes());
        // A pack host's key is neither its executor's nor another account's pack host's: a
        // ticket signed for one verifies at no other.
        assert_ne!(m.packs_key("a").as_bytes(), m.account_key("a").as_bytes());
        assert_ne!(m.packs_key("a").as_bytes(), m.packs_key("b").as_bytes());
        let t = m.packs_key("alice").sign(&body());
        assert_eq!(
            m.account_key("alice")
                .verify(&t, &expected(0, "alice", "c1", "file_read")),
            Err(TicketError::BadSignature)
        );
        assert_eq!(format!("{m:?}"), "MasterKey(<redacted>)");
        assert_eq!(
            format!("{:?}", m.account_key("a")),
            "AccountKey(<redacted>)"
        );
        assert_eq!(
            MasterKey::from_bytes(&[0u8; 5]).unwrap_err(),
            TicketError::BadKey
        );
    }

    #[test]
    fn a_content_tag_is_no_ticket_mac_and_the_master_key_signs_nothing() {
        // The same bytes tagged as content and signed as a ticket give different MACs: a plan's
        // content tag can never be replayed as a ticket's signature.
        let key = master().account_key("alice");
        let t = key.sign(&body());
        assert_ne!(key.tag(&t.body), t.mac);
        let forged = Ticket {
            body: t.body.clone(),
            mac: key.tag(&t.body),
        };
        assert_eq!(
            key.verify(&forged, &expected(0, "alice", "c1", "file_read")),
            Err(TicketError::BadSignature)
        );
    }
}
