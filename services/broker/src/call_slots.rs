//! Calls running at once per account, across all its connections and MCP sessions: a call past
//! the account's share waits in the broker (cheaply, cancellable) rather than in the gate's and
//! the executors' queues, where it would delay every other account's calls. One account's flood
//! therefore costs the others at most its share of the backends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Each account's running calls, at most `per_account` each.
#[derive(Debug)]
pub struct CallSlots {
    per_account: usize,
    accounts: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl CallSlots {
    pub fn new(per_account: usize) -> CallSlots {
        CallSlots {
            per_account,
            accounts: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for one of `account`'s places; the call runs while the permit lives. (`None` only
    /// if the semaphore were closed, which nothing does: the call then fails closed.)
    pub async fn enter(&self, account: &str) -> Option<OwnedSemaphorePermit> {
        let semaphore = crate::sync::lock(&self.accounts)
            .entry(account.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_account)))
            .clone();
        semaphore.acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_account_past_its_share_waits_and_another_does_not() {
        let slots = CallSlots::new(2);
        let one = slots.enter("a").await;
        let _two = slots.enter("a").await;
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), slots.enter("a"));
        assert!(third.await.is_err(), "a third call of a waits");
        let _other = tokio::time::timeout(std::time::Duration::from_millis(50), slots.enter("b"))
            .await
            .expect("b does not wait for a");
        drop(one);
        let _third = tokio::time::timeout(std::time::Duration::from_millis(50), slots.enter("a"))
            .await
            .expect("a place came free");
    }
}
