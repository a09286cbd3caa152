//! [`Vouchers`]: the broker's voucher key and the vouchers already judged — what lets an
//! executor or a pack host have the gate judge a call only the broker made, once.

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
        runs_calls_of(peer, call)?;
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

/// Why `peer` may not have `call` judged on the broker's voucher: an account's executor may have
/// its account's built-in calls judged, its pack host its pack calls, and nobody else any.
pub(crate) fn runs_calls_of(peer: &str, call: &ToolCall) -> Result<(), String> {
    let (runner, account) = peer.split_once(':').unwrap_or((peer, ""));
    let tool = call.tool.as_str();
    let its_own = match runner {
        "executor" => glovebox_proto::tools::Tool::from_name(tool).is_some(),
        "packs" => glovebox_proto::packs::split_name(tool).is_some(),
        _ => false,
    };
    if account.is_empty() || account != call.account || !matches!(runner, "executor" | "packs") {
        return Err(format!(
            "{peer} may not have calls of account {:?} judged",
            call.account
        ));
    }
    if !its_own {
        return Err(match runner {
            "executor" => "only calls to built-in tools are judged for an executor".to_owned(),
            _ => "only calls to pack tools are judged for a pack host".to_owned(),
        });
    }
    Ok(())
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
    fn an_executor_has_its_built_in_calls_judged_and_a_pack_host_its_pack_calls() {
        let call = |account: &str, tool: &str| ToolCall {
            account: account.into(),
            tool: tool.into(),
            ..Default::default()
        };
        let table = [
            ("executor:alice", "alice", "file_read", Ok(())),
            ("packs:alice", "alice", "everything__echo", Ok(())),
            (
                "executor:alice",
                "alice",
                "everything__echo",
                Err("built-in"),
            ),
            ("packs:alice", "alice", "file_read", Err("pack tools")),
            ("packs:alice", "alice", "client__x", Err("pack tools")),
            ("packs:alice", "bob", "everything__echo", Err("may not")),
            ("executor:alice", "bob", "file_read", Err("may not")),
            ("packs:", "", "everything__echo", Err("may not")),
            ("broker", "alice", "file_read", Err("may not")),
            ("supervisor:alice", "alice", "file_read", Err("may not")),
        ];
        for (peer, account, tool, expected) in table {
            let got = runs_calls_of(peer, &call(account, tool));
            match expected {
                Ok(()) => assert_eq!(got, Ok(()), "{peer} {account} {tool}"),
                Err(said) => {
                    let why = got.expect_err(&format!("{peer} {account} {tool}"));
                    assert!(why.contains(said), "{peer} {account} {tool}: {why}");
                }
            }
        }
    }

    #[test]
    fn the_record_of_used_vouchers_holds_more_than_the_gate_can_decide() {
        // The decision goal is 30,000 a second, for every account together.
        let per_second = MAX_VOUCHERS as u64 * 1000 / glovebox_ticket::voucher::VOUCHER_TTL_MS;
        assert!(per_second >= 30_000, "{per_second}");
    }
}
