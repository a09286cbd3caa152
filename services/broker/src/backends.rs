//! gRPC clients for the gate and each account's executor and pack host, over their Unix sockets, proving the
//! broker's keys (and checking that the other end proves them too). Channels connect lazily and
//! reconnect, so a restarted service is picked up without a broker restart.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use glovebox_config::AccountId;
use glovebox_proto::transport::Link as Channel;
use glovebox_proto::transport::authenticated_channel;
use glovebox_proto::transport::handover::{
    AccountsUpdate, AddedAccount, Handover, HandoverError, socket,
};
use glovebox_proto::transport::messages::{MessageClient, PackRuns};
use glovebox_proto::v1::{
    account_admin_client::AccountAdminClient, audit_client::AuditClient,
    executor_client::ExecutorClient, gate_client::GateClient, packs_client::PacksClient,
};

use crate::decisions::GateDecisions;
use crate::deliveries::GateDeliveries;
use crate::runs::ExecutorRuns;

/// Longest a single gRPC call to a backend may take.
pub const BACKEND_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Backends {
    pub gate: GateClient<Channel>,
    /// The gate's verdicts, on the stream the broker keeps open (`Gate.Decisions`).
    pub decisions: GateDecisions,
    pub deliveries: GateDeliveries,
    pub audit: AuditClient<Channel>,
    /// An account's own policy and calls, for its approver (on the gate's main socket).
    pub account_admin: AccountAdminClient<Channel>,
    /// The broker's word to the gate that a call handed to an executor or a pack host was made
    /// (`Executor.Runs`, `Packs.Runs`).
    pub vouchers: glovebox_ticket::voucher::VoucherKey,
    executors: HashMap<AccountId, ExecutorLink>,
    packs: HashMap<AccountId, PacksLink>,
    /// The accounts added at run time: their executors and pack hosts, replaced as a whole by
    /// each of the supervisor's updates ([`Backends::set_added`]).
    added: Arc<RwLock<Added>>,
}

#[derive(Default)]
struct Added {
    executors: HashMap<AccountId, ExecutorLink>,
    packs: HashMap<AccountId, PacksLink>,
}

/// An account's pack host: its RPCs, and the stream its pack calls are run on (`Packs.Runs`).
#[derive(Clone)]
pub struct PacksLink {
    pub client: PacksClient<Channel>,
    pub runs: MessageClient<PackRuns>,
}

impl PacksLink {
    fn new(channel: Channel) -> PacksLink {
        PacksLink {
            runs: MessageClient::new(channel.clone()),
            client: PacksClient::new(channel),
        }
    }
}

/// An account's executor: its RPCs, and the stream its built-in calls are run on
/// (`Executor.Runs`).
#[derive(Clone)]
pub struct ExecutorLink {
    pub client: ExecutorClient<Channel>,
    pub runs: ExecutorRuns,
}

impl ExecutorLink {
    fn new(channel: Channel) -> ExecutorLink {
        ExecutorLink {
            runs: ExecutorRuns::new(channel.clone()),
            client: ExecutorClient::new(channel),
        }
    }
}

impl Backends {
    /// What the gate says about `account` (`None` while the gate cannot be reached), and which of
    /// `tools` (client and pack tool names; none to ask only about the account) a managed rule
    /// denies.
    pub async fn account_info(
        &self,
        account: &AccountId,
        tools: Vec<String>,
    ) -> Option<glovebox_proto::v1::AccountInfoResponse> {
        let mut gate = self.gate.clone();
        gate.account_info(request(glovebox_proto::v1::AccountInfoRequest {
            account: account.to_string(),
            tools,
        }))
        .await
        .ok()
        .map(|r| r.into_inner())
    }

