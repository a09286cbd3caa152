//! glovebox's policy decision, as pure functions: no file system, no clock, no network.
//!
//! The gate loads the policy files (IO at its edge): the administrator's managed files, the
//! account's `permissions.yaml` and the project's `<workdir>/.glovebox/permissions.yaml`. It
//! compiles them here into a [`Policy`] and asks it about each canonical subject
//! ([`Policy::decide_at`], [`Policy::decide_command_at`], [`Policy::decide_tool_at`]), passing
//! the time in. The executor uses [`floor`] to hide secret entries from listings. Every verdict
//! names its layer, the rule that decided, and why. Writes and deletes of files that make later
//! commands run code ([`code_carrying`]) always ask, with a warning for the approver. [`edit`] changes a policy file's text without
//! losing its comments.

pub mod code_carrying;
pub mod decision;
pub mod edit;
pub mod expiry;
pub mod floor;
pub mod permissions;
pub mod policy;

pub use decision::{Decision, Domain, Layer, Verdict};
pub use permissions::{
    Capability, Kind, PolicyError, RawPolicy, RawRule, Section, exact_command_rule,
    exact_path_rule, exact_rule,
};
pub use policy::{Inputs, Policy, RuleInfo, Source, applies_to, build_glob, check_account_text};
