//! The `AccountAdmin` service: an account's approver managing that account's own policy and
//! reading its calls from the audit, through the broker (the web console). The broker is the only
//! peer; the account is the one its approver's credential authenticated. The logic is the
//! administrator's (`crate::admin`); this adds what an approver may not do (reset the file) and an
//! audit row naming the approver for every change.

use glovebox_proto::audit_row::{Outcome, RowKind, Source};
use tokio::sync::OnceCell;

use super::prelude::*;
use crate::audit::query::AuditReader;
use glovebox_proto::v1::{
    AskAgainAboutPacksRequest, AskAgainAboutPacksResponse, CallEventsRequest, CallEventsResponse,
    RecentCallsRequest, RecentCallsResponse,
};

/// The `AccountAdmin` service, on the gate's main socket, for the broker.
/// Who changes secrets through the broker, as the audit says it.
const APPROVER: &str = "the account's approver";

#[derive(Clone)]
pub struct AccountAdminService {
    state: Arc<GateState>,
    /// Opened at the first read (the writer has created and migrated the database by then).
    reader: Arc<OnceCell<AuditReader>>,
}

impl AccountAdminService {
    pub fn new(state: Arc<GateState>) -> AccountAdminService {
        AccountAdminService {
            state,
            reader: Arc::new(OnceCell::new()),
        }
    }

    async fn reader(&self) -> Result<&AuditReader, Status> {
        let path = self.state.state_dir.audit_db();
        self.reader
            .get_or_try_init(|| async move { AuditReader::open(&path).await })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "could not open the audit for reading");
                Status::unavailable("the audit cannot be read")
            })
    }

    fn known(&self, account: &str) -> Result<(), Status> {
        match self.state.policies.workdir(account) {
            Some(_) => Ok(()),
            None => Err(Status::not_found("unknown account")),
        }
    }

    /// Records that the account's approver made `change` (the change itself has its own row).
    async fn by_approver(
        &self,
        account: &str,
        what: &str,
        change: Result<PolicyChangeResponse, Status>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        let change = change?;
        if change.changed {
            self.state
                .audit(AuditEvent {
                    account: account.to_owned(),
                    source: Source::Gate.into(),
                    kind: RowKind::Policy.into(),
                    outcome: Outcome::Approver.into(),
                    detail: format!("{what} by the account's approver: {}", change.summary),
                    ..Default::default()
                })
                .await;
        }
        Ok(Response::new(change))
    }
}

