//! `file_list`: a directory's entries with type, size and modification time (or, with `details`
//! false, names and types only: the types the directory itself records, with no `stat` per entry),
//! optionally to a depth of `MAX_LIST_DEPTH`. Entries on the secret floor are hidden (and
//! counted), links are listed but never followed; at most `MAX_LIST_ENTRIES` are returned.

use glovebox_proto::ErrorCode;
use glovebox_proto::tools::mcp_form::{CellValue, TableWriter};
use glovebox_proto::tools::{FileListParams, MAX_LIST_ENTRIES};
use glovebox_proto::v1::{Domain, Plan, Subject, TicketBody};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir};

use crate::approved::open_approved_read;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;
use crate::resolve::resolve;

pub fn plan(ctx: &OpContext<'_>, p: &FileListParams) -> Result<Plan, OpError> {
    let r = resolve(&p.path, ctx.workdir)?;
    Ok(Plan {
        subjects: vec![Subject::new(
            Domain::Read,
            r.path.clone(),
            fsio::observed(&r),
        )],
        content_tag: Vec::new(),
        pack: None,
    })
}

fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    }
}

/// Entries looked at before a deep listing stops (it then says it was cut).
const MAX_SCANNED: usize = 100_000;

/// Bytes of directory entries read per `getdents` call (a thousand short names in one or two).
const DIRENT_BUFFER_BYTES: usize = 32 * 1024;

/// One listed entry, as the result carries it (size and time only with details).
#[derive(serde::Serialize)]
struct Entry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtime: Option<i64>,
}

/// The result of `file_list`. `details` comes before the entries, so a reader knows the
/// entries' fields before it reads them (`mcp_form`'s table).
#[derive(serde::Serialize)]
struct ListResult<'a> {
    path: &'a str,
    details: bool,
    entries: &'a [Entry],
    total: usize,
    truncated: bool,
    hidden: u64,
}

/// The result of `file_list` for a call that asks for tables: the entries as `mcp_form`'s table.
#[derive(serde::Serialize)]
struct ListTable<'a> {
    path: &'a str,
    details: bool,
    total: usize,
    truncated: bool,
    hidden: u64,
}

struct Listing {
    /// The listed directory's canonical path.
    path: String,
    /// The call asked for the entries as a table.
    tables: bool,
    entries: Vec<Entry>,
    hidden: u64,
    scanned: usize,
    /// Whether entries get their size and time (a `stat` each).
    details: bool,
}

/// Each name of `dir` an agent may see, with its sort key and the type the directory records
/// for it (`None`: it does not say); the names it may not see (on the floor, not UTF-8) are
/// counted in `out.hidden`.
fn shown_names(
    ctx: &OpContext<'_>,
    dir: &OwnedFd,
    path: &str,
    out: &mut Listing,
) -> Result<Vec<(u64, String, Option<FileType>)>, OpError> {
    // Read from the start, a buffer's worth of entries per `getdents` (rustix's `Dir` starts
    // small and zeroes its buffer each time: 1,000 entries took seven calls).
    rustix::fs::seek(dir, rustix::fs::SeekFrom::Start(0)).map_err(|e| OpError::errno(e, path))?;
    let mut buf = Vec::with_capacity(DIRENT_BUFFER_BYTES);
    let mut entries = RawDir::new(dir, buf.spare_capacity_mut());
    // A directory on the floor (listed with the sandbox off) shows none of its entries; otherwise
    // each entry is checked for what its own name adds.
    let on_floor = ctx.on_floor(path);
    let mut names = Vec::new();
    while let Some(entry) = entries.next() {
        let entry = entry.map_err(|e| OpError::errno(e, path))?;
        let bytes = entry.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(bytes) else {
            out.hidden += 1;
            continue;
        };
        if on_floor || ctx.hidden_entry(path, name).is_some() {
            out.hidden += 1;
            continue;
        }
        let recorded = match entry.file_type() {
            FileType::Unknown => None,
            known => Some(known),
        };
        names.push((sort_key(name), name.to_owned(), recorded));
    }
    Ok(names)
}

