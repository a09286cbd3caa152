//! [`Vouchers`]: the broker's voucher key and the vouchers already judged — what lets an
//! executor have the gate judge a call only the broker made, once.

use glovebox_proto::v1::{self as pb, ToolCall};
use glovebox_ticket::spent::SpentTickets;
use glovebox_ticket::voucher::VoucherKey;

/// Vouchers remembered at most (about 80 bytes each, ~85 MB when full): one gate serves every
/// account, so this bounds the vouched calls of all of them over a voucher's life — above the
/// gate's decision rate (see the test), so a busy gate never refuses a call for want of room.
const MAX_VOUCHERS: usize = 1 << 20;

/// The broker's voucher key and the vouchers already judged.
pub struct Vouchers {
    /// None: this gate has no broker key (e.g. not started by `glovebox up`) and judges no
    /// vouched call.
    key: Option<VoucherKey>,
    spent: SpentTickets,
}

impl Vouchers {
    pub fn new(key: Option<VoucherKey>) -> Vouchers {
        Vouchers {
            key,
            spent: SpentTickets::new(MAX_VOUCHERS),
        }
    }

    /// Why `peer` may not have `call` judged on `voucher` at `now_ms`; nothing when it may (the
    /// voucher is spent now).
    pub(crate) fn admit(
        &self,
        peer: &str,
        call: &ToolCall,
        voucher: &pb::Voucher,
        now_ms: u64,
    ) -> Result<(), String> {
        if peer.strip_prefix("executor:") != Some(call.account.as_str()) {
            return Err(format!(
                "{peer} may not have calls of account {:?} judged",
                call.account
            ));
        }
        if glovebox_proto::tools::Tool::from_name(&call.tool).is_none() {
            return Err("only calls to built-in tools are judged for an executor".to_owned());
        }
        let key = self
            .key
            .as_ref()
            .ok_or("this gate holds no broker key: it judges no vouched call")?;
        let expires = key
            .check(call, voucher, now_ms)
            .map_err(|e| format!("voucher refused: {e}"))?;
        self.spent
            .spend(&voucher.mac, expires, now_ms)
            .map_err(|e| match e {
                glovebox_ticket::spent::SpendError::AlreadyUsed => {
                    "voucher refused: it was already used (a call is judged once)".to_owned()
                }
                full => full.to_string(),
            })
    }
}

impl Default for Vouchers {
    fn default() -> Vouchers {
        Vouchers::new(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_of_used_vouchers_holds_more_than_the_gate_can_decide() {
        // The decision goal is 30,000 a second, for every account together.
        let per_second = MAX_VOUCHERS as u64 * 1000 / glovebox_ticket::voucher::VOUCHER_TTL_MS;
        assert!(per_second >= 30_000, "{per_second}");
    }
}
