//! The client end of a link between glovebox's processes: each gRPC request is one HTTP/2 stream
//! on one connection ([`h2`]), opened from the caller's own task. The connection is made on first
//! use and made again after it fails, running the capability handshake each time.
//!
//! tonic's `Channel` put two tasks between a caller and the connection (a `Buffer` worker, then
//! hyper's dispatch, plus a task per request to send its body): three hand-overs per request, on
//! a multi-threaded runtime often to the other thread, for requests that are one small message
//! each. Here a request's message is sent by its caller; the connection's task only moves frames.
//!
//! A failure to connect, or a connection lost before its answer, is `Unavailable`; a request
//! that carries a `grpc-timeout` (tonic's `Request::set_timeout`) ends `Cancelled` when it runs
//! out, as with tonic's own channel, whatever the server does.

use std::error::Error as StdError;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use tonic::Status;

use super::connect::{CONNECT_TIMEOUT, connect_authenticated};
use super::handshake::SocketKey;
use super::quiet;

type BoxError = Box<dyn StdError + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Flow-control windows (as hyper's client sets them): a large answer (a file read of up to a few
/// MiB) flows without waiting for window updates at every 64 KiB.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// The most header bytes an answer may carry (its status message among them), and the streams
/// open at once before the server says how many it takes: hyper's client's bounds.
const MAX_HEADER_LIST: u32 = 16 * 1024;
const INITIAL_STREAMS: usize = 100;
/// The largest DATA frame the server may send: an answer of up to 1 MiB (a listing of a thousand
/// names is some 20 KiB) comes in one frame and so in one write, where HTTP/2's default of 16 KiB
/// cut it into several writes and as many wake-ups of this end.
const MAX_FRAME: u32 = 1024 * 1024;

/// A lazily connecting client channel to one control socket. Cheap to clone; clones share the
/// connection.
#[derive(Clone)]
pub struct Channel {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    peer: String,
    key: SocketKey,
    /// The connection's sender, and how many times it was made (so that of several callers who
    /// saw it fail, one makes it again).
    conn: tokio::sync::Mutex<(u64, Option<h2::client::SendRequest<Bytes>>)>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("path", &self.shared.path)
            .field("peer", &self.shared.peer)
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// A channel to the socket at `path`, as `peer` with `key`. Nothing is connected until the
    /// first request.
    pub fn new(path: PathBuf, peer: String, key: SocketKey) -> Channel {
        Channel {
            shared: Arc::new(Shared {
                path,
                peer,
                key,
                conn: tokio::sync::Mutex::new((0, None)),
            }),
        }
    }

    /// A sender ready to open a stream: the connection's, or a new connection's if it failed.
    async fn sender(&self) -> Result<h2::client::SendRequest<Bytes>, Status> {
        let (made, current) = {
            let conn = self.shared.conn.lock().await;
            (conn.0, conn.1.clone())
        };
        if let Some(sender) = current
            && let Ok(ready) = sender.ready().await
        {
            return Ok(ready);
        }
        let mut conn = self.shared.conn.lock().await;
        if conn.0 == made {
            // Nobody made it again meanwhile: this caller does, the others wait for it.
            conn.0 += 1;
            conn.1 = None;
            conn.1 = Some(self.connect().await?);
        }
        let sender = conn
            .1
            .clone()
            .ok_or_else(|| self.unavailable("not connected"))?;
        drop(conn);
        sender
            .ready()
            .await
            .map_err(|e| self.unavailable(&e.to_string()))
    }

    async fn connect(&self) -> Result<h2::client::SendRequest<Bytes>, Status> {
        let s = &self.shared;
        let connecting = async {
            let stream = connect_authenticated(&s.path, &s.peer, &s.key)
                .await
                .map_err(|e| self.unavailable(&e.to_string()))?;
            let stream =
                quiet::QuietStream::new(stream).map_err(|e| self.unavailable(&e.to_string()))?;
            h2::client::Builder::new()
                .initial_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .max_header_list_size(MAX_HEADER_LIST)
                .initial_max_send_streams(INITIAL_STREAMS)
                .max_frame_size(MAX_FRAME)
                .enable_push(false)
                .handshake::<_, Bytes>(stream)
                .await
                .map_err(|e| self.unavailable(&e.to_string()))
        };
        let (sender, connection) = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| self.unavailable("timed out connecting"))??;
        let path = s.path.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(path = %path.display(), error = %e, "link connection ended");
            }
        });
        Ok(sender)
    }

    fn unavailable(&self, why: &str) -> Status {
        Status::unavailable(format!("{}: {why}", self.shared.path.display()))
    }

    /// Sends one request and waits for its answer's head.
    async fn send(
        self,
        request: http::Request<tonic::body::Body>,
    ) -> Result<http::Response<ResponseBody>, BoxError> {
        let (mut parts, body) = request.into_parts();
        let limit = parts
            .headers
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        // Every request here is one message (no client streaming): read it before the stream
        // opens, so it goes out with the stream's end.
        let message = body.collect().await?.to_bytes();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        parts.uri = http::Uri::builder()
            .scheme("http")
            .authority("glovebox.local")
            .path_and_query(path)
            .build()?;
        let exchange = async {
            let mut sender = self.sender().await?;
            let head = http::Request::from_parts(parts, ());
            let (answer, mut outgoing) = sender
                .send_request(head, message.is_empty())
                .map_err(|e| self.lost(e))?;
            if !message.is_empty() {
                outgoing
                    .send_data(message, true)
                    .map_err(|e| self.lost(e))?;
            }
            let answer = answer.await.map_err(|e| self.lost(e))?;
            Ok::<_, Status>(answer.map(|incoming| ResponseBody {
                incoming,
                data_done: false,
            }))
        };
        match limit {
            None => Ok(exchange.await?),
            Some(limit) => match tokio::time::timeout(limit, exchange).await {
                Ok(answer) => Ok(answer?),
                Err(_) => Err(Status::cancelled("Timeout expired").into()),
            },
        }
    }

    /// A stream that failed: one the server reset gets its reason's code (as tonic gives it); a
    /// lost connection is `Unavailable`.
    fn lost(&self, e: h2::Error) -> Status {
        let path = self.shared.path.display();
        match e.reason() {
            Some(reason) if e.is_remote() && !e.is_go_away() => Status::new(
                reset_code(reason),
                format!("{path}: stream reset ({reason})"),
            ),
            _ => self.unavailable(&e.to_string()),
        }
    }
}

