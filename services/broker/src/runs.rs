//! The broker's built-in calls as messages on one stream it keeps open to each executor
//! (`Executor.Runs`, see `glovebox_proto::transport::messages`), instead of an HTTP/2 stream per
//! call. A call the broker gives up on (its client withdrew it, the connection closed) is
//! cancelled on the stream, and the executor stops it.

use glovebox_proto::transport::Link;
use glovebox_proto::transport::messages::{AnsweredElsewhere, MessageClient, Runs};
use glovebox_proto::v1 as pb;
use tonic::Status;

/// One executor's stream of calls. Cheap to clone; clones share the stream.
#[derive(Clone)]
pub struct ExecutorRuns {
    stream: MessageClient<Runs>,
}

impl ExecutorRuns {
    pub fn new(link: Link) -> ExecutorRuns {
        ExecutorRuns {
            stream: MessageClient::new(link),
        }
    }

    /// A built-in call run by the executor (planned, judged and, if allowed, executed), as a
    /// message on the stream. Dropping the future cancels the call.
    pub async fn run(&self, request: pb::RunRequest) -> Result<pb::RunResponse, Status> {
        self.run_unless_answered(request, &AnsweredElsewhere::default())
            .await
    }

    /// [`ExecutorRuns::run`] of a call whose answer the gate may hand over: once `elsewhere` is
    /// set, dropping the future forgets the call without cancelling it (the executor, told by
    /// the gate, sends no answer).
    pub async fn run_unless_answered(
        &self,
        request: pb::RunRequest,
        elsewhere: &AnsweredElsewhere,
    ) -> Result<pb::RunResponse, Status> {
        self.stream.run(request, elsewhere).await
    }

    /// How many calls wait for their answers now.
    pub fn waiting(&self) -> usize {
        self.stream.waiting()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::transport::messages::{AnswerStream, answer_each};
    use glovebox_proto::transport::{
        ServerKeys, SocketKey, authenticated_channel, authenticated_incoming, bind_private_socket,
        default_allowed_uids,
    };
    use glovebox_proto::v1::executor_server::{Executor, ExecutorServer};
    use glovebox_proto::v1::{run_answer::Body as Answer, run_call::Body as Asked};
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tonic::{Request, Response};

    /// An executor whose `Runs` answers each call with its call id as a tool error (`slow` after
    /// 300 ms), except `hold`, which runs until stopped; it reports each call whose work was
    /// dropped.
    struct FakeExecutor {
        dropped: mpsc::UnboundedSender<String>,
    }

    struct Dropped(String, mpsc::UnboundedSender<String>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            let _ = self.1.send(self.0.clone());
        }
    }

    fn only_runs<T>() -> Result<Response<T>, Status> {
        Err(Status::unimplemented("only Runs"))
    }

    #[tonic::async_trait]
    impl Executor for FakeExecutor {
        async fn plan(
            &self,
            _: Request<pb::PlanRequest>,
        ) -> Result<Response<pb::PlanResponse>, Status> {
            only_runs()
        }
        async fn plan_paths(
            &self,
            _: Request<pb::PlanPathsRequest>,
        ) -> Result<Response<pb::PlanResponse>, Status> {
            only_runs()
        }
        async fn preview(
            &self,
            _: Request<pb::PreviewRequest>,
        ) -> Result<Response<pb::PreviewResponse>, Status> {
            only_runs()
        }
        async fn execute(
            &self,
            _: Request<pb::ExecuteRequest>,
        ) -> Result<Response<pb::ExecuteResponse>, Status> {
            only_runs()
        }
        async fn status(
            &self,
            _: Request<pb::ExecutorStatusRequest>,
        ) -> Result<Response<pb::ExecutorStatusResponse>, Status> {
            only_runs()
        }

        type RunsStream = AnswerStream<pb::RunAnswer>;

