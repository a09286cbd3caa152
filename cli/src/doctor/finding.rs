//! One result of one check: its level, what was found and, when it is not OK, the fix.

use std::fmt;

/// How a check came out. `Fail` makes `glovebox doctor` exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        }
    }
}

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    /// The check's name, e.g. `landlock` or `file /var/lib/glovebox/ticket.key`.
    pub check: String,
    pub finding: String,
    /// The command or setting that fixes it (not OK only).
    pub fix: Option<String>,
}

impl Finding {
    /// As `glovebox doctor --json` prints it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "level": self.level.as_str(),
            "check": self.check,
            "finding": self.finding,
            "fix": self.fix,
        })
    }

    pub fn ok(check: impl Into<String>, finding: impl Into<String>) -> Finding {
        Finding {
            level: Level::Ok,
            check: check.into(),
            finding: finding.into(),
            fix: None,
        }
    }
    pub fn warn(
        check: impl Into<String>,
        finding: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            level: Level::Warn,
            check: check.into(),
            finding: finding.into(),
            fix: Some(fix.into()),
        }
    }
    pub fn fail(
        check: impl Into<String>,
        finding: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            level: Level::Fail,
            check: check.into(),
            finding: finding.into(),
            fix: Some(fix.into()),
        }
    }
}

/// `OK|WARN|FAIL <check>: <finding>`, and the fix on the next line when there is one.
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.level.as_str(),
            self.check,
            self.finding
        )?;
        if let Some(fix) = self.fix.as_ref().filter(|_| self.level != Level::Ok) {
            write!(f, "\n    fix: {fix}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_is_one_line_and_its_fix_the_next() {
        assert_eq!(
            Finding::ok("landlock", "ABI 7").to_string(),
            "OK landlock: ABI 7"
        );
        assert_eq!(
            Finding::fail("file /s/k", "0644", "chmod 600 /s/k").to_string(),
            "FAIL file /s/k: 0644\n    fix: chmod 600 /s/k"
        );
        assert!(Level::Fail > Level::Warn && Level::Warn > Level::Ok);
    }
}