    /// Channels to the gate and each executor, proving the keys in `keys` (the broker's
    /// handover); a backend the handover has no key for is a configuration error.
    pub fn new(
        gate_socket: &Path,
        executors: &[(AccountId, std::path::PathBuf)],
        packs: &[(AccountId, std::path::PathBuf)],
        keys: &Handover,
    ) -> Result<Backends, HandoverError> {
        let (peer, key) = keys.calling(socket::GATE)?;
        let vouchers = glovebox_ticket::voucher::VoucherKey::of_broker(&key);
        let gate_channel = authenticated_channel(gate_socket, &peer, key);
        let mut clients = HashMap::new();
        for (account, path) in executors {
            let (peer, key) = keys.calling(&socket::executor(account))?;
            clients.insert(
                account.clone(),
                ExecutorLink::new(authenticated_channel(path, &peer, key)),
            );
        }
        let mut pack_clients = HashMap::new();
        for (account, path) in packs {
            let (peer, key) = keys.calling(&socket::packs(account))?;
            pack_clients.insert(
                account.clone(),
                PacksLink::new(authenticated_channel(path, &peer, key)),
            );
        }
        Ok(Backends {
            gate: GateClient::new(gate_channel.clone()),
            decisions: GateDecisions::new(gate_channel.clone()),
            deliveries: GateDeliveries::new(gate_channel.clone()),
            audit: AuditClient::new(gate_channel.clone()),
            account_admin: AccountAdminClient::new(gate_channel),
            vouchers,
            executors: clients,
            packs: pack_clients,
            added: Arc::default(),
        })
    }

    /// Replaces the added accounts' backends with those of `update` (an account missing from it
    /// has none from now on). An account of `glovebox.yaml` is never replaced.
    /// `accepted`: the update's accounts whose ids were checked (`added_accounts::accepted`).
    pub fn set_added(
        &self,
        update: &AccountsUpdate,
        accepted: &[(AccountId, &AddedAccount)],
    ) -> Result<(), HandoverError> {
        let mut added = Added::default();
        for (id, a) in accepted {
            if self.executors.contains_key(id) {
                continue;
            }
            let (peer, key) = update.calling(&socket::executor(&a.id))?;
            let channel = authenticated_channel(Path::new(&a.executor_socket), &peer, key);
            added
                .executors
                .insert(id.clone(), ExecutorLink::new(channel));
            let (peer, key) = update.calling(&socket::packs(&a.id))?;
            let channel = authenticated_channel(Path::new(&a.packs_socket), &peer, key);
            added.packs.insert(id.clone(), PacksLink::new(channel));
        }
        *self.added.write().unwrap_or_else(|p| p.into_inner()) = added;
        Ok(())
    }

    fn added(&self) -> std::sync::RwLockReadGuard<'_, Added> {
        self.added.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The executor of `account` (the authenticated account, never one named in a request).
    /// Every account that has an executor.
    pub fn accounts(&self) -> Vec<AccountId> {
        let mut accounts: Vec<AccountId> = self.executors.keys().cloned().collect();
        accounts.extend(self.added().executors.keys().cloned());
        accounts.sort();
        accounts
    }

    pub fn executor(&self, account: &AccountId) -> Option<ExecutorClient<Channel>> {
        self.executor_link(account).map(|e| e.client)
    }

    /// The executor of `account`, with the stream its built-in calls are run on.
    pub fn executor_link(&self, account: &AccountId) -> Option<ExecutorLink> {
        self.executors
            .get(account)
            .cloned()
            .or_else(|| self.added().executors.get(account).cloned())
    }

    /// The pack host of `account` (the authenticated account, never one named in a request).
    pub fn packs(&self, account: &AccountId) -> Option<PacksClient<Channel>> {
        self.packs_link(account).map(|p| p.client)
    }

    /// The pack host of `account`, with the stream its pack calls are run on.
    pub fn packs_link(&self, account: &AccountId) -> Option<PacksLink> {
        self.packs
            .get(account)
            .cloned()
            .or_else(|| self.added().packs.get(account).cloned())
    }
}

/// Wraps a message in a request with the backend deadline.
pub fn request<T>(message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(BACKEND_TIMEOUT);
    r
}
