//! What the supervisor hands each service on its standard input at start: one JSON line with the
//! socket keys it serves and calls with (and, for an executor, its account's ticket key). Secrets
//! travel this way only: never in argv, the environment or a file a job could reach. After the
//! line, standard input stays open as the supervisor's lifeline.

use serde::{Deserialize, Serialize};

use super::handshake::SocketKey;

/// Longest handover line accepted.
pub const MAX_HANDOVER_BYTES: usize = 256 * 1024;

/// The socket names of glovebox's control sockets, as keys are derived and granted for them.
pub mod socket {
    /// The gate's main socket (Gate and Audit): the broker and the supervisor call it.
    pub const GATE: &str = "gate";
    /// The gate's rule-management socket: administrators' `glovebox policy` calls it.
    pub const ADMIN: &str = "admin";
    /// The gate's audit-only socket: executors call it.
    pub const AUDIT: &str = "audit";
    /// One account's executor socket: the broker calls it, and administrators' `glovebox policy
    /// explain` asks it to plan.
    pub fn executor(account: &str) -> String {
        format!("executor:{account}")
    }
    /// One account's pack host socket: the broker calls it, and administrators' `glovebox packs
    /// list|reload` and `glovebox secret set` (which restarts the packs that use the secret).
    pub fn packs(account: &str) -> String {
        format!("packs:{account}")
    }
}

/// The peer names keys are granted to.
pub mod peer {
    pub const BROKER: &str = "broker";
    pub const SUPERVISOR: &str = "supervisor";
    pub const ADMIN: &str = "admin";
    /// One account's executor, as a client of the audit socket.
    pub fn executor(account: &str) -> String {
        format!("executor:{account}")
    }
    /// One account's pack host, as a client of the audit socket (Audit and PackSupport).
    pub fn packs(account: &str) -> String {
        format!("packs:{account}")
    }
}

/// One key: on `socket`, for `peer`.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub socket: String,
    pub peer: String,
    /// Hex.
    pub key: String,
}

/// Everything one service is handed.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handover {
    /// The executor's ticket key (hex): its own account's, and nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket_key: Option<String>,
    /// Keys of the peers this service accepts on the sockets it serves.
    #[serde(default)]
    pub serve: Vec<Grant>,
    /// Keys this service proves as a client.
    #[serde(default)]
    pub call: Vec<Grant>,
    /// System mode: the uids, besides its own and root, whose connections the service's main
    /// socket accepts (the broker's, on the gate's and each executor's; see [`ControlKeys`]).
    /// The keys are still needed: this is the kernel's check before the handshake.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peer_uids: Vec<u32>,
    /// System mode: the identity the supervisor switched this service to. The service checks it
    /// against `/proc/self/status` before anything else and refuses to run if anything is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<ExpectedIdentity>,
}

/// What a service started in system mode must find itself to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedIdentity {
    pub uid: u32,
    pub gid: u32,
}

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |g: &[Grant]| -> Vec<String> {
            g.iter()
                .map(|g| format!("{}/{}", g.socket, g.peer))
                .collect()
        };
        f.debug_struct("Handover")
            .field(
                "ticket_key",
                &self.ticket_key.as_ref().map(|_| "<redacted>"),
            )
            .field("serve", &names(&self.serve))
            .field("call", &names(&self.call))
            .field("peer_uids", &self.peer_uids)
            .field("expect", &self.expect)
            .finish()
    }
}

/// Why a handover could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    #[error("read the handover from stdin: {0}")]
    Io(#[from] std::io::Error),
    #[error("the handover on stdin is missing: start this service through `glovebox up`")]
    Missing,
    #[error("the handover on stdin is longer than {MAX_HANDOVER_BYTES} bytes")]
    TooLong,
    #[error("the handover on stdin is not valid: {0}")]
    Invalid(String),
    #[error("the handover has no key for {0}")]
    NoKey(String),
}

impl Handover {
    /// Grants a key this service accepts from `peer` on `socket`.
    pub fn serve(&mut self, socket: &str, peer: &str, key: &SocketKey) -> &mut Handover {
        self.serve.push(Grant {
            socket: socket.to_owned(),
            peer: peer.to_owned(),
            key: key.to_hex(),
        });
        self
    }

