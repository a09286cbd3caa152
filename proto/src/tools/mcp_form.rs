//! How a built-in tool's result is shown to MCP clients (the broker's `/mcp` and `glovebox mcp`).
//!
//! Most results go as they are: their JSON as text and as `structuredContent`. The three tools
//! whose results are collections — `file_list`, `file_find`, `file_grep` — send the collection as
//! a table instead: a header line and one line per item, columns separated by tabs, in a `table`
//! string that replaces the array; the result's other fields stay. The text block is those other
//! fields as JSON on the first line, then the table. A file's text (`file_read`,
//! `file_head_tail`) goes the same way in the text block: the other fields as JSON on the first
//! line, then the text as it is, not escaped inside a JSON string (a model reads the file's own
//! lines, and pays for no escapes); `structuredContent` keeps the result whole.
//!
//! Why: a listing of 1,000 entries as JSON objects is about twice the text of the table (tokens a
//! model pays for), and an MCP client turns it into thousands of objects — the official Python
//! SDK spends ~6 ms parsing one, more than the whole call costs in glovebox. The WebSocket API
//! keeps the JSON arrays.
//!
//! A cell that could be misread — a name with a tab, a newline or another control or format
//! character, a quote or backslash at its start, or surrounding spaces — is written quoted and
//! escaped (`"a\nb"`), so a hostile file name cannot forge a line or a column.

use serde_json::{Map, Number, Value};

use super::Tool;

pub mod rows;

/// How one column of a table is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    /// A string, quoted when it could be misread.
    Text,
    /// A number as it is.
    Number,
    /// Seconds since the epoch as UTC `YYYY-MM-DD HH:MM:SS`.
    Time,
}

/// A collection result's table: the array field it replaces and its columns (field, header,
/// how written).
#[derive(Debug, PartialEq)]
struct Table {
    array: &'static str,
    columns: &'static [(&'static str, &'static str, Cell)],
}

/// The field the table goes in.
pub const TABLE_FIELD: &str = "table";

fn table_of(tool: Tool) -> Option<Table> {
    match tool {
        Tool::FileList => Some(Table {
            array: "entries",
            columns: WITH_DETAILS,
        }),
        Tool::FileFind => Some(FIND),
        Tool::FileGrep => Some(GREP),
        _ => None,
    }
}

const FIND: Table = Table {
    array: "entries",
    columns: &[("type", "type", Cell::Text), ("path", "path", Cell::Text)],
};

const GREP: Table = Table {
    array: "matches",
    columns: &[
        ("path", "path", Cell::Text),
        ("line", "line", Cell::Number),
        ("text", "text", Cell::Text),
    ],
};

/// A listing's columns.
const WITH_DETAILS: &[(&str, &str, Cell)] = &[
    ("type", "type", Cell::Text),
    ("size", "size", Cell::Number),
    ("mtime", "modified (UTC)", Cell::Time),
    ("name", "name", Cell::Text),
];

/// A listing's columns without details (`"details": false`: names and types only).
const NAMES_AND_TYPES: &[(&str, &str, Cell)] =
    &[("type", "type", Cell::Text), ("name", "name", Cell::Text)];

/// The table of a result of `tool` whose fields other than the collection are `fields`: a
/// listing without details has no size or time columns.
fn table_for(tool: Tool, fields: &Map<String, Value>) -> Option<Table> {
    let table = table_of(tool)?;
    if tool == Tool::FileList && fields.get("details") == Some(&Value::Bool(false)) {
        return Some(Table {
            array: table.array,
            columns: NAMES_AND_TYPES,
        });
    }
    Some(table)
}

