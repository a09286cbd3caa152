//! Which arguments of a pack tool call are paths, at any depth of its arguments: those named
//! like paths (`path`, `file`, `dir`, `source`, `destination`, `src`, `dst`, `target`, `root`,
//! `sourcePath`, `output_file`, ..., and the whole names `cwd`, `workdir`, `from`, `to`), those the
//! pack declares (`path_args`: `name` for every tool, `tool:name` for one), less those it exempts
//! (`not_paths`); and wherever they sit, a `file://` URI and an absolute path inside the account's
//! roots. Each such string (or each string in a list) becomes a subject the account's executor
//! resolves and the gate judges: a read for a tool the server marks read-only, a write
//! otherwise. Pure.

use std::path::{Component, Path, PathBuf};

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
    "source",
    "sources",
    "destination",
    "destinations",
    "dest",
    "src",
    "dst",
    "target",
    "targets",
    "root",
    "roots",
];
/// Whole argument names that are paths.
const PATH_NAMES: &[&str] = &["cwd", "workdir", "from", "to"];
/// How deep into the arguments paths are looked for, and how many values at most.
const MAX_DEPTH: usize = 16;
const MAX_VALUES: usize = 100_000;

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

/// What decides which arguments of one tool are paths.
#[derive(Debug, Clone, Copy)]
pub struct PathRules<'a> {
    pub tool: &'a str,
    /// The pack's `path_args` (added to what is named like a path).
    pub declared: &'a [String],
    /// The pack's `not_paths` (names never taken for paths).
    pub exempt: &'a [String],
    /// The account's roots: an absolute path inside one is judged wherever it sits.
    pub roots: &'a [PathBuf],
}

impl PathRules<'_> {
    /// Whether `entry` (`name`, or `tool:name`) names `name` for this tool.
    fn lists(&self, list: &[String], name: &str) -> bool {
        list.iter().any(|entry| match entry.split_once(':') {
            Some((t, n)) => t == self.tool && n == name,
            None => entry == name,
        })
    }

    /// Whether an argument (at any depth) called `name` holds paths.
    pub fn is_path(&self, name: &str) -> bool {
        !self.lists(self.exempt, name) && (self.lists(self.declared, name) || is_path_like(name))
    }

    /// Whether `value`, found in an argument that is not a path, is one all the same: a `file:`
    /// URI (its path), or an absolute path inside a root (or with a `..` in it).
    fn stray_path<'v>(&self, value: &'v str) -> Option<&'v str> {
        if let Some(path) = value.strip_prefix("file://") {
            return Some(path);
        }
        // Absolute, and inside a root as written or climbing out of one with `..`.
        let path = Path::new(value);
        let climbs = path.components().any(|c| c == Component::ParentDir);
        let in_root = self.roots.iter().any(|r| path.starts_with(r));
        (path.is_absolute() && (in_root || climbs)).then_some(value)
    }
}

/// The path arguments of a call with `params`, in the order they appear: `name` is where each
/// sits (`edits[1].path`), `index` its place in a list of paths.
pub fn path_arguments(
    rules: &PathRules<'_>,
    params: &serde_json::Map<String, serde_json::Value>,
    read_only: bool,
) -> Result<Vec<PathArgument>, String> {
    Ok(judged_and_unjudged(rules, params, read_only)?.0)
}

/// Most unjudged path-like strings named in one ask.
const MAX_UNJUDGED: usize = 5;

/// Whether a string that is not judged as a path looks like one all the same: relative with a
/// directory (`notes/x.txt`, `./a`, `../b`, `~/c`), or absolute (outside the roots, where it is
/// not judged either). One word, no URL, not too long.
pub fn looks_like_path(value: &str) -> bool {
    let one_word = !value.is_empty()
        && value.len() <= 512
        && !value.chars().any(|c| c.is_whitespace() || c.is_control())
        && !value.contains("://");
    one_word
        && (value.starts_with('/')
            || value.starts_with("./")
            || value.starts_with("../")
            || value.starts_with("~/")
            || (value.contains('/')
                && value
                    .split('/')
                    .all(|part| !part.is_empty() && part.len() <= 255)))
}