    /// Grants a key this service calls `socket` with, as `peer`.
    pub fn call(&mut self, socket: &str, peer: &str, key: &SocketKey) -> &mut Handover {
        self.call.push(Grant {
            socket: socket.to_owned(),
            peer: peer.to_owned(),
            key: key.to_hex(),
        });
        self
    }

    /// The one JSON line written to the service's stdin.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// Parses a handover line.
    pub fn parse(line: &str) -> Result<Handover, HandoverError> {
        if line.trim().is_empty() {
            return Err(HandoverError::Missing);
        }
        let h: Handover =
            serde_json::from_str(line.trim()).map_err(|e| HandoverError::Invalid(e.to_string()))?;
        for g in h.serve.iter().chain(&h.call) {
            SocketKey::from_hex(&g.key)
                .map_err(|e| HandoverError::Invalid(format!("{}/{}: {e}", g.socket, g.peer)))?;
        }
        Ok(h)
    }

    /// Reads the handover line from `input` one byte at a time (so nothing after the line is
    /// consumed: the rest of stdin is the lifeline).
    pub fn read_from(mut input: impl std::io::Read) -> Result<Handover, HandoverError> {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            match input.read(&mut byte) {
                Ok(0) => break,
                Ok(_) if byte[0] == b'\n' => break,
                Ok(_) => {
                    if line.len() >= MAX_HANDOVER_BYTES {
                        return Err(HandoverError::TooLong);
                    }
                    line.push(byte[0]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let text =
            String::from_utf8(line).map_err(|_| HandoverError::Invalid("not UTF-8".into()))?;
        Handover::parse(&text)
    }

    /// The keys accepted on `socket`, by peer name.
    pub fn served_on(&self, socket: &str) -> super::ServerKeys {
        super::ServerKeys::new(
            self.serve
                .iter()
                .filter(|g| g.socket == socket)
                .filter_map(|g| Some((g.peer.clone(), SocketKey::from_hex(&g.key).ok()?))),
        )
    }

    /// The uids allowed to connect to this service's main socket: its own, root's, and
    /// [`Handover::peer_uids`].
    pub fn allowed_uids(&self) -> Vec<u32> {
        let mut uids = super::default_allowed_uids();
        for uid in &self.peer_uids {
            if !uids.contains(uid) {
                uids.push(*uid);
            }
        }
        uids
    }

    /// The mode of the socket this service serves: its owner's alone in user mode; in system
    /// mode (started with an [`ExpectedIdentity`]) anyone's, because the socket's directory,
    /// made by the supervisor with the peer's group, decides who reaches it (see
    /// `glovebox_config::StateDir`).
    pub fn socket_mode(&self) -> u32 {
        if self.expect.is_some() { 0o666 } else { 0o600 }
    }

    /// The key to call `socket` with, and the peer name it was granted to.
    pub fn calling(&self, socket: &str) -> Result<(String, SocketKey), HandoverError> {
        self.call
            .iter()
            .find(|g| g.socket == socket)
            .and_then(|g| Some((g.peer.clone(), SocketKey::from_hex(&g.key).ok()?)))
            .ok_or_else(|| HandoverError::NoKey(socket.to_owned()))
    }
}

/// What the supervisor writes to the broker's standard input after its handover, one JSON line
/// each time the accounts added at run time change (and right after the handover of a restarted
/// broker): every added account as it is now. An account missing from it is gone: its tokens
/// stop authenticating and its connections close.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountsUpdate {
    pub accounts: Vec<AddedAccount>,
    /// The broker's keys on those accounts' executor and pack host sockets.
    pub call: Vec<Grant>,
}

/// One account added at run time, as the broker needs it.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddedAccount {
    pub id: String,
    /// Hex SHA-256 of each agent credential.
    pub token_sha256: Vec<String>,
    /// Hex SHA-256 of each approver credential.
    pub approver_token_sha256: Vec<String>,
    pub executor_socket: String,
    pub packs_socket: String,
    /// System mode: the uid of its owner, who approves for it and reads its agent token on the
    /// approve socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_uid: Option<u32>,
}

impl std::fmt::Debug for AccountsUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.accounts.iter().map(|a| a.id.as_str()).collect();
        f.debug_struct("AccountsUpdate")
            .field("accounts", &ids)
            .finish_non_exhaustive()
    }
}