/// The tool's MCP `outputSchema`: its result's schema, with a table's string in place of the
/// collection.
pub fn output_schema(tool: Tool) -> Value {
    let mut schema = tool.entry().output_schema();
    if let Some(table) = table_of(tool) {
        let properties = &mut schema["properties"];
        if let Some(map) = properties.as_object_mut() {
            map.remove(table.array);
            map.insert(
                TABLE_FIELD.to_owned(),
                serde_json::json!({"type": "string"}),
            );
        }
        if let Some(required) = schema["required"].as_array_mut() {
            for name in required.iter_mut() {
                if name == table.array {
                    *name = Value::from(TABLE_FIELD);
                }
            }
        }
    }
    schema
}

/// What an MCP client is given for a successful result of `tool`: the text block and the
/// structured content. A result not in the expected shape goes as it is.
pub fn present(tool: Option<Tool>, result: Value) -> (String, Option<Value>) {
    let table = match (tool, &result) {
        (Some(tool), Value::Object(fields)) => table_for(tool, fields),
        _ => None,
    };
    match (table, result) {
        (Some(table), Value::Object(mut fields))
            if fields.get(table.array).is_some_and(Value::is_array) =>
        {
            let Some(Value::Array(items)) = fields.remove(table.array) else {
                unreachable!("checked above");
            };
            let rendered = render(&table, &items);
            let mut text = Value::Object(fields.clone()).to_string();
            text.push('\n');
            text.push_str(&rendered);
            fields.insert(TABLE_FIELD.to_owned(), Value::String(rendered));
            (text, Some(Value::Object(fields)))
        }
        (Some(table), Value::Object(fields)) if made_as_table(&table, &fields) => {
            head_then(fields, TABLE_FIELD)
        }
        (None, Value::Object(fields))
            if tool.is_some_and(shows_content)
                && fields.get(CONTENT_FIELD).is_some_and(Value::is_string) =>
        {
            head_then(fields, CONTENT_FIELD)
        }
        (_, Value::String(s)) => (s, None),
        (_, other) => {
            let text = other.to_string();
            (text, other.is_object().then_some(other))
        }
    }
}

/// The field of a file's text in the results of the tools that return one.
const CONTENT_FIELD: &str = "content";

/// Whether `tool`'s text block shows its result's `content` as it is, after the other fields.
fn shows_content(tool: Tool) -> bool {
    matches!(tool, Tool::FileRead | Tool::FileHeadTail)
}

/// The text block of a result whose string field `field` is shown as it is: the other fields as
/// JSON on the first line, then that field's text; and the result whole, for
/// `structuredContent`. The caller has checked that `field` is a string.
fn head_then(mut fields: Map<String, Value>, field: &str) -> (String, Option<Value>) {
    let Some(Value::String(body)) = fields.remove(field) else {
        unreachable!("checked by the caller");
    };
    let mut text = Value::Object(fields.clone()).to_string();
    text.push('\n');
    text.push_str(&body);
    fields.insert(field.to_owned(), Value::String(body));
    (text, Some(Value::Object(fields)))
}

/// Whether a result was made with its collection as a table already (a call that asked for
/// tables): a `table` string and no collection.
fn made_as_table(table: &Table, fields: &Map<String, Value>) -> bool {
    !fields.contains_key(table.array) && fields.get(TABLE_FIELD).is_some_and(Value::is_string)
}

/// A cell as the maker of a result gives it.
#[derive(Debug, Clone, Copy)]
pub enum CellValue<'a> {
    Text(&'a str),
    Number(i64),
}

/// A collection's table written row by row where its result is made, for a call that asks for
/// tables (the executor's listings, finds and searches): the text [`present`] renders from the
/// same result's JSON, without the JSON. The result carries it in [`TABLE_FIELD`] in place of
/// the collection.
pub struct TableWriter {
    table: Table,
    out: String,
}

impl TableWriter {
    /// A listing's table: with `details`, each entry's size and time; else its type and name.
    pub fn listing(details: bool, rows: usize) -> TableWriter {
        let table = Table {
            array: "entries",
            columns: if details {
                WITH_DETAILS
            } else {
                NAMES_AND_TYPES
            },
        };
        TableWriter::with(table, rows)
    }

