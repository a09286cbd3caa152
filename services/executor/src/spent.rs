//! Tickets already acted on. A ticket authorizes one execution: an approval replayed within its
//! 30 s life is refused. Each spent ticket is remembered (by its MAC) until it expires; the set is
//! bounded, and when it is full of unexpired tickets new ones are refused as `busy` rather than
//! forgotten. Pure apart from its lock: the caller passes the time.

use std::collections::HashMap;
use std::sync::Mutex;

use glovebox_proto::ErrorCode;

use crate::error::OpError;

/// Unexpired spent tickets remembered at most (about 64 bytes each).
pub const MAX_SPENT: usize = 1 << 18;

#[derive(Debug)]
pub struct SpentTickets {
    cap: usize,
    /// MAC → the ticket's expiry (ms since the epoch).
    spent: Mutex<HashMap<Vec<u8>, u64>>,
}

impl SpentTickets {
    pub fn new(cap: usize) -> SpentTickets {
        SpentTickets {
            cap,
            spent: Mutex::new(HashMap::new()),
        }
    }

    /// Marks the ticket with `mac` (valid until `expires_at_ms`) spent, or refuses it if it was.
    pub fn spend(&self, mac: &[u8], expires_at_ms: u64, now_ms: u64) -> Result<(), OpError> {
        let mut spent = crate::jobs::lock(&self.spent);
        if spent.contains_key(mac) {
            return Err(OpError::new(
                ErrorCode::Denied,
                "ticket refused: it was already used (an approval authorizes one execution)",
            ));
        }
        if spent.len() >= self.cap {
            spent.retain(|_, expires| *expires > now_ms);
            if spent.len() >= self.cap {
                return Err(OpError::new(
                    ErrorCode::Busy,
                    "too many calls in the last 30 seconds; try again",
                ));
            }
        }
        spent.insert(mac.to_vec(), expires_at_ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_spent_once() {
        let s = SpentTickets::new(8);
        s.spend(b"mac-a", 100, 0).unwrap();
        let e = s.spend(b"mac-a", 100, 50).unwrap_err();
        assert_eq!(e.code, ErrorCode::Denied);
        assert!(e.message.contains("already used"), "{}", e.message);
        s.spend(b"mac-b", 100, 50).unwrap();
    }

    #[test]
    fn a_full_set_forgets_only_expired_tickets() {
        let s = SpentTickets::new(2);
        s.spend(b"a", 100, 0).unwrap();
        s.spend(b"b", 300, 0).unwrap();
        assert_eq!(s.spend(b"c", 300, 50).unwrap_err().code, ErrorCode::Busy);
        // Once `a` expired, there is room again, and `b` is still remembered.
        s.spend(b"c", 300, 150).unwrap();
        assert_eq!(s.spend(b"b", 300, 160).unwrap_err().code, ErrorCode::Denied);
    }
}
