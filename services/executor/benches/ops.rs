//! The executor's own cost for the operations the comparison benchmark measures, without any
//! process around it: plan and execute of `file_read` (4 KiB), `file_list` (1,000 entries) and
//! `file_find` (400 of 20,000 names), with the JSON the executor hands back serialized, next to
//! the same work done plainly (`std::fs` reads, `read_dir` + `symlink_metadata`) in the same run.
//!
//! Run: `cargo bench -p glovebox-executor --bench ops`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use glovebox_executor::context::OpContext;
use glovebox_executor::ops;
use glovebox_proto::tools::Tool;
use glovebox_proto::v1::TicketBody;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn time(n: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..(n / 10).max(1) {
        f();
    }
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let work = root.join("work");
    std::fs::create_dir_all(work.join("dir1000")).unwrap();
    std::fs::write(work.join("read4k.txt"), "a".repeat(4096)).unwrap();
    for i in 0..1000 {
        std::fs::write(work.join(format!("dir1000/file-{i:04}.txt")), "x\n").unwrap();
    }
    for i in 0..20_000 {
        let sub = work.join(format!("tree/d{:02}/e{:02}", i % 50, (i / 50) % 20));
        std::fs::create_dir_all(&sub).unwrap();
        let name = if i % 50 == 7 { "match" } else { "file" };
        std::fs::write(sub.join(format!("{name}-{i:05}.txt")), "y\n").unwrap();
    }
    let key = glovebox_ticket::AccountKey::from_bytes(&[1u8; 32]).unwrap();
    let jobs = glovebox_executor::jobs::JobTable::new(Default::default());
    let protected = vec![root.join("state").display().to_string()];
    let ctx = OpContext {
        workdir: &work,
        protected: &protected,
        key: &key,
        jobs: &jobs,
        trash_dir: &root.join("trash"),
        denied: None,
        tables: false,
    };
    let run = |tool: Tool, params: serde_json::Value| {
        let params = tool.parse_params(&params).unwrap();
        let plan = ops::plan(&ctx, &params).unwrap();
        let ticket = TicketBody {
            account: "a".into(),
            call_id: "c".into(),
            tool: tool.name().into(),
            subjects: plan.subjects,
            content_tag: plan.content_tag,
            expires_at_ms: u64::MAX,
            approval: "auto".into(),
            pack: None,
            hidden_globs: Vec::new(),
            job_network: String::new(),
        };
        let done = ops::execute(&ctx, &params, &ticket).unwrap();
        std::hint::black_box(done.result.to_string());
    };
    let show = |name: &str, d: Duration, reference: Duration| {
        println!(
            "{name:<34} {:>10.1} µs   plain {:>10.1} µs   ratio {:>6.2}",
            d.as_secs_f64() * 1e6,
            reference.as_secs_f64() * 1e6,
            d.as_secs_f64() / reference.as_secs_f64()
        );
    };
    // `OPS_BENCH=list` runs one measure (e.g. under callgrind, which counts instructions).
    let only = std::env::var("OPS_BENCH").unwrap_or_default();
    let wanted = |m: &str| only.is_empty() || only == m;
    if wanted("read") {
        let read = time(2000, || {
            run(Tool::FileRead, serde_json::json!({"path": "read4k.txt"}))
        });
        let plain_read = time(2000, || {
            std::hint::black_box(std::fs::read_to_string(work.join("read4k.txt")).unwrap());
        });
        show("file_read 4 KiB", read, plain_read);
    }
    if wanted("list") {
        let rounds: usize = std::env::var("OPS_BENCH_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(200);
        let list = time(rounds, || {
            run(Tool::FileList, serde_json::json!({"path": "dir1000"}))
        });
        let plain_list = time(200, || {
            let mut n = 0u64;
            for e in std::fs::read_dir(work.join("dir1000")).unwrap() {
                let e = e.unwrap();
                n += std::fs::symlink_metadata(e.path()).unwrap().len();
            }
            std::hint::black_box(n);
        });
        show("file_list 1,000 entries", list, plain_list);
    }
    if wanted("find") {
        let find = time(10, || {
            run(
                Tool::FileFind,
                serde_json::json!({"path": "tree", "names": ["match-*.txt"], "max_results": 1000}),
            )
        });
        let plain_find = time(10, || {
            fn walk(p: &Path, n: &mut u64) {
                for e in std::fs::read_dir(p).unwrap() {
                    let e = e.unwrap();
                    if e.file_type().unwrap().is_dir() {
                        walk(&e.path(), n);
                    } else if e.file_name().to_string_lossy().starts_with("match-") {
                        *n += 1;
                    }
                }
            }
            let mut n = 0;
            walk(&work.join("tree"), &mut n);
            assert_eq!(n, 400);
        });
        show("file_find 400 of 20,000", find, plain_find);
    }
}
