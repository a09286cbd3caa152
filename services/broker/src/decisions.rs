//! The broker's `Gate.Decide` calls as messages on one stream it keeps open to the gate
//! (`Gate.Decisions`, see `glovebox_proto::transport::messages`), instead of an HTTP/2 stream per
//! decision: a client tool's or a pack tool's (a built-in tool's call is decided by its executor,
//! which asks the gate itself). A decision the broker gives up on is forgotten; the gate makes
//! and audits it all the same, as it would a `Decide` whose caller went away.

use glovebox_proto::transport::Link;
use glovebox_proto::transport::messages::{Decisions, MessageClient, status_of};
use glovebox_proto::v1::{self as pb, decide_answer::Body as Answer};
use tonic::Status;
use tracing::Instrument;

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

    /// `Gate.Decide`, as a message on the stream.
    pub async fn decide(&self, request: pb::DecideRequest) -> Result<pb::DecideResponse, Status> {
        let (span, trace) =
            glovebox_telemetry::propagation::message_client_span("glovebox.v1.Gate", "Decide");
        let answer = self
            .stream
            .call(|id| pb::DecideCall {
                id,
                trace,
                decide: Some(request),
            })
            .instrument(span)
            .await?;
        match answer.body {
            Some(Answer::Decided(decided)) => Ok(decided),
            Some(Answer::Error(status)) => Err(status_of(status)),
            None => Err(Status::internal("the gate sent an empty answer")),
        }
    }
}