/// Lists `dir` (canonical path `path`, shown below the root as `prefix`), descending `depth - 1`
/// more levels. Directories are opened beneath their parent without following links; symbolic
/// links are listed, never followed; hidden entries are neither listed nor entered.
fn list_dir(
    ctx: &OpContext<'_>,
    dir: &OwnedFd,
    path: &str,
    prefix: &str,
    depth: u32,
    out: &mut Listing,
) -> Result<(), OpError> {
    let mut names = shown_names(ctx, dir, path, out)?;
    names.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    for (_, name, recorded) in names {
        if out.scanned >= MAX_SCANNED {
            return Ok(());
        }
        out.scanned += 1;
        let (kind, size, mtime) = match recorded {
            Some(kind) if !out.details => (kind, None, None),
            _ => {
                let Ok(st) = rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
                else {
                    continue;
                };
                let details = out.details;
                (
                    fsio::file_type(&st),
                    details.then_some(st.st_size.max(0)),
                    details.then_some(st.st_mtime),
                )
            }
        };
        // A directory to descend into is opened (beneath this one) before its name moves
        // into the entry.
        let descend = (depth > 1 && kind == FileType::Directory).then(|| {
            let below = format!("{prefix}{name}/");
            let full = format!("{}/{name}", path.trim_end_matches('/'));
            let sub = fsio::open_beneath(
                dir,
                &name,
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            );
            (below, full, sub)
        });
        let shown = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}{name}")
        };
        out.entries.push(Entry {
            name: shown,
            kind: type_name(kind),
            size,
            mtime,
        });
        if let Some((below, full, Ok(sub))) = descend {
            list_dir(ctx, &sub, &full, &below, depth - 1, out)?;
        }
    }
    Ok(())
}

/// A name's first eight bytes as a number that sorts as they do (a name has no NUL, so the
/// zeros padding a shorter one sort it before every longer name it begins). Names compared by
/// it first, and in full only when it ties, sort as by their bytes, with most comparisons one
/// instruction instead of a call: sorting a listing's names was a tenth of its CPU.
fn sort_key(name: &str) -> u64 {
    let mut key = [0u8; 8];
    let n = name.len().min(8);
    key[..n].copy_from_slice(&name.as_bytes()[..n]);
    u64::from_be_bytes(key)
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileListParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    Ok(listing(ctx, p, ticket)?.done())
}

/// The entries of the directory `ticket` names, as `ctx` shows them.
fn listing(
    ctx: &OpContext<'_>,
    p: &FileListParams,
    ticket: &TicketBody,
) -> Result<Listing, OpError> {
    let (path, fd, stat) = open_approved_read(ctx, &p.path, ticket)?;
    if fsio::file_type(&stat) != FileType::Directory {
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!("{} is not a directory", p.path),
        ));
    }
    let mut listing = Listing {
        path: String::new(),
        tables: ctx.tables,
        entries: Vec::new(),
        hidden: 0,
        scanned: 0,
        details: p.details.unwrap_or(true),
    };
    list_dir(ctx, &fd, &path, "", p.depth.unwrap_or(1), &mut listing)?;
    listing.path = path;
    Ok(listing)
}

impl Listing {
    /// The result, cut at `MAX_LIST_ENTRIES`.
    fn done(mut self) -> Done {
        let total = self.entries.len();
        let truncated = total > MAX_LIST_ENTRIES || self.scanned >= MAX_SCANNED;
        self.entries.truncate(MAX_LIST_ENTRIES);
        if self.tables {
            let mut table = TableWriter::listing(self.details, self.entries.len());
            for entry in &self.entries {
                table.row(|field| match field {
                    "name" => Some(CellValue::Text(&entry.name)),
                    "type" => Some(CellValue::Text(entry.kind)),
                    "size" => entry.size.map(CellValue::Number),
                    "mtime" => entry.mtime.map(CellValue::Number),
                    _ => None,
                });
            }
            let result = ListTable {
                path: &self.path,
                details: self.details,
                total,
                truncated,
                hidden: self.hidden,
            };
            return Done::with_table(&result, table.finish(), 0);
        }
        let result = ListResult {
            path: &self.path,
            details: self.details,
            entries: &self.entries,
            total,
            truncated,
            hidden: self.hidden,
        };
        Done::new(&result, 0)
    }
}

/// A listing of one directory's names and types made before its verdict (by the plan's
/// subject, which `ticket` carries, with no denies: the floor alone hidden), finished by
/// [`ListedAhead::finish`] once the gate's ticket says what else to hide.
pub struct ListedAhead(Listing);

/// Lists one directory ahead of its verdict; `None` for a listing that is not of one
/// directory's names and types (its entries would be entered or looked at before the ticket
/// says which to hide).
pub fn list_ahead(
    ctx: &OpContext<'_>,
    p: &FileListParams,
    ticket: &TicketBody,
) -> Option<Result<ListedAhead, OpError>> {
    if p.depth.unwrap_or(1) > 1 || p.details != Some(false) || ctx.denied.is_some() {
        return None;
    }
    Some(listing(ctx, p, ticket).map(ListedAhead))
}

