//! What a compiled policy is made of: each rule's metadata ([`RuleInfo`]), its lists compiled
//! into sets ([`List`], one per layer, section and kind), and the [`Policy`] that holds them.
//! `compile.rs` builds these; `policy.rs` decides with them.

use globset::GlobSet;
use regex::RegexSet;

use crate::decision::Layer;
use crate::permissions::{Capability, Kind, Section};

/// Metadata of one compiled rule.
#[derive(Debug, Clone)]
pub struct RuleInfo {
    pub layer: Layer,
    pub section: Section,
    pub kind: Kind,
    /// Index in its list in the file.
    pub index: usize,
    pub pattern: String,
    /// Unix seconds after which the rule no longer applies.
    pub expires: Option<i64>,
    /// The file it came from.
    pub file: String,
}

impl RuleInfo {
    /// e.g. `paths.read.allow[0]: ./**`
    pub fn name(&self) -> String {
        format!(
            "{}.{}[{}]: {}",
            self.section.name(),
            self.kind.as_str(),
            self.index,
            self.pattern
        )
    }

    pub(super) fn live(&self, now: Option<i64>) -> bool {
        match (self.expires, now) {
            (None, _) => true,
            (Some(t), Some(now)) => now < t,
            // No clock: expiring allows do not apply, expiring denies do.
            (Some(_), None) => self.kind == Kind::Deny,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) enum Matcher {
    Globs(GlobSet),
    Regexes(RegexSet),
    Empty,
}

/// One list (one layer, section and kind), compiled into one set.
#[derive(Debug, Clone)]
pub(super) struct List {
    pub(super) matcher: Matcher,
    /// Set index → rule index (one rule can compile to two globs).
    pub(super) owners: Vec<usize>,
    pub(super) rules: Vec<RuleInfo>,
    /// The absolute globs of a path list, with their rule index (for [`Policy::read_deny_globs`]).
    pub(super) path_globs: Vec<(String, usize)>,
}

impl List {
    /// The first live rule that matches `subject`.
    pub(super) fn first_match(&self, subject: &str, now: Option<i64>) -> Option<&RuleInfo> {
        let hits: Vec<usize> = match &self.matcher {
            Matcher::Empty => return None,
            Matcher::Globs(set) => set.matches(subject),
            Matcher::Regexes(set) => set.matches(subject).into_iter().collect(),
        };
        hits.into_iter()
            .filter_map(|i| self.owners.get(i).copied())
            .filter(|r| self.rules.get(*r).is_some_and(|r| r.live(now)))
            .min()
            .and_then(|r| self.rules.get(r))
    }
}

#[derive(Debug, Clone)]
pub(super) struct LayerLists {
    pub(super) layer: Layer,
    /// Indexed by (section, kind).
    pub(super) lists: Vec<((Section, Kind), List)>,
}

impl LayerLists {
    pub(super) fn list(&self, section: Section, kind: Kind) -> Option<&List> {
        self.lists
            .iter()
            .find(|(k, _)| *k == (section, kind))
            .map(|(_, l)| l)
    }
}

/// A validated policy with compiled rules, ready to decide.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(super) sandbox: bool,
    pub(super) confine: bool,
    /// Which layer turned confinement on.
    pub(super) confine_layer: Layer,
    pub(super) caps: Vec<(Capability, String)>,
    pub(super) workdir: String,
    /// `<workdir>/.glovebox`, which agents may read but not change.
    pub(super) project_dir: String,
    pub(super) protected: Vec<String>,
    /// The account's roots (empty: not checked).
    pub(super) roots: Vec<String>,
    /// Managed, account, project: in that order.
    pub(super) layers: Vec<LayerLists>,
    pub(super) warnings: Vec<String>,
}

/// The `.glovebox` directory in a workdir holds the project policy: agents may not change it.
pub const PROJECT_DIR: &str = ".glovebox";
