//! `file_grep`: a regex or literal over one file or a tree, on ripgrep's crates (`ignore` walks,
//! `grep-regex` matches, `grep-searcher` reads). Floor entries are never opened, links never
//! followed, binary, hard-linked and over-1 MiB files skipped, and a deadline (checked between
//! files, on every read and in the sink) bounds the whole search.

use std::io::Read;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::mcp_form::{CellValue, TableWriter};
use glovebox_proto::tools::{FileGrepParams, MAX_READ_BYTES};
use glovebox_proto::v1::TicketBody;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use rustix::fs::{FileType, OFlags, Stat};
use serde_json::json;

use crate::approved::open_planned_read;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::walk::{Deadline, WalkOptions, WalkStats, check_root_unchanged, walk};

/// Matching lines returned when the call does not say.
pub const DEFAULT_RESULTS: u32 = 200;
/// A matching line is cut to this many bytes in the result.
pub const MAX_LINE_BYTES: usize = 512;
/// Compiled regexes may not grow beyond this (a huge pattern is refused, not run).
const REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Hit {
    path: String,
    line: u64,
    text: String,
}

#[derive(Default)]
struct Counters {
    searched: AtomicU64,
    binary: AtomicU64,
    too_large: AtomicU64,
    hard_linked: AtomicU64,
    unreadable: AtomicU64,
}

struct Shared<'a> {
    hits: Mutex<Vec<Hit>>,
    max: usize,
    deadline: Deadline,
    stats: &'a WalkStats,
    counters: Counters,
}

impl Shared<'_> {
    fn push(&self, hit: Hit) -> bool {
        let Ok(mut hits) = self.hits.lock() else {
            return false;
        };
        if hits.len() >= self.max {
            self.stats.full.store(true, Ordering::Relaxed);
            return false;
        }
        hits.push(hit);
        if hits.len() >= self.max {
            self.stats.full.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// Passes reads through until the deadline, then fails them: a search cannot outlive its cap by
/// more than one buffer's worth of matching.
struct DeadlineReader<R> {
    inner: R,
    deadline: Deadline,
}

impl<R: Read> Read for DeadlineReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.deadline.passed() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "search time cap",
            ));
        }
        self.inner.read(buf)
    }
}

struct HitSink<'a, 'b> {
    path: &'a str,
    shared: &'a Shared<'b>,
    binary: bool,
}

impl Sink for HitSink<'_, '_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        if self.shared.deadline.passed() {
            self.shared.stats.timed_out.store(true, Ordering::Relaxed);
            return Ok(false);
        }
        let bytes = m.bytes();
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let mut text =
            String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_LINE_BYTES)]).into_owned();
        if bytes.len() > MAX_LINE_BYTES {
            text.push('…');
        }
        Ok(self.shared.push(Hit {
            path: self.path.to_owned(),
            line: m.line_number().unwrap_or(0),
            text,
        }))
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}

pub fn matcher(p: &FileGrepParams) -> Result<RegexMatcher, OpError> {
    let mut b = RegexMatcherBuilder::new();
    b.case_insensitive(p.case_insensitive)
        .fixed_strings(p.literal)
        .line_terminator(Some(b'\n'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT);
    b.build(&p.pattern).map_err(|e| {
        OpError::new(
            ErrorCode::InvalidParams,
            format!("pattern does not compile: {e}"),
        )
    })
}

fn searcher() -> Searcher {
    SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(b'\0'))
        .build()
}