impl ListedAhead {
    /// The result, without the entries `denied` hides (the ticket's read denies), counted as
    /// hidden, as a listing on that ticket would have left them out.
    pub fn finish(self, denied: &globset::GlobSet) -> Done {
        let mut listing = self.0;
        if !denied.is_empty() {
            let parent = listing.path.trim_end_matches('/').to_owned();
            let before = listing.entries.len();
            listing
                .entries
                .retain(|e| !denied.is_match(format!("{parent}/{}", e.name)));
            let left_out = before - listing.entries.len();
            listing.hidden += left_out as u64;
            listing.scanned -= left_out;
        }
        listing.done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fixture, shown_alike_as_tables, ticket_for};
    use glovebox_proto::tools::Tool;
    use std::os::unix::fs::symlink;

    fn run(f: &Fixture, depth: Option<u32>) -> serde_json::Value {
        run_with(f, depth, None)
    }

    fn run_with(f: &Fixture, depth: Option<u32>, details: Option<bool>) -> serde_json::Value {
        let p = FileListParams {
            path: ".".into(),
            depth,
            details,
        };
        let planned = plan(&f.ctx(), &p).unwrap();
        let result = execute(&f.ctx(), &p, &ticket_for(&planned)).unwrap();
        crate::testing::conforming(glovebox_proto::tools::Tool::FileList, result.value())
    }

