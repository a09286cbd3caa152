//! Pack secrets: each account's in `<state>/accounts/<id>/pack-secrets.json`, each value sealed
//! with XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`) under the gate's secrets key
//! (`<state>/secrets.key`, made on first use, 0600) with a random nonce, and bound to its account
//! and name (the associated data), so a value moved to another name or account does not open.
//! Values are handed only to the account's own pack host, at a pack's start; never logged,
//! audited or returned to an administrator.
//!
//! The key sits in the same directory as the file: this keeps values out of anything that reads
//! the file without the key (a backup of `accounts/`, a grep of the state, a pasted file), not
//! away from the gate's user.

use std::collections::BTreeMap;
use std::sync::Mutex;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use glovebox_config::StateDir;
use serde::{Deserialize, Serialize};

/// Largest secret value, in bytes.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;
/// Most secrets one account may store.
pub const MAX_SECRETS: usize = 256;
const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;
const AAD_LABEL: &[u8] = b"glovebox.v1.pack-secret\0";

/// Why a secret could not be stored, removed or read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret names are 1 to 64 of [A-Za-z0-9._-]")]
    BadName,
    #[error("a secret is at most {MAX_SECRET_BYTES} bytes, and not empty")]
    BadValue,
    #[error("an account stores at most {MAX_SECRETS} secrets")]
    TooMany,
    #[error("{0}")]
    Store(String),
}

/// The file as stored: name → hex of nonce and sealed value.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    secrets: BTreeMap<String, String>,
}

pub struct SecretStore {
    state: StateDir,
    /// Serializes changes of the files.
    lock: Mutex<()>,
    /// Every value stored or opened, for masking by value what others read (the audit).
    known: glovebox_redact::KnownSecrets,
}

fn aad(account: &str, name: &str) -> Vec<u8> {
    let mut aad = AAD_LABEL.to_vec();
    aad.extend_from_slice(account.as_bytes());
    aad.push(0);
    aad.extend_from_slice(name.as_bytes());
    aad
}

/// Seals `value` as the secret `name` of `account` (nonce, then ciphertext and tag; hex).
pub fn seal(
    key: &[u8; KEY_BYTES],
    nonce: [u8; NONCE_BYTES],
    account: &str,
    name: &str,
    value: &[u8],
) -> Option<String> {
    let cipher = XChaCha20Poly1305::new_from_slice(key).ok()?;
    let aad = aad(account, name);
    let sealed = cipher
        .encrypt(
            &XNonce::from(nonce),
            Payload {
                msg: value,
                aad: &aad,
            },
        )
        .ok()?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Some(hex::encode(out))
}

/// Opens a value [`seal`]ed for `account` and `name`; `None` if it was not (or was altered).
pub fn open(key: &[u8; KEY_BYTES], account: &str, name: &str, stored: &str) -> Option<Vec<u8>> {
    let bytes = hex::decode(stored).ok()?;
    if bytes.len() < NONCE_BYTES {
        return None;
    }
    let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
    let nonce: [u8; NONCE_BYTES] = nonce.try_into().ok()?;
    let cipher = XChaCha20Poly1305::new_from_slice(key).ok()?;
    let aad = aad(account, name);
    cipher
        .decrypt(
            &XNonce::from(nonce),
            Payload {
                msg: sealed,
                aad: &aad,
            },
        )
        .ok()
}

impl SecretStore {
    pub fn new(state: StateDir) -> SecretStore {
        SecretStore {
            state,
            lock: Mutex::new(()),
            known: Default::default(),
        }
    }

    /// The values this store has stored or opened, by account (shared: it grows as they do).
    pub fn known(&self) -> glovebox_redact::KnownSecrets {
        self.known.clone()
    }

    /// Opens every value `account` stores, so that they are known from the start.
    pub fn learn_all(&self, account: &str) {
        if let Ok(names) = self.names(account) {
            let _ = self.values(account, &names);
        }
    }

