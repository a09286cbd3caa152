//! Fuzzes the control sockets' hello parser (`transport::handshake`): the fixed head, then the
//! peer name and nonce; an accepted peer name is a valid one.

#![no_main]

use glovebox_proto::transport::handshake::{hello_rest_len, is_valid_peer, parse_hello_rest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<5>() else {
        return;
    };
    if let Ok(len) = hello_rest_len(head) {
        let rest = &rest[..len.min(rest.len())];
        if let Ok((peer, _nonce)) = parse_hello_rest(rest) {
            assert!(is_valid_peer(&peer), "{peer:?}");
        }
    }
    // The rest parser on its own, whatever precedes it.
    let _ = parse_hello_rest(data);
});
