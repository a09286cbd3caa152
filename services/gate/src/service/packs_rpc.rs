//! MCP tool packs at the gate: the `PackSupport` service for pack hosts (on the audit socket; the
//! account is the peer's, `packs:<account>`, never the request's), and what the broker and
//! administrators ask of it — recording a trust answer (`Gate.ResolveTrust`), managing secrets
//! (`GateAdmin.SetSecret|RemoveSecret|ListSecrets`) and the account's own packs
//! (`SetPack|RemovePack`, its `mcp.json`). Every change is audited; a secret only by its name, a
//! pack by its command or address, never its environment's values.

use std::pin::Pin;

use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use glovebox_proto::v1::{
    ListSecretsRequest, ListSecretsResponse, PackConfig, PackConfigRequest, PackSecretsRequest,
    PackSecretsResponse, PackTrustAnswer, PackTrustQuery, RemovePackRequest, RemoveSecretRequest,
    ResolveTrustRequest, ResolveTrustResponse, SecretChangeResponse, SetPackRequest,
    SetSecretRequest, TrustSubject,
};
use tokio_stream::Stream;

use super::prelude::*;
use glovebox_proto::ws::manage::MAX_PACK_DEFINITION_BYTES;

use crate::packs::EditError;
use crate::packs::secrets::SecretError;
use crate::packs::trust::Trust;

/// Most secret names a pack host may ask for at once.
const MAX_SECRETS_ASKED: usize = 256;

/// The `PackSupport` service, for pack hosts.
#[derive(Clone)]
pub struct PackSupportService(pub Arc<GateState>);

/// The account of a pack host's connection, while that account is served.
fn pack_host<T>(state: &GateState, request: &Request<T>) -> Result<String, Status> {
    match glovebox_proto::transport::peer_of(request) {
        Some(peer) if !state.account_peer_current(peer) => Err(Status::permission_denied(format!(
            "{peer} is no longer served"
        ))),
        Some(peer) => peer
            .strip_prefix("packs:")
            .map(str::to_owned)
            .ok_or_else(|| Status::permission_denied(format!("{peer} may not call this method"))),
        None => Err(Status::unauthenticated(
            "the connection was not authenticated",
        )),
    }
}