        async fn runs(
            &self,
            request: Request<tonic::Streaming<pb::RunCall>>,
        ) -> Result<Response<Self::RunsStream>, Status> {
            let dropped = self.dropped.clone();
            let (_, stopping) = tokio::sync::watch::channel(false);
            Ok(Response::new(answer_each(
                request.into_inner(),
                stopping,
                8,
                move |asked: pb::RunCall| {
                    let dropped = dropped.clone();
                    async move {
                        let Some(Asked::Run(run)) = asked.body else {
                            unreachable!("a cancel is not answered");
                        };
                        let call_id = run.call.unwrap_or_default().call_id;
                        let _guard = Dropped(call_id.clone(), dropped);
                        match call_id.as_str() {
                            "hold" => std::future::pending::<()>().await,
                            "slow" => tokio::time::sleep(Duration::from_millis(300)).await,
                            _ => {}
                        }
                        pb::RunAnswer {
                            id: asked.id,
                            body: Some(Answer::Ran(pb::RunResponse {
                                error: Some(pb::ToolError {
                                    code: "echo".into(),
                                    message: call_id,
                                }),
                                ..Default::default()
                            })),
                        }
                    }
                },
            )))
        }
    }

    fn key() -> SocketKey {
        SocketKey::derive(b"test control key", "test", "broker")
    }

    fn asked(call_id: &str) -> pb::RunRequest {
        pb::RunRequest {
            call: Some(pb::ToolCall {
                call_id: call_id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_given_up_on_is_stopped_at_the_executor_and_the_stream_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("executor.sock");
        let listener = bind_private_socket(&path).unwrap();
        let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
        let keys = ServerKeys::new([("broker".to_owned(), key())]);
        tokio::spawn(async move {
            let incoming = authenticated_incoming(listener, default_allowed_uids(), keys);
            let _ = tonic::transport::Server::builder()
                .add_service(ExecutorServer::new(FakeExecutor {
                    dropped: dropped_tx,
                }))
                .serve_with_incoming(incoming)
                .await;
        });
        let runs = ExecutorRuns::new(authenticated_channel(&path, "broker", key()));
        let ran = runs.run(asked("first")).await.unwrap();
        assert_eq!(ran.error.unwrap().message, "first");
        assert_eq!(dropped.recv().await.unwrap(), "first");
        // A call given up on (here by a timeout) is cancelled: its work is dropped at the
        // executor, not left running.
        let gave_up =
            tokio::time::timeout(Duration::from_millis(200), runs.run(asked("hold"))).await;
        assert!(gave_up.is_err());
        assert_eq!(runs.waiting(), 0);
        let stopped = tokio::time::timeout(Duration::from_secs(10), dropped.recv()).await;
        assert_eq!(stopped.unwrap().unwrap(), "hold");
        let ran = runs.run(asked("next")).await.unwrap();
        assert_eq!(ran.error.unwrap().message, "next");
        assert_eq!(dropped.recv().await.unwrap(), "next");
        // A call answered another way (the gate handed its read over) is forgotten without a
        // cancel: the executor, told so by the gate, finishes it and sends nothing.
        let elsewhere = AnsweredElsewhere::default();
        let held = runs.run_unless_answered(asked("hold"), &elsewhere);
        let gave_up = tokio::time::timeout(Duration::from_millis(200), async {
            tokio::pin!(held);
            tokio::select! {
                _ = &mut held => unreachable!("hold is never answered"),
                () = tokio::time::sleep(Duration::from_millis(50)) => elsewhere.set(),
            }
            held.await
        })
        .await;
        assert!(gave_up.is_err());
        assert_eq!(runs.waiting(), 0);
        let ran = runs.run(asked("then")).await.unwrap();
        assert_eq!(ran.error.unwrap().message, "then");
        assert_eq!(
            dropped.recv().await.unwrap(),
            "then",
            "the call answered elsewhere was not stopped"
        );
        let later = tokio::time::timeout(Duration::from_millis(300), dropped.recv()).await;
        assert!(
            later.is_err(),
            "{later:?}: the call answered elsewhere was stopped"
        );
        // A call too large for the stream fails alone: one running meanwhile is answered.
        let slow = tokio::spawn({
            let runs = runs.clone();
            async move { runs.run(asked("slow")).await }
        });
        let mut huge = asked("huge");
        huge.call.as_mut().unwrap().params_json =
            "x".repeat(glovebox_proto::transport::link::MAX_DUPLEX_MESSAGE);
        let e = runs.run(huge).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        let ran = slow.await.unwrap().unwrap();
        assert_eq!(ran.error.unwrap().message, "slow");
    }
}
