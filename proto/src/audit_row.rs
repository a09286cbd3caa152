//! What an audit row is about, who wrote it and how it ended, as enums: every service that makes
//! an [`AuditEvent`](crate::v1::AuditEvent) names its [`RowKind`], its [`Outcome`] (and the gate
//! its [`Source`]) with these, and the gate admits a peer's row by matching them, so a kind, an
//! outcome or a source is never a string someone typed. On the wire and in the `events` table they
//! stay text (`as_str`), which administrators query with SQL; the shapes that read rows back from
//! a file (the chain's fields, a query's rows) keep text too, because a changed file may hold any.

use std::fmt;

/// Declares a closed set of row values with their text in the audit.
macro_rules! audit_values {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The value's text in the audit.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value `text` names, if any.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.as_str().to_owned()
            }
        }
    };
}

audit_values! {
    /// What a row records.
    RowKind {
        /// The gate's verdict on a call.
        Decide = "decide",
        /// The approver's answer to an ask, resolved into a ticket or a denial.
        Resolve = "resolve",
        /// An executor or pack host ran a call under its ticket.
        Execute = "execute",
        /// A call's answer, as its agent got it.
        Result = "result",
        /// How a job ended when it reached a cap.
        Job = "job",
        /// A credential refused, or root opening an account as its approver.
        Auth = "auth",
        /// A service started, stopped or was refused.
        Service = "service",
        /// An account added, removed, changed or left out.
        Account = "account",
        /// An account's tools switched on or off.
        Enablement = "enablement",
        /// A policy loaded, refused, or a rule added or revoked.
        Policy = "policy",
        /// A pack's server trusted or distrusted.
        Trust = "trust",
        /// A pack enabled, disabled or refused.
        Pack = "pack",
        /// A pack's secret set or removed (never its value).
        Secret = "secret",
        /// The audit itself: a store opened, verified, or found changed.
        Audit = "audit",
        /// A signed checkpoint of the chain.
        Checkpoint = "checkpoint",
    }
}

audit_values! {
    /// The service a row came from.
    Source {
        Broker = "broker",
        Gate = "gate",
        Executor = "executor",
        Packs = "packs",
        Supervisor = "supervisor",
    }
}

audit_values! {
    /// How the event a row records ended: its `outcome` column. Which values a kind uses is
    /// in `docs/audit.md`; a peer's row whose outcome is not one of these is refused.
    Outcome {
        /// A call, a query or a check went through.
        Ok = "ok",
        /// A call failed for a reason other than a denial.
        Error = "error",
        /// A call was denied (by a rule, the approver, or a cap).
        Denied = "denied",
        /// A request was refused before anything was done.
        Refused = "refused",
        /// A call was cancelled by its agent.
        Cancelled = "cancelled",
        /// A job reached a cap.
        Limit = "limit",
        /// A service started.
        Started = "started",
        /// A service stopped.
        Stopped = "stopped",
        /// A service was restarted after it exited.
        Restarted = "restarted",
        /// An account's services started.
        AccountStarted = "account_started",
        /// An account's services stopped.
        AccountStopped = "account_stopped",
        /// Root opened an account's approver socket as its administrator.
        Administrator = "administrator",
        /// A policy was changed by the account's approver.
        Approver = "approver",
        /// A credential was refused.
        TokenRefused = "token_refused",
        /// A credential was read by its owner.
        TokenShown = "token_shown",
        /// A credential was replaced.
        TokenRotated = "token_rotated",
        /// An account, a pack or a secret was added.
        Added = "added",
        /// A pack was replaced by a new definition.
        Replaced = "replaced",
        /// An account, a pack or a secret was removed.
        Removed = "removed",
        /// An account was changed.
        Changed = "changed",
        /// A secret was set.
        Set = "set",
        /// An account's services could not be reached.
        Unavailable = "unavailable",
        /// An account's tools or a pack were switched on.
        Enabled = "enabled",
        /// An account's tools or a pack were switched off.
        Disabled = "disabled",
        /// A project pack's server is trusted from now on.
        Always = "always",
        /// A project pack's server is trusted this once.
        Once = "once",
        /// A project pack's server is refused.
        No = "no",
        /// A project pack's server is to be asked about again.
        Unknown = "unknown",
        /// A policy file changed and was loaded.
        Reloaded = "reloaded",
        /// A policy file changed and was refused; the last good policy stays.
        Invalid = "invalid",
        /// A rule was added to a policy.
        RuleAdded = "rule_added",
        /// A rule was revoked from a policy.
        RuleRevoked = "rule_revoked",
        /// A policy was reset to the default.
        Reset = "reset",
        /// A policy's `sandbox` switch was set.
        Sandbox = "sandbox",
        /// A policy's confinement switch was set.
        Confinement = "confinement",
        /// The audit's head file does not match its rows.
        AnchorMismatch = "anchor_mismatch",
        /// A checkpoint written as the gate started.
        Start = "start",
        /// A checkpoint written on the checkpoint interval.
        Interval = "interval",
        /// A checkpoint written after a number of rows.
        Rows = "rows",
        /// A checkpoint written as the gate stopped.
        Stop = "stop",
    }
}

impl Source {
    /// The kinds of row a peer of this source may send the gate (the gate writes the rest).
    pub fn may_send(self) -> &'static [RowKind] {
        match self {
            Source::Broker => &[RowKind::Result, RowKind::Auth],
            Source::Supervisor => &[RowKind::Service],
            Source::Executor => &[RowKind::Execute, RowKind::Job],
            Source::Packs => &[RowKind::Execute],
            Source::Gate => RowKind::ALL,
        }
    }
}

/// Says in a call's `result` row that the call failed with `error` (a service's `ToolError`): its
/// outcome, code and reason, as the executors and the pack hosts write them.
pub fn note_failure(row: &mut crate::v1::AuditEvent, error: &crate::v1::ToolError) {
    let code = crate::ErrorCode::parse(&error.code).unwrap_or(crate::ErrorCode::Internal);
    row.outcome = code.result_outcome().into();
    row.error_code = code.as_str().into();
    row.reason = error.message.clone();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_reads_back_from_its_text() {
        for kind in RowKind::ALL {
            assert_eq!(RowKind::parse(kind.as_str()), Some(*kind));
        }
        for source in Source::ALL {
            assert_eq!(Source::parse(source.as_str()), Some(*source));
        }
        assert_eq!(RowKind::parse("Decide"), None);
        assert_eq!(RowKind::parse(""), None);
        assert_eq!(Source::parse("executor:alice"), None);
        for outcome in Outcome::ALL {
            assert_eq!(Outcome::parse(outcome.as_str()), Some(*outcome));
        }
        assert_eq!(Outcome::parse("OK"), None);
        assert_eq!(Outcome::parse(""), None);
    }

    #[test]
    fn only_the_gate_writes_decisions() {
        for source in Source::ALL {
            let decides = source.may_send().contains(&RowKind::Decide);
            assert_eq!(decides, *source == Source::Gate, "{source}");
        }
    }
}
