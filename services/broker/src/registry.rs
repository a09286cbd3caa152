//! The client-tools registry: which provider connections of which account offer which tools, and
//! the delegate-and-block invoke that routes a call to the most recently registered provider of
//! the caller's account and waits for its result. Transport-agnostic: a provider is a channel of
//! JSON text frames, so the registry is unit-tested with fake senders.
//!
//! Routing keys are the authenticated account only; nothing in a call can name another account.
//! A delegated call travels under an id the registry makes (`ct-<random>`), never under the
//! agent's own call id: agents choose those freely, so two of them (of one account or of two) may
//! use the same one at once, and each must still get its own provider's result.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use glovebox_config::AccountId;
use glovebox_proto::client_tools::{ClientToolSpec, ToProviderFrame};
use tokio::sync::{mpsc, oneshot};

use glovebox_proto::ids::new_id;

/// Provider connections per account.
pub const DEFAULT_MAX_PROVIDERS: usize = 8;
/// How long an agent's call waits for a provider's result.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    NoClient,
    ClientDisconnected,
    Timeout,
    TooManyConnections,
    /// The provider answered `ok: false`.
    Failed(String),
}

struct Provider {
    key: u64,
    connection_id: String,
    /// Registration order: the highest is the most recent.
    seq: u64,
    tools: Vec<ClientToolSpec>,
    send: mpsc::Sender<String>,
}

/// The provider a call of `tool` goes to: the most recently registered one of `account` that
/// offers it.
fn provider_of<'a>(inner: &'a Inner, account: &AccountId, tool: &str) -> Option<&'a Provider> {
    inner
        .providers
        .get(account)?
        .iter()
        .filter(|p| p.tools.iter().any(|t| t.name == tool))
        .max_by_key(|p| p.seq)
}

struct Pending {
    /// The agent's call id, for logs.
    call_id: String,
    account: AccountId,
    provider: u64,
    reply: oneshot::Sender<Result<serde_json::Value, RegistryError>>,
}

#[derive(Default)]
struct Inner {
    providers: HashMap<AccountId, Vec<Provider>>,
    /// Calls waiting for a provider, by the registry's own id.
    pending: HashMap<String, Pending>,
    next: u64,
}

pub struct Registry {
    inner: Mutex<Inner>,
    max_providers: usize,
    timeout: Duration,
}