    #[test]
    fn names_sort_by_their_key_and_then_in_full_exactly_as_by_their_bytes() {
        let mut names: Vec<String> = [
            "b",
            "a",
            "ab",
            "abcdefgh",
            "abcdefg",
            "abcdefghi",
            "abcdefgha",
            "abcdefgh~",
            "Z",
            "z",
            "é",
            "e\u{301}",
            "日本",
            "file-010",
            "file-001",
            "file-0010",
            "",
            "\u{7f}",
            "abcdefgi",
            "abcdefgg\u{ff}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut by_key = names.clone();
        by_key.sort_unstable_by(|a, b| sort_key(a).cmp(&sort_key(b)).then_with(|| a.cmp(b)));
        names.sort();
        assert_eq!(by_key, names);
    }

    #[test]
    fn asked_for_tables_it_makes_the_table_mcp_clients_are_shown() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("sub")).unwrap();
        for name in [
            "a.txt",
            "tab\tname",
            "new\nline",
            " pad ",
            "sub/deep.txt",
            ".env",
        ] {
            std::fs::write(f.work.join(name), "x").unwrap();
        }
        symlink("a.txt", f.work.join("link")).unwrap();
        for (depth, details) in [(1, false), (1, true), (2, true), (2, false)] {
            let p = FileListParams {
                path: ".".into(),
                depth: Some(depth),
                details: Some(details),
            };
            let planned = plan(&f.ctx(), &p).unwrap();
            let table = shown_alike_as_tables(&f, Tool::FileList, |ctx| {
                execute(ctx, &p, &ticket_for(&planned)).unwrap().value()
            });
            let rows = table["total"].as_u64().unwrap() as usize;
            assert_eq!(rows, if depth == 1 { 6 } else { 7 }, "{table}");
            assert_eq!(table["hidden"], 1, "the floor's .env");
            assert_eq!(table["table"].as_str().unwrap().lines().count(), rows + 1);
        }
    }

    fn names(r: &serde_json::Value) -> Vec<&str> {
        r["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn depth_hides_the_floor_and_does_not_follow_links() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("a/b/c")).unwrap();
        std::fs::create_dir_all(f.work.join("a/.ssh")).unwrap();
        std::fs::write(f.work.join("a/b/x.txt"), "x").unwrap();
        std::fs::create_dir_all(f.root.join("outside")).unwrap();
        std::fs::write(f.root.join("outside/o.txt"), "o").unwrap();
        symlink(f.root.join("outside"), f.work.join("a/out")).unwrap();
        assert_eq!(names(&run(&f, None)), ["a"]);
        let r = run(&f, Some(5));
        assert_eq!(names(&r), ["a", "a/b", "a/b/c", "a/b/x.txt", "a/out"]);
        assert_eq!(r["entries"][4]["type"], "symlink");
        assert_eq!(r["hidden"], 1);
        assert_eq!(names(&run(&f, Some(2))), ["a", "a/b", "a/out"]);
    }

    #[test]
    fn more_than_the_cap_is_cut_and_says_so() {
        let f = Fixture::new();
        // Names long enough that the entries take more than one read of the directory.
        for i in 0..1005 {
            let name = format!("{i:04}-a-name-long-enough-for-two-reads");
            std::fs::write(f.work.join(name), "").unwrap();
        }
        let r = run(&f, None);
        assert_eq!(r["entries"].as_array().unwrap().len(), MAX_LIST_ENTRIES);
        assert_eq!(
            (r["total"].as_u64(), r["truncated"].as_bool()),
            (Some(1005), Some(true))
        );
    }

    #[test]
    fn without_details_entries_are_names_and_types_the_same_as_with() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("a/b")).unwrap();
        std::fs::create_dir_all(f.work.join("a/.ssh")).unwrap();
        std::fs::write(f.work.join("a/b/x.txt"), "xyz").unwrap();
        std::fs::write(f.work.join("f.txt"), "hello").unwrap();
        symlink(f.work.join("a"), f.work.join("link")).unwrap();
        symlink(f.work.join("nowhere"), f.work.join("dangling")).unwrap();
        for depth in [None, Some(3)] {
            let with = run_with(&f, depth, None);
            let without = run_with(&f, depth, Some(false));
            assert_eq!(
                (&with["details"], &without["details"]),
                (&true.into(), &false.into())
            );
            let kinds = |r: &serde_json::Value| -> Vec<(String, String)> {
                r["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| (e["name"].to_string(), e["type"].to_string()))
                    .collect()
            };
            assert_eq!(kinds(&with), kinds(&without), "depth {depth:?}");
            assert_eq!(
                (&with["hidden"], &with["total"]),
                (&without["hidden"], &without["total"])
            );
            for e in with["entries"].as_array().unwrap() {
                assert!(e["size"].is_i64() && e["mtime"].is_i64(), "{e}");
            }
            for e in without["entries"].as_array().unwrap() {
                assert_eq!(e.as_object().unwrap().len(), 2, "names and types only: {e}");
            }
        }
        let deep = run_with(&f, Some(3), Some(false));
        assert_eq!(
            names(&deep),
            ["a", "a/b", "a/b/x.txt", "dangling", "f.txt", "link"],
            "the floor hidden, links listed and not followed"
        );
        assert_eq!(deep["hidden"], 1);
        assert_eq!(deep["entries"][5]["type"], "symlink");
    }

    #[test]
    fn a_listing_made_ahead_shows_what_a_listing_on_the_ticket_shows() {
        let f = Fixture::new();
        std::fs::create_dir_all(f.work.join("private")).unwrap();
        std::fs::create_dir_all(f.work.join(".ssh")).unwrap();
        std::fs::write(f.work.join("notes.txt"), "n").unwrap();
        std::fs::write(f.work.join("salary.secret"), "s").unwrap();
        symlink(f.work.join("notes.txt"), f.work.join("link")).unwrap();
        let p = FileListParams {
            path: ".".into(),
            depth: None,
            details: Some(false),
        };
        let planned = plan(&f.ctx(), &p).unwrap();
        let work = f.work.display().to_string();
        for denies in [
            vec![],
            vec![format!("{work}/*.secret"), format!("{work}/private")],
            vec!["/**".to_owned()],
        ] {
            let mut ticket = ticket_for(&planned);
            ticket.hidden_globs = denies.clone();
            let denied = crate::context::denied_set(&denies);
            let on_ticket = OpContext {
                denied: Some(&denied),
                ..f.ctx()
            };
            let expected = execute(&on_ticket, &p, &ticket).unwrap().value();
            let ahead = list_ahead(&f.ctx(), &p, &ticket_for(&planned))
                .unwrap()
                .unwrap()
                .finish(&denied)
                .value();
            assert_eq!(ahead, expected, "{denies:?}");
        }
        let shown = |denies: &[String]| {
            let denied = crate::context::denied_set(denies);
            let r = list_ahead(&f.ctx(), &p, &ticket_for(&planned))
                .unwrap()
                .unwrap()
                .finish(&denied)
                .value();
            (names(&r).join(" "), r["hidden"].as_u64().unwrap())
        };
        assert_eq!(
            shown(&[]),
            ("link notes.txt private salary.secret".into(), 1)
        );
        assert_eq!(
            shown(&[format!("{work}/*.secret")]),
            ("link notes.txt private".into(), 2)
        );
        // Only one directory's names and types are listed ahead; nothing with denies in hand.
        for (depth, details) in [(Some(2), Some(false)), (None, None), (None, Some(true))] {
            let deeper = FileListParams {
                path: ".".into(),
                depth,
                details,
            };
            assert!(list_ahead(&f.ctx(), &deeper, &ticket_for(&planned)).is_none());
        }
        let denied = crate::context::denied_set(&[]);
        let with_denies = OpContext {
            denied: Some(&denied),
            ..f.ctx()
        };
        assert!(list_ahead(&with_denies, &p, &ticket_for(&planned)).is_none());
    }
}
