//! How the broker's frames go out on a `/v1/ws` connection: each a WebSocket text message, and
//! an error as an `error` frame.

use axum::extract::ws::Message;
use glovebox_proto::ErrorCode;
use glovebox_proto::ws::ServerFrame;

pub(super) fn text(frame: &ServerFrame) -> Message {
    Message::Text(frame.to_json().into())
}

pub(super) fn frame_error(code: ErrorCode, message: impl Into<String>) -> Message {
    text(&frame_error_frame(code, message))
}

pub(super) fn frame_error_frame(code: ErrorCode, message: impl Into<String>) -> ServerFrame {
    ServerFrame::Error {
        code,
        message: message.into(),
    }
}
