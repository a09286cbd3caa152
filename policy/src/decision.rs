//! Verdicts: what was decided, in which layer, by which rule, and why.

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

/// What a path is judged for. Commands and tool names have their own entry points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    Read,
    Write,
    Delete,
}

impl Domain {
    pub fn as_str(self) -> &'static str {
        match self {
            Domain::Read => "read",
            Domain::Write => "write",
            Domain::Delete => "delete",
        }
    }
}

/// Where the deciding rule lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The built-in secret floor (and glovebox's own files).
    Floor,
    /// The administrator's files (`<state>/managed/*.yaml`, `/etc/glovebox/policy.d/*.yaml`).
    Managed,
    /// The account's own `permissions.yaml`.
    Account,
    /// `<workdir>/.glovebox/permissions.yaml`, which can only tighten.
    Project,
    /// No rule of a file: the default (ask), the built-in ask for files that make later commands
    /// run code, or a subject the policy cannot judge (deny).
    Default,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Floor => "floor",
            Layer::Managed => "managed",
            Layer::Account => "account",
            Layer::Project => "project",
            Layer::Default => "default",
        }
    }
}

/// A decision with the layer and rule that made it and a reason a person can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    pub layer: Layer,
    /// Names the deciding rule, e.g. `floor:.ssh` or `paths.read.allow[0]: /w/**`.
    pub rule: String,
    pub reason: String,
    /// What the approver must be told when this verdict asks (e.g. that the file makes later
    /// commands run code). Kept when verdicts are combined.
    pub warnings: Vec<String>,
}

impl Verdict {
    /// A verdict outside any policy layer (e.g. an unknown account or a malformed plan).
    pub fn new(decision: Decision, rule: impl Into<String>, reason: impl Into<String>) -> Verdict {
        Verdict::in_layer(Layer::Default, decision, rule, reason)
    }

    pub fn in_layer(
        layer: Layer,
        decision: Decision,
        rule: impl Into<String>,
        reason: impl Into<String>,
    ) -> Verdict {
        Verdict {
            decision,
            layer,
            rule: rule.into(),
            reason: reason.into(),
            warnings: Vec::new(),
        }
    }

    /// This verdict with `warning` added.
    pub fn with_warning(mut self, warning: impl Into<String>) -> Verdict {
        self.warnings.push(warning.into());
        self
    }

    /// Combines the verdicts of several subjects: the strictest decision wins, and among equals
    /// the first one keeps its rule. Every subject's warnings are kept (once each).
    pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Option<Verdict> {
        let mut warnings: Vec<String> = Vec::new();
        let combined = verdicts.into_iter().fold(None, |acc: Option<Verdict>, v| {
            for w in &v.warnings {
                if !warnings.contains(w) {
                    warnings.push(w.clone());
                }
            }
            match acc {
                Some(a) if a.decision >= v.decision => Some(a),
                _ => Some(v),
            }
        });
        combined.map(|v| Verdict { warnings, ..v })
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

    #[test]
    fn combining_keeps_every_warning_once() {
        let v = Verdict::combine([
            Verdict::new(Decision::Ask, "first", ""),
            Verdict::new(Decision::Ask, "second", "").with_warning("w1"),
            Verdict::new(Decision::Allow, "third", "").with_warning("w1"),
            Verdict::new(Decision::Allow, "fourth", "").with_warning("w2"),
        ])
        .unwrap();
        assert_eq!((v.decision, v.rule.as_str()), (Decision::Ask, "first"));
        assert_eq!(v.warnings, ["w1", "w2"]);
    }
}
