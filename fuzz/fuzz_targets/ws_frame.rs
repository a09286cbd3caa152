//! Fuzzes the WebSocket frame parser (`glovebox_proto::ws::parse_client_frame`): any text a
//! client sends parses to a frame or a `FrameError`, never a panic, and an accepted frame's ids
//! are valid.

#![no_main]

use glovebox_proto::call_id::is_valid_id;
use glovebox_proto::ws::{ClientFrame, parse_client_frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match parse_client_frame(text) {
        Ok(
            ClientFrame::Invoke { call_id, .. }
            | ClientFrame::Cancel { call_id }
            | ClientFrame::PackInvoke { call_id, .. },
        ) => {
            assert!(is_valid_id(call_id.as_str()));
        }
        Ok(ClientFrame::Answer { ask_id, .. }) => assert!(is_valid_id(&ask_id)),
        Ok(_) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
