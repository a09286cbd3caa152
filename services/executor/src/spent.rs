//! Tickets already acted on (see `glovebox_ticket::spent`), refused with the executor's error
//! codes: a replayed ticket is `denied`, a full set `busy`.

use glovebox_proto::ErrorCode;
use glovebox_ticket::spent::SpendError;

use crate::error::OpError;

pub use glovebox_ticket::spent::MAX_SPENT;

#[derive(Debug)]
pub struct SpentTickets(glovebox_ticket::spent::SpentTickets);

impl SpentTickets {
    pub fn new(cap: usize) -> SpentTickets {
        SpentTickets(glovebox_ticket::spent::SpentTickets::new(cap))
    }

    /// Marks the ticket with `mac` (valid until `expires_at_ms`) spent, or refuses it if it was.
    pub fn spend(&self, mac: &[u8], expires_at_ms: u64, now_ms: u64) -> Result<(), OpError> {
        self.0.spend(mac, expires_at_ms, now_ms).map_err(|e| {
            let code = match e {
                SpendError::AlreadyUsed => ErrorCode::Denied,
                SpendError::Full => ErrorCode::Busy,
            };
            OpError::new(code, e.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_is_denied_and_a_full_set_busy() {
        let s = SpentTickets::new(1);
        s.spend(b"a", 100, 0).unwrap();
        let e = s.spend(b"a", 100, 50).unwrap_err();
        assert_eq!(e.code, ErrorCode::Denied);
        assert!(e.message.contains("already used"), "{}", e.message);
        assert_eq!(s.spend(b"b", 100, 50).unwrap_err().code, ErrorCode::Busy);
    }
}
