//! Verdicts: what was decided, by which rule, and why.

/// The outcome of judging a subject. Ordered so that combining verdicts is `max()`:
/// the strictest wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

/// What a subject is judged for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    Read,
    Write,
}

impl Domain {
    pub fn as_str(self) -> &'static str {
        match self {
            Domain::Read => "read",
            Domain::Write => "write",
        }
    }
}

/// A decision with the rule that made it and a reason a person can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    /// Names the deciding rule, e.g. `floor:.ssh` or `paths.read.allow[0]: /w/**`.
    pub rule: String,
    pub reason: String,
}

impl Verdict {
    pub fn new(decision: Decision, rule: impl Into<String>, reason: impl Into<String>) -> Verdict {
        Verdict {
            decision,
            rule: rule.into(),
            reason: reason.into(),
        }
    }

    /// Combines the verdicts of several subjects: the strictest decision wins, and among equals
    /// the first one keeps its rule.
    pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Option<Verdict> {
        verdicts.into_iter().fold(None, |acc, v| match acc {
            Some(a) if a.decision >= v.decision => Some(a),
            _ => Some(v),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictest_wins() {
        assert!(Decision::Allow < Decision::Ask && Decision::Ask < Decision::Deny);
        let v = Verdict::combine([
            Verdict::new(Decision::Allow, "a", ""),
            Verdict::new(Decision::Deny, "d1", ""),
            Verdict::new(Decision::Ask, "q", ""),
            Verdict::new(Decision::Deny, "d2", ""),
        ])
        .unwrap();
        assert_eq!((v.decision, v.rule.as_str()), (Decision::Deny, "d1"));
        assert_eq!(Verdict::combine([]), None);
    }
}
