//! The broker's decisions as messages on one stream it keeps open to the gate (`Gate.Decisions`,
//! see `glovebox_proto::transport::messages`), instead of an HTTP/2 stream per decision: a client
//! tool's or a pack tool's (a built-in tool's call is decided by its executor, which asks the gate
//! itself). A decision the broker gives up on is forgotten; the gate makes and audits it all the
//! same.

use glovebox_proto::transport::Link;
use glovebox_proto::transport::messages::{Decisions, MessageClient};
use glovebox_proto::v1 as pb;
use tonic::Status;

/// The stream of decisions to the gate. Cheap to clone; clones share the stream.
#[derive(Clone)]
pub struct GateDecisions {
    stream: MessageClient<Decisions>,
}

impl GateDecisions {
    pub fn new(link: Link) -> GateDecisions {
        GateDecisions {
            stream: MessageClient::new(link),
        }
    }

    /// The gate's verdict on a planned call, as a message on the stream.
    pub async fn decide(&self, request: pb::DecideRequest) -> Result<pb::DecideResponse, Status> {
        self.stream.decide(request).await
    }
}