/// [`path_arguments`], and the strings in other arguments that look like paths
/// ([`looks_like_path`]), as `at holds value` (at most [`MAX_UNJUDGED`]): an ask says those were
/// not judged as paths.
pub fn judged_and_unjudged(
    rules: &PathRules<'_>,
    params: &serde_json::Map<String, serde_json::Value>,
    read_only: bool,
) -> Result<(Vec<PathArgument>, Vec<String>), String> {
    let domain = if read_only {
        Domain::Read
    } else {
        Domain::Write
    };
    let mut walk = Walk {
        rules,
        domain,
        out: Vec::new(),
        unjudged: Vec::new(),
        seen: 0,
    };
    let mut keys: Vec<&String> = params.keys().collect();
    keys.sort();
    for key in keys {
        walk.value(key, key, &params[key], 0)?;
    }
    let (out, unjudged) = (walk.out, walk.unjudged);
    if out.len() > MAX_PATH_ARGUMENTS {
        return Err(format!(
            "the call names more than {MAX_PATH_ARGUMENTS} paths; split it"
        ));
    }
    if let Some(empty) = out.iter().find(|a| a.path.is_empty()) {
        return Err(format!("argument {} is an empty path", empty.name));
    }
    Ok((out, unjudged))
}

struct Walk<'r, 'a> {
    rules: &'r PathRules<'a>,
    domain: Domain,
    out: Vec<PathArgument>,
    /// Strings in other arguments that look like paths: `at holds value`.
    unjudged: Vec<String>,
    seen: usize,
}

impl Walk<'_, '_> {
    fn push(&mut self, at: &str, index: usize, in_list: bool, path: &str) {
        self.out.push(PathArgument {
            name: at.to_owned(),
            index: index as u32,
            in_list,
            domain: self.domain as i32,
            path: path.to_owned(),
        });
    }

