//! What every service of the gate names: the shared state and its checks, the wire types and
//! tonic's, in one import (`use super::prelude::*`) for the service modules.

pub(super) use std::sync::Arc;
pub(super) use std::time::Instant;

pub(super) use glovebox_policy::Decision;
pub(super) use glovebox_policy::permissions::Section;
pub(super) use glovebox_proto::transport::{require_peer, required};
pub(super) use glovebox_proto::v1::{
    self as pb, AccountInfoRequest, AccountInfoResponse, AddRuleRequest, Answer, AppendAck,
    AuditEvent, DecideRequest, DecideResponse, ExplainRequest, ExplainResponse, HealthRequest,
    HealthResponse, ListRulesRequest, ListRulesResponse, Plan, PolicyChangeResponse,
    ResetRulesRequest, ResolveRequest, ResolveResponse, RevokeRuleRequest, SetConfinementRequest,
    SetSandboxRequest, TicketBody, ToolCall,
};
pub(super) use glovebox_ticket::{MasterKey, TICKET_TTL_MS};
pub(super) use tonic::{Request, Response, Status};

pub(super) use crate::judge;
pub(super) use glovebox_proto::transport::handover::peer::{ADMIN, BROKER, SUPERVISOR};

pub(super) use super::state::*;
