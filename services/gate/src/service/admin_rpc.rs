//! The `GateAdmin` service, for administrators on the admin socket: rule management, explain,
//! enablement (the logic is in `crate::admin`).

use super::prelude::*;

/// Who changes secrets over the control socket, as the audit says it.
const ADMINISTRATOR: &str = "the administrator";

/// The `GateAdmin` service: rule management and explain (see `admin.rs`), on the admin socket.
#[derive(Clone)]
pub struct AdminService(pub Arc<GateState>);

#[tonic::async_trait]
impl pb::gate_admin_server::GateAdmin for AdminService {
    async fn list_rules(
        &self,
        request: Request<ListRulesRequest>,
    ) -> Result<Response<ListRulesResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let r = self.0.list_rules(&request.into_inner().account).await?;
        Ok(Response::new(r))
    }

    async fn add_rule(
        &self,
        request: Request<AddRuleRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(self.0.add_rule(request.into_inner()).await?))
    }

    async fn revoke_rule(
        &self,
        request: Request<RevokeRuleRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(
            self.0.revoke_rule(request.into_inner()).await?,
        ))
    }

    async fn reset_rules(
        &self,
        request: Request<ResetRulesRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let account = request.into_inner().account;
        Ok(Response::new(self.0.reset_rules(&account).await?))
    }

    async fn set_confinement(
        &self,
        request: Request<SetConfinementRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let r = request.into_inner();
        let resp = self
            .0
            .set_switch(&r.account, "confine_to_workdir", r.enabled)
            .await?;
        Ok(Response::new(resp))
    }

    async fn set_sandbox(
        &self,
        request: Request<SetSandboxRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let r = request.into_inner();
        let resp = self.0.set_sandbox(&r.account, r.enabled, r.confirm).await?;
        Ok(Response::new(resp))
    }

    async fn set_enabled(
        &self,
        request: Request<pb::SetEnabledRequest>,
    ) -> Result<Response<pb::SetEnabledResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let r = request.into_inner();
        self.0
            .set_enabled(&known_account(&r.account)?, r.enabled, "admin")
            .await?;
        Ok(Response::new(pb::SetEnabledResponse { enabled: r.enabled }))
    }

    async fn explain(
        &self,
        request: Request<ExplainRequest>,
    ) -> Result<Response<ExplainResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(self.0.explain(request.into_inner()).await?))
    }

    async fn set_secret(
        &self,
        request: Request<pb::SetSecretRequest>,
    ) -> Result<Response<pb::SecretChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(
            self.0
                .set_secret(request.into_inner(), ADMINISTRATOR)
                .await?,
        ))
    }

    async fn remove_secret(
        &self,
        request: Request<pb::RemoveSecretRequest>,
    ) -> Result<Response<pb::SecretChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(
            self.0
                .remove_secret(request.into_inner(), ADMINISTRATOR)
                .await?,
        ))
    }

    async fn list_secrets(
        &self,
        request: Request<pb::ListSecretsRequest>,
    ) -> Result<Response<pb::ListSecretsResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(self.0.list_secrets(request.into_inner())?))
    }

    async fn set_pack(
        &self,
        request: Request<pb::SetPackRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(
            self.0.set_pack(request.into_inner(), ADMINISTRATOR).await?,
        ))
    }

    async fn remove_pack(
        &self,
        request: Request<pb::RemovePackRequest>,
    ) -> Result<Response<PolicyChangeResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(
            self.0
                .remove_pack(request.into_inner(), ADMINISTRATOR)
                .await?,
        ))
    }

    async fn add_account(
        &self,
        request: Request<pb::AddAccountRequest>,
    ) -> Result<Response<pb::AddAccountResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let uid = actor_uid(&request)?;
        Ok(Response::new(
            self.0.add_account(request.into_inner(), uid).await?,
        ))
    }

    async fn remove_account(
        &self,
        request: Request<pb::RemoveAccountRequest>,
    ) -> Result<Response<pb::RemoveAccountResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let uid = actor_uid(&request)?;
        self.0.remove_account(&request.into_inner().id, uid).await?;
        Ok(Response::new(pb::RemoveAccountResponse {}))
    }

    async fn update_account(
        &self,
        request: Request<pb::UpdateAccountRequest>,
    ) -> Result<Response<pb::UpdateAccountResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let uid = actor_uid(&request)?;
        Ok(Response::new(
            self.0.update_account(request.into_inner(), uid).await?,
        ))
    }

    async fn rotate_token(
        &self,
        request: Request<pb::RotateTokenRequest>,
    ) -> Result<Response<pb::RotateTokenResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        let uid = actor_uid(&request)?;
        Ok(Response::new(
            self.0.rotate_token(request.into_inner(), uid).await?,
        ))
    }

    async fn list_accounts(
        &self,
        request: Request<pb::ListAccountsRequest>,
    ) -> Result<Response<pb::ListAccountsResponse>, Status> {
        require_peer(&request, &[ADMIN])?;
        Ok(Response::new(self.0.list_accounts()?))
    }
}

/// The kernel's uid of the administrator making a change, for its audit row.
fn actor_uid<T>(request: &Request<T>) -> Result<u32, Status> {
    glovebox_proto::transport::peer_uid_of(request)
        .ok_or_else(|| Status::unauthenticated("the connection was not authenticated"))
}
