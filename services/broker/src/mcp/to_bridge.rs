//! [`ToBridge`]: the broker's side of a handed-over stdio session's connection to its bridge
//! (`glovebox mcp`), on which the broker tells the client's initialization and the session's end.

use glovebox_config::AccountId;
use glovebox_proto::stdio::{MAX_LINE, Told};
use tokio::io::AsyncWriteExt;

/// The broker's side of the bridge's connection, which the session writes to.
pub struct ToBridge {
    write: tokio::net::unix::OwnedWriteHalf,
    /// The client's initialization was told (or came with the handover).
    initialization_told: bool,
    account: AccountId,
}

impl ToBridge {
    /// `initialization_told`: the client's initialization came with the handover (a session
    /// handed over again), so it is not told again.
    pub(super) fn new(
        write: tokio::net::unix::OwnedWriteHalf,
        initialization_told: bool,
        account: AccountId,
    ) -> ToBridge {
        ToBridge {
            write,
            initialization_told,
            account,
        }
    }

    /// Tells the bridge the client's initialization `request`, once, and returns once it is
    /// written (or the bridge is gone): the client is answered only after, so there is no moment
    /// when it is initialized and the bridge could not hand its session to a next broker.
    pub async fn initialized(&mut self, request: &rmcp::model::InitializeRequestParams) {
        if std::mem::replace(&mut self.initialization_told, true) {
            return;
        }
        let Ok(info) = serde_json::value::to_raw_value(request) else {
            return;
        };
        let line = Told::Initialized(info).line();
        // A line the bridge would not read (a client's initialization past the bound) is not
        // sent: the session then cannot be handed to a next broker.
        if line.len() > MAX_LINE {
            tracing::warn!(account = %self.account, "a stdio session's initialization is too long to hand over again");
            return;
        }
        let _ = self.write.write_all(&line).await;
    }

    /// Tells the bridge the client closed its side: the session is over.
    pub(super) async fn ended(&mut self) {
        let _ = self.write.write_all(&Told::Ended.line()).await;
    }
}
