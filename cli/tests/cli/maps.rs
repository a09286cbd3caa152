//! The maps stay true: every path and every Rust name ARCHITECTURE.md names in a code span
//! exists in the repository, and every relative link of README.md, ARCHITECTURE.md and docs/
//! leads to a file of the repository.
//!
//! In ARCHITECTURE.md a code span is read as
//! - a repository path when it holds a `/` or ends in a source or config file's extension: with a
//!   `/` it is a path from the repository's root (a trailing `/` names a directory, a `*` a glob
//!   whose directory must exist), without one the name of some file; spans starting with `/`
//!   (a URL path, a path on the machine) or holding `<` (`<state>/audit.db`) are not the
//!   repository's and are left alone;
//! - a Rust name when it is an identifier or a `::` path (`AuditStore`, `Policy::decide_at`,
//!   `glovebox_sandbox::shim`): every segment but a leading crate name must be a word of some
//!   `.rs` file, of that crate's directory when the path starts with a workspace crate;
//! - a crate when it is `glovebox-<name>`: a package of the workspace;
//! - a gRPC name when it is `Service.Method` (`Audit.Append`): each part a word of a `.proto`.
//!
//! Anything else (commands, flags, URL paths, config keys, a bare `.proto`) is prose.
//!
//! A relative link must lead to a file of the repository itself: not into `target/` or
//! `node_modules/`, which a fresh clone does not have.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file and directory of the repository (not the build's, nor the installed packages'),
/// as paths from its root.
fn walk(root: &Path, dir: &Path, files: &mut Vec<String>, dirs: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if ["target", "node_modules", ".git"].contains(&name.as_str()) {
            continue;
        }
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if path.is_dir() {
            dirs.push(relative);
            walk(root, &path, files, dirs);
        } else {
            files.push(relative);
        }
    }
}

/// The repository as the map is checked against.
struct Repo {
    files: Vec<String>,
    dirs: Vec<String>,
    /// The words of each `.rs` file, by its path.
    rust_words: BTreeMap<String, BTreeSet<String>>,
    /// The words of every `.proto` file.
    proto_words: BTreeSet<String>,
    /// Each workspace package's name (`glovebox-proto`) and its directory (`proto`).
    packages: BTreeMap<String, String>,
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

impl Repo {
    fn read() -> Repo {
        let root = repo();
        let (mut files, mut dirs) = (Vec::new(), Vec::new());
        walk(&root, &root, &mut files, &mut dirs);
        let mut rust_words = BTreeMap::new();
        let mut proto_words = BTreeSet::new();
        let mut packages = BTreeMap::new();
        for file in &files {
            let read = || std::fs::read_to_string(root.join(file)).unwrap_or_default();
            if file.ends_with(".rs") {
                let set = words(&read()).map(str::to_owned).collect();
                rust_words.insert(file.clone(), set);
            } else if file.ends_with(".proto") {
                proto_words.extend(words(&read()).map(str::to_owned));
            } else if file.ends_with("Cargo.toml") {
                let text = read();
                let package = text.split("[package]").nth(1).unwrap_or_default();
                let name = package.lines().find_map(|l| {
                    let value = l.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
                    Some(value.trim().trim_matches('"').to_owned())
                });
                if let Some(name) = name {
                    let dir = file
                        .strip_suffix("Cargo.toml")
                        .unwrap()
                        .trim_end_matches('/');
                    packages.insert(name, dir.to_owned());
                }
            }
        }
        Repo {
            files,
            dirs,
            rust_words,
            proto_words,
            packages,
        }
    }

    /// A path from the root, a directory (trailing `/`), a glob, or a bare file name.
    fn has_path(&self, span: &str) -> bool {
        if let Some(star) = span.find('*') {
            let dir = span[..star].rsplit_once('/').map_or("", |(dir, _)| dir);
            return dir.is_empty() || self.dirs.iter().any(|d| d == dir);
        }
        if let Some(dir) = span.strip_suffix('/') {
            return self.dirs.iter().any(|d| d == dir);
        }
        if span.contains('/') {
            return self.files.iter().chain(&self.dirs).any(|f| f == span);
        }
        self.files
            .iter()
            .any(|f| f == span || f.ends_with(&format!("/{span}")))
    }

    /// Every segment of a Rust name is a word of some `.rs` file (of the crate it starts with).
    fn has_rust_name(&self, span: &str) -> bool {
        let span = span.strip_suffix("()").unwrap_or(span);
        let mut segments: Vec<&str> = span.split("::").collect();
        let mut scope = String::new();
        if let Some(dir) = self.packages.get(&segments[0].replace('_', "-")) {
            scope = if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            };
            segments.remove(0);
        }
        segments
            .iter()
            .filter(|s| !["crate", "self", "super"].contains(s))
            .all(|segment| {
                self.rust_words
                    .iter()
                    .any(|(file, set)| file.starts_with(&scope) && set.contains(*segment))
            })
    }
}

