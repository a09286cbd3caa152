//! The `audit.ship` section of `glovebox.yaml`: the gate copies its audit rows to a fleet
//! PostgreSQL database in the background (see the gate's `audit::ship`). Strict: unknown fields,
//! a URL that is not `postgres://`/`postgresql://`, and numbers out of range are refused with
//! what was expected. The URL may hold a password: it is never shown whole ([`redact_url`]).

use crate::Invalid;
use crate::invalid::invalid;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `audit:` section as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ship: Option<RawShip>,
}

impl RawAudit {
    pub fn is_empty(&self) -> bool {
        *self == RawAudit::default()
    }
}

/// `audit.ship` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShip {
    /// `postgres://user:password@host:port/database` (libpq-style parameters allowed).
    pub postgres: String,
    /// This machine's id in the fleet (default: /etc/machine-id, else one made and kept in the
    /// state directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// Rows per transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    /// How long to wait, once caught up, before looking for new rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
}

/// Validated shipping settings.
#[derive(Clone, PartialEq, Eq)]
pub struct Ship {
    /// The connection URL (with its password: never log it, use [`Ship::redacted_url`]).
    pub postgres: String,
    pub machine: Option<String>,
    pub batch: u32,
    pub interval: Duration,
}

impl std::fmt::Debug for Ship {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ship")
            .field("postgres", &redact_url(&self.postgres))
            .field("machine", &self.machine)
            .field("batch", &self.batch)
            .field("interval", &self.interval)
            .finish()
    }
}

/// Rows per transaction: default and range.
pub const DEFAULT_BATCH: u32 = 500;
pub const BATCH: (u32, u32) = (1, 10_000);
/// Idle poll interval: default and range.
pub const DEFAULT_INTERVAL_MS: u64 = 2_000;
pub const INTERVAL_MS: (u64, u64) = (50, 3_600_000);
/// Longest machine id.
pub const MAX_MACHINE_ID: usize = 128;

impl Ship {
    pub fn redacted_url(&self) -> String {
        redact_url(&self.postgres)
    }

    /// Validates the section (`None`: not configured).
    pub fn validate(raw: &RawAudit) -> Result<Option<Ship>, Invalid> {
        let Some(ship) = &raw.ship else {
            return Ok(None);
        };
        check_url(&ship.postgres).map_err(|m| invalid!("audit.ship.postgres: {m}"))?;
        if let Some(id) = &ship.machine {
            check_machine_id(id).map_err(|m| invalid!("audit.ship.machine: {m}"))?;
        }
        let batch = ship.batch.unwrap_or(DEFAULT_BATCH);
        if !(BATCH.0..=BATCH.1).contains(&batch) {
            return Err(invalid!(
                "audit.ship.batch: expected {} to {}, got {batch}",
                BATCH.0,
                BATCH.1
            ));
        }
        let interval = ship.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS);
        if !(INTERVAL_MS.0..=INTERVAL_MS.1).contains(&interval) {
            return Err(invalid!(
                "audit.ship.interval_ms: expected {} to {}, got {interval}",
                INTERVAL_MS.0,
                INTERVAL_MS.1
            ));
        }
        Ok(Some(Ship {
            postgres: ship.postgres.clone(),
            machine: ship.machine.clone(),
            batch,
            interval: Duration::from_millis(interval),
        }))
    }
}

/// A PostgreSQL URL's scheme and shape (the driver checks the rest when it connects).
pub fn check_url(url: &str) -> Result<(), Invalid> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"));
    match rest {
        Some(_) if !url.chars().any(char::is_whitespace) => Ok(()),
        _ => Err(crate::invalid::invalid!(
            "expected a URL like postgres://user:password@host/database, got {:?}",
            redact_url(url)
        )),
    }
}

/// A machine id: 1 to [`MAX_MACHINE_ID`] of `[A-Za-z0-9._-]`.
pub fn check_machine_id(id: &str) -> Result<(), Invalid> {
    if id.is_empty()
        || id.len() > MAX_MACHINE_ID
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(crate::invalid::invalid!(
            "expected 1 to {MAX_MACHINE_ID} letters, digits, '.', '_' or '-', got {id:?}"
        ));
    }
    Ok(())
}

/// `url` with any password replaced by `***`, in the userinfo (`user:pw@`) and in a `password=`
/// parameter, for logs and messages.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let start = scheme_end + 3;
        let authority_end = out[start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..authority_end].rfind('@') {
            let userinfo = &out[start..start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(start + colon + 1..start + at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(yaml: &str) -> Result<Option<Ship>, Invalid> {
        let raw: RawAudit = serde_yaml::from_str(yaml).map_err(|e| Invalid(e.to_string()))?;
        Ship::validate(&raw)
    }

    #[test]
    fn a_section_is_validated_with_defaults() {
        assert_eq!(raw("{}").unwrap(), None);
        let ship = raw("ship: {postgres: 'postgres://s:pw@db/fleet'}")
            .unwrap()
            .unwrap();
        assert_eq!(ship.batch, DEFAULT_BATCH);
        assert_eq!(ship.interval, Duration::from_millis(DEFAULT_INTERVAL_MS));
        assert!(!format!("{ship:?}").contains("pw"), "{ship:?}");
        let ship = raw("ship: {postgres: 'postgresql:///fleet?host=/run/pg', machine: m-1, batch: 50, interval_ms: 100}")
            .unwrap()
            .unwrap();
        assert_eq!((ship.machine.as_deref(), ship.batch), (Some("m-1"), 50));
    }

    #[test]
    fn bad_sections_are_refused_with_what_was_expected() {
        let cases = [
            (
                "ship: {postgres: 'mysql://x'}",
                "audit.ship.postgres: expected a URL",
            ),
            (
                "ship: {postgres: 'postgres://x', batch: 0}",
                "audit.ship.batch: expected 1 to 10000, got 0",
            ),
            (
                "ship: {postgres: 'postgres://x', interval_ms: 1}",
                "audit.ship.interval_ms: expected 50",
            ),
            (
                "ship: {postgres: 'postgres://x', machine: 'a b'}",
                "audit.ship.machine: expected",
            ),
            (
                "ship: {postgres: 'postgres://x', colour: blue}",
                "unknown field `colour`",
            ),
            ("ship: {}", "missing field `postgres`"),
            ("shipping: {}", "unknown field `shipping`"),
        ];
        for (yaml, want) in cases {
            let err = raw(yaml).unwrap_err().0;
            assert!(err.contains(want), "{yaml}: {err}");
        }
        let err = raw("ship: {postgres: 'mysql://u:secret@h/d'}")
            .unwrap_err()
            .0;
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn passwords_never_show() {
        let cases = [
            ("postgres://u:secret@h:5432/d", "postgres://u:***@h:5432/d"),
            ("postgres://u@h/d", "postgres://u@h/d"),
            (
                "postgres://h/d?user=u&password=secret&sslmode=require",
                "postgres://h/d?user=u&password=***&sslmode=require",
            ),
            ("postgresql://u:p%40ss@h/d", "postgresql://u:***@h/d"),
            ("postgres:///d?host=/run/pg", "postgres:///d?host=/run/pg"),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want);
        }
    }
}