    /// The value at `at`, under the key `key`.
    fn value(
        &mut self,
        at: &str,
        key: &str,
        value: &serde_json::Value,
        depth: usize,
    ) -> Result<(), String> {
        use serde_json::Value;
        self.seen += 1;
        if depth > MAX_DEPTH || self.seen > MAX_VALUES {
            return Err(
                "the call's arguments are nested too deep, or too many, to be judged".into(),
            );
        }
        let named = self.rules.is_path(key);
        match value {
            Value::String(s) if named => self.push(at, 0, false, s),
            Value::String(s) => {
                if let Some(path) = self.rules.stray_path(s) {
                    self.push(at, 0, false, path);
                } else if looks_like_path(s) && self.unjudged.len() < MAX_UNJUDGED {
                    let mut shown = s.clone();
                    glovebox_proto::display::truncate_at_char(&mut shown, 120);
                    self.unjudged.push(format!("{at} holds {shown}"));
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) if named => self.push(at, i, true, s),
                        _ => self.value(&format!("{at}[{i}]"), key, item, depth + 1)?,
                    }
                }
            }
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for k in keys {
                    self.value(&format!("{at}.{k}"), k, &map[k], depth + 1)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NONE: &[String] = &[];

    fn rules<'a>(
        declared: &'a [String],
        exempt: &'a [String],
        roots: &'a [PathBuf],
    ) -> PathRules<'a> {
        PathRules {
            tool: "t",
            declared,
            exempt,
            roots,
        }
    }

    fn args(rules: &PathRules<'_>, params: serde_json::Value) -> Vec<(String, String)> {
        path_arguments(rules, params.as_object().unwrap(), false)
            .unwrap()
            .into_iter()
            .map(|a| (a.name, a.path))
            .collect()
    }

    #[test]
    fn strings_that_look_like_paths_in_other_arguments_are_named_not_judged() {
        let roots = [PathBuf::from("/w")];
        let r = rules(NONE, NONE, &roots);
        let params = json!({
            "content": "notes/secret.txt",
            "query": "what is in ./config",
            "url": "https://example.com/a/b",
            "other": "/etc/passwd",
            "inside": "/w/a.txt",
            "path": "b.txt",
            "n": 3
        });
        let (judged, unjudged) =
            judged_and_unjudged(&r, params.as_object().unwrap(), false).unwrap();
        let judged: Vec<&str> = judged.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(judged, ["/w/a.txt", "b.txt"]);
        assert_eq!(
            unjudged,
            ["content holds notes/secret.txt", "other holds /etc/passwd"]
        );
        for no in ["hello", "a b/c", "https://x/y", "", "2024/12"] {
            let want = no == "2024/12";
            assert_eq!(looks_like_path(no), want, "{no:?}");
        }
    }

    #[test]
    fn names_like_paths() {
        #[rustfmt::skip]
        let cases: &[(&str, bool)] = &[
            ("path", true), ("file_path", true), ("sourcePath", true), ("output_file", true),
            ("files", true), ("target-dir", true), ("directory", true), ("cwd", true),
            ("filename", true), ("PATH", true), ("paths", true), ("folder", true),
            ("source", true), ("destination", true), ("src", true), ("dst", true),
            ("target", true), ("from", true), ("to", true), ("project_root", true),
            ("profile", false), ("file_id", false), ("url", false), ("pathology", false),
            ("content", false), ("", false), ("repo", false), ("xpath_query", false),
            ("source_timezone", false), ("to_do", false), ("total", false),
        ];
        for (name, like) in cases {
            assert_eq!(is_path_like(name), *like, "{name}");
        }
    }

    #[test]
    fn the_filesystem_servers_move_is_two_paths() {
        let got = args(
            &rules(NONE, NONE, &[]),
            json!({"source": ".env", "destination": "env-copy.txt"}),
        );
        assert_eq!(
            got,
            [
                ("destination".to_owned(), "env-copy.txt".to_owned()),
                ("source".to_owned(), ".env".to_owned())
            ]
        );
    }

    #[test]
    fn declared_names_add_and_exempt_ones_remove() {
        let declared = [
            "query".to_owned(),
            "other:x".to_owned(),
            "t:spec".to_owned(),
        ];
        let exempt = ["to".to_owned()];
        let got = args(
            &rules(&declared, &exempt, &[]),
            json!({"query": "q", "x": "not here", "spec": "s", "to": "bob@example.com", "path": "p"}),
        );
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["path", "query", "spec"]);
    }

    #[test]
    fn paths_are_found_at_any_depth_and_in_lists() {
        let got = args(
            &rules(NONE, NONE, &[]),
            json!({
                "edits": [{"path": "a.rs", "old": "x"}, {"path": "b.rs"}],
                "files": ["c", 3, "d"],
                "options": {"output": {"dir": "out"}},
                "n": 1
            }),
        );
        assert_eq!(
            got,
            [
                ("edits[0].path".to_owned(), "a.rs".to_owned()),
                ("edits[1].path".to_owned(), "b.rs".to_owned()),
                ("files".to_owned(), "c".to_owned()),
                ("files".to_owned(), "d".to_owned()),
                ("options.output.dir".to_owned(), "out".to_owned()),
            ]
        );
    }

    #[test]
    fn a_file_uri_or_an_absolute_path_in_a_root_is_judged_wherever_it_sits() {
        let roots = [PathBuf::from("/home/a/work")];
        let got = args(
            &rules(NONE, NONE, &roots),
            json!({
                "q": "/home/a/work/.env",
                "r": "/etc/passwd",
                "u": "file:///home/a/.ssh/id_rsa",
                "sneaky": "/home/a/work/../.ssh/id_rsa",
                "text": "hello /home/a/work/x",
                "rel": "notes.txt"
            }),
        );
        assert_eq!(
            got,
            [
                ("q".to_owned(), "/home/a/work/.env".to_owned()),
                (
                    "sneaky".to_owned(),
                    "/home/a/work/../.ssh/id_rsa".to_owned()
                ),
                ("u".to_owned(), "/home/a/.ssh/id_rsa".to_owned()),
            ]
        );
    }

    #[test]
    fn a_read_only_tools_paths_are_reads() {
        let params = json!({"path": "a.txt"});
        let a = path_arguments(&rules(NONE, NONE, &[]), params.as_object().unwrap(), true).unwrap();
        assert_eq!(a[0].domain, Domain::Read as i32);
        let w =
            path_arguments(&rules(NONE, NONE, &[]), params.as_object().unwrap(), false).unwrap();
        assert_eq!(w[0].domain, Domain::Write as i32);
    }

    #[test]
    fn too_many_empty_or_too_deep_paths_are_refused() {
        let r = rules(NONE, NONE, &[]);
        let many: Vec<String> = (0..=MAX_PATH_ARGUMENTS).map(|i| i.to_string()).collect();
        let params = json!({ "files": many });
        assert!(path_arguments(&r, params.as_object().unwrap(), true).is_err());
        let params = json!({ "path": "" });
        assert!(path_arguments(&r, params.as_object().unwrap(), true).is_err());
        let mut deep = json!({"path": "x"});
        for _ in 0..=MAX_DEPTH {
            deep = json!({ "a": deep });
        }
        assert!(path_arguments(&r, deep.as_object().unwrap(), true).is_err());
    }
}
