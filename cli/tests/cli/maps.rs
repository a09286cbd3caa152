//! The maps stay true: every source file ARCHITECTURE.md names exists where it says (by its
//! path's end, as the map names files within their crate's section), and every relative link of
//! README.md and docs/ leads to a file.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file of the repository (not the build's, nor the installed packages').
fn files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if ["target", "node_modules", ".git"].contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path.to_string_lossy().into_owned());
        }
    }
}

/// The `code spans` of a markdown text that name a Rust source file.
fn named_sources(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            span.ends_with(".rs")
                && !span.contains(' ')
                && !span.contains('*')
                && !span.contains('<')
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_source_file_the_architecture_names_exists() {
    let mut all = Vec::new();
    files(&repo(), &mut all);
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let named = named_sources(&text);
    assert!(named.len() > 50, "{named:?}");
    let missing: Vec<&String> = named
        .iter()
        .filter(|n| !all.iter().any(|f| f.ends_with(&format!("/{n}"))))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names files that do not exist: {missing:?}"
    );
}

#[test]
fn every_relative_link_of_the_readme_and_docs_leads_to_a_file() {
    let mut pages = vec![repo().join("README.md"), repo().join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "md") {
            pages.push(entry.path());
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in text.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or_default();
            let target = target.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !page.parent().unwrap().join(target).exists() {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
}