const EXTENSIONS: &[&str] = &[
    ".rs", ".toml", ".proto", ".md", ".yaml", ".yml", ".json", ".sql", ".sh", ".service", ".conf",
    ".lock", ".py", ".js", ".ts", ".css", ".html",
];

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What a code span names, if it names something to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Path,
    RustName,
    Package,
    Grpc,
}

fn kind(span: &str) -> Option<Kind> {
    if span.is_empty()
        || span.contains(char::is_whitespace)
        || span.starts_with('/')
        || span.contains('<')
        || EXTENSIONS.contains(&span)
    {
        return None;
    }
    if span.contains('/') || EXTENSIONS.iter().any(|e| span.ends_with(e)) {
        return Some(Kind::Path);
    }
    if span.starts_with("glovebox-") && span[9..].split('-').all(is_identifier) {
        return Some(Kind::Package);
    }
    let name = span.strip_suffix("()").unwrap_or(span);
    if name.split("::").all(is_identifier) {
        return Some(Kind::RustName);
    }
    if span.starts_with(|c: char| c.is_ascii_uppercase()) && span.split('.').all(is_identifier) {
        return Some(Kind::Grpc);
    }
    None
}

/// The inline code spans of a markdown text, fenced blocks left out.
fn code_spans(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_path_and_name_the_architecture_names_exists() {
    let repo = Repo::read();
    let text = std::fs::read_to_string(self::repo().join("ARCHITECTURE.md")).unwrap();
    let mut named: BTreeMap<Kind, BTreeSet<String>> = BTreeMap::new();
    for span in code_spans(&text) {
        if let Some(kind) = kind(&span) {
            named.entry(kind).or_default().insert(span);
        }
    }
    let count = |kind| named.get(&kind).map_or(0, BTreeSet::len);
    // A floor, so that a page that names nothing (or a parser that finds nothing) fails.
    assert!(
        count(Kind::Path) >= 40
            && count(Kind::RustName) >= 50
            && count(Kind::Package) >= 10
            && count(Kind::Grpc) >= 1,
        "{named:#?}"
    );
    let mut missing = Vec::new();
    for (kind, spans) in &named {
        for span in spans {
            let present = match kind {
                Kind::Path => repo.has_path(span),
                Kind::RustName => repo.has_rust_name(span),
                Kind::Package => repo.packages.contains_key(span),
                Kind::Grpc => span.split('.').all(|w| repo.proto_words.contains(w)),
            };
            if !present {
                missing.push(format!("{kind:?} `{span}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what the repository does not have: {missing:#?}"
    );
}

#[test]
fn code_spans_are_read_as_the_map_means_them() {
    assert_eq!(kind("cli/src/main.rs"), Some(Kind::Path));
    assert_eq!(kind("services/gate/migrations/"), Some(Kind::Path));
    assert_eq!(kind("proto/proto/glovebox/v1/*.proto"), Some(Kind::Path));
    assert_eq!(kind("Cargo.toml"), Some(Kind::Path));
    assert_eq!(
        kind("glovebox_proto::transport::require_peer"),
        Some(Kind::RustName)
    );
    assert_eq!(kind("App::run"), Some(Kind::RustName));
    assert_eq!(kind("AuditStore"), Some(Kind::RustName));
    assert_eq!(kind("glovebox-sandbox"), Some(Kind::Package));
    assert_eq!(kind("Audit.Append"), Some(Kind::Grpc));
    for prose in [
        "glovebox up",
        "--system",
        "/v1/ws",
        "/usr",
        "<state>/audit.db",
        "<pack>__<tool>",
        "limits.ask_timeout_secs",
        "pack-host",
        ".proto",
    ] {
        assert_eq!(kind(prose), None, "{prose}");
    }
    let spans = code_spans("a `b`\n```\n`not` a span\n```\n`c::d` and `e`");
    assert_eq!(spans, ["b", "c::d", "e"]);
}

#[test]
fn every_relative_link_of_the_readme_and_docs_leads_to_a_file() {
    let mut pages = vec![repo().join("README.md"), repo().join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "md") {
            pages.push(entry.path());
        }
    }
    let root = repo().canonicalize().unwrap();
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in text.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or_default();
            let target = target.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            // A file of the repository itself, not of what a build or an install made.
            let resolved = page.parent().unwrap().join(target).canonicalize();
            let in_repository = resolved.is_ok_and(|path| {
                path.strip_prefix(&root).is_ok_and(|within| {
                    !within
                        .components()
                        .any(|c| c.as_os_str() == "target" || c.as_os_str() == "node_modules")
                })
            });
            if !in_repository {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing of the repository: {broken:#?}"
    );
}
