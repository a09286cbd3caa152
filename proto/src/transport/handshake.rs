//! The capability handshake every glovebox control socket runs before gRPC: both ends prove they
//! hold the key granted to the client's peer name for this socket, without sending it.
//!
//! A job runs as the executor's user, so the kernel's peer-uid check cannot tell them apart; a
//! process that binds a socket path can pass as the service behind it. The handshake closes both:
//! the client must prove the key to be served, and the server must prove it before the client
//! sends anything else (so an impostor socket learns nothing and captures no call).
//!
//! ```text
//! client → server   "GBX1" | len(peer) u8 | peer | client nonce (32)
//! server → client   server nonce (32) | HMAC(key, "server" 0 peer 0 cn sn)
//! client → server   HMAC(key, "client" 0 peer 0 cn sn)
//! server → client   1 (accepted)
//! ```
//!
//! Keys are derived from the state directory's control key per (socket, peer) by the supervisor,
//! which hands each process only the keys it serves or calls with. Pure: message encoding,
//! derivation and proofs; the socket I/O is in `transport`.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Length of a key, a nonce and a proof.
pub const KEY_BYTES: usize = 32;
/// The protocol tag that opens every client hello.
pub const MAGIC: &[u8; 4] = b"GBX1";
/// Longest peer name.
pub const MAX_PEER: usize = 128;
/// The server's final byte when it accepted the client's proof.
pub const ACCEPTED: u8 = 1;

/// A socket key. Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct SocketKey([u8; KEY_BYTES]);

impl std::fmt::Debug for SocketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SocketKey(<redacted>)")
    }
}

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a socket key must be {KEY_BYTES} bytes ({} hex digits)", KEY_BYTES * 2)]
pub struct BadKey;

impl SocketKey {
    pub fn from_bytes(bytes: &[u8]) -> Result<SocketKey, BadKey> {
        Ok(SocketKey(bytes.try_into().map_err(|_| BadKey)?))
    }