/// The gRPC code of a stream the server reset with `reason`: one it refused or was told to
/// calm down about may be tried again; anything else is the server's fault.
fn reset_code(reason: h2::Reason) -> tonic::Code {
    match reason {
        h2::Reason::REFUSED_STREAM => tonic::Code::Unavailable,
        h2::Reason::CANCEL => tonic::Code::Cancelled,
        h2::Reason::ENHANCE_YOUR_CALM => tonic::Code::ResourceExhausted,
        h2::Reason::INADEQUATE_SECURITY => tonic::Code::PermissionDenied,
        _ => tonic::Code::Internal,
    }
}

/// A `grpc-timeout` header's value (digits and a unit).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

impl tower::Service<http::Request<tonic::body::Body>> for Channel {
    type Response = http::Response<ResponseBody>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is the connection's, awaited in the call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.clone().send(request))
    }
}

/// An answer's body: its data as it arrives (given back to the connection's window as it is
/// taken), then its trailers (the gRPC status).
pub struct ResponseBody {
    incoming: h2::RecvStream,
    data_done: bool,
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if !this.data_done {
            match ready!(this.incoming.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.incoming.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.data_done = true,
            }
        }
        match ready!(this.incoming.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }
}

/// The largest message a [`DuplexReceiver`] takes (tonic's default for a server's requests).
pub const MAX_DUPLEX_MESSAGE: usize = 4 * 1024 * 1024;

