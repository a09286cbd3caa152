//! What an audit row is about and who wrote it, as enums: every service that makes an
//! [`AuditEvent`](crate::v1::AuditEvent) names its [`RowKind`] (and the gate its [`Source`]) with
//! these, and the gate admits a peer's row by matching them, so a kind or a source is never a
//! string someone typed. On the wire and in the `events` table they stay text (`as_str`), which
//! administrators query with SQL.

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
    }

    #[test]
    fn only_the_gate_writes_decisions() {
        for source in Source::ALL {
            let decides = source.may_send().contains(&RowKind::Decide);
            assert_eq!(decides, *source == Source::Gate, "{source}");
        }
    }
}
