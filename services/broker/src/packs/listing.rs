//! What an account's pack host lists now ([`listing`], which also queues the trust asks of the
//! project packs waiting for one), and each listed tool read as the broker shows it.

use std::time::Instant;

use glovebox_config::AccountId;
use glovebox_proto::tools::catalog::{Hints, ToolInfo};
use glovebox_proto::v1::{self as pb, ListPacksRequest, ListPacksResponse};
use glovebox_proto::ws::ToolAnnotations;

use crate::backends::{Backends, request};
use crate::packs::trust_asks::TrustAsks;

/// What listing an account's packs takes: its pack host (among the backends), and the trust asks
/// a listing queues. A handle, not the broker's `App`.
#[derive(Clone, Copy)]
pub struct PackHosts<'a> {
    pub backends: &'a Backends,
    pub trust_asks: &'a TrustAsks,
}

/// Why the account's packs could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum Unlisted {
    #[error("the account has no pack host")]
    NoPackHost,
    #[error("the account's pack host is unavailable ({0})")]
    Unavailable(String),
}

/// The account's packs as its pack host lists them (starting them), queueing a trust ask for
/// each project pack waiting for one. `Err` when the pack host cannot be reached.
pub async fn listing(
    hosts: PackHosts<'_>,
    account: &AccountId,
) -> Result<ListPacksResponse, Unlisted> {
    let mut packs = hosts.backends.packs(account).ok_or(Unlisted::NoPackHost)?;
    let listed_at = Instant::now();
    let listed = packs
        .list(request(ListPacksRequest {}))
        .await
        .map_err(|s| Unlisted::Unavailable(s.message().to_owned()))?
        .into_inner();
    for waiting in &listed.untrusted {
        if let Some(subject) = &waiting.subject {
            hosts
                .trust_asks
                .request(account, subject.clone(), listed_at);
        }
    }
    Ok(listed)
}

pub(super) fn hints(t: &pb::PackTool) -> Hints {
    Hints {
        read_only: t.read_only,
        destructive: t.destructive,
    }
}

/// A pack tool's hints as MCP spells them (untrusted: they decide nothing).
pub(super) fn annotations(t: &pb::PackTool) -> ToolAnnotations {
    ToolAnnotations {
        read_only_hint: t.read_only,
        destructive_hint: t.destructive,
        idempotent_hint: t.idempotent,
        open_world_hint: t.open_world,
    }
}

/// A JSON text the pack host passed on (`None` when empty or not JSON).
pub(super) fn json_of(text: &str) -> Option<serde_json::Value> {
    (!text.is_empty())
        .then(|| serde_json::from_str(text).ok())
        .flatten()
}

pub(super) fn pack_info(t: &pb::PackTool) -> Result<ToolInfo, glovebox_proto::packs::Unoffered> {
    let schema: serde_json::Value =
        serde_json::from_str(&t.input_schema_json).unwrap_or(serde_json::Value::Null);
    ToolInfo::pack(&t.pack, &t.tool, &t.description, &schema, hints(t))
}
