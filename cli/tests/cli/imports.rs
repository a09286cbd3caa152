//! No import circles: within each crate of the workspace, no source file reaches, through the
//! `use` lines and `crate::`/`super::` paths of the files it names, a file that names it. The
//! graph is drawn from the code's own text (test modules, after a file's first `#[cfg(test)]`,
//! and comments left out), one node per file, an edge to the longest module path that is a file;
//! a parent that names its child module (`child::Item`) imports it too.
//!
//! Circles not yet broken are listed in [`KNOWN`]: the test fails on any other circle, and on a
//! listed one that is gone (so the list only shrinks).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles that remain, each as its crate directory and its files' module paths: none. A new
/// one fails the test; if one must be let in for a while, it is listed here, named as the test
/// prints it, until it is broken.
const KNOWN: &[(&str, &[&str])] = &[];

type Module = Vec<String>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace's member directories, from its Cargo.toml.
fn members() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let list = text.split("members = [").nth(1).unwrap();
    let list = list.split(']').next().unwrap();
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Every `.rs` file under `dir` but a crate's separate binaries (`src/bin/`).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if entry.file_name() != "bin" {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of the file `file` of the tree rooted at `src`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("lib" | "main" | "mod")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file that the crate's build sees outside tests, without comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths of one `use` tree: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let prefix = &tree[..open];
    let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(p).into_iter().map(|e| format!("{prefix}{e}")))
        .collect()
}

/// The crate-relative module paths a file's code names (`crate::`, `super::`, `self::`).
fn named_paths(code: &str, me: &Module) -> Vec<Module> {
    let mut paths: Vec<String> = Vec::new();
    // `use` items: a line that starts one (after any `pub(...)`), to its `;`.
    for (at, _) in code.match_indices("use ") {
        let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let lead = code[line_start..at].trim();
        if !(lead.is_empty() || lead.starts_with("pub")) {
            continue;
        }
        let tree: String = code[at + 4..]
            .split(';')
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        paths.extend(expand(&tree));
    }
    // Paths in code (`crate::a::f()`), not a lone keyword (`pub(super)`).
    let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
    paths.extend(words.filter(|w| w.contains("::")).map(str::to_owned));
    let mut out = Vec::new();
    for path in paths {
        let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
        let mut base = match segments.peek().copied() {
            Some("crate") => {
                segments.next();
                Vec::new()
            }
            Some("self") => {
                segments.next();
                me.clone()
            }
            Some("super") => me.clone(),
            _ => continue,
        };
        while segments.peek() == Some(&"super") {
            segments.next();
            base.pop();
        }
        base.extend(segments.map(str::to_owned));
        out.push(base);
    }
    out
}

/// The strongly connected components of more than one file (Tarjan's algorithm).
fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        found: Vec<BTreeSet<Module>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    component.insert(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The child modules of `me` its code names by their bare name (`child::Item`, as a parent's
/// `pub use child::Item` does): a parent that uses its child imports it too.
fn children_named(code: &str, me: &Module, modules: &BTreeMap<Module, PathBuf>) -> Vec<Module> {
    let children = modules
        .keys()
        .filter(|m| m.len() == me.len() + 1 && m.starts_with(me));
    children
        .filter(|child| {
            let needle = format!("{}::", child[me.len()]);
            code.match_indices(&needle).any(|(at, _)| {
                let before = code[..at].chars().next_back();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            })
        })
        .cloned()
        .collect()
}

/// Each crate's circles, as (crate directory, sorted module paths).
fn workspace_circles() -> BTreeSet<(String, Vec<String>)> {
    let mut found = BTreeSet::new();
    for member in members() {
        let src = repo().join(&member).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let modules: BTreeMap<Module, PathBuf> = files
            .into_iter()
            .map(|f| (module_of(&src, &f), f))
            .collect();
        let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (me, file) in &modules {
            let code = code(&std::fs::read_to_string(file).unwrap());
            let edges = graph.entry(me.clone()).or_default();
            let mut named = named_paths(&code, me);
            named.extend(children_named(&code, me, &modules));
            for path in named {
                let target = (0..=path.len())
                    .rev()
                    .map(|k| path[..k].to_vec())
                    .find(|prefix| modules.contains_key(prefix));
                if let Some(target) = target.filter(|t| t != me && !t.is_empty()) {
                    edges.insert(target);
                }
            }
        }
        for circle in circles(&graph) {
            let names = circle.iter().map(|m| m.join("::")).collect();
            found.insert((member.clone(), names));
        }
    }
    found
}

#[test]
fn no_crate_has_an_import_circle_but_the_known_ones() {
    let found = workspace_circles();
    let known: BTreeSet<(String, Vec<String>)> = KNOWN
        .iter()
        .map(|(dir, files)| {
            let mut files: Vec<String> = files.iter().map(|f| (*f).to_owned()).collect();
            files.sort();
            ((*dir).to_owned(), files)
        })
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        new.is_empty(),
        "import circles (a file reaches, through the files it names, a file that names it): {new:#?}"
    );
    assert!(
        gone.is_empty(),
        "these circles are broken or changed: update KNOWN in {}: {gone:#?}",
        file!()
    );
}

#[test]
fn the_circle_finder_finds_a_circle_and_resolves_super_and_braces() {
    let me: Module = vec!["a".into(), "b".into()];
    let named = named_paths(
        "use super::{c, d::{e, f}};\nfn x() { crate::g::h(); self::i::j(); }",
        &me,
    );
    let named: Vec<String> = named.iter().map(|m| m.join("::")).collect();
    for want in ["a::c", "a::d::e", "a::d::f", "g::h", "a::b::i::j"] {
        assert!(named.contains(&want.to_owned()), "{want} not in {named:?}");
    }
    let m = |s: &str| -> Module { s.split("::").map(str::to_owned).collect() };
    let modules = BTreeMap::from([
        (m("packs"), PathBuf::new()),
        (m("packs::rows"), PathBuf::new()),
        (m("packs::trust"), PathBuf::new()),
    ]);
    let named = children_named(
        "pub use rows::view;\nfn f() { my_trust::x(); }",
        &m("packs"),
        &modules,
    );
    assert_eq!(
        named,
        vec![m("packs::rows")],
        "a bare child path is an import, a longer word is not"
    );
    assert!(
        named_paths("pub(super) fn f() {}", &me).is_empty(),
        "a visibility is no import"
    );
    let graph = BTreeMap::from([
        (m("a"), BTreeSet::from([m("b")])),
        (m("b"), BTreeSet::from([m("c")])),
        (m("c"), BTreeSet::from([m("a")])),
        (m("d"), BTreeSet::from([m("a")])),
    ]);
    assert_eq!(
        circles(&graph),
        vec![BTreeSet::from([m("a"), m("b"), m("c")])]
    );
}