    /// A find's table: each entry's type and path.
    pub fn find(rows: usize) -> TableWriter {
        TableWriter::with(FIND, rows)
    }

    /// A search's table: each match's path, line and text.
    pub fn grep(rows: usize) -> TableWriter {
        TableWriter::with(GREP, rows)
    }

    fn with(table: Table, rows: usize) -> TableWriter {
        let mut out = String::with_capacity(32 * (rows + 1));
        render_header(&mut out, &table);
        TableWriter { table, out }
    }

    /// One line: each column's cell by its field (`None`: missing, shown as `-`).
    pub fn row<'a>(&mut self, cell: impl Fn(&str) -> Option<CellValue<'a>>) {
        write_row(&mut self.out, &self.table, |_, field| {
            cell(field).map(|value| match value {
                CellValue::Text(s) => CellRef::Text(s),
                CellValue::Number(n) => CellRef::Int(n),
            })
        });
    }

    /// The table's text, for the result's `table` field.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The header and one line per item.
fn render(table: &Table, items: &[Value]) -> String {
    let mut out = String::with_capacity(64 * (items.len() + 1));
    render_header(&mut out, table);
    for item in items {
        write_row(&mut out, table, |_, field| item.get(field).map(CellRef::of));
    }
    out
}

/// Writes a line of `table` after a newline: each column's cell as `cell` gives it by the
/// column's index and field (`None`: missing). Every table's rows are written by this, whatever
/// their cells were read from.
fn write_row<'c>(
    out: &mut String,
    table: &Table,
    cell: impl Fn(usize, &str) -> Option<CellRef<'c>>,
) {
    out.push('\n');
    for (i, (field, _, kind)) in table.columns.iter().enumerate() {
        if i > 0 {
            out.push('\t');
        }
        write_cell(out, cell(i, field), *kind);
    }
}

fn render_header(out: &mut String, table: &Table) {
    for (i, (_, header, _)) in table.columns.iter().enumerate() {
        if i > 0 {
            out.push('\t');
        }
        out.push_str(header);
    }
}

