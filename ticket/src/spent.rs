//! Tickets already acted on. A ticket authorizes one action: an approval replayed within its
//! 30 s life is refused. Each spent ticket is remembered (by its MAC) until it expires; the set is
//! bounded, and when it is full of unexpired tickets new ones are refused rather than forgotten.
//! Pure apart from its lock: the caller passes the time. Executors and pack hosts each keep one.

use std::collections::HashMap;
use std::sync::Mutex;

/// Unexpired spent tickets remembered at most (about 64 bytes each).
pub const MAX_SPENT: usize = 1 << 18;

/// Why a ticket cannot be spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SpendError {
    #[error("ticket refused: it was already used (an approval authorizes one execution)")]
    AlreadyUsed,
    #[error("too many calls in the last 30 seconds; try again")]
    Full,
}

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
    pub fn spend(&self, mac: &[u8], expires_at_ms: u64, now_ms: u64) -> Result<(), SpendError> {
        // A poisoned lock only means another thread panicked mid-insert; the map is still a map.
        let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        if spent.contains_key(mac) {
            return Err(SpendError::AlreadyUsed);
        }
        if spent.len() >= self.cap {
            spent.retain(|_, expires| *expires > now_ms);
            if spent.len() >= self.cap {
                return Err(SpendError::Full);
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
        assert_eq!(s.spend(b"mac-a", 100, 50), Err(SpendError::AlreadyUsed));
        s.spend(b"mac-b", 100, 50).unwrap();
    }

    #[test]
    fn a_full_set_forgets_only_expired_tickets() {
        let s = SpentTickets::new(2);
        s.spend(b"a", 100, 0).unwrap();
        s.spend(b"b", 300, 0).unwrap();
        assert_eq!(s.spend(b"c", 300, 50), Err(SpendError::Full));
        // Once `a` expired, there is room again, and `b` is still remembered.
        s.spend(b"c", 300, 150).unwrap();
        assert_eq!(s.spend(b"b", 300, 160), Err(SpendError::AlreadyUsed));
    }
}