#[tonic::async_trait]
impl pb::account_admin_server::AccountAdmin for AccountAdminService {
    async fn list_rules(
        &self,
        request: Request<ListRulesRequest>,
    ) -> Result<Response<ListRulesResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = self.state.list_rules(&request.into_inner().account).await?;
        Ok(Response::new(r))
    }

    async fn add_rule(
        &self,
        request: Request<AddRuleRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        let account = r.account.clone();
        let change = self.state.add_rule(r).await;
        self.by_approver(&account, "rule added", change).await
    }

    async fn revoke_rule(
        &self,
        request: Request<RevokeRuleRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        let account = r.account.clone();
        let change = self.state.revoke_rule(r).await;
        self.by_approver(&account, "rule revoked", change).await
    }

    async fn set_confinement(
        &self,
        request: Request<SetConfinementRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        let change = self
            .state
            .set_switch(&r.account, "confine_to_workdir", r.enabled)
            .await;
        self.by_approver(&r.account, "confinement switched", change)
            .await
    }

    async fn set_sandbox(
        &self,
        request: Request<SetSandboxRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        let change = self
            .state
            .set_sandbox(&r.account, r.enabled, r.confirm)
            .await;
        self.by_approver(&r.account, "sandbox switched", change)
            .await
    }

    async fn explain(
        &self,
        request: Request<ExplainRequest>,
    ) -> Result<Response<ExplainResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        Ok(Response::new(
            self.state.explain(request.into_inner()).await?,
        ))
    }

    async fn set_secret(
        &self,
        request: Request<pb::SetSecretRequest>,
    ) -> Result<Response<pb::SecretChangeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        Ok(Response::new(self.state.set_secret(r, APPROVER).await?))
    }

    async fn remove_secret(
        &self,
        request: Request<pb::RemoveSecretRequest>,
    ) -> Result<Response<pb::SecretChangeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        Ok(Response::new(self.state.remove_secret(r, APPROVER).await?))
    }

    async fn list_secrets(
        &self,
        request: Request<pb::ListSecretsRequest>,
    ) -> Result<Response<pb::ListSecretsResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        Ok(Response::new(self.state.list_secrets(r)?))
    }

    async fn set_pack(
        &self,
        request: Request<pb::SetPackRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        Ok(Response::new(self.state.set_pack(r, APPROVER).await?))
    }

    async fn remove_pack(
        &self,
        request: Request<pb::RemovePackRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        Ok(Response::new(self.state.remove_pack(r, APPROVER).await?))
    }

    async fn ask_again_about_packs(
        &self,
        request: Request<AskAgainAboutPacksRequest>,
    ) -> Result<Response<AskAgainAboutPacksResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let account = request.into_inner().account;
        self.known(&account)?;
        let forgotten = self.state.packs.trust.forget_refusals(&account);
        self.state
            .audit(AuditEvent {
                account: account.clone(),
                source: Source::Gate.into(),
                kind: RowKind::Trust.into(),
                outcome: Outcome::Unknown.into(),
                detail: format!(
                    "the account's approver asked to be asked again about its refused project \
                     packs ({forgotten} refused)"
                ),
                ..Default::default()
            })
            .await;
        Ok(Response::new(AskAgainAboutPacksResponse {
            forgotten: u32::try_from(forgotten).unwrap_or(u32::MAX),
        }))
    }

    async fn recent_calls(
        &self,
        request: Request<RecentCallsRequest>,
    ) -> Result<Response<RecentCallsResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        let calls = self
            .reader()
            .await?
            .recent_calls(&r.account, r.limit)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "could not read the audit");
                Status::unavailable("the audit cannot be read")
            })?;
        Ok(Response::new(RecentCallsResponse { calls }))
    }

    async fn call_events(
        &self,
        request: Request<CallEventsRequest>,
    ) -> Result<Response<CallEventsResponse>, Status> {
        require_peer(&request, &[BROKER])?;
        let r = request.into_inner();
        self.known(&r.account)?;
        let events = self
            .reader()
            .await?
            .call_events(&r.account, &r.call_id)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "could not read the audit");
                Status::unavailable("the audit cannot be read")
            })?;
        Ok(Response::new(CallEventsResponse { events }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditStore;
    use crate::policies::AccountPolicies;
    use glovebox_proto::v1::account_admin_server::AccountAdmin;

    fn as_peer<T>(message: T, peer: &str) -> Request<T> {
        let mut r = Request::new(message);
        r.extensions_mut()
            .insert(glovebox_proto::transport::Peer(peer.into(), 0));
        r
    }

    #[tokio::test]
    async fn only_the_broker_reaches_an_account_s_own_policy() {
        let dir = tempfile::tempdir().unwrap();
        let state = glovebox_config::StateDir::new(dir.path().join("state"));
        std::fs::create_dir_all(state.permissions_file("alice").parent().unwrap()).unwrap();
        std::fs::write(
            state.permissions_file("alice"),
            "paths:\n  read:\n    allow: ['./**']\n",
        )
        .unwrap();
        let workdir = dir.path().display().to_string();
        let gate = Arc::new(GateState {
            policies: AccountPolicies::new(
                &state,
                vec![crate::policies::AccountPaths::in_workdir("alice", &workdir)],
                Vec::new(),
                Vec::new(),
            ),
            audit: AuditStore::open(&crate::audit::AuditFiles {
                db: state.audit_db(),
                head: state.audit_head(),
                key: crate::audit::chain::AuditKey::from_bytes(&[1u8; 32]).unwrap(),
            })
            .await
            .unwrap(),
            master_key: MasterKey::from_bytes(&[9u8; glovebox_ticket::KEY_BYTES]).unwrap(),
            enablement: crate::enablement::Enablement::new(
                state.clone(),
                [("alice".parse().unwrap(), true)].into(),
            ),
            packs: crate::packs::PackState::new(state.clone(), ["alice".parse().unwrap()]),
            audit_access: Default::default(),
            vouchers: Default::default(),
            deliveries: Default::default(),
            account_changes: Default::default(),
            state_dir: state,
        });
        let service = AccountAdminService::new(gate);
        let sandbox_off = |peer: &str| {
            as_peer(
                SetSandboxRequest {
                    account: "alice".into(),
                    enabled: false,
                    confirm: true,
                },
                peer,
            )
        };
        for peer in ["admin", "supervisor", "executor:alice"] {
            let e = service.set_sandbox(sandbox_off(peer)).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{peer}");
        }
        // Turning the sandbox off needs confirm, from the approver too.
        let unconfirmed = as_peer(
            SetSandboxRequest {
                account: "alice".into(),
                enabled: false,
                confirm: false,
            },
            "broker",
        );
        let e = service.set_sandbox(unconfirmed).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        let unknown = as_peer(
            SetSandboxRequest {
                account: "mallory".into(),
                enabled: true,
                confirm: false,
            },
            "broker",
        );
        let e = service.set_sandbox(unknown).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        let r = service.set_sandbox(sandbox_off("broker")).await.unwrap();
        assert!(r.into_inner().changed);
        let listed = service
            .list_rules(as_peer(
                ListRulesRequest {
                    account: "alice".into(),
                },
                "broker",
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(!listed.sandbox_enabled);
    }
}
