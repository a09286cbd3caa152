//! Vouchers: the broker's word that an authenticated client made exactly this call.
//!
//! The broker hands a built-in call to the account's executor with a voucher; the executor plans
//! it and asks the gate for the verdict itself (one hop less than the broker asking). The gate
//! judges a call only with a voucher that verifies for it, so an executor cannot have the gate
//! judge (and audit) calls nobody made, nor change a call it was given. The key is derived from
//! the broker's key on the gate's socket, which only the broker and the gate hold: a voucher
//! proves nothing a holder of that key could not do directly. Pure: the caller passes the time.

use glovebox_proto::v1::{ToolCall, Voucher};
use hmac::Mac;

use crate::{KEY_BYTES, TicketError, mac_with};

/// How long a voucher is honoured after the broker made it (the executor plans in between).
pub const VOUCHER_TTL_MS: u64 = 30_000;

const VOUCHER_LABEL: &[u8] = b"glovebox.v1.voucher\0";

/// The key vouchers are made and checked with. Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct VoucherKey([u8; KEY_BYTES]);

impl std::fmt::Debug for VoucherKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VoucherKey(<redacted>)")
    }
}

impl VoucherKey {
    pub fn from_bytes(bytes: &[u8]) -> Result<VoucherKey, TicketError> {
        Ok(VoucherKey(crate::key_bytes(bytes)?))
    }

    /// The voucher key of the broker that calls the gate's socket with `broker_key`.
    pub fn of_broker(broker_key: &glovebox_proto::transport::handshake::SocketKey) -> VoucherKey {
        VoucherKey(broker_key.subkey("broker vouchers"))
    }

    /// The broker's voucher for `call`, made at `now_ms`.
    pub fn vouch(&self, call: &ToolCall, now_ms: u64) -> Voucher {
        Voucher {
            issued_at_ms: now_ms,
            mac: self.mac(call, now_ms).finalize().into_bytes().to_vec(),
        }
    }

    /// Checks that `voucher` was made with this key for exactly `call`, and is neither from the
    /// future nor older than [`VOUCHER_TTL_MS`]. Returns when it expires (for the caller's record
    /// of vouchers already used).
    pub fn check(
        &self,
        call: &ToolCall,
        voucher: &Voucher,
        now_ms: u64,
    ) -> Result<u64, TicketError> {
        self.mac(call, voucher.issued_at_ms)
            .verify_slice(&voucher.mac)
            .map_err(|_| TicketError::BadSignature)?;
        let expires = voucher.issued_at_ms.saturating_add(VOUCHER_TTL_MS);
        // A clock that went back a little between the broker and the gate is tolerated; a
        // voucher from further ahead is not (it would live longer than its time).
        if now_ms >= expires || voucher.issued_at_ms > now_ms.saturating_add(1_000) {
            return Err(TicketError::Expired);
        }
        Ok(expires)
    }

    /// The MAC over the time and each field of the call, each length-prefixed so no two calls
    /// share an input.
    fn mac(&self, call: &ToolCall, issued_at_ms: u64) -> hmac::Hmac<sha2::Sha256> {
        let mut mac = mac_with(&self.0, VOUCHER_LABEL);
        mac.update(&issued_at_ms.to_be_bytes());
        for field in [
            &call.account,
            &call.call_id,
            &call.tool,
            &call.params_json,
            &call.client_call_id,
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> VoucherKey {
        VoucherKey::from_bytes(&[byte; KEY_BYTES]).unwrap()
    }

    fn call() -> ToolCall {
        ToolCall {
            account: "alice".into(),
            call_id: "call-1".into(),
            tool: "file_read".into(),
            params_json: r#"{"path":"a"}"#.into(),
            client_call_id: "r1".into(),
        }
    }

    #[test]
    fn a_voucher_holds_for_its_call_until_it_expires() {
        let v = key(1).vouch(&call(), 1_000);
        assert_eq!(key(1).check(&call(), &v, 1_000), Ok(1_000 + VOUCHER_TTL_MS));
        assert_eq!(
            key(1).check(&call(), &v, 1_000 + VOUCHER_TTL_MS - 1),
            Ok(31_000)
        );
        assert_eq!(
            key(1).check(&call(), &v, 1_000 + VOUCHER_TTL_MS),
            Err(TicketError::Expired)
        );
    }

    #[test]
    fn a_voucher_is_for_one_call_one_key_and_one_time() {
        let v = key(1).vouch(&call(), 1_000);
        let changed: [fn(&mut ToolCall); 5] = [
            |c| c.account = "bob".into(),
            |c| c.call_id = "call-2".into(),
            |c| c.tool = "file_write".into(),
            |c| c.params_json = r#"{"path":"b"}"#.into(),
            |c| c.client_call_id = "r2".into(),
        ];
        for change in changed {
            let mut other = call();
            change(&mut other);
            assert_eq!(
                key(1).check(&other, &v, 1_000),
                Err(TicketError::BadSignature),
                "{other:?}"
            );
        }
        // Moving bytes from one field to the next is another call too.
        let mut shifted = call();
        shifted.account = "alicec".into();
        shifted.call_id = "all-1".into();
        assert_eq!(
            key(1).check(&shifted, &v, 1_000),
            Err(TicketError::BadSignature)
        );
        assert_eq!(
            key(2).check(&call(), &v, 1_000),
            Err(TicketError::BadSignature)
        );
        // A MAC cut short, empty or overlong is no MAC.
        for mac in [
            v.mac[..16].to_vec(),
            Vec::new(),
            [v.mac.clone(), vec![0]].concat(),
        ] {
            let odd = Voucher { mac, ..v.clone() };
            assert_eq!(
                key(1).check(&call(), &odd, 1_000),
                Err(TicketError::BadSignature)
            );
        }
        // A later time in the voucher (to live longer) breaks its MAC.
        let mut later = v.clone();
        later.issued_at_ms += 10_000;
        assert_eq!(
            key(1).check(&call(), &later, 1_000),
            Err(TicketError::BadSignature)
        );
    }

    #[test]
    fn a_voucher_from_the_future_is_refused() {
        let v = key(1).vouch(&call(), 10_000);
        assert!(
            key(1).check(&call(), &v, 9_500).is_ok(),
            "a clock a little behind"
        );
        assert_eq!(key(1).check(&call(), &v, 5_000), Err(TicketError::Expired));
    }
}
