//! `file_tree`: a directory's tree as nested entries, walked like `file_find` walks (floor entries
//! and the account's read denies hidden, links counted but never followed, ignore files honoured
//! where plain), to a bounded depth, leaving out names matching the call's exclude globs with
//! everything below them; at most `max_entries`, and `truncated` when it was cut.

use std::sync::atomic::Ordering;

use glovebox_proto::tools::FileTreeParams;
use glovebox_proto::v1::TicketBody;
use serde_json::{Map, Value, json};

use crate::approved::open_approved_dir;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::walk::{Deadline, WalkOptions, WalkStats, check_root_unchanged, collect};

/// Levels shown when the call does not say.
pub const DEFAULT_DEPTH: u32 = 3;
/// Entries returned when the call does not say.
pub const DEFAULT_ENTRIES: u32 = 1000;

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileTreeParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let deadline = Deadline::of_call(p.timeout_ms);
    let (root, stat) = open_approved_dir(ctx, &p.path, ticket)?;
    let max = p.max_entries.unwrap_or(DEFAULT_ENTRIES) as usize;
    // Excluded names, as ripgrep's overrides spell them: a name glob matches at any depth.
    let globs: Vec<String> = p.exclude.iter().map(|g| format!("!{g}")).collect();
    let options = WalkOptions {
        hidden: p.hidden,
        no_ignore: p.no_ignore,
        globs: &globs,
        max_depth: Some(p.depth.unwrap_or(DEFAULT_DEPTH) as usize),
    };
    let stats = WalkStats::default();
    let below = format!("{}/", root.trim_end_matches('/'));
    let found: Vec<(String, &'static str)> =
        collect(ctx, &root, &options, deadline, &stats, max, &|_| true)?
            .into_iter()
            .filter_map(|(path, kind)| Some((path.strip_prefix(&below)?.to_owned(), kind)))
            .collect();
    check_root_unchanged(&root, &stat)?;
    let timed_out = stats.timed_out.load(Ordering::Relaxed) || deadline.passed();
    let full = stats.full.load(Ordering::Relaxed);
    Ok(Done::new(
        &json!({
            "path": root,
            "count": found.len(),
            "tree": nest(found),
            "truncated": full || timed_out,
            "timed_out": timed_out,
            "hidden": WalkStats::get(&stats.hidden),
            "links": WalkStats::get(&stats.links),
        }),
        0,
    ))
}

/// Paths relative to the root (`a/b/c`), each with its kind, as nested entries: `{"name",
/// "type"}`, and `"children"` for a directory, each level sorted by name. A path whose parent is
/// missing (the walk was cut) still gets its parents, as directories. Pure.
pub fn nest(mut found: Vec<(String, &'static str)>) -> Vec<Value> {
    found.sort_unstable();
    let mut top: Map<String, Value> = Map::new();
    for (path, kind) in found {
        let mut level = &mut top;
        let mut parts = path.split('/').peekable();
        while let Some(name) = parts.next() {
            let last = parts.peek().is_none();
            let node = level
                .entry(name.to_owned())
                .or_insert_with(|| json!({"name": name, "type": if last { kind } else { "dir" }}));
            if last {
                if kind == "dir" {
                    node.as_object_mut()
                        .map(|n| n.entry("children").or_insert_with(|| json!({})));
                }
                break;
            }
            let Some(children) = node
                .as_object_mut()
                .map(|n| n.entry("children").or_insert_with(|| json!({})))
                .and_then(Value::as_object_mut)
            else {
                break;
            };
            level = children;
        }
    }
    listed(top)
}

/// A level's entries (kept by name) as a list, their children too.
fn listed(level: Map<String, Value>) -> Vec<Value> {
    level
        .into_iter()
        .map(|(_, mut node)| {
            if let Some(Value::Object(children)) =
                node.as_object_mut().and_then(|n| n.remove("children"))
            {
                node["children"] = Value::Array(listed(children));
            }
            node
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approved::read_plan;
    use crate::testing::{Fixture, ticket_for};

    fn params() -> FileTreeParams {
        FileTreeParams {
            path: ".".into(),
            depth: None,
            exclude: Vec::new(),
            hidden: true,
            no_ignore: false,
            max_entries: None,
            timeout_ms: None,
        }
    }

    fn run(f: &Fixture, p: &FileTreeParams) -> Value {
        let plan = read_plan(&f.ctx(), &p.path).unwrap();
        let result = execute(&f.ctx(), p, &ticket_for(&plan)).unwrap();
        crate::testing::conforming(glovebox_proto::tools::Tool::FileTree, result.value())
    }

    #[test]
    fn paths_nest_by_level_in_name_order() {
        let tree = nest(vec![
            ("src/main.rs".into(), "file"),
            ("src".into(), "dir"),
            ("README.md".into(), "file"),
            ("deep/a/b.txt".into(), "file"),
            ("empty".into(), "dir"),
        ]);
        assert_eq!(
            tree,
            json!([
                {"name": "README.md", "type": "file"},
                {"name": "deep", "type": "dir", "children": [
                    {"name": "a", "type": "dir", "children": [{"name": "b.txt", "type": "file"}]}]},
                {"name": "empty", "type": "dir", "children": []},
                {"name": "src", "type": "dir", "children": [{"name": "main.rs", "type": "file"}]},
            ])
            .as_array()
            .unwrap()
            .clone()
        );
    }

    #[test]
    fn hides_the_floor_leaves_out_excludes_and_stops_at_depth() {
        let f = Fixture::new();
        for dir in ["src/a/b/c", "node_modules/pkg", ".ssh"] {
            std::fs::create_dir_all(f.work.join(dir)).unwrap();
        }
        std::fs::write(f.work.join("src/a/b/c/deep.rs"), "").unwrap();
        std::fs::write(f.work.join("src/lib.rs"), "").unwrap();
        std::fs::write(f.work.join(".ssh/id_rsa"), "").unwrap();
        std::fs::write(f.work.join("node_modules/pkg/i.js"), "").unwrap();
        std::os::unix::fs::symlink(f.root.join("outside"), f.work.join("out")).unwrap();
        let mut p = params();
        p.exclude = vec!["node_modules".into()];
        let r = run(&f, &p);
        let text = r["tree"].to_string();
        assert!(text.contains("lib.rs") && text.contains("\"b\""), "{text}");
        assert!(!text.contains("deep.rs"), "below the default depth: {text}");
        assert!(
            !text.contains("node_modules") && !text.contains("i.js"),
            "{text}"
        );
        assert!(!text.contains(".ssh") && !text.contains("id_rsa"), "{text}");
        assert!(!text.contains("\"out\""), "{text}");
        assert_eq!(r["links"], 1);
        assert!(r["hidden"].as_u64().unwrap() >= 1, "{r}");
        p.depth = Some(5);
        assert!(run(&f, &p)["tree"].to_string().contains("deep.rs"));
    }

    #[test]
    fn a_big_tree_is_cut_and_says_so() {
        let f = Fixture::new();
        for i in 0..50 {
            std::fs::write(f.work.join(format!("f{i:02}")), "").unwrap();
        }
        let mut p = params();
        p.max_entries = Some(10);
        let r = run(&f, &p);
        assert_eq!(r["truncated"], true);
        assert_eq!(r["count"], 10);
        assert_eq!(r["tree"].as_array().unwrap().len(), 10);
    }
}