impl AccountsUpdate {
    /// The one JSON line written to the broker's stdin.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// Parses an update line; every key must be well-formed.
    pub fn parse(line: &str) -> Result<AccountsUpdate, HandoverError> {
        if line.len() > MAX_HANDOVER_BYTES {
            return Err(HandoverError::TooLong);
        }
        let u: AccountsUpdate =
            serde_json::from_str(line.trim()).map_err(|e| HandoverError::Invalid(e.to_string()))?;
        for g in &u.call {
            SocketKey::from_hex(&g.key)
                .map_err(|e| HandoverError::Invalid(format!("{}/{}: {e}", g.socket, g.peer)))?;
        }
        Ok(u)
    }

    /// The key to call `socket` with, and the peer name it was granted to.
    pub fn calling(&self, socket: &str) -> Result<(String, SocketKey), HandoverError> {
        self.call
            .iter()
            .find(|g| g.socket == socket)
            .and_then(|g| Some((g.peer.clone(), SocketKey::from_hex(&g.key).ok()?)))
            .ok_or_else(|| HandoverError::NoKey(socket.to_owned()))
    }
}

/// What the supervisor writes to the gate's standard input after its handover, one JSON line
/// each time the accounts change: who may call the gate's audit socket now, as a whole (the key
/// of every account's executor and pack host, and in system mode the uids they run as). A peer
/// an update no longer names is refused at its next handshake; the gate refuses its calls on
/// connections already open by its own account table.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditPeers {
    /// Keys on [`socket::AUDIT`], each of an `executor:<id>` or `packs:<id>` peer.
    pub serve: Vec<Grant>,
    /// The uids, besides the gate's own and root, whose connections the audit socket accepts.
    #[serde(default)]
    pub peer_uids: Vec<u32>,
}

impl std::fmt::Debug for AuditPeers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let peers: Vec<&str> = self.serve.iter().map(|g| g.peer.as_str()).collect();
        f.debug_struct("AuditPeers")
            .field("peers", &peers)
            .field("peer_uids", &self.peer_uids)
            .finish()
    }
}

impl AuditPeers {
    /// The one JSON line written to the gate's stdin.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// Parses an update line: every key well-formed, every grant an account's service on the
    /// audit socket (an update cannot grant the broker, the supervisor or an administrator).
    pub fn parse(line: &str) -> Result<AuditPeers, HandoverError> {
        if line.len() > MAX_HANDOVER_BYTES {
            return Err(HandoverError::TooLong);
        }
        let u: AuditPeers =
            serde_json::from_str(line.trim()).map_err(|e| HandoverError::Invalid(e.to_string()))?;
        for g in &u.serve {
            let account = g
                .peer
                .strip_prefix("executor:")
                .or_else(|| g.peer.strip_prefix("packs:"));
            if g.socket != socket::AUDIT || account.is_none_or(str::is_empty) {
                return Err(HandoverError::Invalid(format!(
                    "{}/{}: not an account's service on the audit socket",
                    g.socket, g.peer
                )));
            }
            SocketKey::from_hex(&g.key)
                .map_err(|e| HandoverError::Invalid(format!("{}/{}: {e}", g.socket, g.peer)))?;
        }
        Ok(u)
    }

    /// The keys the audit socket accepts under this update.
    pub fn server_keys(&self) -> super::ServerKeys {
        super::ServerKeys::new(
            self.serve
                .iter()
                .filter_map(|g| Some((g.peer.clone(), SocketKey::from_hex(&g.key).ok()?))),
        )
    }
}

/// The control key of one state directory, and who may call whom: the one place the topology of
/// glovebox's control sockets is written down.
///
/// | socket | served by | peers |
/// | --- | --- | --- |
/// | `gate` | the gate | `broker` (Gate, Audit), `supervisor` (Audit: service events) |
/// | `admin` | the gate | `admin` (`glovebox policy`) |
/// | `audit` | the gate | `executor:<id>` for each account (Audit: its own execute rows, and a built-in call's execute and result rows together with the call's ticket; ExecutorGate: the verdict on a call the broker vouched for), `packs:<id>` (Audit: its own execute rows; PackSupport: its account's mcp.json, trust, secrets) |
/// | `executor:<id>` | that account's executor | `broker` (Run; Preview and Execute after an ask; Plan for the console, PlanPaths for packs), `admin` (Plan only: `policy explain`) |
/// | `packs:<id>` | that account's pack host | `broker`, `admin` (List and Reload only) |
pub struct ControlKeys(Vec<u8>);

