//! Fuzzes what `glovebox mcp` does with a result from the broker: its read of a frame
//! (`parse_bridge_frame`, a result left as text) comes to exactly what the `ServerFrame` enum reads
//! (the same frame or the same refusal), presenting a result from its text (`present_text`) gives
//! what presenting its tree does, and a collection shown as a table (`mcp_form::present`) has one
//! line per item and the same columns on every line, whatever the names hold (no forged lines or
//! columns); a result whose `table` came apart (`present_parts`) is shown as its whole is. And the broker's check of a result text it passes on as it came (`reads_as_object`)
//! takes exactly the texts that read as a `serde_json::Value` object, so no client is sent a frame
//! it cannot read.

#![no_main]

use glovebox_proto::tools::Tool;
use glovebox_proto::tools::mcp_form::rows::{present_parts, present_text};
use glovebox_proto::tools::mcp_form::{TABLE_FIELD, present};
use glovebox_proto::ws::{BridgeFrame, ServerFrame, parse_bridge_frame, reads_as_object};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let text_in = text;
    let read = parse_bridge_frame(text).and_then(BridgeFrame::into_frame).ok();
    let reference = serde_json::from_str::<ServerFrame>(text).ok();
    assert_eq!(read, reference, "{text:?}");
    let tree = serde_json::from_str::<serde_json::Value>(text);
    assert_eq!(
        reads_as_object(text),
        tree.as_ref().is_ok_and(|v| v.is_object()),
        "{text:?}"
    );
    let Ok(value) = tree else {
        return;
    };
    // A listing without details (`"details": false`) has type and name only.
    let list_columns = if value.get("details") == Some(&serde_json::Value::Bool(false)) {
        2
    } else {
        4
    };
    for (tool, array, columns) in [
        (Tool::FileList, "entries", list_columns),
        (Tool::FileFind, "entries", 2),
        (Tool::FileGrep, "matches", 3),
    ] {
        let items = value.get(array).and_then(|a| a.as_array()).map(Vec::len);
        let (text, structured) = present(Some(tool), value.clone());
        assert_eq!(
            present_text(Some(tool), text_in).ok(),
            Some((text.clone(), structured.clone()))
        );
        // A table sent apart from the other fields is shown as the whole result is.
        if let Some(serde_json::Value::String(table)) = value.get(TABLE_FIELD) {
            let mut fields = value.clone();
            fields.as_object_mut().map(|f| f.remove(TABLE_FIELD));
            assert_eq!(
                present_parts(Some(tool), &fields.to_string(), table.clone()).ok(),
                Some((text.clone(), structured.clone()))
            );
        }
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
