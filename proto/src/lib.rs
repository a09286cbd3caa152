//! glovebox's wire contracts, and the only place a wire format is defined: the gRPC services
//! between the broker, the gate and the executors (`v1`), the WebSocket frames clients speak
//! (`ws`), the built-in tools' parameter types (`tools`), pack tool names (`packs`) and the stable error
//! codes (`error`).

pub mod audit_row;
pub mod call_id;
pub mod client_tools;
pub mod display;
pub mod error;
pub mod ids;
pub mod packs;
pub mod stdio;
pub mod tool_name;
pub mod tools;
pub mod transport;
pub mod ws;

pub use error::ErrorCode;

/// Generated gRPC and protobuf types of package `glovebox.v1`.
#[allow(clippy::all, clippy::unwrap_used, clippy::expect_used, missing_docs)]
pub mod v1 {
    tonic::include_proto!("glovebox.v1");

    impl Subject {
        /// What a call touches: `path` (or a command, a job id) in `domain`, as observed in
        /// `state`.
        pub fn new(domain: Domain, path: String, state: FileState) -> Subject {
            Subject {
                domain: domain as i32,
                path,
                state: Some(state),
            }
        }
    }
}
