//! `file_find`: entries whose names match globs, in a tree walked like `file_grep` walks it
//! (floor entries hidden, links reported but never followed), with a result cap and a time cap.

use std::sync::atomic::Ordering;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use glovebox_proto::ErrorCode;
use glovebox_proto::tools::FileFindParams;
use glovebox_proto::tools::mcp_form::{CellValue, TableWriter};
use glovebox_proto::v1::TicketBody;
use serde_json::json;

use crate::approved::open_approved_dir;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::walk::{Deadline, WalkOptions, WalkStats, check_root_unchanged, collect};

/// Paths returned when the call does not say.
pub const DEFAULT_RESULTS: u32 = 200;

fn names(globs: &[String]) -> Result<GlobSet, OpError> {
    let mut set = GlobSetBuilder::new();
    for g in globs {
        let glob = GlobBuilder::new(g)
            .literal_separator(true)
            .build()
            .map_err(|e| OpError::new(ErrorCode::InvalidParams, format!("glob {g:?}: {e}")))?;
        set.add(glob);
    }
    set.build()
        .map_err(|e| OpError::new(ErrorCode::InvalidParams, format!("globs: {e}")))
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileFindParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let set = names(&p.names)?;
    let deadline = Deadline::of_call(p.timeout_ms);
    let (root, stat) = open_approved_dir(ctx, &p.path, ticket)?;
    let max = p.max_results.unwrap_or(DEFAULT_RESULTS) as usize;
    let stats = WalkStats::default();
    let found = find(ctx, p, &set, &root, deadline, &stats, max)?;
    check_root_unchanged(&root, &stat)?;
    let timed_out = stats.timed_out.load(Ordering::Relaxed) || deadline.passed();
    let full = stats.full.load(Ordering::Relaxed);
    let mut result = json!({
        "path": root,
        "count": found.len(),
        "truncated": full || timed_out,
        "timed_out": timed_out,
        "hidden": WalkStats::get(&stats.hidden),
        "links": WalkStats::get(&stats.links),
    });
    if ctx.tables {
        let mut table = TableWriter::find(found.len());
        for (path, kind) in &found {
            table.row(|field| match field {
                "path" => Some(CellValue::Text(path)),
                "type" => Some(CellValue::Text(kind)),
                _ => None,
            });
        }
        return Ok(Done::with_table(&result, table.finish(), 0));
    } else {
        let entries: Vec<serde_json::Value> = found
            .iter()
            .map(|(path, kind)| json!({"path": path, "type": kind}))
            .collect();
        result["entries"] = entries.into();
    }
    Ok(Done::new(&result, 0))
}

/// The entries below the canonical directory `root` whose names match `set`, with their kind,
/// in path order: at most `max`.
fn find(
    ctx: &OpContext<'_>,
    p: &FileFindParams,
    set: &GlobSet,
    root: &str,
    deadline: Deadline,
    stats: &WalkStats,
    max: usize,
) -> Result<Vec<(String, &'static str)>, OpError> {
    let options = WalkOptions {
        hidden: p.hidden,
        no_ignore: p.no_ignore,
        globs: &[],
        max_depth: None,
    };
    collect(ctx, root, &options, deadline, stats, max, &|name| {
        set.is_match(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approved::read_plan;
    use crate::testing::{Fixture, shown_alike_as_tables, ticket_for};
    use glovebox_proto::tools::Tool;
    use std::os::unix::fs::symlink;

    fn params(names: &[&str]) -> FileFindParams {
        FileFindParams {
            names: names.iter().map(|s| (*s).to_owned()).collect(),
            path: ".".into(),
            hidden: true,
            no_ignore: false,
            max_results: None,
            timeout_ms: None,
        }
    }

    fn run(f: &Fixture, p: &FileFindParams) -> serde_json::Value {
        let plan = read_plan(&f.ctx(), &p.path).unwrap();
        let result = execute(&f.ctx(), p, &ticket_for(&plan)).unwrap();
        crate::testing::conforming(glovebox_proto::tools::Tool::FileFind, result.value())
    }

    #[test]
    fn asked_for_tables_it_makes_the_table_mcp_clients_are_shown() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("a/dir.rs")).unwrap();
        for name in ["a/x.rs", "tab\tname.rs", "new\nline.rs", "\"q.rs", "y.txt"] {
            std::fs::write(f.work.join(name), "").unwrap();
        }
        let p = params(&["*.rs"]);
        let plan = read_plan(&f.ctx(), &p.path).unwrap();
        let table = shown_alike_as_tables(&f, Tool::FileFind, |ctx| {
            execute(ctx, &p, &ticket_for(&plan)).unwrap().value()
        });
        assert_eq!(table["count"], 5);
        assert_eq!(
            table["table"].as_str().unwrap().lines().count(),
            6,
            "a header and one line each, whatever the names hold"
        );
    }

    #[test]
    fn finds_names_hides_the_floor_and_never_follows_links() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("a/b")).unwrap();
        std::fs::create_dir_all(f.work.join(".ssh")).unwrap();
        std::fs::write(f.work.join("a/b/x.rs"), "").unwrap();
        std::fs::write(f.work.join("y.rs"), "").unwrap();
        std::fs::write(f.work.join("z.txt"), "").unwrap();
        std::fs::write(f.work.join(".ssh/k.rs"), "").unwrap();
        std::fs::write(f.work.join("server.key"), "").unwrap();
        let outside = f.root.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("o.rs"), "").unwrap();
        symlink(&outside, f.work.join("out")).unwrap();
        let r = run(&f, &params(&["*.rs", "*.key"]));
        let got: Vec<&str> = r["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect();
        assert_eq!(got, [f.path("a/b/x.rs"), f.path("y.rs")], "{r}");
        assert_eq!(r["hidden"], 2, "{r}");
        assert_eq!(r["links"], 1, "{r}");
    }

    #[test]
    fn result_cap() {
        let f = Fixture::new();
        for i in 0..30 {
            std::fs::write(f.work.join(format!("{i}.txt")), "").unwrap();
        }
        let mut p = params(&["*.txt"]);
        p.max_results = Some(5);
        let r = run(&f, &p);
        assert_eq!(
            (r["count"].as_u64(), r["truncated"].as_bool()),
            (Some(5), Some(true))
        );
    }
}
