//! The gate's admin socket as the CLI reaches it: the client proving the administrator's key,
//! the account a command acts on, and a gate error said plainly. Shared by the commands that
//! manage policy, packs and accounts.

use glovebox_config::StateDir;
use glovebox_proto::transport::Link as Channel;
use glovebox_proto::v1::gate_admin_client::GateAdminClient;

/// The account to manage (see `which_account::choose`).
pub(crate) fn account(state: &StateDir, account: Option<String>) -> anyhow::Result<String> {
    crate::which_account::choose_in(state, account)
}

/// [`account`] among the accounts the running gate has (glovebox.yaml's and those added at run
/// time): for the system service, whose configuration file root's command may not see as the
/// service does.
pub(crate) async fn running_account(
    state: &StateDir,
    account: Option<String>,
) -> anyhow::Result<String> {
    let listed = client(state)?
        .list_accounts(glovebox_proto::v1::ListAccountsRequest {})
        .await
        .map_err(gate_error)?
        .into_inner();
    let ids: Vec<String> = listed.accounts.into_iter().map(|a| a.id).collect();
    crate::which_account::choose(
        &ids,
        account,
        &glovebox_supervisor::init::default_account_name(),
    )
    .map_err(anyhow::Error::msg)
}

/// A client of the gate's admin socket, proving the administrator's key (derived from the state
/// directory's control key, which only its owner can read).
pub(crate) fn client(state: &StateDir) -> anyhow::Result<GateAdminClient<Channel>> {
    use glovebox_proto::transport::handover::{peer, socket};
    let keys = crate::control_keys(state)?;
    let channel = glovebox_proto::transport::authenticated_channel(
        &state.admin_socket(),
        peer::ADMIN,
        keys.key(socket::ADMIN, peer::ADMIN),
    );
    Ok(GateAdminClient::new(channel))
}

pub(crate) fn gate_error(status: tonic::Status) -> anyhow::Error {
    match status.code() {
        tonic::Code::Unavailable => {
            anyhow::anyhow!("is glovebox running? the gate is not reachable")
        }
        _ => anyhow::anyhow!("{}", status.message()),
    }
}
