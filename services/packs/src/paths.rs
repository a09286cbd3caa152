//! Which arguments of a pack tool call are paths: the ones the pack declares (`path_args`:
//! `name` for every tool, `tool:name` for one), or else the properties of the tool's schema named
//! like paths (`path`, `file`, `dir`, `sourcePath`, `output_file`, ...). Each string value (or each
//! string in a list) becomes a subject the account's executor resolves and the gate judges: a
//! read for a tool the server marks read-only, a write otherwise. Only top-level arguments are
//! looked at. Pure.

use glovebox_proto::v1::{Domain, PathArgument};

/// Most path arguments one call may carry (more is refused, not judged in part).
pub const MAX_PATH_ARGUMENTS: usize = 64;

/// The last words of argument names that are paths.
const PATH_WORDS: &[&str] = &[
    "path",
    "paths",
    "file",
    "files",
    "filename",
    "filenames",
    "filepath",
    "filepaths",
    "dir",
    "dirs",
    "directory",
    "directories",
    "folder",
    "folders",
];
/// Whole argument names that are paths.
const PATH_NAMES: &[&str] = &["cwd", "workdir"];

/// Whether an argument called `name` is named like a path: its last word (split at `_`, `-` and
/// lower-to-upper case changes) is one of [`PATH_WORDS`], or it is one of [`PATH_NAMES`].
pub fn is_path_like(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    if PATH_NAMES.contains(&lower.as_str()) {
        return true;
    }
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if c == '_' || c == '-' {
            words.push(std::mem::take(&mut word));
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        word.push(c.to_ascii_lowercase());
    }
    words.push(word);
    words
        .iter()
        .rev()
        .find(|w| !w.is_empty())
        .is_some_and(|w| PATH_WORDS.contains(&w.as_str()))
}

/// The names of `tool`'s arguments that are paths: the declared ones, or the schema's properties
/// named like paths.
pub fn path_names(
    tool: &str,
    schema: &serde_json::Value,
    declared: Option<&[String]>,
) -> Vec<String> {
    let mut names: Vec<String> = match declared {
        Some(list) => list
            .iter()
            .filter_map(|entry| match entry.split_once(':') {
                Some((t, name)) if t == tool => Some(name.to_owned()),
                Some(_) => None,
                None => Some(entry.clone()),
            })
            .collect(),
        None => schema
            .get("properties")
            .and_then(|p| p.as_object())
            .map(|props| props.keys().filter(|k| is_path_like(k)).cloned().collect())
            .unwrap_or_default(),
    };
    names.sort();
    names.dedup();
    names
}

/// The path arguments of a call with `params`, in name order (and list order within a name).
pub fn path_arguments(
    names: &[String],
    params: &serde_json::Map<String, serde_json::Value>,
    read_only: bool,
) -> Result<Vec<PathArgument>, String> {
    let domain = if read_only {
        Domain::Read
    } else {
        Domain::Write
    };
    let mut out = Vec::new();
    let mut push = |name: &str, index: usize, in_list: bool, path: &str| {
        out.push(PathArgument {
            name: name.to_owned(),
            index: index as u32,
            in_list,
            domain: domain as i32,
            path: path.to_owned(),
        });
    };
    for name in names {
        match params.get(name) {
            Some(serde_json::Value::String(p)) => push(name, 0, false, p),
            Some(serde_json::Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if let Some(p) = item.as_str() {
                        push(name, i, true, p);
                    }
                }
            }
            _ => {}
        }
    }
    if out.len() > MAX_PATH_ARGUMENTS {
        return Err(format!(
            "the call names more than {MAX_PATH_ARGUMENTS} paths; split it"
        ));
    }
    if let Some(empty) = out.iter().find(|a| a.path.is_empty()) {
        return Err(format!("argument {} is an empty path", empty.name));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_like_paths() {
        #[rustfmt::skip]
        let cases: &[(&str, bool)] = &[
            ("path", true), ("file_path", true), ("sourcePath", true), ("output_file", true),
            ("files", true), ("target-dir", true), ("directory", true), ("cwd", true),
            ("filename", true), ("PATH", true), ("paths", true), ("folder", true),
            ("profile", false), ("file_id", false), ("url", false), ("pathology", false),
            ("content", false), ("", false), ("repo", false), ("xpath_query", false),
        ];
        for (name, like) in cases {
            assert_eq!(is_path_like(name), *like, "{name}");
        }
    }

    #[test]
    fn declared_names_win_over_the_schema() {
        let schema =
            json!({"type": "object", "properties": {"path": {}, "query": {}, "out_file": {}}});
        assert_eq!(path_names("t", &schema, None), ["out_file", "path"]);
        let declared = [
            "query".to_owned(),
            "other:x".to_owned(),
            "t:target".to_owned(),
        ];
        assert_eq!(
            path_names("t", &schema, Some(&declared)),
            ["query", "target"]
        );
        assert!(path_names("t", &schema, Some(&[])).is_empty());
        assert!(path_names("t", &json!({"type": "object"}), None).is_empty());
    }

    #[test]
    fn arguments_become_subjects_in_order() {
        let params = json!({"path": "a.txt", "files": ["b", 3, "c"], "n": 1, "dir": {"x": 1}});
        let names: Vec<String> = ["dir", "files", "missing", "n", "path"]
            .map(String::from)
            .to_vec();
        let args = path_arguments(&names, params.as_object().unwrap(), true).unwrap();
        let got: Vec<(&str, u32, bool, &str)> = args
            .iter()
            .map(|a| (a.name.as_str(), a.index, a.in_list, a.path.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("files", 0, true, "b"),
                ("files", 2, true, "c"),
                ("path", 0, false, "a.txt")
            ]
        );
        assert!(args.iter().all(|a| a.domain == Domain::Read as i32));
        let w = path_arguments(&["path".into()], params.as_object().unwrap(), false).unwrap();
        assert_eq!(w[0].domain, Domain::Write as i32);
    }

    #[test]
    fn too_many_or_empty_paths_are_refused() {
        let many: Vec<String> = (0..=MAX_PATH_ARGUMENTS).map(|i| i.to_string()).collect();
        let params = json!({ "files": many });
        assert!(path_arguments(&["files".into()], params.as_object().unwrap(), true).is_err());
        let params = json!({ "path": "" });
        assert!(path_arguments(&["path".into()], params.as_object().unwrap(), true).is_err());
    }
}