/// How the audit shows a trust subject: the pack, its command line (secrets masked) and where.
fn trust_text(s: &TrustSubject) -> String {
    let mut line = vec![s.command.clone()];
    line.extend(s.args.iter().cloned());
    format!(
        "pack {}: {} (cwd {}, network {}, env {})",
        s.pack,
        crate::redact::mask_command(&line.join(" ")),
        s.cwd,
        s.network,
        s.env
            .iter()
            .map(|e| e.split('=').next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// How the audit shows a pack definition: its command line (secrets masked) or address, its
/// network, and the names of its environment and grants, never their values.
fn pack_text(name: &str, def: &serde_json::Value) -> String {
    let field = |k: &str| def.get(k).and_then(serde_json::Value::as_str);
    let list = |k: &str| -> Vec<String> {
        def.get(k)
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let what = match (field("url"), field("command")) {
        (Some(url), _) => crate::redact::mask_command(url),
        (None, command) => {
            let mut line = vec![command.unwrap_or_default().to_owned()];
            line.extend(list("args"));
            crate::redact::mask_command(&line.join(" "))
        }
    };
    let mut said = format!("pack {name}: {what}");
    if let Some(n) = field("network") {
        said.push_str(&format!(", network {n}"));
    }
    let names = |k: &str| -> Vec<String> {
        def.get(k)
            .and_then(serde_json::Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    for (key, shown) in [("env", "env"), ("headers", "headers")] {
        let keys = names(key);
        if !keys.is_empty() {
            said.push_str(&format!(", {shown} {}", keys.join(",")));
        }
    }
    for grant in ["read", "write"] {
        let places = list(grant);
        if !places.is_empty() {
            said.push_str(&format!(", {grant} {}", places.join(",")));
        }
    }
    said
}

fn edit_status(e: EditError) -> Status {
    match e {
        EditError::Refused(why) => Status::invalid_argument(why),
        EditError::Write { path, why } => {
            tracing::error!(%path, error = %why, "write an account's mcp.json");
            Status::internal("could not write the account's mcp.json")
        }
    }
}

fn secret_status(e: SecretError) -> Status {
    match e {
        SecretError::Store(why) => {
            tracing::error!(error = %why, "pack secrets store");
            Status::internal("could not store the secret")
        }
        other => Status::invalid_argument(other.to_string()),
    }
}

impl GateState {
    fn known_account(&self, account: &str) -> Result<(), Status> {
        self.policies
            .workdir(account)
            .map(|_| ())
            .ok_or_else(|| Status::not_found("unknown account"))
    }

    /// Records the approver's answer to a project pack's trust ask, and audits it.
    pub(crate) async fn resolve_trust(
        &self,
        request: ResolveTrustRequest,
    ) -> Result<ResolveTrustResponse, Status> {
        self.known_account(&request.account)?;
        let subject = required(request.subject, "subject")?;
        // A project pack is trusted for the account's own workdir only.
        if self.policies.workdir(&request.account).as_deref() != Some(subject.workdir.as_str()) {
            return Err(Status::invalid_argument(
                "the pack is not of the account's workdir",
            ));
        }
        let answer = Answer::try_from(request.answer).unwrap_or(Answer::Unspecified);
        let trust = tokio::task::block_in_place(|| {
            self.packs.trust.resolve(&request.account, &subject, answer)
        })
        .map_err(|e| {
            tracing::error!(error = %e, "could not store a trusted pack");
            Status::internal("could not store the answer")
        })?;
        let approval = match answer {
            Answer::Once => "approved",
            Answer::Always => "approved_always",
            Answer::Deny => "denied",
            Answer::Timeout => "timeout",
            Answer::NoApprover => "no_approver",
            Answer::Cancelled => "cancelled",
            _ => "denied",
        };
        self.audit(AuditEvent {
            account: request.account.clone(),
            source: Source::Gate.into(),
            kind: RowKind::Trust.into(),
            subject: trust_text(&subject),
            approval: approval.into(),
            outcome: trust.outcome().into(),
            detail: format!("project pack of {}", subject.workdir),
            ..Default::default()
        })
        .await;
        Ok(ResolveTrustResponse {
            trusted: matches!(trust, Trust::Always | Trust::Once),
        })
    }

    /// Stores a pack secret; `by` says who, for the audit (`the administrator`, `the account's
    /// approver`).
    pub(crate) async fn set_secret(
        &self,
        request: SetSecretRequest,
        by: &str,
    ) -> Result<SecretChangeResponse, Status> {
        self.known_account(&request.account)?;
        let changed = tokio::task::block_in_place(|| {
            self.packs
                .secrets
                .set(&request.account, &request.name, &request.value)
        })
        .map_err(secret_status)?;
        self.audit_secret(&request.account, &request.name, Outcome::Set, by)
            .await;
        Ok(SecretChangeResponse { changed })
    }

    pub(crate) async fn remove_secret(
        &self,
        request: RemoveSecretRequest,
        by: &str,
    ) -> Result<SecretChangeResponse, Status> {
        self.known_account(&request.account)?;
        let changed = tokio::task::block_in_place(|| {
            self.packs.secrets.remove(&request.account, &request.name)
        })
        .map_err(secret_status)?;
        if changed {
            self.audit_secret(&request.account, &request.name, Outcome::Removed, by)
                .await;
        }
        Ok(SecretChangeResponse { changed })
    }

    pub(crate) fn list_secrets(
        &self,
        request: ListSecretsRequest,
    ) -> Result<ListSecretsResponse, Status> {
        self.known_account(&request.account)?;
        let names = self
            .packs
            .secrets
            .names(&request.account)
            .map_err(secret_status)?;
        Ok(ListSecretsResponse { names })
    }

    /// Adds or replaces a pack in the account's own `mcp.json`, checked as the pack host reads
    /// it; `by` says who, for the audit.
    pub(crate) async fn set_pack(
        &self,
        request: SetPackRequest,
        by: &str,
    ) -> Result<PolicyChangeResponse, Status> {
        use glovebox_config::mcp_json;
        self.known_account(&request.account)?;
        if request.definition.len() > MAX_PACK_DEFINITION_BYTES {
            return Err(Status::invalid_argument(format!(
                "a pack definition is at most {MAX_PACK_DEFINITION_BYTES} bytes"
            )));
        }
        let def: serde_json::Value = serde_json::from_str(&request.definition)
            .map_err(|e| Status::invalid_argument(format!("the definition is not JSON: {e}")))?;
        if !def.is_object() {
            return Err(Status::invalid_argument(
                "a pack definition is a JSON object (`command` and `args`, or `url`)",
            ));
        }
        let (account, name) = (&request.account, &request.name);
        let audited = pack_text(name, &def);
        let mut replaced = false;
        let changed = tokio::task::block_in_place(|| {
            self.packs.edit(account, |text| {
                replaced = mcp_json::without_pack(text, name)
                    .map_err(|e| e.0)?
                    .is_some();
                mcp_json::with_pack(text, name, def)
                    .map(Some)
                    .map_err(|why| format!("pack {name:?} not set: {why}"))
            })
        })
        .map_err(edit_status)?;
        if !changed {
            return Ok(PolicyChangeResponse {
                changed,
                summary: format!("pack {name} of account {account} is already so"),
            });
        }
        let outcome = if replaced {
            Outcome::Replaced
        } else {
            Outcome::Added
        };
        self.audit_pack(account, &audited, outcome, by).await;
        Ok(PolicyChangeResponse {
            changed,
            summary: format!(
                "{outcome} pack {name} of account {account}; it starts on its next use"
            ),
        })
    }

    /// Removes a pack from the account's own `mcp.json`; its server stops.
    pub(crate) async fn remove_pack(
        &self,
        request: RemovePackRequest,
        by: &str,
    ) -> Result<PolicyChangeResponse, Status> {
        use glovebox_config::mcp_json;
        self.known_account(&request.account)?;
        let (account, name) = (&request.account, &request.name);
        let changed = tokio::task::block_in_place(|| {
            self.packs.edit(account, |text| {
                mcp_json::without_pack(text, name).map_err(|e| e.0)
            })
        })
        .map_err(edit_status)?;
        if !changed {
            return Err(Status::not_found(format!(
                "account {account} has no pack {name:?} of its own"
            )));
        }
        self.audit_pack(account, &format!("pack {name}"), Outcome::Removed, by)
            .await;
        Ok(PolicyChangeResponse {
            changed,
            summary: format!("removed pack {name} from account {account}"),
        })
    }

    async fn audit_pack(&self, account: &str, what: &str, outcome: Outcome, by: &str) {
        self.audit(AuditEvent {
            account: account.to_owned(),
            source: Source::Gate.into(),
            kind: RowKind::Pack.into(),
            outcome: outcome.into(),
            detail: format!("{what} (by {by})"),
            ..Default::default()
        })
        .await;
    }

    async fn audit_secret(&self, account: &str, name: &str, outcome: Outcome, by: &str) {
        self.audit(AuditEvent {
            account: account.to_owned(),
            source: Source::Gate.into(),
            kind: RowKind::Secret.into(),
            outcome: outcome.into(),
            detail: format!("pack secret {name} (by {by})"),
            ..Default::default()
        })
        .await;
    }
}

type ConfigStream = Pin<Box<dyn Stream<Item = Result<PackConfig, Status>> + Send>>;

#[tonic::async_trait]
impl pb::pack_support_server::PackSupport for PackSupportService {
    type WatchConfigStream = ConfigStream;

    async fn watch_config(
        &self,
        request: Request<PackConfigRequest>,
    ) -> Result<Response<Self::WatchConfigStream>, Status> {
        let account = pack_host(&self.0, &request)?;
        let rx = self
            .0
            .packs
            .follow(&account)
            .ok_or_else(|| Status::not_found("unknown account"))?;
        // The current file first, then each change.
        let stream = futures_util::stream::unfold((rx, true), |(mut rx, first)| async move {
            if !first && rx.changed().await.is_err() {
                return None;
            }
            let now = rx.borrow_and_update().clone();
            Some((Ok(now), (rx, false)))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn secrets(
        &self,
        request: Request<PackSecretsRequest>,
    ) -> Result<Response<PackSecretsResponse>, Status> {
        let account = pack_host(&self.0, &request)?;
        let names = request.into_inner().names;
        if names.len() > MAX_SECRETS_ASKED {
            return Err(Status::invalid_argument("too many secrets asked for"));
        }
        let values = tokio::task::block_in_place(|| self.0.packs.secrets.values(&account, &names))
            .map_err(secret_status)?;
        let missing = names
            .iter()
            .filter(|n| !values.contains_key(*n))
            .cloned()
            .collect();
        Ok(Response::new(PackSecretsResponse {
            values: values.into_iter().collect(),
            missing,
        }))
    }

    async fn trust(
        &self,
        request: Request<PackTrustQuery>,
    ) -> Result<Response<PackTrustAnswer>, Status> {
        let account = pack_host(&self.0, &request)?;
        let query = request.into_inner();
        if query.forget_refusals {
            self.0.packs.trust.forget_refusals(&account);
        }
        let trust = match &query.subject {
            // A pack of another directory than the account's workdir is never trusted.
            Some(s) if self.0.policies.workdir(&account).as_deref() == Some(s.workdir.as_str()) => {
                tokio::task::block_in_place(|| self.0.packs.trust.get(&account, s))
            }
            _ => Trust::Unknown,
        };
        Ok(Response::new(PackTrustAnswer {
            trust: trust.as_str().to_owned(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_shows_a_trusted_command_with_secrets_masked_and_env_by_name() {
        let s = TrustSubject {
            workdir: "/w".into(),
            pack: "p".into(),
            command: "curl".into(),
            args: vec![
                "-H".into(),
                "Authorization: Bearer abcdef0123456789abcdef".into(),
            ],
            env: vec!["TOKEN=${secret:t}".into(), "MODE=ro".into()],
            cwd: "/w".into(),
            network: "any".into(),
            url: String::new(),
            read: Vec::new(),
            write: Vec::new(),
        };
        let t = trust_text(&s);
        assert!(t.starts_with("pack p: curl -H"), "{t}");
        assert!(!t.contains("abcdef0123456789abcdef"), "{t}");
        assert!(t.ends_with("env TOKEN,MODE)"), "{t}");
    }

    #[test]
    fn a_pack_change_is_audited_by_its_command_and_names_never_values() {
        let def = serde_json::json!({
            "command": "npx",
            "args": ["-y", "server", "--token", "ghp_abcdef0123456789abcdef0123456789"],
            "env": {"API_TOKEN": "${secret:T}", "MODE": "fast-and-loose"},
            "network": "none",
            "read": ["/opt/models"],
        });
        let t = pack_text("p", &def);
        assert!(t.starts_with("pack p: npx -y server --token"), "{t}");
        assert!(!t.contains("abcdef0123456789abcdef"), "{t}");
        assert!(
            !t.contains("fast-and-loose") && !t.contains("secret:T"),
            "{t}"
        );
        assert!(
            t.ends_with(", network none, env API_TOKEN,MODE, read /opt/models"),
            "{t}"
        );
        let http = serde_json::json!({"url": "https://u:pw-9f8e7d6c@mcp.example/x",
            "headers": {"Authorization": "Bearer ${secret:T}"}});
        let t = pack_text("h", &http);
        assert!(!t.contains("pw-9f8e7d6c"), "{t}");
        assert!(t.ends_with(", headers Authorization"), "{t}");
    }
}
