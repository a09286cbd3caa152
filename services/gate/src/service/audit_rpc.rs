//! The `Audit` service: rows from the broker, the supervisor and the executors, each admitted by
//! who the connection proved to be (`admit_audit_event`); an account's executor or pack host
//! only while its account is served (`accounts::live`).

use super::*;

#[tonic::async_trait]
impl pb::audit_server::Audit for AuditService {
    async fn append(&self, request: Request<AuditEvent>) -> Result<Response<AppendAck>, Status> {
        let peer = glovebox_proto::transport::peer_of(&request)
            .ok_or_else(|| Status::unauthenticated("the connection was not authenticated"))?
            .to_owned();
        if !self.0.account_peer_current(&peer) {
            tracing::warn!(%peer, "refused an audit row of a removed account's service");
            return Err(Status::permission_denied(format!(
                "{peer} is no longer served"
            )));
        }
        let mut event = request.into_inner();
        if let Err(why) = admit_audit_event(&peer, &mut event) {
            tracing::warn!(%peer, kind = %event.kind, "refused an audit row");
            return Err(Status::permission_denied(why));
        }
        self.0.audit(event).await;
        Ok(Response::new(AppendAck {}))
    }
}