/// A cell's value, however it was read.
#[derive(Clone, Copy)]
enum CellRef<'a> {
    Text(&'a str),
    /// A number as its maker gave it.
    Int(i64),
    Number(&'a Number),
    Other(&'a Value),
}

impl<'a> CellRef<'a> {
    fn of(value: &'a Value) -> CellRef<'a> {
        match value {
            Value::String(s) => CellRef::Text(s),
            Value::Number(n) => CellRef::Number(n),
            other => CellRef::Other(other),
        }
    }
}

fn write_cell(out: &mut String, value: Option<CellRef<'_>>, cell: Cell) {
    match (value, cell) {
        (Some(CellRef::Number(n)), Cell::Time) => {
            if !n.as_i64().is_some_and(|secs| push_utc_time(out, secs)) {
                out.push_str(&n.to_string());
            }
        }
        (Some(CellRef::Int(secs)), Cell::Time) => {
            if !push_utc_time(out, secs) {
                out.push_str(&secs.to_string());
            }
        }
        (Some(CellRef::Int(n)), _) => out.push_str(&n.to_string()),
        (Some(CellRef::Text(s)), _) => push_text(out, s),
        (Some(CellRef::Number(n)), _) => out.push_str(&n.to_string()),
        (Some(CellRef::Other(Value::Bool(b))), _) => {
            out.push_str(if *b { "true" } else { "false" })
        }
        // A missing field or one of another shape: shown as JSON, quoted, so it is never blank.
        (Some(CellRef::Other(other)), _) => push_quoted(out, &other.to_string()),
        (None, _) => out.push('-'),
    }
}

/// Writes `secs` as UTC `YYYY-MM-DD HH:MM:SS` (by the fields: a format string would be parsed
/// again for every entry); false, writing nothing, if it is out of range.
fn push_utc_time(out: &mut String, secs: i64) -> bool {
    use chrono::{Datelike, Timelike};
    use std::fmt::Write;
    let Some(t) = chrono::DateTime::from_timestamp(secs, 0) else {
        return false;
    };
    let _ = write!(
        out,
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    true
}

/// Characters that are never written raw: controls (tab and newline among them) and the
/// invisible format characters that reorder or hide text.
fn hidden_char(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// Whether `s` is written quoted: empty, holding a hidden character, starting with a quote, or
/// with spaces at either end.
fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.starts_with('"')
        || s.starts_with(char::is_whitespace)
        || s.ends_with(char::is_whitespace)
        // Printable ASCII, as nearly every name is, holds no hidden character: one pass over
        // its bytes instead of decoding each character.
        || (!s.bytes().all(|b| (b' '..=b'~').contains(&b)) && s.chars().any(hidden_char))
}

fn push_text(out: &mut String, s: &str) {
    if needs_quotes(s) {
        push_quoted(out, s);
    } else {
        out.push_str(s);
    }
}

/// `s` in double quotes, with `"` and `\` escaped and every hidden character as `\u{…}`
/// (`\t`, `\n`, `\r` by their usual names).
fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if hidden_char(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::rows::present_text;
    use super::*;
    use serde_json::json;

    fn listing(entries: Value) -> Value {
        json!({"path": "/w/d", "entries": entries, "total": 2, "truncated": false, "hidden": 1})
    }

    #[test]
    fn printable_ascii_is_quoted_exactly_when_the_full_rule_says_so() {
        let full = |s: &str| {
            s.is_empty()
                || s.starts_with('"')
                || s.starts_with(char::is_whitespace)
                || s.ends_with(char::is_whitespace)
                || s.chars().any(hidden_char)
        };
        let mut cases: Vec<String> = vec![String::new()];
        for a in 0u8..=0x7f {
            cases.push((a as char).to_string());
            for b in [b' ', b'"', b'a', b'\t', 0x7f] {
                cases.push(format!("{}x{}", a as char, b as char));
                cases.push(format!("{}{}", b as char, a as char));
            }
        }
        cases.extend(
            [
                "file.txt",
                " lead",
                "trail ",
                "in side",
                "\"q",
                "q\"",
                "é",
                "a\u{200b}b",
            ]
            .map(String::from),
        );
        for case in &cases {
            assert_eq!(needs_quotes(case), full(case), "{case:?}");
        }
    }

    #[test]
    fn a_listing_becomes_a_table_and_keeps_its_other_fields() {
        let result = listing(json!([
            {"name": "a.txt", "type": "file", "size": 64, "mtime": 1_764_650_000},
            {"name": "src", "type": "dir", "size": 4096, "mtime": 0},
        ]));
        let (text, structured) = present(Some(Tool::FileList), result);
        let structured = structured.unwrap();
        let table = "type\tsize\tmodified (UTC)\tname\n\
                     file\t64\t2025-12-02 04:33:20\ta.txt\n\
                     dir\t4096\t1970-01-01 00:00:00\tsrc";
        assert_eq!(
            structured,
            json!({"path": "/w/d", "table": table, "total": 2, "truncated": false, "hidden": 1})
        );
        let (first, rest) = text.split_once('\n').unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(first).unwrap(),
            json!({"path": "/w/d", "total": 2, "truncated": false, "hidden": 1})
        );
        assert_eq!(rest, table);
    }

    #[test]
    fn a_listing_without_details_has_names_and_types_only() {
        let result = json!({"path": "/w/d", "details": false, "entries": [
            {"name": "a.txt", "type": "file"},
            {"name": "src", "type": "dir"},
        ], "total": 2, "truncated": false, "hidden": 0});
        let (text, structured) = present(Some(Tool::FileList), result);
        let table = "type\tname\nfile\ta.txt\ndir\tsrc";
        assert_eq!(structured.unwrap()["table"], table);
        assert_eq!(text.split_once('\n').unwrap().1, table);
        // Only `false` drops the columns; details or no word on them keep the four.
        for details in [json!(true), json!("false"), json!(null)] {
            let result = json!({"details": details, "entries": [{"name": "a", "type": "file"}]});
            let (_, structured) = present(Some(Tool::FileList), result);
            assert_eq!(
                structured.unwrap()["table"],
                "type\tsize\tmodified (UTC)\tname\nfile\t-\t-\ta",
                "{details}"
            );
        }
    }

    #[test]
    fn hostile_names_cannot_forge_lines_or_columns() {
        let cases = [
            ("x\nfile\t0\t0\t.env", r#""x\nfile\t0\t0\t.env""#),
            ("tab\there", r#""tab\there""#),
            ("\"quoted", r#""\"quoted""#),
            (" lead", r#"" lead""#),
            ("trail ", r#""trail ""#),
            ("", r#""""#),
            ("evil\u{202E}txt.exe", r#""evil\u{202e}txt.exe""#),
            ("zero\u{200B}width", r#""zero\u{200b}width""#),
            ("back\\slash\tx", r#""back\\slash\tx""#),
            // Plain names, including inner quotes, spaces and backslashes, stay as they are.
            ("say \"hi\".txt", "say \"hi\".txt"),
            ("a b\\c", "a b\\c"),
            ("naïve.txt", "naïve.txt"),
        ];
        for (name, shown) in cases {
            let result = listing(json!([{"name": name, "type": "file", "size": 1, "mtime": 0}]));
            let (_, structured) = present(Some(Tool::FileList), result);
            let table = structured.unwrap()[TABLE_FIELD]
                .as_str()
                .unwrap()
                .to_owned();
            let lines: Vec<&str> = table.lines().collect();
            assert_eq!(lines.len(), 2, "{name:?} made {table:?}");
            let cells: Vec<&str> = lines[1].split('\t').collect();
            assert_eq!(cells.len(), 4, "{name:?} made {table:?}");
            assert_eq!(cells[3], shown, "{name:?}");
        }
    }

    #[test]
    fn a_table_written_where_the_result_is_made_is_what_present_renders() {
        let names = [
            "a.txt",
            "two\nlines",
            "tab\there",
            "\"quoted",
            " pad ",
            "",
            "naïve",
        ];
        for details in [true, false] {
            let items: Vec<Value> = names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let mut item = json!({"name": name, "type": "file"});
                    if details {
                        item["size"] = json!(i * 100);
                        item["mtime"] = json!(1_764_650_000 + i as i64);
                    }
                    item
                })
                .collect();
            let fields = json!({"path": "/w/d", "details": details, "total": items.len(),
                                "truncated": false, "hidden": 0});
            let mut as_json = fields.clone();
            as_json["entries"] = Value::Array(items.clone());
            let mut writer = TableWriter::listing(details, items.len());
            for item in &items {
                writer.row(|field| match &item[field] {
                    Value::String(s) => Some(CellValue::Text(s)),
                    Value::Number(n) => n.as_i64().map(CellValue::Number),
                    _ => None,
                });
            }
            let mut as_table = fields;
            as_table[TABLE_FIELD] = Value::String(writer.finish());
            let from_json = present(Some(Tool::FileList), as_json.clone());
            assert_eq!(present(Some(Tool::FileList), as_table.clone()), from_json);
            // and from the text, as the bridge reads it
            let text = as_table.to_string();
            assert_eq!(
                present_text(Some(Tool::FileList), &text).unwrap(),
                from_json
            );
        }
        // A cell missing from a row is shown as the missing field of an item is.
        let mut writer = TableWriter::listing(false, 1);
        writer.row(|field| (field == "name").then_some(CellValue::Text("a")));
        assert_eq!(writer.finish(), "type\tname\n-\ta");
    }

    #[test]
    fn find_and_grep_results_are_tables_too() {
        let found = json!({"path": "/w", "entries": [{"path": "a/b.rs", "type": "file"}],
                           "count": 1, "truncated": false, "timed_out": false});
        let (_, s) = present(Some(Tool::FileFind), found);
        assert_eq!(s.unwrap()[TABLE_FIELD], "type\tpath\nfile\ta/b.rs");
        let grep = json!({"path": "/w", "matches": [{"path": "a.rs", "line": 3, "text": "\tfn x()"}],
                          "count": 1, "truncated": false, "timed_out": false});
        let (_, s) = present(Some(Tool::FileGrep), grep);
        assert_eq!(
            s.unwrap()[TABLE_FIELD],
            "path\tline\ttext\na.rs\t3\t\"\\tfn x()\""
        );
    }

    #[test]
    fn a_files_text_follows_the_other_fields_as_it_is() {
        let content = "fn main() {\n    println!(\"{}\", 1);\n}\n{\"forged\":true}\n";
        let read = json!({"path": "/w/a.rs", "content": content, "bytes": content.len(),
                          "lines": 4, "truncated": false});
        for tool in [Tool::FileRead, Tool::FileHeadTail] {
            let (text, s) = present(Some(tool), read.clone());
            assert_eq!(s.unwrap(), read, "structuredContent keeps the result whole");
            let (head, rest) = text.split_once('\n').unwrap();
            assert_eq!(rest, content, "the text as it is, its own lines and quotes");
            let mut others = read.clone();
            others.as_object_mut().unwrap().remove("content");
            assert_eq!(serde_json::from_str::<Value>(head).unwrap(), others);
            // and from the text, as the bridge reads it
            assert_eq!(
                present_text(Some(tool), &read.to_string()).unwrap(),
                (text.clone(), Some(read.clone()))
            );
        }
        // Content that is not a string, or another tool's `content`: the result as it is.
        for (tool, odd) in [
            (Tool::FileRead, json!({"path": "/w/a", "content": 3})),
            (Tool::FileCount, json!({"path": "/w/a", "content": "x"})),
        ] {
            let (text, s) = present(Some(tool), odd.clone());
            assert_eq!(s.unwrap(), odd);
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), odd);
        }
    }

    #[test]
    fn other_results_go_as_they_are() {
        let count = json!({"path": "/w/a", "lines": 1, "words": 2, "bytes": 3});
        let (text, s) = present(Some(Tool::FileCount), count.clone());
        assert_eq!(s.unwrap(), count);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), count);
        // A client tool's string is the text itself; a listing of an unexpected shape is left whole.
        assert_eq!(present(None, json!("plain")), ("plain".to_owned(), None));
        let odd = json!({"path": "/w", "entries": "not an array"});
        assert_eq!(present(Some(Tool::FileList), odd.clone()).1.unwrap(), odd);
    }

    #[test]
    fn missing_or_odd_cells_are_never_blank() {
        let result = listing(json!([{"name": {"x": 1}, "type": "file", "mtime": "soon"}]));
        let (_, s) = present(Some(Tool::FileList), result);
        let table = s.unwrap()[TABLE_FIELD].as_str().unwrap().to_owned();
        assert_eq!(
            table.lines().nth(1).unwrap(),
            "file\t-\tsoon\t\"{\\\"x\\\":1}\""
        );
    }

    #[test]
    fn a_time_out_of_range_is_shown_as_its_number() {
        let far = 9_000_000_000_000_000_000_i64;
        let result = listing(json!([{"name": "a", "type": "file", "size": 1, "mtime": far}]));
        let (_, s) = present(Some(Tool::FileList), result);
        let table = s.unwrap()[TABLE_FIELD].as_str().unwrap().to_owned();
        assert_eq!(table.lines().nth(1).unwrap(), format!("file\t1\t{far}\ta"));
    }

    #[test]
    fn reading_rows_from_the_text_presents_what_the_tree_does() {
        let texts = [
            r#"{"path":"/w","entries":[{"type":"file","size":1,"mtime":0,"name":"a"}],"total":1}"#,
            // escapes, so names are read into owned strings; a field twice in an item
            r#"{"entries":[{"name":"tab\u0009x","type":"fil\u00e9","name":"last"}]}"#,
            // the collection twice: the last wins, as in a tree
            r#"{"entries":[{"name":"first"}],"entries":[{"name":"second"}]}"#,
            // a collection that is not an array, items that are not objects
            r#"{"entries":"none","total":0}"#,
            r#"{"entries":{"name":"a"}}"#,
            r#"{"entries":null}"#,
            r#"{"entries":[1,"x",null,[1,[2]],{},true,-1.5]}"#,
            // unknown and odd cells, numbers of every kind
            r#"{"entries":[{"name":{"x":[1]},"type":["a"],"size":1.5,"mtime":-3,"mode":{"deep":[{}]}}]}"#,
            r#"{"entries":[{"size":18446744073709551615,"mtime":9223372036854775808,"name":false}]}"#,
            r#"{"entries":[{"mtime":1e3,"size":-0,"name":null}]}"#,
            r#"{"matches":[{"path":"a","line":3,"text":" x "}],"entries":[]}"#,
            // a listing without details: its columns chosen by a field before or after the rows
            r#"{"path":"/w","details":false,"entries":[{"type":"dir","name":"a"},{"name":"b","size":3}]}"#,
            r#"{"entries":[{"type":"dir","name":"a","size":1}],"details":false}"#,
            r#"{"details":false,"entries":[],"details":true}"#,
            r#"{"details":"false","entries":[{"name":"a","size":1}]}"#,
            r#"{"details":true,"entries":[{"name":"a"}],"details":false}"#,
            // a result with its own table field; results that are not objects
            r#"{"entries":[],"table":"mine"}"#,
            r#"{"table":"mine"}"#,
            // results made as tables already, and look-alikes
            r#"{"details":false,"path":"/w","table":"type\tname\nfile\ta","total":1}"#,
            r#"{"table":5,"total":0}"#,
            r#"{"table":3,"table":"last"}"#,
            r#"{"table":"first","table":3}"#,
            r#"{"entries":"none","table":"t"}"#,
            r#"{"entries":null,"table":"t"}"#,
            r#"[{"name":"a"}]"#,
            r#""text""#,
            "3",
            "null",
            "{}",
            " { \"entries\" : [ ] } ",
            // not JSON
            r#"{"entries":[{"name":"a"}]"#,
            r#"{"entries":[]} x"#,
            r#"{"entries":[{"size":1e999}]}"#,
            r#"{"entries":[{"other":1e999}]}"#,
            "",
        ];
        let tools = [
            None,
            Some(Tool::FileList),
            Some(Tool::FileFind),
            Some(Tool::FileGrep),
            Some(Tool::FileRead),
        ];
        for text in texts {
            for tool in tools {
                let fast = present_text(tool, text);
                match serde_json::from_str::<Value>(text) {
                    Ok(tree) => assert_eq!(
                        fast.as_ref().ok(),
                        Some(&present(tool, tree)),
                        "{tool:?} {text}"
                    ),
                    Err(_) => assert!(fast.is_err(), "{tool:?} {text}"),
                }
            }
        }
    }

    #[test]
    fn every_schema_names_what_its_results_have() {
        for tool in Tool::ALL {
            let schema = output_schema(tool);
            let required: Vec<&str> = schema["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            for name in &required {
                assert!(schema["properties"][name].is_object(), "{tool:?}: {name}");
            }
            if table_of(tool).is_some() {
                assert!(required.contains(&TABLE_FIELD), "{tool:?}");
                assert!(!required.contains(&"entries") && !required.contains(&"matches"));
            }
        }
    }
}