    fn key(&self, create: bool) -> Result<Option<[u8; KEY_BYTES]>, SecretError> {
        let path = self.state.secrets_key();
        let store = |e: String| SecretError::Store(format!("{}: {e}", path.display()));
        if !path.exists() {
            if !create {
                return Ok(None);
            }
            let key =
                glovebox_config::random_bytes::<KEY_BYTES>().map_err(|e| store(e.to_string()))?;
            glovebox_config::write_private_file(&path, &key).map_err(|e| store(e.to_string()))?;
        }
        let bytes = std::fs::read(&path).map_err(|e| store(e.to_string()))?;
        let key: [u8; KEY_BYTES] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| store(format!("the key must be {KEY_BYTES} bytes")))?;
        Ok(Some(key))
    }

    fn read(&self, account: &str) -> Result<File, SecretError> {
        let path = self.state.pack_secrets_file(account);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| SecretError::Store(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(File::default()),
            Err(e) => Err(SecretError::Store(format!("{}: {e}", path.display()))),
        }
    }

    fn write(&self, account: &str, file: &File) -> Result<(), SecretError> {
        let path = self.state.pack_secrets_file(account);
        let text =
            serde_json::to_string_pretty(file).map_err(|e| SecretError::Store(e.to_string()))?;
        if let Some(dir) = path.parent() {
            glovebox_config::create_private_dir(dir)
                .map_err(|e| SecretError::Store(e.to_string()))?;
        }
        glovebox_config::write_private_file(&path, text.as_bytes())
            .map_err(|e| SecretError::Store(e.to_string()))
    }

    /// Stores `value` as `name`; returns whether it changed anything.
    pub fn set(&self, account: &str, name: &str, value: &str) -> Result<bool, SecretError> {
        if !glovebox_config::mcp_json::is_secret_name(name) {
            return Err(SecretError::BadName);
        }
        if value.is_empty() || value.len() > MAX_SECRET_BYTES {
            return Err(SecretError::BadValue);
        }
        let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let key = self
            .key(true)?
            .ok_or_else(|| SecretError::Store("no key".into()))?;
        let mut file = self.read(account)?;
        if let Some(old) = file.secrets.get(name)
            && open(&key, account, name, old).as_deref() == Some(value.as_bytes())
        {
            return Ok(false);
        }
        if !file.secrets.contains_key(name) && file.secrets.len() >= MAX_SECRETS {
            return Err(SecretError::TooMany);
        }
        let nonce = glovebox_config::random_bytes::<NONCE_BYTES>()
            .map_err(|e| SecretError::Store(e.to_string()))?;
        let sealed = seal(&key, nonce, account, name, value.as_bytes())
            .ok_or_else(|| SecretError::Store("could not seal the value".into()))?;
        file.secrets.insert(name.to_owned(), sealed);
        self.write(account, &file)?;
        self.known.learn(account, [value.to_owned()]);
        Ok(true)
    }

    /// Removes `name`; returns whether it was there.
    pub fn remove(&self, account: &str, name: &str) -> Result<bool, SecretError> {
        let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = self.read(account)?;
        if file.secrets.remove(name).is_none() {
            return Ok(false);
        }
        self.write(account, &file)?;
        Ok(true)
    }

    /// The names of the account's secrets.
    pub fn names(&self, account: &str) -> Result<Vec<String>, SecretError> {
        Ok(self.read(account)?.secrets.into_keys().collect())
    }

    /// The values of those of `names` the account has (one that does not open is left out, and
    /// logged by name).
    pub fn values(
        &self,
        account: &str,
        names: &[String],
    ) -> Result<BTreeMap<String, String>, SecretError> {
        let file = self.read(account)?;
        let Some(key) = self.key(false)? else {
            return Ok(BTreeMap::new());
        };
        let mut out = BTreeMap::new();
        for name in names {
            let Some(stored) = file.secrets.get(name) else {
                continue;
            };
            match open(&key, account, name, stored).and_then(|v| String::from_utf8(v).ok()) {
                Some(v) => {
                    out.insert(name.clone(), v);
                }
                None => {
                    tracing::error!(%account, secret = %name, "a stored pack secret does not open; set it again")
                }
            }
        }
        self.known.learn(account, out.values().cloned());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_as_its_own_account_and_name() {
        let key = [4u8; KEY_BYTES];
        let sealed = seal(&key, [1u8; NONCE_BYTES], "alice", "github", b"ghp_token").unwrap();
        assert!(!sealed.contains(&hex::encode(b"ghp_token")));
        assert_eq!(
            open(&key, "alice", "github", &sealed).as_deref(),
            Some(&b"ghp_token"[..])
        );
        assert_eq!(open(&key, "bob", "github", &sealed), None);
        assert_eq!(open(&key, "alice", "jira", &sealed), None);
        assert_eq!(open(&[5u8; KEY_BYTES], "alice", "github", &sealed), None);
        let mut flipped = hex::decode(&sealed).unwrap();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(open(&key, "alice", "github", &hex::encode(flipped)), None);
        assert_eq!(open(&key, "alice", "github", "zz"), None);
        assert_eq!(open(&key, "alice", "github", "00"), None);
    }

    #[test]
    fn the_store_keeps_values_sealed_and_names_listed() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let store = SecretStore::new(state.clone());
        assert!(store.names("a").unwrap().is_empty());
        assert!(store.set("a", "tok", "s3cr3t-value").unwrap());
        assert!(!store.set("a", "tok", "s3cr3t-value").unwrap());
        assert!(store.set("a", "tok", "another-value").unwrap());
        assert_eq!(store.names("a").unwrap(), ["tok"]);
        let on_disk = std::fs::read_to_string(state.pack_secrets_file("a")).unwrap();
        assert!(!on_disk.contains("another-value") && !on_disk.contains("s3cr3t"));
        let values = store
            .values("a", &["tok".into(), "missing".into()])
            .unwrap();
        assert_eq!(values.get("tok").map(String::as_str), Some("another-value"));
        assert!(!values.contains_key("missing"));
        assert!(store.values("b", &["tok".into()]).unwrap().is_empty());
        use std::os::unix::fs::PermissionsExt;
        for f in [state.secrets_key(), state.pack_secrets_file("a")] {
            assert_eq!(
                std::fs::metadata(&f).unwrap().permissions().mode() & 0o077,
                0,
                "{f:?}"
            );
        }
        assert!(store.remove("a", "tok").unwrap());
        assert!(!store.remove("a", "tok").unwrap());
        for (name, value) in [("a b", "v"), ("", "v"), ("ok", "")] {
            assert!(store.set("a", name, value).is_err(), "{name:?} {value:?}");
        }
        assert!(matches!(
            store.set("a", "big", &"x".repeat(MAX_SECRET_BYTES + 1)),
            Err(SecretError::BadValue)
        ));
    }
}
