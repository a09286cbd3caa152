//! The pack host's line to the gate, on the gate's audit socket as `packs:<account>`: the
//! account's own `mcp.json` (which the pack host cannot read: the state directory is the gate's),
//! followed as it changes; whether a project pack is trusted; the values of the secrets a pack
//! names, at its start; the verdicts on the calls the broker hands it in one hop and the audit
//! rows of the calls it makes (`ExecutorGate.Calls`, one stream).

use std::collections::BTreeMap;
use std::time::Duration;

use glovebox_proto::transport::Link as Channel;
use glovebox_proto::transport::gate_calls::GateCalls;
use glovebox_proto::transport::{SocketKey, authenticated_channel};
use glovebox_proto::v1::{
    PackConfig, PackConfigRequest, PackSecretsRequest, PackTrustQuery, TrustSubject,
    audit_client::AuditClient, pack_support_client::PackSupportClient,
};
use tokio::sync::watch;

/// Longest a request to the gate may take.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause before following the configuration again after the gate went away (doubling to 2 s).
const RECONNECT_START: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// What the pack host knows of the account's own `mcp.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserFile {
    /// Not heard from the gate yet (or it went away before saying).
    Unknown,
    Known(PackConfig),
}

/// A project pack's trust, as the gate says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    Always,
    Once,
    /// Refused (the approver said no, or did not answer in time) until the packs are reloaded.
    No,
    /// Not asked yet.
    Unknown,
}

#[derive(Clone)]
pub struct GateLink {
    support: PackSupportClient<Channel>,
    pub audit: AuditClient<Channel>,
    /// Verdicts on vouched calls and a call's last rows, as messages on one stream.
    pub calls: GateCalls,
}

fn request<T>(message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(GATE_TIMEOUT);
    r
}

impl GateLink {
    pub fn new(audit_socket: &std::path::Path, peer: &str, key: SocketKey) -> GateLink {
        let channel = authenticated_channel(audit_socket, peer, key);
        GateLink {
            support: PackSupportClient::new(channel.clone()),
            audit: AuditClient::new(channel.clone()),
            calls: GateCalls::new(channel),
        }
    }

    /// Follows the account's `mcp.json` for as long as the process runs, reconnecting when the
    /// gate restarts. Returns the receiving end.
    pub fn follow_user_file(&self) -> watch::Receiver<UserFile> {
        let (tx, rx) = watch::channel(UserFile::Unknown);
        let mut client = self.support.clone();
        tokio::spawn(async move {
            let mut pause = RECONNECT_START;
            loop {
                match client.watch_config(PackConfigRequest {}).await {
                    Ok(stream) => {
                        let mut stream = stream.into_inner();
                        while let Ok(Some(config)) = stream.message().await {
                            pause = RECONNECT_START;
                            tx.send_if_modified(|now| {
                                let changed = *now != UserFile::Known(config.clone());
                                *now = UserFile::Known(config);
                                changed
                            });
                        }
                    }
                    Err(status) => {
                        tracing::debug!(error = %status.message(), "cannot follow mcp.json at the gate yet");
                    }
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RECONNECT_MAX);
            }
        });
        rx
    }

    /// Whether the approver trusted `subject`; with `forget_refusals`, the account's refusals are
    /// forgotten first.
    pub async fn trust(
        &self,
        subject: TrustSubject,
        forget_refusals: bool,
    ) -> Result<Trust, String> {
        let answer = self
            .support
            .clone()
            .trust(request(PackTrustQuery {
                subject: Some(subject),
                forget_refusals,
            }))
            .await
            .map_err(|s| format!("the gate is unavailable ({})", s.message()))?
            .into_inner();
        Ok(match answer.trust.as_str() {
            "always" => Trust::Always,
            "once" => Trust::Once,
            "no" => Trust::No,
            _ => Trust::Unknown,
        })
    }

    /// The values of `names` (secrets of the account); a missing one is simply absent.
    pub async fn secrets(&self, names: &[String]) -> Result<BTreeMap<String, String>, String> {
        let response = self
            .support
            .clone()
            .secrets(request(PackSecretsRequest {
                names: names.to_vec(),
            }))
            .await
            .map_err(|s| {
                format!(
                    "the pack's secrets could not be fetched: the gate is unavailable ({})",
                    s.message()
                )
            })?
            .into_inner();
        Ok(response.values.into_iter().collect())
    }
}
