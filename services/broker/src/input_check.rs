//! A client tool's input checked against the `input_schema` its provider registered, before the
//! call is judged or sent: a provider is told only what it said it takes. Pure (the schema and
//! the input in, the refusal out), with the `jsonschema` crate.

/// Schema errors named in one refusal at most.
const MAX_NAMED: usize = 3;

/// Whether `schema` can check input at all (a tool whose schema cannot is not registered).
pub fn usable_schema(schema: &serde_json::Value) -> Result<(), String> {
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| format!("its input_schema cannot check input: {e}"))
}

/// Whether `input` fits `schema`; `Err` says where it does not (or that the schema cannot be
/// used: then nothing is sent either).
pub fn check_input(schema: &serde_json::Value, input: &serde_json::Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the provider's input schema cannot check the input: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(input)
        .take(MAX_NAMED + 1)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() {
                "input".to_owned()
            } else {
                format!("input{at}")
            };
            let mut said = e.to_string();
            glovebox_proto::display::truncate_at_char(&mut said, 200);
            format!("{at}: {said}")
        })
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    let more = if errors.len() > MAX_NAMED {
        "; …"
    } else {
        ""
    };
    Err(format!(
        "the input does not match the tool's input schema: {}{more}",
        errors[..errors.len().min(MAX_NAMED)].join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_is_held_to_the_registered_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"q": {"type": "string", "maxLength": 5}, "n": {"type": "integer"}},
            "required": ["q"],
            "additionalProperties": false
        });
        assert_eq!(check_input(&schema, &json!({"q": "hi", "n": 2})), Ok(()));
        let e = check_input(&schema, &json!({"n": "two"})).unwrap_err();
        assert!(e.contains("\"q\" is a required property"), "{e}");
        assert!(e.contains("input/n: "), "{e}");
        let e = check_input(&schema, &json!({"q": "too long", "x": 1})).unwrap_err();
        assert!(e.contains("input/q"), "{e}");
        assert!(e.contains("Additional properties"), "{e}");
        // an open schema takes any object
        assert_eq!(
            check_input(&json!({"type": "object"}), &json!({"a": [1]})),
            Ok(())
        );
        // a schema that refers elsewhere cannot check anything: nothing is sent
        let e =
            check_input(&json!({"$ref": "https://example.com/s.json"}), &json!({})).unwrap_err();
        assert!(e.contains("cannot check the input"), "{e}");
    }
}