impl std::fmt::Debug for ControlKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlKeys(<redacted>)")
    }
}

impl ControlKeys {
    pub fn from_bytes(bytes: &[u8]) -> Result<ControlKeys, super::handshake::BadKey> {
        if bytes.len() != super::handshake::KEY_BYTES {
            return Err(super::handshake::BadKey);
        }
        Ok(ControlKeys(bytes.to_vec()))
    }

    /// The key of `peer` on `socket`.
    pub fn key(&self, socket: &str, peer: &str) -> SocketKey {
        SocketKey::derive(&self.0, socket, peer)
    }

    /// The gate's handover: the keys of everyone who may call its three sockets.
    pub fn for_gate<'a>(&self, accounts: impl IntoIterator<Item = &'a str>) -> Handover {
        let mut h = Handover::default();
        for p in [peer::BROKER, peer::SUPERVISOR] {
            h.serve(socket::GATE, p, &self.key(socket::GATE, p));
        }
        h.serve(
            socket::ADMIN,
            peer::ADMIN,
            &self.key(socket::ADMIN, peer::ADMIN),
        );
        h.serve.extend(self.audit_peers(accounts, Vec::new()).serve);
        h
    }

    /// The gate's audit socket peers: the executor and pack host of each of `accounts`, and
    /// `peer_uids` (what the gate is told when the accounts change).
    pub fn audit_peers<'a>(
        &self,
        accounts: impl IntoIterator<Item = &'a str>,
        peer_uids: Vec<u32>,
    ) -> AuditPeers {
        let mut h = Handover::default();
        for account in accounts {
            for p in [peer::executor(account), peer::packs(account)] {
                h.serve(socket::AUDIT, &p, &self.key(socket::AUDIT, &p));
            }
        }
        AuditPeers {
            serve: h.serve,
            peer_uids,
        }
    }

    /// The broker's handover: how it calls the gate and each account's executor.
    pub fn for_broker<'a>(&self, accounts: impl IntoIterator<Item = &'a str>) -> Handover {
        let mut h = Handover::default();
        h.call(
            socket::GATE,
            peer::BROKER,
            &self.key(socket::GATE, peer::BROKER),
        );
        for account in accounts {
            for s in [socket::executor(account), socket::packs(account)] {
                h.call(&s, peer::BROKER, &self.key(&s, peer::BROKER));
            }
        }
        h
    }

    /// The broker's update for the accounts added at run time: `accounts`, with the broker's keys
    /// on their executors and pack hosts (and nothing else).
    pub fn accounts_update(&self, accounts: Vec<AddedAccount>) -> AccountsUpdate {
        let ids: Vec<&str> = accounts.iter().map(|a| a.id.as_str()).collect();
        let mut h = self.for_broker(ids);
        h.call.retain(|g| g.socket != socket::GATE);
        AccountsUpdate {
            accounts,
            call: h.call,
        }
    }

    /// One executor's handover: its ticket key, the broker's and the administrator's keys on its
    /// socket, and its own key on the gate's audit socket.
    pub fn for_executor(&self, account: &str, ticket_key_hex: String) -> Handover {
        let mut h = Handover {
            ticket_key: Some(ticket_key_hex),
            ..Default::default()
        };
        let s = socket::executor(account);
        for p in [peer::BROKER, peer::ADMIN] {
            h.serve(&s, p, &self.key(&s, p));
        }
        let p = peer::executor(account);
        h.call(socket::AUDIT, &p, &self.key(socket::AUDIT, &p));
        h
    }

    /// One pack host's handover: its account's pack ticket key (never the executor's), the
    /// broker's and the administrator's keys on its socket, and its own key on the gate's audit
    /// socket.
    pub fn for_packs(&self, account: &str, ticket_key_hex: String) -> Handover {
        let mut h = Handover {
            ticket_key: Some(ticket_key_hex),
            ..Default::default()
        };
        let s = socket::packs(account);
        for p in [peer::BROKER, peer::ADMIN] {
            h.serve(&s, p, &self.key(&s, p));
        }
        let p = peer::packs(account);
        h.call(socket::AUDIT, &p, &self.key(socket::AUDIT, &p));
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handover_round_trips_and_never_prints_keys() {
        let k = SocketKey::derive(b"c", socket::GATE, peer::BROKER);
        let mut h = Handover {
            ticket_key: Some("aa".repeat(32)),
            ..Default::default()
        };
        h.serve(socket::GATE, peer::BROKER, &k)
            .call(socket::AUDIT, &peer::executor("a"), &k);
        let line = h.to_line();
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let back = Handover::read_from(format!("{line}lifeline bytes").as_bytes()).unwrap();
        assert_eq!(back.ticket_key, h.ticket_key);
        assert!(!back.served_on(socket::GATE).is_empty());
        assert!(back.served_on(socket::ADMIN).is_empty());
        assert_eq!(
            back.calling(socket::AUDIT).unwrap(),
            ("executor:a".to_owned(), k.clone())
        );
        assert!(matches!(
            back.calling(socket::GATE),
            Err(HandoverError::NoKey(_))
        ));
        let shown = format!("{back:?}");
        assert!(
            !shown.contains(&k.to_hex()) && !shown.contains("aaaa"),
            "{shown}"
        );
    }

    #[test]
    fn each_service_gets_only_the_keys_of_its_own_sockets() {
        let keys = ControlKeys::from_bytes(&[3u8; 32]).unwrap();
        let exec = keys.for_executor("alice", "00".repeat(32));
        let line = exec.to_line();
        // The executor can serve the broker and the administrator on its own socket and call the
        // audit socket as itself, nothing else.
        let served: Vec<(&str, &str)> = exec
            .serve
            .iter()
            .map(|g| (g.socket.as_str(), g.peer.as_str()))
            .collect();
        assert_eq!(
            served,
            [
                ("executor:alice", peer::BROKER),
                ("executor:alice", peer::ADMIN)
            ]
        );
        let on_alice = socket::executor("alice");
        for p in [peer::BROKER, peer::ADMIN] {
            assert!(line.contains(&keys.key(&on_alice, p).to_hex()), "{p}");
        }
        assert!(!line.contains(&keys.key(socket::GATE, peer::BROKER).to_hex()));
        assert!(!line.contains(&keys.key(socket::ADMIN, peer::ADMIN).to_hex()));
        assert!(!line.contains(&keys.key(&socket::executor("bob"), peer::BROKER).to_hex()));
        assert!(!line.contains(&keys.key(&socket::executor("bob"), peer::ADMIN).to_hex()));
        assert!(!line.contains(&keys.key(socket::AUDIT, &peer::executor("bob")).to_hex()));
        // The administrator's key on one socket is worth nothing on another.
        assert_ne!(
            keys.key(&on_alice, peer::ADMIN).to_hex(),
            keys.key(socket::ADMIN, peer::ADMIN).to_hex()
        );
        assert_eq!(
            exec.calling(socket::AUDIT).unwrap(),
            (
                "executor:alice".to_owned(),
                keys.key(socket::AUDIT, "executor:alice")
            )
        );
        let broker = keys.for_broker(["alice", "bob"]).to_line();
        assert!(!broker.contains(&keys.key(socket::ADMIN, peer::ADMIN).to_hex()));
        assert!(!broker.contains(&keys.key(&on_alice, peer::ADMIN).to_hex()));
        assert!(!broker.contains(&keys.key(socket::GATE, peer::SUPERVISOR).to_hex()));
        assert!(ControlKeys::from_bytes(&[0u8; 31]).is_err());
    }

    #[test]
    fn a_pack_host_gets_its_own_socket_and_audit_keys_only() {
        let keys = ControlKeys::from_bytes(&[5u8; 32]).unwrap();
        let packs = keys.for_packs("alice", "11".repeat(32));
        let served: Vec<(&str, &str)> = packs
            .serve
            .iter()
            .map(|g| (g.socket.as_str(), g.peer.as_str()))
            .collect();
        assert_eq!(
            served,
            [("packs:alice", peer::BROKER), ("packs:alice", peer::ADMIN)]
        );
        assert_eq!(
            packs.calling(socket::AUDIT).unwrap(),
            (
                "packs:alice".to_owned(),
                keys.key(socket::AUDIT, "packs:alice")
            )
        );
        let line = packs.to_line();
        // Not the executor's socket keys, nor another account's, nor the gate's.
        assert!(!line.contains(&keys.key(&socket::executor("alice"), peer::BROKER).to_hex()));
        assert!(!line.contains(&keys.key(&socket::packs("bob"), peer::BROKER).to_hex()));
        assert!(!line.contains(&keys.key(socket::AUDIT, "executor:alice").to_hex()));
        assert!(!line.contains(&keys.key(socket::GATE, peer::BROKER).to_hex()));
        // The gate accepts the pack host on its audit socket; the broker can call it.
        assert!(
            keys.for_gate(["alice"])
                .serve
                .iter()
                .any(|g| g.socket == socket::AUDIT && g.peer == "packs:alice")
        );
        assert!(keys.for_broker(["alice"]).calling("packs:alice").is_ok());
    }

    #[test]
    fn an_accounts_update_carries_only_the_added_accounts_keys() {
        let keys = ControlKeys::from_bytes(&[9u8; 32]).unwrap();
        let update = keys.accounts_update(vec![AddedAccount {
            id: "new".into(),
            token_sha256: vec!["ab".repeat(32)],
            ..Default::default()
        }]);
        let line = update.to_line();
        let back = AccountsUpdate::parse(&line).unwrap();
        assert_eq!(
            back.calling(&socket::executor("new")).unwrap().1,
            keys.key(&socket::executor("new"), peer::BROKER)
        );
        assert!(back.calling(&socket::packs("new")).is_ok());
        assert!(back.calling(socket::GATE).is_err());
        assert!(back.calling(&socket::executor("other")).is_err());
        assert!(!line.contains(&keys.key(socket::GATE, peer::BROKER).to_hex()));
        let shown = format!("{back:?}");
        assert!(
            !shown.contains(&"ab".repeat(32)) && shown.contains("new"),
            "{shown}"
        );
        assert!(AccountsUpdate::parse(r#"{"accounts":[],"call":[],"x":1}"#).is_err());
        assert!(AccountsUpdate::parse(&"x".repeat(MAX_HANDOVER_BYTES + 1)).is_err());
    }

    #[test]
    fn an_audit_peers_update_grants_only_accounts_services_on_the_audit_socket() {
        let keys = ControlKeys::from_bytes(&[6u8; 32]).unwrap();
        let update = keys.audit_peers(["new"], vec![1234]);
        let line = update.to_line();
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let back = AuditPeers::parse(&line).unwrap();
        assert_eq!(back.peer_uids, [1234]);
        let served = back.server_keys();
        assert_eq!(
            served.get("executor:new"),
            Some(keys.key(socket::AUDIT, "executor:new"))
        );
        assert!(served.contains("packs:new") && !served.contains("executor:other"));
        // The same keys the gate's handover grants for that account.
        let handover = keys.for_gate(["new"]).served_on(socket::AUDIT);
        assert_eq!(handover.get("packs:new"), served.get("packs:new"));
        assert!(!format!("{back:?}").contains(&keys.key(socket::AUDIT, "packs:new").to_hex()));
        let k = "ab".repeat(32);
        for bad in [
            format!(r#"{{"serve":[{{"socket":"gate","peer":"executor:a","key":"{k}"}}]}}"#),
            format!(r#"{{"serve":[{{"socket":"audit","peer":"broker","key":"{k}"}}]}}"#),
            format!(r#"{{"serve":[{{"socket":"audit","peer":"executor:","key":"{k}"}}]}}"#),
            r#"{"serve":[{"socket":"audit","peer":"executor:a","key":"zz"}]}"#.to_owned(),
            r#"{"serve":[],"extra":1}"#.to_owned(),
            "x".repeat(MAX_HANDOVER_BYTES + 1),
        ] {
            assert!(AuditPeers::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_handovers_are_refused() {
        assert!(matches!(
            Handover::read_from(&b""[..]),
            Err(HandoverError::Missing)
        ));
        assert!(matches!(
            Handover::parse("{nope"),
            Err(HandoverError::Invalid(_))
        ));
        assert!(matches!(
            Handover::parse(r#"{"serve":[{"socket":"gate","peer":"broker","key":"zz"}]}"#),
            Err(HandoverError::Invalid(_))
        ));
        assert!(matches!(
            Handover::parse(r#"{"extra":1}"#),
            Err(HandoverError::Invalid(_))
        ));
        let long = vec![b'x'; MAX_HANDOVER_BYTES + 1];
        assert!(matches!(
            Handover::read_from(&long[..]),
            Err(HandoverError::TooLong)
        ));
    }
}