/// Searches one opened file; `shown` names it in errors. Skips (and counts) what may not be read.
/// `walked` is what the walker found at `path` before opening it: the file opened must be that
/// one, which had one name then (its count read after opening can be one again, the other name
/// removed since, though it was opened through another name of a file elsewhere).
fn search_fd(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    fd: std::os::fd::OwnedFd,
    walked: Option<&Stat>,
    path: &str,
    shared: &Shared<'_>,
) -> Result<(), OpError> {
    let stat = fsio::fstat(&fd, path)?;
    if fsio::file_type(&stat) != FileType::RegularFile {
        return Ok(());
    }
    if stat.st_nlink > 1 || walked.is_some_and(|w| w.st_nlink > 1) {
        WalkStats::count(&shared.counters.hard_linked);
        return Ok(());
    }
    if walked.is_some_and(|w| (w.st_dev, w.st_ino) != (stat.st_dev, stat.st_ino)) {
        WalkStats::count(&shared.counters.unreadable);
        return Ok(());
    }
    if stat.st_size.max(0) as u64 > MAX_READ_BYTES {
        WalkStats::count(&shared.counters.too_large);
        return Ok(());
    }
    WalkStats::count(&shared.counters.searched);
    let reader = DeadlineReader {
        inner: std::fs::File::from(fd),
        deadline: shared.deadline,
    };
    let mut sink = HitSink {
        path,
        shared,
        binary: false,
    };
    match searcher.search_reader(matcher, reader, &mut sink) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            shared.stats.timed_out.store(true, Ordering::Relaxed);
        }
        Err(_) => WalkStats::count(&shared.counters.unreadable),
    }
    if sink.binary {
        WalkStats::count(&shared.counters.binary);
    }
    Ok(())
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileGrepParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let matcher = matcher(p)?;
    let deadline = Deadline::of_call(p.timeout_ms);
    let (root, fd, stat, planned) = open_planned_read(ctx, &p.path, ticket)?;
    let stats = WalkStats::default();
    let shared = Shared {
        hits: Mutex::new(Vec::new()),
        max: p.max_results.unwrap_or(DEFAULT_RESULTS) as usize,
        deadline,
        stats: &stats,
        counters: Counters::default(),
    };
    match fsio::file_type(&stat) {
        FileType::RegularFile => {
            fsio::refuse_other_names(&stat, planned.links, &p.path)?;
            if stat.st_size.max(0) as u64 > MAX_READ_BYTES {
                return Err(OpError::new(
                    ErrorCode::TooLarge,
                    format!("{} is larger than {MAX_READ_BYTES} bytes", p.path),
                ));
            }
            search_fd(&mut searcher(), &matcher, fd, None, &root, &shared)?;
        }
        FileType::Directory => {
            drop(fd);
            search_tree(ctx, p, &matcher, &root, &shared)?;
            check_root_unchanged(&root, &stat)?;
        }
        _ => {
            return Err(OpError::new(
                ErrorCode::InvalidParams,
                format!("{} is neither a file nor a directory", p.path),
            ));
        }
    }
    if deadline.passed() {
        stats.timed_out.store(true, Ordering::Relaxed);
    }
    Ok(done(&root, shared, ctx.tables))
}

/// Searches every file of the tree at the canonical directory `root`, each opened without
/// following links, until the deadline passes or the results are full.
fn search_tree(
    ctx: &OpContext<'_>,
    p: &FileGrepParams,
    matcher: &RegexMatcher,
    root: &str,
    shared: &Shared<'_>,
) -> Result<(), OpError> {
    let options = WalkOptions {
        hidden: p.hidden,
        no_ignore: p.no_ignore,
        globs: &p.globs,
        max_depth: None,
    };
    walk(ctx, root, &options, shared.deadline, shared.stats, || {
        let mut searcher = searcher();
        move |visit| {
            if !visit.entry.file_type().is_some_and(|t| t.is_file()) {
                return true;
            }
            // Every open refuses links on the whole path: a file or directory swapped for a
            // link after the walker listed it is not followed.
            let opened = fsio::stat_path(visit.path).and_then(|walked| {
                fsio::open_no_links(visit.path, OFlags::RDONLY | OFlags::NOCTTY)
                    .map(|fd| (walked, fd))
            });
            match opened {
                Ok((walked, fd)) => {
                    let searched = search_fd(
                        &mut searcher,
                        matcher,
                        fd,
                        Some(&walked),
                        visit.path,
                        shared,
                    );
                    if searched.is_err() {
                        WalkStats::count(&shared.counters.unreadable);
                    }
                }
                Err(_) => WalkStats::count(&shared.counters.unreadable),
            }
            !shared.deadline.passed() && !shared.stats.full.load(Ordering::Relaxed)
        }
    })
}

