//! [`super::present`] straight from a result's JSON text: the collection's rows are written into
//! the table as they are read, with no tree of thousands of objects built first (the bridge's
//! biggest cost for a listing). The answer is [`super::present`]'s of the parsed text, exactly:
//! anything this reader does not expect — a field twice, a result that is not an object — falls
//! back to parsing the whole and presenting that, and the fuzz target `mcp_result` holds the two
//! equal.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::{
    CellRef, TABLE_FIELD, Table, Tool, made_as_table, render_header, table_for, table_of, write_row,
};

/// What an MCP client is given for `text`, the JSON of a successful result of `tool` (see
/// [`super::present`]); an error if `text` is not JSON.
pub fn present_text(tool: Option<Tool>, text: &str) -> serde_json::Result<(String, Option<Value>)> {
    if let Some(tool) = tool
        && table_of(tool).is_some()
        && let Ok(read) = read(tool, text)
    {
        return Ok(read.presented());
    }
    Ok(super::present(tool, serde_json::from_str(text)?))
}

/// [`present_text`] of a result that came in two parts: `fields`, the JSON text of an object
/// without its `table`, and `table` itself (as the executor sends a call's table that asked for
/// tables). The same answer as for [`with_table`]'s text, without escaping the table into JSON
/// and reading it back.
pub fn present_parts(
    tool: Option<Tool>,
    fields: &str,
    table: String,
) -> serde_json::Result<(String, Option<Value>)> {
    let mut fields: Map<String, Value> = serde_json::from_str(fields)?;
    if let Some(shape) = tool.and_then(table_of)
        && !fields.contains_key(shape.array)
        && !fields.contains_key(TABLE_FIELD)
    {
        let table = Some(table);
        return Ok(Read { fields, table }.presented());
    }
    fields.insert(TABLE_FIELD.to_owned(), Value::String(table));
    Ok(super::present(tool, Value::Object(fields)))
}

/// The JSON text of the object `fields` (JSON text) with `table` as its last field.
pub fn with_table(fields: &str, table: &str) -> String {
    let Some(open) = fields.trim_end().strip_suffix('}') else {
        return fields.to_owned();
    };
    let escaped = Value::String(table.to_owned()).to_string();
    let mut whole = String::with_capacity(open.len() + escaped.len() + 12);
    whole.push_str(open);
    if !open.trim_end().ends_with('{') {
        whole.push(',');
    }
    whole.push_str(r#""table":"#);
    whole.push_str(&escaped);
    whole.push('}');
    whole
}

/// Reads a result of `tool` with its collection rendered as it goes; an error for anything left
/// to the whole parse (and for a tool without a table).
fn read(tool: Tool, text: &str) -> serde_json::Result<Read> {
    let Some(table) = table_of(tool) else {
        return Err(de::Error::custom("the tool's results have no table"));
    };
    let mut reader = serde_json::Deserializer::from_str(text);
    let array = table.array;
    let mut read = ResultSeed { tool, array }.deserialize(&mut reader)?;
    reader.end()?;
    if read.table.is_none()
        && made_as_table(&table, &read.fields)
        && let Some(Value::String(made)) = read.fields.remove(TABLE_FIELD)
    {
        read.table = Some(made);
    }
    Ok(read)
}

/// A result object read with its collection rendered.
struct Read {
    /// Every field but the collection.
    fields: Map<String, Value>,
    /// The rendered table, when the collection was an array.
    table: Option<String>,
}

impl Read {
    fn presented(self) -> (String, Option<Value>) {
        let Read { mut fields, table } = self;
        match table {
            Some(table) => {
                let mut text = Value::Object(fields.clone()).to_string();
                text.push('\n');
                text.push_str(&table);
                fields.insert(TABLE_FIELD.to_owned(), Value::String(table));
                (text, Some(Value::Object(fields)))
            }
            None => {
                let whole = Value::Object(fields);
                (whole.to_string(), Some(whole))
            }
        }
    }
}

struct ResultSeed {
    tool: Tool,
    /// The collection's field.
    array: &'static str,
}

impl<'de> DeserializeSeed<'de> for ResultSeed {
    type Value = Read;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Read, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ResultSeed {
    type Value = Read;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a result object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let mut fields = Map::new();
        let mut table = None;
        // The columns the collection was written with, chosen by the fields before it.
        let mut columns = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == self.array {
                if columns.is_some() {
                    // The last of two wins in a parsed object: left to the whole parse.
                    return Err(de::Error::custom("the collection appears twice"));
                }
                let chosen = table_for(self.tool, &fields)
                    .ok_or_else(|| de::Error::custom("the tool's results have no table"))?;
                match map.next_value_seed(RowsSeed { table: &chosen })? {
                    Rows::Rendered(rendered) => table = Some(rendered),
                    Rows::Other(value) => {
                        fields.insert(key.into_owned(), value);
                    }
                }
                columns = Some(chosen);
            } else {
                fields.insert(key.into_owned(), map.next_value()?);
            }
        }
        if table.is_some() && fields.contains_key(TABLE_FIELD) {
            // `present` lets the table replace such a field: left to it.
            return Err(de::Error::custom("a result with its own table field"));
        }
        if table.is_some() && columns != table_for(self.tool, &fields) {
            // A field after the collection changes its columns (`details`): left to the whole
            // parse, which sees every field first.
            return Err(de::Error::custom(
                "the collection came before what chooses its columns",
            ));
        }
        Ok(Read { fields, table })
    }
}