    pub fn from_hex(text: &str) -> Result<SocketKey, BadKey> {
        let mut out = [0u8; KEY_BYTES];
        hex::decode_to_slice(text.trim(), &mut out).map_err(|_| BadKey)?;
        Ok(SocketKey(out))
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// A key for another use, derived from this one under `label` (e.g. the broker's vouchers,
    /// from its key on the gate's socket): whoever holds one holds the other, and neither MAC can
    /// stand in for the other's.
    pub fn subkey(&self, label: &str) -> [u8; KEY_BYTES] {
        let mut mac = mac_with(&self.0);
        mac.update(b"glovebox subkey v1\0");
        mac.update(label.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The key of `peer` on `socket`, derived from the control key of a state directory.
    pub fn derive(control_key: &[u8], socket: &str, peer: &str) -> SocketKey {
        let mut mac = mac_with(control_key);
        mac.update(b"glovebox socket key v1\0");
        mac.update(socket.as_bytes());
        mac.update(b"\0");
        mac.update(peer.as_bytes());
        SocketKey(mac.finalize().into_bytes().into())
    }
}

fn mac_with(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail.
    match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts every key length"),
    }
}

/// Which side a proof speaks for; the two proofs of one exchange never match each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// The proof that `side` holds `key` in the exchange of `peer` with these nonces.
pub fn proof(
    key: &SocketKey,
    side: Side,
    peer: &str,
    client_nonce: &[u8; KEY_BYTES],
    server_nonce: &[u8; KEY_BYTES],
) -> [u8; KEY_BYTES] {
    let mut mac = mac_with(&key.0);
    mac.update(match side {
        Side::Server => b"server\0",
        Side::Client => b"client\0",
    });
    mac.update(peer.as_bytes());
    mac.update(b"\0");
    mac.update(client_nonce);
    mac.update(server_nonce);
    mac.finalize().into_bytes().into()
}

/// Whether `got` is the proof `side` should have sent (constant time).
pub fn verify(
    key: &SocketKey,
    side: Side,
    peer: &str,
    client_nonce: &[u8; KEY_BYTES],
    server_nonce: &[u8; KEY_BYTES],
    got: &[u8],
) -> bool {
    let want = proof(key, side, peer, client_nonce, server_nonce);
    got.len() == KEY_BYTES && bool::from(want.ct_eq(got))
}

/// Whether `name` can be a peer name: 1 to 128 characters of `[A-Za-z0-9_.:-]`.
pub fn is_valid_peer(name: &str) -> bool {
    (1..=MAX_PEER).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// The client's opening message.
pub fn encode_hello(peer: &str, client_nonce: &[u8; KEY_BYTES]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 1 + peer.len() + KEY_BYTES);
    out.extend_from_slice(MAGIC);
    out.push(peer.len() as u8);
    out.extend_from_slice(peer.as_bytes());
    out.extend_from_slice(client_nonce);
    out
}

/// Why a client hello was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("not a glovebox control connection")]
    BadMagic,
    #[error("peer name is not valid")]
    BadPeer,
}

/// Checks the fixed head of a client hello (magic and the peer name's length), returning the
/// number of bytes that follow it: the peer name and the client nonce.
pub fn hello_rest_len(head: &[u8; 5]) -> Result<usize, HelloError> {
    if &head[..4] != MAGIC {
        return Err(HelloError::BadMagic);
    }
    let len = head[4] as usize;
    if len == 0 || len > MAX_PEER {
        return Err(HelloError::BadPeer);
    }
    Ok(len + KEY_BYTES)
}

/// Splits the rest of a client hello into the peer name and the client nonce.
pub fn parse_hello_rest(rest: &[u8]) -> Result<(String, [u8; KEY_BYTES]), HelloError> {
    let split = rest
        .len()
        .checked_sub(KEY_BYTES)
        .ok_or(HelloError::BadPeer)?;
    let (name, nonce) = rest.split_at(split);
    let name = std::str::from_utf8(name).map_err(|_| HelloError::BadPeer)?;
    if !is_valid_peer(name) {
        return Err(HelloError::BadPeer);
    }
    let nonce: [u8; KEY_BYTES] = nonce.try_into().map_err(|_| HelloError::BadPeer)?;
    Ok((name.to_owned(), nonce))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> SocketKey {
        SocketKey([b; KEY_BYTES])
    }

    #[test]
    fn derived_keys_differ_by_socket_peer_and_control_key() {
        let a = SocketKey::derive(b"control", "gate", "broker");
        assert_eq!(a, SocketKey::derive(b"control", "gate", "broker"));
        for other in [
            SocketKey::derive(b"control", "gate", "supervisor"),
            SocketKey::derive(b"control", "admin", "broker"),
            SocketKey::derive(b"other", "gate", "broker"),
            // The separator keeps ("ga", "tebroker") apart from ("gate", "broker").
            SocketKey::derive(b"control", "ga", "tebroker"),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn proofs_bind_key_side_peer_and_both_nonces() {
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        let p = proof(&key(7), Side::Server, "broker", &cn, &sn);
        assert!(verify(&key(7), Side::Server, "broker", &cn, &sn, &p));
        // A server proof is never a client proof: a relay cannot reflect one as the other.
        assert!(!verify(&key(7), Side::Client, "broker", &cn, &sn, &p));
        assert!(!verify(&key(8), Side::Server, "broker", &cn, &sn, &p));
        assert!(!verify(&key(7), Side::Server, "admin", &cn, &sn, &p));
        assert!(!verify(&key(7), Side::Server, "broker", &sn, &cn, &p));
        assert!(!verify(&key(7), Side::Server, "broker", &cn, &sn, &p[..31]));
        assert!(!verify(
            &key(7),
            Side::Server,
            "broker",
            &cn,
            &sn,
            &[0u8; 32]
        ));
    }

    #[test]
    fn hellos_round_trip_and_bad_ones_are_refused() {
        let hello = encode_hello("executor:alice", &[9u8; 32]);
        let head: [u8; 5] = hello[..5].try_into().unwrap();
        let rest_len = hello_rest_len(&head).unwrap();
        assert_eq!(rest_len, hello.len() - 5);
        let (peer, nonce) = parse_hello_rest(&hello[5..]).unwrap();
        assert_eq!(peer, "executor:alice");
        assert_eq!(nonce, [9u8; 32]);

        assert_eq!(hello_rest_len(b"PRI *"), Err(HelloError::BadMagic));
        assert_eq!(hello_rest_len(b"GBX1\0"), Err(HelloError::BadPeer));
        assert_eq!(
            hello_rest_len(&[b'G', b'B', b'X', b'1', 200]),
            Err(HelloError::BadPeer)
        );
        for bad in ["", "a b", "a/b", "é", "a\0"] {
            let mut rest = bad.as_bytes().to_vec();
            rest.extend_from_slice(&[0u8; 32]);
            assert_eq!(parse_hello_rest(&rest), Err(HelloError::BadPeer), "{bad:?}");
        }
        assert_eq!(parse_hello_rest(&[0u8; 10]), Err(HelloError::BadPeer));
    }

    #[test]
    fn keys_parse_from_hex_and_never_print() {
        let k = SocketKey::derive(b"c", "gate", "broker");
        assert_eq!(SocketKey::from_hex(&k.to_hex()), Ok(k.clone()));
        assert_eq!(SocketKey::from_hex("abcd"), Err(BadKey));
        assert_eq!(SocketKey::from_hex(&"zz".repeat(32)), Err(BadKey));
        assert!(!format!("{k:?}").contains(&k.to_hex()[..8]));
    }
}
