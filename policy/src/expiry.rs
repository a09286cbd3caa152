//! Rule expiry: `expires: <RFC 3339>` or `expires: <duration>` (`90s`, `30m`, `8h`, `7d`, `2w`).
//!
//! Pure: times are Unix seconds passed in by the caller. A duration counts from an anchor the
//! caller supplies: the moment glovebox wrote the rule (`policy add --expires` converts it to a
//! timestamp), or, for a hand-written duration, the file's last modification.

/// When a rule stops applying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Unix seconds.
    At(i64),
    /// Seconds after the anchor.
    After(i64),
}

/// A text that is neither an RFC 3339 time nor a duration (the text, trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected an RFC 3339 time (2026-12-31T18:00:00Z) or a duration (30m, 8h, 7d), got {0:?}")]
pub struct BadExpiry(pub String);

impl Expiry {
    /// Parses an RFC 3339 timestamp or a duration.
    pub fn parse(text: &str) -> Result<Expiry, BadExpiry> {
        let t = text.trim();
        if let Some(secs) = parse_duration(t) {
            return Ok(Expiry::After(secs));
        }
        parse_rfc3339(t)
            .map(Expiry::At)
            .ok_or_else(|| BadExpiry(t.to_owned()))
    }

    /// The absolute expiry in Unix seconds, given the anchor for durations.
    pub fn resolve(self, anchor: i64) -> i64 {
        match self {
            Expiry::At(t) => t,
            Expiry::After(d) => anchor.saturating_add(d),
        }
    }
}

/// `<n><unit>` with unit s, m, h, d or w; several may follow each other (`1h30m`).
pub fn parse_duration(text: &str) -> Option<i64> {
    if text.is_empty() {
        return None;
    }
    let mut total: i64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return None,
        };
        let n: i64 = digits.parse().ok()?;
        digits.clear();
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    digits.is_empty().then_some(total)
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` to Unix seconds.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        rest = &frac[n..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || !matches!(rb[0], b'+' | b'-') || rb[3] != b':' {
                return None;
            }
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            let o = h * 3600 + m * 60;
            if rb[0] == b'-' { -o } else { o }
        }
    };
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec - offset)
}

/// Unix seconds to `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(t: i64) -> String {
    format!("{}Z", date_time(t))
}

/// Unix milliseconds to `YYYY-MM-DDTHH:MM:SS.mmmZ` (the audit's timestamps).
pub fn format_rfc3339_millis(ms: i64) -> String {
    format!(
        "{}.{:03}Z",
        date_time(ms.div_euclid(1000)),
        ms.rem_euclid(1000)
    )
}

/// Unix seconds to `YYYY-MM-DDTHH:MM:SS` in UTC.
fn date_time(t: i64) -> String {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil-date algorithms.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_times_and_durations() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2026-11-30T01:00:00Z"), Some(1_796_000_400));
        assert_eq!(
            parse_rfc3339("2026-11-30T02:00:00+01:00"),
            Some(1_796_000_400)
        );
        assert_eq!(
            parse_rfc3339("2026-11-30T01:00:00.123Z"),
            Some(1_796_000_400)
        );
        assert_eq!(parse_rfc3339("2026-02-30T01:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-11-30"), None);
        assert_eq!(format_rfc3339(1_796_000_400), "2026-11-30T01:00:00Z");
        assert_eq!(format_rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339_millis(1_795_996_961_123),
            "2026-11-30T00:02:41.123Z"
        );
        assert_eq!(
            format_rfc3339_millis(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(format_rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(parse_duration("8h"), Some(28_800));
        assert_eq!(parse_duration("1h30m"), Some(5_400));
        assert_eq!(parse_duration("7d"), Some(604_800));
        assert_eq!(parse_duration("7"), None);
        assert_eq!(parse_duration("7x"), None);
        assert_eq!(Expiry::parse("2w"), Ok(Expiry::After(1_209_600)));
        assert!(Expiry::parse("tomorrow").is_err());
        assert_eq!(Expiry::After(10).resolve(5), 15);
    }
}
