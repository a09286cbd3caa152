//! [`AccountId`]: an account's id, checked once where it enters (the configuration, a credential,
//! a request) and carried typed from there, so nothing past that point holds an id that could
//! name a directory or a socket file it should not.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

/// An account's id: 1–64 bytes of ASCII letters, digits, `_`, `.` and `-`, not starting with
/// `.` or `-` (it names a directory and a socket file).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct AccountId(String);

/// A string that cannot name an account; its text is not repeated (it may be anything a client
/// sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not an account id: 1 to 64 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
)]
pub struct NotAnAccountId;

impl AccountId {
    /// Checks `id`.
    pub fn parse(id: impl Into<String>) -> Result<AccountId, NotAnAccountId> {
        let id = id.into();
        if is_valid_account_id(&id) {
            Ok(AccountId(id))
        } else {
            Err(NotAnAccountId)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `id` can name an account (and so a directory and a socket file).
pub fn is_valid_account_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && !id.starts_with('.')
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl Deref for AccountId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for AccountId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for AccountId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<AccountId> for String {
    fn from(id: AccountId) -> String {
        id.0
    }
}

impl std::str::FromStr for AccountId {
    type Err = NotAnAccountId;
    fn from_str(id: &str) -> Result<AccountId, NotAnAccountId> {
        AccountId::parse(id)
    }
}

impl PartialEq<str> for AccountId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for AccountId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for AccountId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl<'de> serde::Deserialize<'de> for AccountId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AccountId, D::Error> {
        AccountId::parse(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_ids() {
        for ok in [
            "alice",
            "a",
            "a.b",
            "user_1",
            "A-9",
            "build-bot_2",
            &"a".repeat(64),
        ] {
            assert!(is_valid_account_id(ok), "{ok}");
            assert_eq!(AccountId::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            ".",
            ".hidden",
            "-flag",
            "a/b",
            "..",
            "a b",
            "é",
            "a\0",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_account_id(bad), "{bad}");
            assert_eq!(AccountId::parse(bad), Err(NotAnAccountId));
        }
    }

    #[test]
    fn deserializing_checks_the_id() {
        let ok: AccountId = serde_json::from_str("\"alice\"").unwrap();
        assert_eq!(ok, "alice");
        let bad = serde_json::from_str::<AccountId>("\"../etc\"").unwrap_err();
        assert!(bad.to_string().contains("not an account id"), "{bad}");
    }

    #[test]
    fn an_id_looks_up_by_its_text() {
        let mut map = std::collections::HashMap::new();
        map.insert(AccountId::parse("alice").unwrap(), 1);
        assert_eq!(map.get("alice"), Some(&1));
    }
}
