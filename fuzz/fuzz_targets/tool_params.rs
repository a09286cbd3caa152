//! Fuzzes every built-in tool's parameter parser (`Tool::parse_params`): the first byte picks
//! the tool, the rest is the JSON params; whatever an agent sends is parsed or refused with a
//! message, never a panic.

#![no_main]

use glovebox_proto::tools::Tool;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let tool = Tool::ALL[pick as usize % Tool::ALL.len()];
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(params) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    let _ = tool.parse_params(&params);
});
