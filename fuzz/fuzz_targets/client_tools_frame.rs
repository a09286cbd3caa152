//! Fuzzes the client-tools frame parser (`parse_provider_frame`) and what a provider's hello
//! registers (`accept_tools`): every accepted name is valid, none twice.

#![no_main]

use glovebox_proto::client_tools::{
    ProviderFrame, accept_tools, is_valid_bare_name, parse_provider_frame,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(ProviderFrame::Hello { tools, .. }) = parse_provider_frame(text) {
        let (accepted, _rejected) = accept_tools(tools);
        for (i, tool) in accepted.iter().enumerate() {
            assert!(is_valid_bare_name(&tool.name), "{}", tool.name);
            assert!(tool.input_schema.is_object());
            assert!(accepted[..i].iter().all(|t| t.name != tool.name));
        }
    }
});
