//! Tidy checks on the executor's own source, run as tests (in the manner of rust-analyzer's): an op
//! under `src/ops/` never names another op or the dispatch (`ops.rs`), and the modules the ops
//! share never name the ops, so `ops.rs` → `ops/*` → shared modules stays free of import circles.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The `.rs` files in `dir`, and with `deep`, in its subdirectories too.
fn rust_files(dir: &Path, deep: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if deep {
                out.extend(rust_files(&path, deep));
            }
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// One module path a file names: the line it is on, the prefix it was reached through
/// (`super` or `ops`), the first segment after it, and whether it is in test code (after the
/// file's first `#[cfg(test)]`).
#[derive(Debug, PartialEq, Eq)]
struct Named {
    line: usize,
    prefix: &'static str,
    name: String,
    in_tests: bool,
}

/// Every `super::…` and `ops::…` (`crate::ops::…` included) a file's code names, with brace groups
/// (`super::{a, b::c}`) taken apart. Comments are left out.
fn named(text: &str) -> Vec<Named> {
    let code: Vec<&str> = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect();
    let code = code.join("\n");
    let tests_from = code.find("#[cfg(test)]").unwrap_or(code.len());
    let mut out = Vec::new();
    for prefix in ["super", "ops"] {
        let needle = format!("{prefix}::");
        for (at, _) in code.match_indices(&needle) {
            let head = &code[..at];
            if head.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            // `std::ops::…` is not ours: below `::`, only `crate::ops` and `super::ops` are.
            if prefix == "ops"
                && head.ends_with("::")
                && !(head.ends_with("crate::") || head.ends_with("super::"))
            {
                continue;
            }
            let rest = &code[at + needle.len()..];
            let names: Vec<String> = match rest.strip_prefix('{') {
                Some(group) => {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    group
                        .split(',')
                        .map(|item| item.split("::").next().unwrap_or("").trim().to_owned())
                        .filter(|n| !n.is_empty())
                        .collect()
                }
                None => vec![
                    rest.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '*')
                        .collect(),
                ],
            };
            for name in names {
                out.push(Named {
                    line: code[..at].matches('\n').count() + 1,
                    prefix,
                    name,
                    in_tests: at >= tests_from,
                });
            }
        }
    }
    out
}

/// What is wrong with an op file's imports: naming another op, or the dispatch. In its test
/// module, `super::` is the op itself and may be named.
fn op_violations(file: &str, text: &str, ops: &[String]) -> Vec<String> {
    named(text)
        .into_iter()
        .filter_map(|n| {
            let what = match n.prefix {
                "ops" if ops.contains(&n.name) => "names another op",
                "ops" => "names the dispatch",
                _ if ops.contains(&n.name) => "names another op",
                _ if n.in_tests && n.name != "super" => return None,
                _ => "names the dispatch",
            };
            Some(format!(
                "{file}:{}: {what}: `{}::{}`",
                n.line, n.prefix, n.name
            ))
        })
        .collect()
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn ops_never_name_each_other_or_the_dispatch() {
    let files = rust_files(&src().join("ops"), false);
    assert!(files.len() > 10, "{:?}", files);
    let ops: Vec<String> = files.iter().map(|f| stem(f)).collect();
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = format!("ops/{}.rs", stem(file));
        problems.extend(op_violations(&shown, &text, &ops));
    }
    assert!(
        problems.is_empty(),
        "ops share code through modules beside them (approved, context, fsio, replace, movable, \
         diff, walk), never through each other or ops.rs:\n{}",
        problems.join("\n")
    );
}

#[test]
fn shared_modules_never_name_the_ops() {
    let src = src();
    let mut problems = Vec::new();
    for file in rust_files(&src, true) {
        let relative = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        // The crate root declares `ops`; the service dispatches to it; the ops are checked above.
        if ["lib.rs", "service.rs", "ops.rs"].contains(&relative.as_str())
            || relative.starts_with("ops/")
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for n in named(&text) {
            if n.prefix == "ops" {
                problems.push(format!("{relative}:{}: names `ops::{}`", n.line, n.name));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_checker_finds_what_it_looks_for() {
    let ops: Vec<String> = ["read", "write", "grep"].map(String::from).to_vec();
    let text = "//! an op\n\
                use super::{Done, OpContext};\n\
                use super::write::render_diff;\n\
                // use super::grep::quiet; (a comment)\n\
                fn f() { crate::ops::read::observed(); std::ops::Range::default(); }\n\
                use crate::ops::{\n    grep::matcher,\n    plan,\n};\n\
                #[cfg(test)]\n\
                mod tests {\n    use super::*;\n    use super::super::read_plan;\n}\n";
    let found = op_violations("ops/x.rs", text, &ops);
    assert_eq!(
        found,
        [
            "ops/x.rs:2: names the dispatch: `super::Done`",
            "ops/x.rs:2: names the dispatch: `super::OpContext`",
            "ops/x.rs:3: names another op: `super::write`",
            "ops/x.rs:13: names the dispatch: `super::super`",
            "ops/x.rs:5: names another op: `ops::read`",
            "ops/x.rs:6: names another op: `ops::grep`",
            "ops/x.rs:6: names the dispatch: `ops::plan`",
        ],
        "{found:#?}"
    );
    let clean = "use crate::approved::subject;\nuse crate::context::{Done, OpContext};\n\
                 #[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::testing::Fixture;\n}\n";
    assert_eq!(op_violations("ops/x.rs", clean, &ops), Vec::<String>::new());
}
