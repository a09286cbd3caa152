//! What an operation knows of the account it runs for ([`OpContext`]), what it hands back
//! ([`Done`]), and what listings and walks leave out ([`OpContext::hidden_entry`]).

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
    /// The call asked for its result's collection as a table (`mcp_form`, the MCP form).
    pub tables: bool,
}

impl OpContext<'_> {
    /// Why the entry `name` of the directory `parent` (canonical), met while listing or walking
    /// a tree, is left out, or `None` to show it: entries on the floor, and entries the account's
    /// policy denies reading (from the ticket). Hidden entries are never opened. `parent` must be
    /// known not to be on the floor ([`OpContext::on_floor`], or it passed this check itself), so
    /// only what the entry's own name adds is checked.
    pub fn hidden_entry(&self, parent: &str, name: &str) -> Option<String> {
        if let Some(hit) = glovebox_policy::floor::check_entry(parent, name, self.protected) {
            return Some(hit.rule());
        }
        if let Some(set) = self.denied.filter(|set| !set.is_empty()) {
            let full = format!("{}/{name}", parent.trim_end_matches('/'));
            if set.is_match(&full) {
                return Some("policy: read denied".to_owned());
            }
        }
        None
    }

    /// Whether the directory itself is on the floor (then every entry in it is hidden).
    pub fn on_floor(&self, canonical: &str) -> bool {
        glovebox_policy::floor::check(canonical, self.protected).is_some()
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
///
/// The result is serialized once, here, and travels as text from then on: large results
/// (listings, searches) are written straight from typed rows without building a
/// `serde_json::Value` tree first.
#[derive(Debug, Clone)]
pub struct Done {
    /// The result as JSON text (without its `table`, when it has one).
    pub result: String,
    /// The result's `table` (a call that asked for tables), kept apart so that it is never
    /// escaped into JSON on its way to an MCP client (`mcp_form::rows::present_parts`).
    pub table: Option<String>,
    pub bytes: u64,
}

impl Done {
    /// A result serialized from any `Serialize` value.
    pub fn new(result: &impl serde::Serialize, bytes: u64) -> Done {
        // Results are maps with string keys and plain values: serializing them cannot fail, but
        // if it ever did, the caller gets an explicit null rather than a panic.
        let result = serde_json::to_string(result).unwrap_or_else(|_| "null".to_owned());
        Done {
            result,
            table: None,
            bytes,
        }
    }

    /// A result whose collection was made as `table`: `fields` are its other fields.
    pub fn with_table(fields: &impl serde::Serialize, table: String, bytes: u64) -> Done {
        Done {
            table: Some(table),
            ..Done::new(fields, bytes)
        }
    }

    /// The whole result parsed back into a value, its table in it (for tests and callers that
    /// inspect it).
    pub fn value(&self) -> serde_json::Value {
        let whole = match &self.table {
            Some(table) => glovebox_proto::tools::mcp_form::rows::with_table(&self.result, table),
            None => self.result.clone(),
        };
        serde_json::from_str(&whole).unwrap_or(serde_json::Value::Null)
    }
}