impl Channel {
    /// Opens a bidirectional gRPC stream to `path` (`/package.Service/Method`) and waits for the
    /// server to take it. Messages are sent from the caller's task ([`DuplexSender::send`]) and
    /// read by one reader ([`DuplexReceiver::next`]).
    pub async fn open_duplex(
        &self,
        path: &'static str,
    ) -> Result<(DuplexSender, DuplexReceiver), Status> {
        let opening = async {
            let mut sender = self.sender().await?;
            let head = http::Request::post(format!("http://glovebox.local{path}"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .map_err(|e| Status::internal(e.to_string()))?;
            let (answer, outgoing) = sender.send_request(head, false).map_err(|e| self.lost(e))?;
            let answer = answer.await.map_err(|e| self.lost(e))?;
            if let Some(status) = Status::from_header_map(answer.headers())
                && status.code() != tonic::Code::Ok
            {
                // A trailers-only answer: the server refused the stream.
                return Err(status);
            }
            if answer.status() != http::StatusCode::OK {
                return Err(Status::internal(format!(
                    "{path}: the server answered HTTP {}",
                    answer.status()
                )));
            }
            Ok((
                DuplexSender { outgoing },
                DuplexReceiver {
                    incoming: answer.into_body(),
                    buffer: bytes::BytesMut::new(),
                    link: self.clone(),
                },
            ))
        };
        tokio::time::timeout(CONNECT_TIMEOUT, opening)
            .await
            .map_err(|_| self.unavailable("timed out opening a stream"))?
    }
}

/// The sending half of a stream from [`Channel::open_duplex`]: each message goes out as one
/// gRPC frame, queued on the connection at once (the connection's task writes it).
pub struct DuplexSender {
    outgoing: h2::SendStream<Bytes>,
}

/// Refuses a message the other end of a duplex stream would refuse for its size (and end the
/// stream with it): `ResourceExhausted`, naming its size.
pub fn within_bound<M: prost::Message>(message: &M) -> Result<(), Status> {
    length_within_bound(message.encoded_len())
}

fn length_within_bound(len: usize) -> Result<(), Status> {
    if len > MAX_DUPLEX_MESSAGE {
        return Err(Status::resource_exhausted(format!(
            "a message of {len} bytes, over the limit of {MAX_DUPLEX_MESSAGE}"
        )));
    }
    Ok(())
}

impl DuplexSender {
    /// Queues `message`; `ResourceExhausted` (nothing sent) for one over the bound
    /// ([`within_bound`]), any other error means the stream is gone.
    pub fn send<M: prost::Message>(&mut self, message: &M) -> Result<(), Status> {
        let len = message.encoded_len();
        length_within_bound(len)?;
        let mut frame = bytes::BytesMut::with_capacity(5 + len);
        frame.extend_from_slice(&[0]);
        frame.extend_from_slice(&(len as u32).to_be_bytes());
        message
            .encode(&mut frame)
            .map_err(|e| Status::internal(e.to_string()))?;
        self.outgoing
            .send_data(frame.freeze(), false)
            .map_err(|e| Status::unavailable(format!("the stream ended: {e}")))
    }
}

impl Drop for DuplexSender {
    /// Ends the caller's side of the stream, so the server's reader sees the end.
    fn drop(&mut self) {
        let _ = self.outgoing.send_data(Bytes::new(), true);
    }
}

/// The receiving half of a stream from [`Channel::open_duplex`].
pub struct DuplexReceiver {
    incoming: h2::RecvStream,
    /// Bytes received and not yet a whole message.
    buffer: bytes::BytesMut,
    link: Channel,
}

impl DuplexReceiver {
    /// The next message; `Ok(None)` when the server ended the stream with status OK, its
    /// status when it ended it otherwise, `Unavailable` when the connection was lost.
    pub async fn next<M: prost::Message + Default>(&mut self) -> Result<Option<M>, Status> {
        loop {
            if let Some(message) = self.take::<M>()? {
                return Ok(Some(message));
            }
            match std::future::poll_fn(|cx| self.incoming.poll_data(cx)).await {
                Some(Ok(data)) => {
                    let _ = self.incoming.flow_control().release_capacity(data.len());
                    self.buffer.extend_from_slice(&data);
                }
                Some(Err(e)) => return Err(self.link.lost(e)),
                None => break,
            }
        }
        if !self.buffer.is_empty() {
            return Err(Status::internal("the stream ended inside a message"));
        }
        let trailers = std::future::poll_fn(|cx| self.incoming.poll_trailers(cx))
            .await
            .map_err(|e| self.link.lost(e))?;
        match trailers.as_ref().and_then(Status::from_header_map) {
            Some(status) if status.code() != tonic::Code::Ok => Err(status),
            Some(_) => Ok(None),
            None => Err(Status::internal("the stream ended without a status")),
        }
    }

    /// A whole message from the front of the buffer, if one is there.
    fn take<M: prost::Message + Default>(&mut self) -> Result<Option<M>, Status> {
        let Some(frame) = next_frame(&mut self.buffer)? else {
            return Ok(None);
        };
        M::decode(frame)
            .map(Some)
            .map_err(|e| Status::internal(format!("a message that does not decode: {e}")))
    }
}

/// Takes one gRPC frame's message off the front of `buffer`, if a whole one is there (room is
/// reserved for the rest of one that is not); refuses a compressed frame (none was offered) and
/// one longer than [`MAX_DUPLEX_MESSAGE`] before any of it is buffered.
fn next_frame(buffer: &mut bytes::BytesMut) -> Result<Option<bytes::BytesMut>, Status> {
    let Some(head) = buffer.get(..5) else {
        return Ok(None);
    };
    if head[0] != 0 {
        return Err(Status::internal(
            "a compressed message, which was not offered",
        ));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    length_within_bound(len)?;
    if buffer.len() < 5 + len {
        buffer.reserve(5 + len - buffer.len());
        return Ok(None);
    }
    let mut frame = buffer.split_to(5 + len);
    Ok(Some(frame.split_off(5)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::messages::{Answer as _, AnswerStream, answer_each};
    use crate::transport::{
        ServerKeys, authenticated_channel, authenticated_incoming, bind_private_socket,
        default_allowed_uids,
    };
    use crate::v1::executor_client::ExecutorClient;
    use crate::v1::executor_gate_answer::Body as Answer;
    use crate::v1::executor_gate_server::{ExecutorGate, ExecutorGateServer};
    use crate::v1::executor_server::{Executor, ExecutorServer};
    use crate::v1::{
        self as pb, DecideResponse, ExecutorGateAnswer, ExecutorGateCall, ToolCall,
        VouchedDecideRequest, executor_gate_call,
    };

    /// Answers a request with its call's parameters after the pause its tool names (ms): a
    /// unary `Executor.Plan` as its error's message, a `decide` on `ExecutorGate.Calls` as the
    /// verdict's reason. Tool `fail` is refused, `huge` fails with a status of 64 KiB.
    struct Echo;

    async fn echo(call: ToolCall) -> Result<String, Status> {
        if call.tool == "fail" {
            return Err(Status::permission_denied("refused"));
        }
        if call.tool == "huge" {
            return Err(Status::internal("x".repeat(64 * 1024)));
        }
        let pause: u64 = call.tool.parse().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        Ok(call.params_json)
    }

    fn not_here<T>() -> Result<tonic::Response<T>, Status> {
        Err(Status::unimplemented("not in these tests"))
    }

    #[tonic::async_trait]
    impl Executor for Echo {
        async fn plan(
            &self,
            request: tonic::Request<pb::PlanRequest>,
        ) -> Result<tonic::Response<pb::PlanResponse>, Status> {
            let echoed = echo(request.into_inner().call.unwrap_or_default()).await?;
            Ok(tonic::Response::new(pb::PlanResponse {
                plan: None,
                error: Some(pb::ToolError {
                    code: "echo".into(),
                    message: echoed,
                }),
            }))
        }
        async fn plan_paths(
            &self,
            _: tonic::Request<pb::PlanPathsRequest>,
        ) -> Result<tonic::Response<pb::PlanResponse>, Status> {
            not_here()
        }
        async fn preview(
            &self,
            _: tonic::Request<pb::PreviewRequest>,
        ) -> Result<tonic::Response<pb::PreviewResponse>, Status> {
            not_here()
        }
        async fn execute(
            &self,
            _: tonic::Request<pb::ExecuteRequest>,
        ) -> Result<tonic::Response<pb::ExecuteResponse>, Status> {
            not_here()
        }
        type RunsStream = AnswerStream<pb::RunAnswer>;
        async fn runs(
            &self,
            _: tonic::Request<tonic::Streaming<pb::RunCall>>,
        ) -> Result<tonic::Response<Self::RunsStream>, Status> {
            not_here()
        }
        async fn status(
            &self,
            _: tonic::Request<pb::ExecutorStatusRequest>,
        ) -> Result<tonic::Response<pb::ExecutorStatusResponse>, Status> {
            not_here()
        }
    }

    #[tonic::async_trait]
    impl ExecutorGate for Echo {
        type CallsStream = AnswerStream<ExecutorGateAnswer>;

        /// Answers each verdict request with [`echo`], each in its own time.
        async fn calls(
            &self,
            request: tonic::Request<tonic::Streaming<ExecutorGateCall>>,
        ) -> Result<tonic::Response<Self::CallsStream>, Status> {
            let (_, stopping) = tokio::sync::watch::channel(false);
            let answers = answer_each(request.into_inner(), stopping, 64, |asked| async move {
                let Some(executor_gate_call::Body::Decide(r)) = asked.body else {
                    return ExecutorGateAnswer::failed(asked.id, Status::invalid_argument("?"));
                };
                match echo(r.call.unwrap_or_default()).await {
                    Ok(reason) => ExecutorGateAnswer {
                        id: asked.id,
                        body: Some(Answer::Decided(DecideResponse {
                            reason,
                            ..Default::default()
                        })),
                    },
                    Err(s) => ExecutorGateAnswer::failed(asked.id, s),
                }
            });
            Ok(tonic::Response::new(answers))
        }
    }

    fn key() -> SocketKey {
        SocketKey::derive(b"test control key", "test", "executor:a")
    }

    /// Serves [`Echo`] on `path` on a runtime of its own, connections and all, until dropped.
    struct Server(Option<tokio::runtime::Runtime>);

    impl Drop for Server {
        fn drop(&mut self) {
            if let Some(runtime) = self.0.take() {
                runtime.shutdown_background();
            }
        }
    }

    fn serve(path: &std::path::Path) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = {
            let _in = runtime.enter();
            bind_private_socket(path).unwrap()
        };
        let keys = ServerKeys::new([("executor:a".to_owned(), key())]);
        runtime.spawn(async move {
            let incoming = authenticated_incoming(listener, default_allowed_uids(), keys);
            let _ = tonic::transport::Server::builder()
                .add_service(ExecutorServer::new(Echo))
                .add_service(ExecutorGateServer::new(Echo))
                .serve_with_incoming(incoming)
                .await;
        });
        Server(Some(runtime))
    }

    fn call(tool: &str, params: String) -> ToolCall {
        ToolCall {
            tool: tool.to_owned(),
            params_json: params,
            ..Default::default()
        }
    }

    /// A unary request of [`Echo`].
    fn request(tool: &str, params: String) -> pb::PlanRequest {
        pb::PlanRequest {
            call: Some(call(tool, params)),
        }
    }

    /// What [`Echo`] answered a unary request with.
    fn echoed(answer: tonic::Response<pb::PlanResponse>) -> String {
        answer.into_inner().error.unwrap_or_default().message
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_and_large_requests_share_one_connection_and_come_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _server = serve(&path);
        let client = ExecutorClient::new(authenticated_channel(&path, "executor:a", key()))
            .max_decoding_message_size(16 << 20)
            .max_encoding_message_size(16 << 20);
        // Larger than both flow-control windows, so it moves only as they are given back.
        let big: String = (0..3 << 20)
            .map(|i| (b'a' + (i % 26) as u8) as char)
            .collect();
        let mut calls = Vec::new();
        for i in 0..64 {
            let mut client = client.clone();
            let params = if i % 16 == 0 {
                big.clone()
            } else {
                format!("call {i}")
            };
            calls.push(tokio::spawn(async move {
                let answer = client.plan(request("1", params.clone())).await.unwrap();
                assert_eq!(echoed(answer), params);
            }));
        }
        for call in calls {
            call.await.unwrap();
        }
        // A refusal keeps its code.
        let status = client.clone().plan(request("fail", String::new())).await;
        assert_eq!(status.unwrap_err().code(), tonic::Code::PermissionDenied);
        // An answer whose headers pass the bound is refused, not taken in, and the next call
        // is served.
        let status = client.clone().plan(request("huge", String::new())).await;
        let status = status.unwrap_err();
        assert!(
            status.message().len() < 16 * 1024,
            "{}",
            status.message().len()
        );
        let answer = client.clone().plan(request("0", "next".into())).await;
        assert_eq!(echoed(answer.unwrap()), "next");
    }

    fn asked(id: u64, tool: &str, params: String) -> ExecutorGateCall {
        ExecutorGateCall {
            id,
            body: Some(executor_gate_call::Body::Decide(VouchedDecideRequest {
                call: Some(call(tool, params)),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn frames_are_taken_whole_in_order_and_hostile_ones_refused() {
        let frame = |flag: u8, body: &[u8]| {
            let mut f = vec![flag];
            f.extend_from_slice(&(body.len() as u32).to_be_bytes());
            f.extend_from_slice(body);
            f
        };
        // Two frames and the start of a third, arriving a byte at a time.
        let mut wire = frame(0, b"one");
        wire.extend(frame(0, b""));
        wire.extend(&frame(0, b"three")[..6]);
        let mut buffer = bytes::BytesMut::new();
        let mut taken = Vec::new();
        for byte in wire {
            buffer.extend_from_slice(&[byte]);
            while let Some(message) = next_frame(&mut buffer).unwrap() {
                taken.push(message.to_vec());
            }
        }
        assert_eq!(taken, [b"one".to_vec(), Vec::new()]);
        assert_eq!(buffer.len(), 6, "the partial frame stays");
        // Refused: a compressed frame; a length over the bound, before its body arrives.
        let mut compressed = bytes::BytesMut::from(&frame(1, b"x")[..]);
        let e = next_frame(&mut compressed).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
        let mut huge = bytes::BytesMut::from(&[0u8, 0xff, 0xff, 0xff, 0xff][..]);
        let e = next_frame(&mut huge).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(huge.capacity() < 1024, "nothing was reserved for it");
        // At the bound: room is reserved for the rest, and the whole frame is taken.
        let mut at_bound = bytes::BytesMut::new();
        at_bound.extend_from_slice(&[0]);
        at_bound.extend_from_slice(&(MAX_DUPLEX_MESSAGE as u32).to_be_bytes());
        assert!(next_frame(&mut at_bound).unwrap().is_none());
        at_bound.resize(5 + MAX_DUPLEX_MESSAGE, 7);
        assert_eq!(
            next_frame(&mut at_bound).unwrap().unwrap().len(),
            MAX_DUPLEX_MESSAGE
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_duplex_stream_carries_messages_both_ways_answered_in_any_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let server = serve(&path);
        let channel = Channel::new(path.clone(), "executor:a".into(), key());
        let (mut tx, mut rx) = channel
            .open_duplex("/glovebox.v1.ExecutorGate/Calls")
            .await
            .unwrap();
        // Answered as they finish: the slowest, sent first, comes last.
        for (id, pause) in [(1, "60"), (2, "30"), (3, "0")] {
            tx.send(&asked(id, pause, format!("call {id}"))).unwrap();
        }
        let mut order = Vec::new();
        for _ in 0..3 {
            let answer: ExecutorGateAnswer = rx.next().await.unwrap().unwrap();
            let Some(Answer::Decided(d)) = answer.body else {
                panic!("{answer:?}")
            };
            assert_eq!(d.reason, format!("call {}", answer.id));
            order.push(answer.id);
        }
        assert_eq!(order, [3, 2, 1]);
        // A message larger than both flow-control windows, each way, arrives whole; a refusal
        // is an answer, and the stream goes on.
        let big: String = (0..3 << 20)
            .map(|i| (b'a' + (i % 26) as u8) as char)
            .collect();
        tx.send(&asked(4, "0", big.clone())).unwrap();
        tx.send(&asked(5, "fail", String::new())).unwrap();
        let mut seen = std::collections::HashMap::new();
        for _ in 0..2 {
            let answer: ExecutorGateAnswer = rx.next().await.unwrap().unwrap();
            seen.insert(answer.id, answer.body.unwrap());
        }
        assert!(matches!(&seen[&4], Answer::Decided(d) if d.reason == big));
        assert!(
            matches!(&seen[&5], Answer::Error(e) if e.code == tonic::Code::PermissionDenied as i32)
        );
        // A message over the bound is refused before it is sent; the stream goes on.
        let too_big = asked(6, "0", "x".repeat(MAX_DUPLEX_MESSAGE));
        let e = tx.send(&too_big).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        tx.send(&asked(7, "0", "after".into())).unwrap();
        let answer: ExecutorGateAnswer = rx.next().await.unwrap().unwrap();
        assert_eq!(answer.id, 7);
        // The caller ends its side: the server ends the stream, with status OK.
        drop(tx);
        assert_eq!(rx.next::<ExecutorGateAnswer>().await.unwrap(), None);

        // A method the server does not have is refused when opened.
        let refused = channel.open_duplex("/glovebox.v1.ExecutorGate/Nope").await;
        assert_eq!(refused.err().unwrap().code(), tonic::Code::Unimplemented);

        // The server gone while a stream is open: the reader learns it, as Unavailable.
        let (mut tx, mut rx) = channel
            .open_duplex("/glovebox.v1.ExecutorGate/Calls")
            .await
            .unwrap();
        tx.send(&asked(8, "5000", String::new())).unwrap();
        drop(server);
        let lost = tokio::time::timeout(Duration::from_secs(10), rx.next::<ExecutorGateAnswer>())
            .await
            .expect("the lost connection was noticed");
        assert_eq!(lost.unwrap_err().code(), tonic::Code::Unavailable);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_service_down_is_unavailable_and_used_again_once_it_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let mut client = ExecutorClient::new(authenticated_channel(&path, "executor:a", key()));
        // Nothing listens yet.
        let status = client.plan(request("0", "x".into())).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        let server = serve(&path);
        let answer = client.plan(request("0", "one".into())).await.unwrap();
        assert_eq!(echoed(answer), "one");
        // The service goes away with a call on the way, and comes back.
        let waiting = tokio::spawn({
            let mut client = client.clone();
            async move { client.plan(request("3000", "slow".into())).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(server);
        let lost = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a call on a lost connection ends")
            .unwrap()
            .unwrap_err();
        assert_eq!(lost.code(), tonic::Code::Unavailable, "{lost:?}");
        let status = client.plan(request("0", "x".into())).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        let _server = serve(&path);
        let answer = client.plan(request("0", "two".into())).await.unwrap();
        assert_eq!(echoed(answer), "two");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_with_a_timeout_ends_when_it_runs_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _server = serve(&path);
        let mut client = ExecutorClient::new(authenticated_channel(&path, "executor:a", key()));
        let mut slow = tonic::Request::new(request("10000", "slow".into()));
        slow.set_timeout(Duration::from_millis(300));
        let started = std::time::Instant::now();
        let status = client.plan(slow).await.unwrap_err();
        assert!(
            matches!(
                status.code(),
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
            ),
            "{status:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // The connection still serves.
        let answer = client.plan(request("0", "after".into())).await.unwrap();
        assert_eq!(echoed(answer), "after");
    }

    #[test]
    fn a_reset_stream_is_retried_only_when_the_server_refused_it() {
        use tonic::Code;
        for (reason, code) in [
            (h2::Reason::REFUSED_STREAM, Code::Unavailable),
            (h2::Reason::CANCEL, Code::Cancelled),
            (h2::Reason::ENHANCE_YOUR_CALM, Code::ResourceExhausted),
            (h2::Reason::INADEQUATE_SECURITY, Code::PermissionDenied),
            (h2::Reason::PROTOCOL_ERROR, Code::Internal),
            (h2::Reason::INTERNAL_ERROR, Code::Internal),
            (h2::Reason::FLOW_CONTROL_ERROR, Code::Internal),
            (h2::Reason::NO_ERROR, Code::Internal),
        ] {
            assert_eq!(reset_code(reason), code, "{reason:?}");
        }
    }

    #[test]
    fn grpc_timeouts_are_read_and_nonsense_is_not() {
        for (text, want) in [
            ("5S", Some(Duration::from_secs(5))),
            ("250m", Some(Duration::from_millis(250))),
            ("2M", Some(Duration::from_secs(120))),
            ("1H", Some(Duration::from_secs(3600))),
            ("7u", Some(Duration::from_micros(7))),
            ("9n", Some(Duration::from_nanos(9))),
            ("5", None),
            ("S", None),
            ("5s", None),
            ("-5S", None),
            ("123456789S", None),
            ("", None),
        ] {
            assert_eq!(parse_grpc_timeout(text), want, "{text:?}");
        }
    }
}