/// The result of a search: the hits in path and line order (as a table if `tables`), and what
/// was skipped and why.
fn done(root: &str, shared: Shared<'_>, tables: bool) -> Done {
    let stats = shared.stats;
    let mut hits = shared.hits.into_inner().unwrap_or_default();
    hits.sort_unstable();
    let c = &shared.counters;
    let timed_out = stats.timed_out.load(Ordering::Relaxed);
    let full = stats.full.load(Ordering::Relaxed);
    let mut result = json!({
            "path": root,
            "count": hits.len(),
            "truncated": full || timed_out,
            "timed_out": timed_out,
            "files_searched": WalkStats::get(&c.searched),
            "skipped": {
                "binary": WalkStats::get(&c.binary),
                "too_large": WalkStats::get(&c.too_large),
                "hard_linked": WalkStats::get(&c.hard_linked),
                "unreadable": WalkStats::get(&c.unreadable),
                "hidden": WalkStats::get(&stats.hidden),
                "links": WalkStats::get(&stats.links),
            },
    });
    if tables {
        let mut table = TableWriter::grep(hits.len());
        for h in &hits {
            table.row(|field| match field {
                "path" => Some(CellValue::Text(&h.path)),
                "line" => Some(CellValue::Number(i64::try_from(h.line).unwrap_or(i64::MAX))),
                "text" => Some(CellValue::Text(&h.text)),
                _ => None,
            });
        }
        return Done::with_table(&result, table.finish(), 0);
    } else {
        let matches: Vec<serde_json::Value> = hits
            .iter()
            .map(|h| json!({"path": h.path, "line": h.line, "text": h.text}))
            .collect();
        result["matches"] = matches.into();
    }
    Done::new(&result, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approved::read_plan;
    use crate::testing::{Fixture, shown_alike_as_tables, ticket_for};
    use glovebox_proto::tools::Tool;
    use std::os::unix::fs::symlink;
    use std::time::Duration;

    fn params(pattern: &str) -> FileGrepParams {
        FileGrepParams {
            pattern: pattern.into(),
            path: ".".into(),
            literal: false,
            case_insensitive: false,
            globs: Vec::new(),
            hidden: false,
            no_ignore: false,
            max_results: None,
            timeout_ms: None,
        }
    }

    fn run(f: &Fixture, p: &FileGrepParams) -> Result<serde_json::Value, OpError> {
        let plan = read_plan(&f.ctx(), &p.path)?;
        execute(&f.ctx(), p, &ticket_for(&plan))
            .map(|d| crate::testing::conforming(glovebox_proto::tools::Tool::FileGrep, d.value()))
    }

    #[test]
    fn asked_for_tables_it_makes_the_table_mcp_clients_are_shown() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.rs"), "needle\n\tneedle indented\nno\n").unwrap();
        std::fs::write(f.work.join("tab\tname.rs"), "x needle \"quoted\"\n").unwrap();
        let p = params("needle");
        let plan = read_plan(&f.ctx(), &p.path).unwrap();
        let table = shown_alike_as_tables(&f, Tool::FileGrep, |ctx| {
            execute(ctx, &p, &ticket_for(&plan)).unwrap().value()
        });
        assert_eq!(table["count"], 3);
        assert_eq!(table["table"].as_str().unwrap().lines().count(), 4);
        assert_eq!(table["skipped"]["binary"], 0, "the other fields stay");
    }

    fn paths(r: &serde_json::Value) -> Vec<String> {
        r["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["path"].as_str().unwrap().to_owned())
            .collect()
    }

    /// A file with another name when planned or walked is not searched even once that name is
    /// gone: a job can link a denied file in under an allowed name and take the link away again
    /// between the look and the read.
    #[test]
    fn a_file_with_other_names_when_looked_at_is_not_searched_with_one_name_when_opened() {
        let f = Fixture::new();
        std::fs::write(f.work.join("secret"), "needle denied\n").unwrap();
        std::fs::write(f.work.join("plain"), "needle plain\n").unwrap();
        std::fs::hard_link(f.work.join("secret"), f.work.join("allowed")).unwrap();
        // One file, planned with two names.
        let mut p = params("needle");
        p.path = "allowed".into();
        let ticket = ticket_for(&read_plan(&f.ctx(), "allowed").unwrap());
        let walked_linked = fsio::stat_path(&f.path("allowed")).unwrap();
        let walked_plain = fsio::stat_path(&f.path("plain")).unwrap();
        std::fs::remove_file(f.work.join("secret")).unwrap();
        let e = execute(&f.ctx(), &p, &ticket).unwrap_err();
        assert_eq!(e.code, ErrorCode::Denied, "{e:?}");
        // In a tree: walked with two names, or walked as another file than the one opened.
        let stats = WalkStats::default();
        let shared = Shared {
            hits: Mutex::new(Vec::new()),
            max: 10,
            deadline: Deadline::after(Duration::from_secs(10)),
            stats: &stats,
            counters: Counters::default(),
        };
        let allowed = f.path("allowed");
        for walked in [&walked_linked, &walked_plain] {
            let fd = fsio::open_no_links(&allowed, OFlags::RDONLY).unwrap();
            search_fd(
                &mut searcher(),
                &matcher(&p).unwrap(),
                fd,
                Some(walked),
                &allowed,
                &shared,
            )
            .unwrap();
        }
        assert!(shared.hits.lock().unwrap().is_empty());
        assert_eq!(WalkStats::get(&shared.counters.hard_linked), 1);
        assert_eq!(WalkStats::get(&shared.counters.unreadable), 1);
        assert_eq!(WalkStats::get(&shared.counters.searched), 0);
        // Walked as it is opened, with one name: searched.
        let walked = fsio::stat_path(&allowed).unwrap();
        let fd = fsio::open_no_links(&allowed, OFlags::RDONLY).unwrap();
        search_fd(
            &mut searcher(),
            &matcher(&p).unwrap(),
            fd,
            Some(&walked),
            &allowed,
            &shared,
        )
        .unwrap();
        assert_eq!(shared.hits.lock().unwrap().len(), 1);
    }

    #[test]
    fn finds_lines_with_numbers_and_skips_what_it_must() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("src")).unwrap();
        std::fs::write(f.work.join("src/a.rs"), "fn main() {}\nlet needle = 1;\n").unwrap();
        std::fs::write(f.work.join("b.txt"), "needle\n").unwrap();
        std::fs::write(f.work.join("bin.dat"), b"needle\0\x01").unwrap();
        std::fs::write(f.work.join(".env"), "needle=secret\n").unwrap();
        std::fs::write(f.work.join("big.txt"), "needle\n".repeat(200_000)).unwrap();
        std::fs::write(f.work.join("linked.txt"), "needle\n").unwrap();
        std::fs::hard_link(f.work.join("linked.txt"), f.root.join("other-name")).unwrap();
        let mut p = params("needle");
        p.hidden = true;
        let r = run(&f, &p).unwrap();
        assert_eq!(paths(&r), [f.path("b.txt"), f.path("src/a.rs")], "{r}");
        assert_eq!(r["matches"][1]["line"], 2);
        assert_eq!(r["matches"][1]["text"], "let needle = 1;");
        assert_eq!(r["skipped"]["binary"], 1, "{r}");
        assert_eq!(r["skipped"]["too_large"], 1, "{r}");
        assert_eq!(r["skipped"]["hard_linked"], 1, "{r}");
        assert_eq!(r["skipped"]["hidden"], 1, "{r}");
        assert_eq!(r["truncated"], false);
    }

    #[test]
    fn globs_literal_and_case() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.rs"), "A.B\n").unwrap();
        std::fs::write(f.work.join("b.md"), "AxB\n").unwrap();
        let mut p = params("a.b");
        p.case_insensitive = true;
        assert_eq!(paths(&run(&f, &p).unwrap()).len(), 2);
        p.literal = true;
        assert_eq!(paths(&run(&f, &p).unwrap()), [f.path("a.rs")]);
        p.literal = false;
        p.globs = vec!["*.md".into()];
        assert_eq!(paths(&run(&f, &p).unwrap()), [f.path("b.md")]);
        p.globs = vec!["!*.md".into()];
        assert_eq!(paths(&run(&f, &p).unwrap()), [f.path("a.rs")]);
    }

    #[test]
    fn symlinks_in_the_tree_are_not_followed() {
        let f = Fixture::new();
        let outside = f.root.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("s.txt"), "needle\n").unwrap();
        symlink(&outside, f.work.join("dir-link")).unwrap();
        symlink(outside.join("s.txt"), f.work.join("file-link")).unwrap();
        let r = run(&f, &params("needle")).unwrap();
        assert_eq!(r["count"], 0, "{r}");
        assert_eq!(r["skipped"]["links"], 2, "{r}");
    }

    #[test]
    fn ignore_files_that_are_links_are_never_read() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.root.join("home/.ssh")).unwrap();
        std::fs::write(f.root.join("home/.ssh/id_rsa"), "*.txt\n").unwrap();
        std::fs::create_dir_all(f.work.join("sub")).unwrap();
        std::fs::write(f.work.join("sub/a.txt"), "needle\n").unwrap();
        std::fs::write(f.work.join("b.txt"), "needle\n").unwrap();
        symlink(
            f.root.join("home/.ssh/id_rsa"),
            f.work.join("sub/.gitignore"),
        )
        .unwrap();
        let r = run(&f, &params("needle")).unwrap();
        assert_eq!(paths(&r), [f.path("b.txt")], "{r}");
        assert_eq!(r["skipped"]["hidden"], 1, "{r}");
        let mut p = params("needle");
        p.no_ignore = true;
        assert_eq!(paths(&run(&f, &p).unwrap()).len(), 2);
        p.no_ignore = false;
        p.path = "sub".into();
        assert_eq!(run(&f, &p).unwrap_err().code, ErrorCode::InvalidParams);
    }

    #[test]
    fn result_cap_and_time_cap() {
        let f = Fixture::new();
        std::fs::write(f.work.join("a.txt"), "x\n".repeat(50)).unwrap();
        let mut p = params("x");
        p.max_results = Some(10);
        let r = run(&f, &p).unwrap();
        assert_eq!(
            (r["count"].as_u64(), r["truncated"].as_bool()),
            (Some(10), Some(true))
        );
        // An exponential DFA over random a/b text: the lazy DFA thrashes and matching falls back
        // to the slow engines on every byte.
        let mut x: u64 = 1;
        let text: String = (0..400_000)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                match (i % 1000, (x >> 33) & 1) {
                    (999, _) => '\n',
                    (_, 0) => 'a',
                    _ => 'b',
                }
            })
            .collect();
        for i in 0..20 {
            std::fs::write(f.work.join(format!("f{i}.txt")), &text).unwrap();
        }
        let mut p = params(r"(?:a|b)*a(?:a|b){30}c");
        p.timeout_ms = Some(200);
        let started = std::time::Instant::now();
        let r = run(&f, &p).unwrap();
        assert_eq!(r["timed_out"], true, "{r}");
        // The cap stopped the walk: not every file was searched. (How long that took depends
        // on the machine's load; a generous bound only catches a cap that does nothing.)
        assert!(r["files_searched"].as_u64().unwrap() < 20, "{r}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn nested_trees_are_walked() {
        let f = Fixture::new();
        for (i, d) in ["a/b/1", "a/c/2", "d/e/3", "d/e/4"].iter().enumerate() {
            std::fs::create_dir_all(f.work.join("tree").join(d)).unwrap();
            std::fs::write(
                f.work.join("tree").join(d).join(format!("x_{i}.rs")),
                "needle\n".repeat(100),
            )
            .unwrap();
        }
        let mut p = params("needle");
        p.path = "tree".into();
        p.max_results = Some(1000);
        let r = run(&f, &p).unwrap();
        assert_eq!(r["count"], 400, "{r}");
    }

    #[test]
    fn bad_patterns_are_invalid_params() {
        let f = Fixture::new();
        assert_eq!(
            run(&f, &params("(")).unwrap_err().code,
            ErrorCode::InvalidParams
        );
        assert_eq!(
            run(&f, &params("a{100000}{100000}")).unwrap_err().code,
            ErrorCode::InvalidParams
        );
    }
}
