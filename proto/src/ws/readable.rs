//! Whether a JSON text reads as a `serde_json::Value` object, without building one: the broker
//! passes an executor's result text into its WebSocket frame as it came (see the broker's
//! `answer.rs`) and must send no client a frame the client cannot read.

/// Whether `text` is one JSON object (nothing before or after it but whitespace) that
/// `serde_json::from_str::<Value>` reads — every number in range, every string valid, nesting
/// within serde_json's limit — exactly the texts it reads as an object (fuzzed against it).
/// Nothing is kept: `serde::de::IgnoredAny` would skip numbers without reading them and let
/// through `1e999`, which no `Value` holds.
pub fn reads_as_object(text: &str) -> bool {
    text.trim_start().starts_with('{') && serde_json::from_str::<Readable>(text).is_ok()
}

/// A JSON value read as a tree would be, kept nowhere.
struct Readable;

impl<'de> serde::Deserialize<'de> for Readable {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Readable, D::Error> {
        d.deserialize_any(ReadableVisitor)
    }
}

struct ReadableVisitor;

impl<'de> serde::de::Visitor<'de> for ReadableVisitor {
    type Value = Readable;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Readable, E> {
        Ok(Readable)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Readable, E> {
        Ok(Readable)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Readable, E> {
        Ok(Readable)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Readable, E> {
        Ok(Readable)
    }
    fn visit_str<E>(self, _: &str) -> Result<Readable, E> {
        Ok(Readable)
    }
    fn visit_unit<E>(self) -> Result<Readable, E> {
        Ok(Readable)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Readable, A::Error> {
        while seq.next_element::<Readable>()?.is_some() {}
        Ok(Readable)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Readable, A::Error> {
        while map.next_entry::<Readable, Readable>()?.is_some() {}
        Ok(Readable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_the_objects_a_tree_reads() {
        let deep = format!("{}{}", "{\"a\":".repeat(200), "1}".repeat(200));
        for text in [
            r#"{"content":"x","bytes":1}"#,
            " \n{\"a\":[1,2,{\"b\":null}]}\n ",
            "{}",
            "[1,2]",
            r#""text""#,
            "42",
            r#"{"a":1}{"b":2}"#,
            r#"{"a":1} x"#,
            r#"{"a":1"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":'x'}"#,
            "",
            &deep,
            r#"{"n":1e999}"#,
            r#"{"n":-1e400}"#,
            r#"{"n":1e308}"#,
            r#"{"n":18446744073709551616}"#,
            r#"{"k":1,"k":2}"#,
            "\u{feff}{}",
        ] {
            let tree = serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object());
            assert_eq!(reads_as_object(text), tree, "{text:.60}");
        }
        assert!(!reads_as_object(r#"{"n":1e999}"#));
        assert!(reads_as_object(r#"{"k":1,"k":2}"#));
    }
}