/// The collection field's value: rendered when it is an array, as it is otherwise.
enum Rows {
    Rendered(String),
    Other(Value),
}

struct RowsSeed<'t> {
    table: &'t Table,
}

impl<'de> DeserializeSeed<'de> for RowsSeed<'_> {
    type Value = Rows;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Rows, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RowsSeed<'_> {
    type Value = Rows;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the result's collection")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Rows, A::Error> {
        let mut out = String::with_capacity(64 * (seq.size_hint().unwrap_or(0) + 1));
        render_header(&mut out, self.table);
        while seq
            .next_element_seed(RowSeed {
                table: self.table,
                out: &mut out,
            })?
            .is_some()
        {}
        Ok(Rows::Rendered(out))
    }

    // Anything else stays a field as it is.
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Rows, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(Rows::Other)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Rows, E> {
        Ok(Rows::Other(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rows, E> {
        Ok(Rows::Other(Value::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rows, E> {
        Ok(Rows::Other(Value::from(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Rows, E> {
        Ok(Rows::Other(Value::from(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Rows, E> {
        Ok(Rows::Other(Value::String(v.to_owned())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Rows, E> {
        Ok(Rows::Other(Value::Null))
    }
}

/// One item of the collection, written as one line of the table.
struct RowSeed<'t, 'o> {
    table: &'t Table,
    out: &'o mut String,
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl RowSeed<'_, '_> {
    fn write(self, cells: &[Option<Cell<'_>>]) {
        write_row(self.out, self.table, |i, _| {
            cells.get(i).and_then(Option::as_ref).map(Cell::as_ref)
        });
    }

    /// An item that is not an object: every cell missing, as `present` shows it.
    fn write_blank(self) {
        self.write(&[])
    }
}

impl<'de> Visitor<'de> for RowSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an item of the collection")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut cells: [Option<Cell<'de>>; 4] = Default::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let column = self
                .table
                .columns
                .iter()
                .position(|(field, _, _)| *field == key);
            match column {
                Some(i) if i < cells.len() => cells[i] = Some(map.next_value()?),
                // Read as a parse would read it (a number out of range is an error either way).
                _ => {
                    map.next_value::<Value>()?;
                }
            }
        }
        self.write(&cells);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        self.write_blank();
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.write_blank();
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.write_blank();
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.write_blank();
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.write_blank();
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.write_blank();
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.write_blank();
        Ok(())
    }
}

/// One cell as read: a string borrowed from the text where it has no escapes.
enum Cell<'de> {
    Text(Cow<'de, str>),
    Number(Number),
    Other(Value),
}

impl Cell<'_> {
    fn as_ref(&self) -> CellRef<'_> {
        match self {
            Cell::Text(s) => CellRef::Text(s),
            Cell::Number(n) => CellRef::Number(n),
            Cell::Other(v) => CellRef::of(v),
        }
    }
}

impl<'de> Deserialize<'de> for Cell<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Cell<'de>, D::Error> {
        d.deserialize_any(CellVisitor)
    }
}

struct CellVisitor;

impl<'de> Visitor<'de> for CellVisitor {
    type Value = Cell<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a cell")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Cell<'de>, E> {
        Ok(Cell::Text(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Cell<'de>, E> {
        Ok(Cell::Text(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Cell<'de>, E> {
        Ok(Cell::Text(Cow::Owned(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Cell<'de>, E> {
        Ok(Cell::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Cell<'de>, E> {
        Ok(Cell::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Cell<'de>, E> {
        Ok(match Value::from(v) {
            Value::Number(n) => Cell::Number(n),
            other => Cell::Other(other),
        })
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Cell<'de>, E> {
        Ok(Cell::Other(Value::Bool(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Cell<'de>, E> {
        Ok(Cell::Other(Value::Null))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Cell<'de>, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(Cell::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Cell<'de>, A::Error> {
        Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Cell::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_is_read_in_one_pass_and_odd_results_are_left_to_the_whole_parse() {
        let list = Tool::FileList;
        for text in [
            r#"{"path":"/w","entries":[{"type":"file","size":1,"mtime":0,"name":"a\tb"},3],"n":1}"#,
            r#"{"path":"/w","details":false,"entries":[{"type":"file","name":"a"}]}"#,
            r#"{"path":"/w","details":true,"entries":[{"type":"file","name":"a"}]}"#,
            r#"{"entries":[],"details":true}"#,
            r#"{"entries":"not an array","details":false}"#,
            r#"{"total":0}"#,
        ] {
            assert!(read(list, text).is_ok(), "{text}");
        }
        for text in [
            r#"{"entries":[],"entries":[]}"#,
            r#"{"entries":[],"table":"mine"}"#,
            r#"{"entries":[],"details":false}"#,
            r#"[]"#,
            r#"{"entries":[]} x"#,
        ] {
            assert!(read(list, text).is_err(), "{text}");
        }
        assert!(read(Tool::FileRead, r#"{"entries":[]}"#).is_err());
    }

    #[test]
    fn a_result_in_two_parts_is_shown_as_the_whole_of_it_is() {
        let table = "type\tname\nfile\t\"a\\tb\"\ndir\tc\u{2028}\n".to_owned();
        for (tool, fields) in [
            (
                Some(Tool::FileList),
                r#"{"path":"/w","details":false,"total":2,"truncated":false}"#,
            ),
            (
                Some(Tool::FileFind),
                r#"{"path":"/w","count":2,"truncated":false}"#,
            ),
            (
                Some(Tool::FileGrep),
                r#"{"files_searched":3,"truncated":false}"#,
            ),
            (Some(Tool::FileList), "{}"),
            // odd ones, left to the whole form: a collection beside the table, a table twice
            (Some(Tool::FileList), r#"{"entries":[],"details":false}"#),
            (Some(Tool::FileFind), r#"{"table":"mine"}"#),
            (Some(Tool::FileRead), r#"{"content":"x"}"#),
            (None, r#"{"a":1}"#),
        ] {
            let whole = with_table(fields, &table);
            let parsed: Value = serde_json::from_str(&whole).unwrap();
            assert_eq!(parsed[TABLE_FIELD], Value::String(table.clone()), "{whole}");
            assert_eq!(
                present_parts(tool, fields, table.clone()).unwrap(),
                present_text(tool, &whole).unwrap(),
                "{fields}"
            );
        }
        assert!(present_parts(Some(Tool::FileList), "not json", table).is_err());
    }
}
