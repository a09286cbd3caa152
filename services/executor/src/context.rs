//! What an operation knows of the account it runs for ([`OpContext`]), what it hands back
//! ([`Done`]), and what listings and walks leave out ([`OpContext::hidden`]).

use std::path::Path;

/// What an operation needs to know about the account it runs for.
#[derive(Debug, Clone)]
pub struct OpContext<'a> {
    pub workdir: &'a Path,
    /// Canonical directories on the floor (hidden from listings).
    pub protected: &'a [String],
    /// This account's key: tags content so plans do not carry plain hashes.
    pub key: &'a glovebox_ticket::AccountKey,
    /// This account's exec jobs.
    pub jobs: &'a crate::jobs::JobTable,
    /// The account's trash (freedesktop layout: `files/` and `info/`).
    pub trash_dir: &'a Path,
    /// The account's read denies, as the ticket carries them (listings and searches only).
    pub denied: Option<&'a globset::GlobSet>,
}

impl OpContext<'_> {
    /// Why an entry met while listing or walking a tree is left out, or `None` to show it:
    /// entries on the floor, and entries the account's policy denies reading (from the ticket).
    /// Hidden entries are never opened.
    pub fn hidden(&self, canonical: &str) -> Option<String> {
        if let Some(hit) = glovebox_policy::floor::check(canonical, self.protected) {
            return Some(hit.rule());
        }
        if self.denied.is_some_and(|set| set.is_match(canonical)) {
            return Some("policy: read denied".to_owned());
        }
        None
    }
}

/// Compiles the globs a ticket says to hide; a glob that does not compile hides everything
/// (fail closed).
pub fn denied_set(globs: &[String]) -> globset::GlobSet {
    let mut builder = globset::GlobSetBuilder::new();
    for g in globs {
        match glovebox_policy::build_glob(g) {
            Ok(glob) => {
                builder.add(glob);
            }
            Err(_) => {
                if let Ok(all) = glovebox_policy::build_glob("/**") {
                    builder.add(all);
                }
            }
        }
    }
    builder.build().unwrap_or_else(|_| {
        let mut all = globset::GlobSetBuilder::new();
        if let Ok(g) = globset::Glob::new("**") {
            all.add(g);
        }
        all.build().unwrap_or_default()
    })
}

/// The outcome of an executed operation: its JSON result and the bytes it moved.
#[derive(Debug)]
pub struct Done {
    pub result: serde_json::Value,
    pub bytes: u64,
}
