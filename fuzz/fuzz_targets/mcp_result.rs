//! Fuzzes what `glovebox mcp` does with a result from the broker: `parse_server_frame` reads any
//! text exactly as the `ServerFrame` enum does (the same frame or the same refusal), and a
//! collection shown as a table (`mcp_form::present`) has one line per item and the same columns
//! on every line, whatever the names hold (no forged lines or columns). And the broker's check
//! of a result text it passes on as it came (`reads_as_object`) takes exactly the texts that
//! read as a `serde_json::Value` object, so no client is sent a frame it cannot read. The bridge's
//! own read of a frame (`parse_bridge_frame`, a result left as text) takes the same frames, and
//! presenting a result from its text (`present_text`) gives what presenting its tree does.

#![no_main]

use glovebox_proto::tools::Tool;
use glovebox_proto::tools::mcp_form::{TABLE_FIELD, present, present_text};
use glovebox_proto::ws::{BridgeFrame, ServerFrame, parse_bridge_frame, parse_server_frame, reads_as_object};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let text_in = text;
    let fast = parse_server_frame(text).ok();
    let reference = serde_json::from_str::<ServerFrame>(text).ok();
    assert_eq!(fast, reference);
    match (parse_bridge_frame(text), &reference) {
        (Ok(BridgeFrame::End(end)), Some(ServerFrame::Result { call_id, ok, result, error })) => {
            assert_eq!((&end.call_id, end.ok, &end.error), (call_id, *ok, error));
            let raw = end.result.as_deref().map(|r| serde_json::from_str::<serde_json::Value>(r.get()).unwrap());
            assert_eq!(&raw, result);
        }
        (Ok(BridgeFrame::Other(frame)), Some(reference)) => assert_eq!(&frame, reference),
        (Err(_), None) => {}
        // A result kept as text is only checked to be JSON: one no tree reads (a number out of
        // range) is refused when it is presented instead.
        (Ok(BridgeFrame::End(end)), None) => {
            let raw = end.result.expect("a frame the enum refuses has a result");
            assert!(present_text(None, raw.get()).is_err(), "{text:?}");
        }
        (read, reference) => panic!("{read:?} but {reference:?}"),
    }
    let tree = serde_json::from_str::<serde_json::Value>(text);
    assert_eq!(
        reads_as_object(text),
        tree.as_ref().is_ok_and(|v| v.is_object()),
        "{text:?}"
    );
    let Ok(value) = tree else {
        return;
    };
    for (tool, array, columns) in [
        (Tool::FileList, "entries", 4),
        (Tool::FileFind, "entries", 2),
        (Tool::FileGrep, "matches", 3),
    ] {
        let items = value.get(array).and_then(|a| a.as_array()).map(Vec::len);
        let (text, structured) = present(Some(tool), value.clone());
        assert_eq!(
            present_text(Some(tool), text_in).ok(),
            Some((text.clone(), structured.clone()))
        );
        let Some(items) = items else { continue };
        let structured = structured.expect("an object with the array");
        let table = structured[TABLE_FIELD].as_str().expect("a table");
        let lines: Vec<&str> = table.split('\n').collect();
        assert_eq!(lines.len(), items + 1, "{table:?}");
        for line in &lines {
            assert_eq!(line.matches('\t').count(), columns - 1, "{line:?}");
            assert!(!line.contains('\r'), "{line:?}");
        }
        assert!(text.ends_with(table));
    }
});