impl Registry {
    pub fn new(max_providers: usize, timeout: Duration) -> Registry {
        Registry {
            inner: Mutex::new(Inner::default()),
            max_providers,
            timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    /// Takes a provider slot for a new connection of `account`. Returns its key.
    pub fn connect(
        &self,
        account: &AccountId,
        connection_id: &str,
        send: mpsc::Sender<String>,
    ) -> Result<u64, RegistryError> {
        let mut inner = self.lock();
        inner.next += 1;
        let key = inner.next;
        let list = inner.providers.entry(account.to_owned()).or_default();
        if list.len() >= self.max_providers {
            return Err(RegistryError::TooManyConnections);
        }
        list.push(Provider {
            key,
            connection_id: connection_id.to_owned(),
            seq: 0,
            tools: Vec::new(),
            send,
        });
        glovebox_telemetry::metrics::broker().provider_connections(1);
        Ok(key)
    }

    /// Sets (replaces) a connection's tools and makes it the most recent provider of its account.
    pub fn set_tools(&self, account: &AccountId, key: u64, tools: Vec<ClientToolSpec>) {
        let mut inner = self.lock();
        inner.next += 1;
        let seq = inner.next;
        if let Some(p) = inner
            .providers
            .get_mut(account)
            .and_then(|l| l.iter_mut().find(|p| p.key == key))
        {
            p.tools = tools;
            p.seq = seq;
        }
    }

    /// Removes a connection; its pending calls fail with `ClientDisconnected`.
    pub fn disconnect(&self, account: &AccountId, key: u64) {
        let mut inner = self.lock();
        if let Some(list) = inner.providers.get_mut(account) {
            let before = list.len();
            list.retain(|p| p.key != key);
            if list.len() < before {
                glovebox_telemetry::metrics::broker().provider_connections(-1);
            }
        }
        let failed: Vec<String> = inner
            .pending
            .iter()
            .filter(|(_, p)| p.account == *account && p.provider == key)
            .map(|(id, _)| id.clone())
            .collect();
        for id in failed {
            if let Some(p) = inner.pending.remove(&id) {
                let _ = p.reply.send(Err(RegistryError::ClientDisconnected));
            }
        }
    }

    /// The tools the account's providers offer; for a name offered twice, the most recent wins.
    pub fn tools(&self, account: &AccountId) -> Vec<ClientToolSpec> {
        let inner = self.lock();
        let mut providers: Vec<&Provider> = inner
            .providers
            .get(account)
            .map(|l| l.iter().collect())
            .unwrap_or_default();
        providers.sort_by_key(|p| std::cmp::Reverse(p.seq));
        let mut out: Vec<ClientToolSpec> = Vec::new();
        for p in providers {
            for t in &p.tools {
                if !out.iter().any(|o| o.name == t.name) {
                    out.push(t.clone());
                }
            }
        }
        out
    }

    /// The account's provider connections, most recent first: each one's id and tool names.
    pub fn providers(&self, account: &AccountId) -> Vec<(String, Vec<String>)> {
        let inner = self.lock();
        let mut list: Vec<&Provider> = inner
            .providers
            .get(account)
            .map(|l| l.iter().collect())
            .unwrap_or_default();
        list.sort_by_key(|p| std::cmp::Reverse(p.seq));
        list.iter()
            .map(|p| {
                let tools = p.tools.iter().map(|t| t.name.clone()).collect();
                (p.connection_id.clone(), tools)
            })
            .collect()
    }

    /// The input schema of `tool` as the provider a call would go to registered it.
    pub fn input_schema(&self, account: &AccountId, tool: &str) -> Option<serde_json::Value> {
        let inner = self.lock();
        let provider = provider_of(&inner, account, tool)?;
        let spec = provider.tools.iter().find(|t| t.name == tool)?;
        Some(spec.input_schema.clone())
    }

    /// Sends the call to the most recent provider of `account` offering `tool` and waits for its
    /// result, the provider's disconnect, or the timeout. `call_id` is the agent's: the provider
    /// sees a fresh id instead.
    pub async fn invoke(
        &self,
        account: &AccountId,
        tool: &str,
        input: serde_json::Value,
        call_id: &str,
    ) -> Result<serde_json::Value, RegistryError> {
        let (reply, wait) = oneshot::channel();
        let (id, send, connection) = {
            let mut inner = self.lock();
            let provider = provider_of(&inner, account, tool)
                .map(|p| (p.key, p.send.clone(), p.connection_id.clone()));
            let Some((key, send, connection)) = provider else {
                return Err(RegistryError::NoClient);
            };
            // Random ids do not repeat; the loop only makes that a guarantee.
            let id = loop {
                let id = new_id("ct");
                if !inner.pending.contains_key(&id) {
                    break id;
                }
            };
            inner.pending.insert(
                id.clone(),
                Pending {
                    call_id: call_id.to_owned(),
                    account: account.to_owned(),
                    provider: key,
                    reply,
                },
            );
            (id, send, connection)
        };
        tracing::debug!(%account, %tool, %connection, call_id, provider_call_id = %id, "invoking a client tool");
        let frame = ToProviderFrame::Invoke {
            call_id: id.clone(),
            tool: tool.to_owned(),
            input,
            run_id: None,
            agent_id: None,
        };
        if send.send(frame.to_json()).await.is_err() {
            self.lock().pending.remove(&id);
            return Err(RegistryError::ClientDisconnected);
        }
        let outcome = match tokio::time::timeout(self.timeout, wait).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(RegistryError::ClientDisconnected),
            Err(_) => Err(RegistryError::Timeout),
        };
        self.lock().pending.remove(&id);
        outcome
    }

    /// Delivers a provider's result for the call it was sent as `provider_call_id`. Only the
    /// provider the call was sent to can complete it.
    pub fn complete(
        &self,
        account: &AccountId,
        key: u64,
        provider_call_id: &str,
        result: Result<serde_json::Value, String>,
    ) -> bool {
        let mut inner = self.lock();
        match inner.pending.get(provider_call_id) {
            Some(p) if p.account == *account && p.provider == key => {}
            _ => return false,
        }
        match inner.pending.remove(provider_call_id) {
            Some(p) => {
                tracing::debug!(%account, call_id = %p.call_id, provider_call_id, "client tool answered");
                p.reply.send(result.map_err(RegistryError::Failed)).is_ok()
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> ClientToolSpec {
        ClientToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        }
    }

    fn provider(
        r: &Registry,
        account: &AccountId,
        tools: &[&str],
    ) -> (u64, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(8);
        let key = r.connect(account, "conn", tx).unwrap();
        r.set_tools(account, key, tools.iter().map(|t| tool(t)).collect());
        (key, rx)
    }

    async fn invoked_call_id(rx: &mut mpsc::Receiver<String>) -> String {
        let frame: serde_json::Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(frame["type"], "invoke");
        frame["call_id"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn round_trip() {
        let r = Arc::new(Registry::new(8, DEFAULT_CALL_TIMEOUT));
        let (key, mut rx) = provider(&r, &"alice".parse().unwrap(), &["click"]);
        let call = tokio::spawn({
            let r = r.clone();
            async move {
                r.invoke(&"alice".parse().unwrap(), "click", json!({"x": 1}), "c1")
                    .await
            }
        });
        let id = invoked_call_id(&mut rx).await;
        assert!(r.complete(&"alice".parse().unwrap(), key, &id, Ok(json!("done"))));
        assert_eq!(call.await.unwrap(), Ok(json!("done")));
    }

    #[tokio::test]
    async fn no_client_wrong_tool_and_wrong_account() {
        let r = Registry::new(8, DEFAULT_CALL_TIMEOUT);
        assert_eq!(
            r.invoke(&"alice".parse().unwrap(), "click", json!({}), "c")
                .await,
            Err(RegistryError::NoClient)
        );
        let (_key, _rx) = provider(&r, &"bob".parse().unwrap(), &["click"]);
        assert_eq!(
            r.invoke(&"alice".parse().unwrap(), "click", json!({}), "c")
                .await,
            Err(RegistryError::NoClient)
        );
        assert_eq!(
            r.invoke(&"bob".parse().unwrap(), "fill", json!({}), "c")
                .await,
            Err(RegistryError::NoClient)
        );
    }

    #[tokio::test]
    async fn another_provider_cannot_complete_a_call() {
        let r = Arc::new(Registry::new(8, DEFAULT_CALL_TIMEOUT));
        let (key, mut rx) = provider(&r, &"alice".parse().unwrap(), &["click"]);
        let (other, _orx) = provider(&r, &"alice".parse().unwrap(), &["fill"]);
        let (bobs, _brx) = provider(&r, &"bob".parse().unwrap(), &["click"]);
        let call = tokio::spawn({
            let r = r.clone();
            async move {
                r.invoke(&"alice".parse().unwrap(), "click", json!({}), "c9")
                    .await
            }
        });
        let id = invoked_call_id(&mut rx).await;
        assert!(!r.complete(&"alice".parse().unwrap(), other, &id, Ok(json!("forged"))));
        assert!(!r.complete(&"bob".parse().unwrap(), bobs, &id, Ok(json!("forged"))));
        assert!(r.complete(
            &"alice".parse().unwrap(),
            key,
            &id,
            Err("element not found".into())
        ));
        assert_eq!(
            call.await.unwrap(),
            Err(RegistryError::Failed("element not found".into()))
        );
    }

    #[tokio::test]
    async fn disconnect_mid_call_fails_the_call() {
        let r = Arc::new(Registry::new(8, DEFAULT_CALL_TIMEOUT));
        let (key, mut rx) = provider(&r, &"alice".parse().unwrap(), &["click"]);
        let call = tokio::spawn({
            let r = r.clone();
            async move {
                r.invoke(&"alice".parse().unwrap(), "click", json!({}), "c")
                    .await
            }
        });
        invoked_call_id(&mut rx).await;
        r.disconnect(&"alice".parse().unwrap(), key);
        assert_eq!(call.await.unwrap(), Err(RegistryError::ClientDisconnected));
        assert!(r.tools(&"alice".parse().unwrap()).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_provider_times_out() {
        let r = Registry::new(8, Duration::from_secs(30));
        let (_key, _rx) = provider(&r, &"alice".parse().unwrap(), &["click"]);
        assert_eq!(
            r.invoke(&"alice".parse().unwrap(), "click", json!({}), "c")
                .await,
            Err(RegistryError::Timeout)
        );
    }

    #[tokio::test]
    async fn most_recently_registered_wins() {
        let r = Arc::new(Registry::new(8, DEFAULT_CALL_TIMEOUT));
        let (_old, mut old_rx) = provider(&r, &"alice".parse().unwrap(), &["click"]);
        let (new, mut new_rx) = provider(&r, &"alice".parse().unwrap(), &["click"]);
        let call = tokio::spawn({
            let r = r.clone();
            async move {
                r.invoke(&"alice".parse().unwrap(), "click", json!({}), "c")
                    .await
            }
        });
        let id = invoked_call_id(&mut new_rx).await;
        assert!(
            old_rx.try_recv().is_err(),
            "the older provider receives nothing"
        );
        assert!(r.complete(&"alice".parse().unwrap(), new, &id, Ok(json!(1))));
        assert_eq!(call.await.unwrap(), Ok(json!(1)));
    }

    #[test]
    fn per_account_cap_and_slot_reuse() {
        let r = Registry::new(2, DEFAULT_CALL_TIMEOUT);
        let (a, _ra) = provider(&r, &"alice".parse().unwrap(), &[]);
        let (_b, _rb) = provider(&r, &"alice".parse().unwrap(), &[]);
        let (tx, _rx) = mpsc::channel(1);
        assert_eq!(
            r.connect(&"alice".parse().unwrap(), "c", tx.clone()),
            Err(RegistryError::TooManyConnections)
        );
        assert!(
            r.connect(&"bob".parse().unwrap(), "c", tx.clone()).is_ok(),
            "the cap is per account"
        );
        r.disconnect(&"alice".parse().unwrap(), a);
        assert!(
            r.connect(&"alice".parse().unwrap(), "c", tx).is_ok(),
            "a slot is reused after disconnect"
        );
    }

    #[tokio::test]
    async fn the_same_agent_call_id_from_two_accounts_and_two_connections() {
        let r = Arc::new(Registry::new(8, DEFAULT_CALL_TIMEOUT));
        let (alice, mut alice_rx) = provider(&r, &"alice".parse().unwrap(), &["click"]);
        let (bob, mut bob_rx) = provider(&r, &"bob".parse().unwrap(), &["click"]);
        // two agents of alice and one of bob, all calling with the agent call id "c1"
        let call = |account: &'static str, x: u32| {
            let r = r.clone();
            tokio::spawn(async move {
                r.invoke(&account.parse().unwrap(), "click", json!({ "x": x }), "c1")
                    .await
            })
        };
        let first = call("alice", 1);
        let first_id = invoked_call_id(&mut alice_rx).await;
        let second = call("alice", 2);
        let second_id = invoked_call_id(&mut alice_rx).await;
        let third = call("bob", 3);
        let third_id = invoked_call_id(&mut bob_rx).await;
        let ids = [&first_id, &second_id, &third_id];
        for id in ids {
            assert_ne!(id, "c1", "the provider never sees the agent's call id");
            assert!(id.starts_with("ct-"), "{id}");
        }
        assert!(first_id != second_id && second_id != third_id && first_id != third_id);
        // answered out of order, each result reaches its own call
        assert!(r.complete(&"bob".parse().unwrap(), bob, &third_id, Ok(json!("bob's"))));
        assert!(r.complete(
            &"alice".parse().unwrap(),
            alice,
            &second_id,
            Ok(json!("second"))
        ));
        assert!(r.complete(
            &"alice".parse().unwrap(),
            alice,
            &first_id,
            Ok(json!("first"))
        ));
        assert_eq!(first.await.unwrap(), Ok(json!("first")));
        assert_eq!(second.await.unwrap(), Ok(json!("second")));
        assert_eq!(third.await.unwrap(), Ok(json!("bob's")));
        // a provider cannot complete a call by the agent's id
        let fourth = call("alice", 4);
        let fourth_id = invoked_call_id(&mut alice_rx).await;
        assert!(!r.complete(&"alice".parse().unwrap(), alice, "c1", Ok(json!("forged"))));
        assert!(r.complete(&"alice".parse().unwrap(), alice, &fourth_id, Ok(json!(4))));
        assert_eq!(fourth.await.unwrap(), Ok(json!(4)));
    }
}
