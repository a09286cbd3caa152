//! glovebox's policy decision, as pure functions: no file system, no clock, no network.
//!
//! The gate loads `permissions.yaml` (IO at its edge), compiles it here into a [`Policy`], and
//! asks [`Policy::decide`] for each canonical subject. The executor uses [`floor`] to hide secret
//! entries from listings. Every verdict carries the rule that decided and why.

pub mod decision;
pub mod floor;
pub mod permissions;

pub use decision::{Decision, Domain, Verdict};
pub use permissions::{Policy, PolicyError, RawPolicy};
