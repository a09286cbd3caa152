//! What an approver connection may ask about and change for its own account, besides answering
//! asks: the `manage` frame's operations and the shapes of their results. The web console uses
//! them; so could any approver client. The account is always the connection's (its credential's),
//! never a field here.
//!
//! ```text
//! approver → server  {"type":"manage","request_id":"r1","op":{"name":"revoke_rule","section":"paths.write","kind":"allow","pattern":"/w/a.txt"}}
//! server → approver  {"type":"manage_result","request_id":"r1","ok":true,"result":{"changed":true,"summary":"…"}}
//! ```

use serde::{Deserialize, Serialize};

/// Longest rule pattern, explained subject or job id a `manage` frame may carry, in bytes.
pub const MAX_MANAGE_TEXT_BYTES: usize = 4096;
/// Most audit rows `recent_calls` returns.
pub const MAX_RECENT_CALLS: u32 = 200;

/// One operation on the approver's own account. Operations without fields are empty structs, not
/// unit variants, so that an unknown field (an `account`, say) is refused for them too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum ManageOp {
    /// The account at a glance: tools on or off, sandbox, confinement, activity, approvers,
    /// providers, the executor's boundary ([`Overview`]).
    Overview {},
    /// Every rule by layer ([`Rules`]).
    ListRules {},
    /// Adds a rule to the account's own file.
    AddRule {
        section: String,
        kind: String,
        pattern: String,
        /// RFC 3339 or a duration (`8h`, `7d`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires: Option<String>,
        /// Escape the pattern so that it matches exactly one path or command.
        #[serde(default)]
        exact: bool,
    },
    /// Removes one rule of the account's own file.
    RevokeRule {
        section: String,
        kind: String,
        pattern: String,
    },
    /// Turns the sandbox on or off; off needs `confirm`.
    SetSandbox {
        enabled: bool,
        #[serde(default)]
        confirm: bool,
    },
    /// Confines the account to its workdir, or not.
    SetConfinement { enabled: bool },
    /// What the account's policy decides for a subject, planned by its executor as a real call
    /// would be ([`Explained`]).
    Explain {
        /// `read`, `write`, `delete`, `exec` or `tool`.
        domain: String,
        /// A path (as an agent would name it), a command, or a tool name.
        subject: String,
        /// The working directory of an `exec` subject (default: the workdir).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
    },
    /// The account's last calls from the audit, newest first ([`Calls`]).
    RecentCalls {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
    },
    /// Every audit row of one of the account's calls ([`CallEvents`]).
    CallDetail { call_id: String },
    /// The account's jobs (what `exec_stat` returns).
    Jobs {},
    /// The last output of one of the account's jobs (what `exec_tail` returns).
    JobTail { job_id: String },
    /// Stops one of the account's jobs and everything it started (what `exec_kill` returns).
    JobKill { job_id: String },
    /// The account's tool packs, each with its state, error and trust ([`Packs`]). Listing
    /// starts packs not started yet and asks the approver about untrusted project packs, as any
    /// listing of the account's tools does.
    Packs {},
    /// Forgets the approver's refusals of the account's project packs and lists the packs again
    /// ([`Packs`]), which asks about them again.
    PacksAskAgain {},
    /// The client-tool providers connected for the account now ([`Providers`]).
    Providers {},
    /// The names of the account's pack secrets ([`Secrets`]); values are never returned.
    Secrets {},
    /// Stores a pack secret of the account (packs that use it restart) and lists the names.
    SetSecret { secret: String, value: SecretValue },
    /// Removes a pack secret of the account (packs that use it restart) and lists the names.
    RemoveSecret { secret: String },
    /// Adds (or replaces) a pack in the account's own `mcp.json`, checked as the pack host reads
    /// it; it starts on its next use ([`Changed`]).
    SetPack {
        pack: String,
        /// The pack's entry as `mcp.json` writes it: `command`, `args`, `env`, `network`, … or
        /// `url` and `headers`.
        definition: serde_json::Map<String, serde_json::Value>,
    },
    /// Removes a pack from the account's own `mcp.json`; its server stops ([`Changed`]).
    RemovePack { pack: String },
}

/// Largest pack definition a `set_pack` may carry, in bytes of JSON.
pub const MAX_PACK_DEFINITION_BYTES: usize = 16 * 1024;

/// A secret's value on its way in: serialized as the plain string, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretValue(pub String);

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

/// Largest pack secret value, in bytes (as the gate stores).
pub const MAX_SECRET_VALUE_BYTES: usize = 16 * 1024;

/// The answer to `secrets`, `set_secret` and `remove_secret`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secrets {
    pub names: Vec<String>,
    /// Whether the operation changed anything (absent for `secrets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<bool>,
    /// Packs restarted to take the change (they start with it on their next use).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarted: Vec<String>,
}

/// Whether `name` can name a pack secret: 1 to 64 of `[A-Za-z0-9._-]`.
fn is_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl ManageOp {
    /// The operation's name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            ManageOp::Overview {} => "overview",
            ManageOp::ListRules {} => "list_rules",
            ManageOp::AddRule { .. } => "add_rule",
            ManageOp::RevokeRule { .. } => "revoke_rule",
            ManageOp::SetSandbox { .. } => "set_sandbox",
            ManageOp::SetConfinement { .. } => "set_confinement",
            ManageOp::Explain { .. } => "explain",
            ManageOp::RecentCalls { .. } => "recent_calls",
            ManageOp::CallDetail { .. } => "call_detail",
            ManageOp::Jobs {} => "jobs",
            ManageOp::JobTail { .. } => "job_tail",
            ManageOp::JobKill { .. } => "job_kill",
            ManageOp::Packs {} => "packs",
            ManageOp::PacksAskAgain {} => "packs_ask_again",
            ManageOp::Providers {} => "providers",
            ManageOp::Secrets {} => "secrets",
            ManageOp::SetSecret { .. } => "set_secret",
            ManageOp::RemoveSecret { .. } => "remove_secret",
            ManageOp::SetPack { .. } => "set_pack",
            ManageOp::RemovePack { .. } => "remove_pack",
        }
    }

    /// Why the operation's fields are out of bounds, if they are.
    pub fn check(&self) -> Result<(), String> {
        let texts: Vec<(&str, &str)> = match self {
            ManageOp::AddRule {
                pattern, expires, ..
            } => {
                let mut t = vec![("pattern", pattern.as_str())];
                if let Some(e) = expires {
                    t.push(("expires", e.as_str()));
                }
                t
            }
            ManageOp::RevokeRule { pattern, .. } => vec![("pattern", pattern.as_str())],
            ManageOp::Explain { subject, cwd, .. } => {
                let mut t = vec![("subject", subject.as_str())];
                if let Some(c) = cwd {
                    t.push(("cwd", c.as_str()));
                }
                t
            }
            ManageOp::CallDetail { call_id } => vec![("call_id", call_id.as_str())],
            ManageOp::SetPack { pack, .. } | ManageOp::RemovePack { pack } => {
                vec![("pack", pack.as_str())]
            }
            ManageOp::JobTail { job_id } | ManageOp::JobKill { job_id } => {
                vec![("job_id", job_id.as_str())]
            }
            _ => Vec::new(),
        };
        for (field, text) in texts {
            if text.is_empty() {
                return Err(format!("{field} is empty"));
            }
            if text.len() > MAX_MANAGE_TEXT_BYTES {
                return Err(format!(
                    "{field} is longer than {MAX_MANAGE_TEXT_BYTES} bytes"
                ));
            }
        }
        if let ManageOp::SetSecret { secret, .. } | ManageOp::RemoveSecret { secret } = self
            && !is_secret_name(secret)
        {
            return Err("secret names are 1 to 64 of [A-Za-z0-9._-]".to_owned());
        }
        if let ManageOp::SetSecret { value, .. } = self
            && (value.0.is_empty() || value.0.len() > MAX_SECRET_VALUE_BYTES)
        {
            return Err(format!("a secret is 1 to {MAX_SECRET_VALUE_BYTES} bytes"));
        }
        if let ManageOp::SetPack { definition, .. } = self
            && serde_json::to_string(definition)
                .map_or(true, |d| d.len() > MAX_PACK_DEFINITION_BYTES)
        {
            return Err(format!(
                "a pack definition is at most {MAX_PACK_DEFINITION_BYTES} bytes"
            ));
        }
        if let ManageOp::RecentCalls { limit: Some(n) } = self
            && !(1..=MAX_RECENT_CALLS).contains(n)
        {
            return Err(format!("limit must be 1 to {MAX_RECENT_CALLS}"));
        }
        Ok(())
    }
}

/// The result of `overview`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub account: String,
    pub workdir: String,
    /// Whether the account's tools are switched on.
    pub enabled: bool,
    pub sandbox_enabled: bool,
    pub confined: bool,
    /// Whether a call of the account is in flight.
    pub active: bool,
    /// Approver connections of the account (this one included).
    pub approvers: usize,
    /// Set when the account's policy file does not compile (the last good one decides).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_error: String,
    pub policy_warnings: Vec<String>,
    /// The executor's OS boundary (`landlock=fully_enforced`), or `unreachable`.
    pub executor_sandbox: String,
    pub running_jobs: u32,
    /// Client-tool providers connected for the account.
    pub providers: Vec<Provider>,
}

/// A connected client-tool provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provider {
    pub connection_id: String,
    pub tools: Vec<String>,
}

/// The result of `providers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Providers {
    pub providers: Vec<Provider>,
}

/// The result of `packs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Packs {
    /// Whether the account's tools are on: while they are off, no pack is listed (or started).
    pub enabled: bool,
    pub packs: Vec<PackRow>,
    /// What is wrong with a whole file (`mcp.json` that does not parse), or why the pack host
    /// could not say.
    pub errors: Vec<String>,
}

/// One configured pack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackRow {
    pub name: String,
    /// `user` (the account's `mcp.json`) or `project` (the workdir's `.glovebox/mcp.json`).
    pub origin: String,
    /// `running`, `starting`, `failed`, `disabled` or `untrusted`.
    pub state: String,
    /// Why it is not running (what its server said included: untrusted text).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Its tools as agents see them (`<pack>__<tool>`).
    pub tools: Vec<String>,
    /// Project packs: `always`, `once`, `waiting` or `refused`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub trust: String,
}

/// The result of `list_rules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rules {
    pub workdir: String,
    pub sandbox_enabled: bool,
    pub confined: bool,
    pub caps: Vec<String>,
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    pub rules: Vec<Rule>,
}

/// One rule, as `glovebox policy list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// `floor`, `managed`, `account` or `project`.
    pub layer: String,
    pub section: String,
    pub kind: String,
    pub index: u32,
    pub pattern: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expires: String,
    pub expired: bool,
    /// Floor, managed and project rules cannot be changed from here.
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub file: String,
}

/// The result of a rule or switch change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Changed {
    pub changed: bool,
    pub summary: String,
}

/// The result of `explain`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explained {
    /// `allow`, `ask` or `deny`.
    pub verdict: String,
    /// The canonical subject judged.
    pub subject: String,
    pub layer: String,
    pub rule: String,
    pub reason: String,
    pub warnings: Vec<String>,
}

/// The result of `recent_calls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calls {
    pub calls: Vec<CallRow>,
}

/// One call, as the audit's `tool_calls` view has it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CallRow {
    pub call_id: String,
    pub client_call_id: String,
    pub started_at: String,
    pub tool: String,
    pub subject: String,
    pub verdict: String,
    pub rule: String,
    pub approval: String,
    pub outcome: String,
    pub error_code: String,
    pub duration_ms: u64,
}

/// The result of `call_detail`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallEvents {
    pub call_id: String,
    pub events: Vec<CallEvent>,
}

/// One audit row of a call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CallEvent {
    pub ts: String,
    pub source: String,
    pub kind: String,
    pub tool: String,
    pub subject: String,
    pub verdict: String,
    pub rule: String,
    pub reason: String,
    pub approval: String,
    pub outcome: String,
    pub error_code: String,
    pub duration_ms: u64,
    pub bytes: u64,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(v: serde_json::Value) -> Result<ManageOp, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn a_secret_is_checked_on_its_way_in_and_never_shown() {
        let set = |secret: &str, value: &str| {
            op(json!({"name": "set_secret", "secret": secret, "value": value}))
                .unwrap()
                .check()
        };
        assert_eq!(set("API_TOKEN", "v"), Ok(()));
        for bad in ["", "../x", "a b", "a/b", &"x".repeat(65)] {
            assert!(
                set(bad, "v").unwrap_err().contains("secret names"),
                "{bad:?}"
            );
        }
        assert!(set("T", "").unwrap_err().contains("1 to"));
        let huge = "x".repeat(MAX_SECRET_VALUE_BYTES + 1);
        assert!(set("T", &huge).unwrap_err().contains("1 to"));
        let removed = op(json!({"name": "remove_secret", "secret": "../etc"})).unwrap();
        assert!(removed.check().is_err());
        // No account can be named, and the value never shows in a log line.
        assert!(
            op(json!({"name": "set_secret", "secret": "T", "value": "v", "account": "b"})).is_err()
        );
        let parsed =
            op(json!({"name": "set_secret", "secret": "T", "value": "hunter2-value"})).unwrap();
        assert!(!format!("{parsed:?}").contains("hunter2-value"));
    }

    #[test]
    fn a_pack_definition_is_an_object_of_bounded_size() {
        let set = |definition: serde_json::Value| {
            op(json!({"name": "set_pack", "pack": "fs", "definition": definition}))
        };
        assert_eq!(
            set(json!({"command": "x", "args": ["y"]})).unwrap().check(),
            Ok(())
        );
        for not_an_object in [json!("x"), json!(["x"]), json!(null)] {
            assert!(set(not_an_object).is_err());
        }
        let huge = json!({"command": "x", "args": ["y".repeat(MAX_PACK_DEFINITION_BYTES)]});
        assert!(set(huge).unwrap().check().unwrap_err().contains("at most"));
        let unnamed = op(json!({"name": "remove_pack", "pack": ""})).unwrap();
        assert!(unnamed.check().unwrap_err().contains("pack is empty"));
        assert!(op(json!({"name": "remove_pack", "pack": "fs", "account": "b"})).is_err());
    }

    #[test]
    fn operations_parse_by_name_with_their_fields_only() {
        assert_eq!(
            op(json!({"name": "list_rules"})),
            Ok(ManageOp::ListRules {})
        );
        assert_eq!(
            op(
                json!({"name": "revoke_rule", "section": "paths.write", "kind": "allow", "pattern": "/w/a"})
            ),
            Ok(ManageOp::RevokeRule {
                section: "paths.write".into(),
                kind: "allow".into(),
                pattern: "/w/a".into()
            })
        );
        assert_eq!(
            op(json!({"name": "set_sandbox", "enabled": false})),
            Ok(ManageOp::SetSandbox {
                enabled: false,
                confirm: false
            })
        );
        // The account is the connection's: a frame cannot name one.
        for bad in [
            json!({"name": "list_rules", "account": "bob"}),
            json!({"name": "set_sandbox", "enabled": false, "account": "bob"}),
            json!({"name": "reset_rules"}),
            json!({"name": "add_rule", "section": "commands", "kind": "allow"}),
            json!({"section": "commands"}),
        ] {
            assert!(op(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn texts_are_bounded_and_present() {
        let long = "x".repeat(MAX_MANAGE_TEXT_BYTES + 1);
        let bad = [
            ManageOp::RevokeRule {
                section: "commands".into(),
                kind: "allow".into(),
                pattern: String::new(),
            },
            ManageOp::Explain {
                domain: "read".into(),
                subject: long.clone(),
                cwd: None,
            },
            ManageOp::JobKill { job_id: long },
            ManageOp::RecentCalls { limit: Some(0) },
            ManageOp::RecentCalls {
                limit: Some(MAX_RECENT_CALLS + 1),
            },
        ];
        for o in bad {
            assert!(o.check().is_err(), "{o:?}");
        }
        assert!(ManageOp::RecentCalls { limit: Some(50) }.check().is_ok());
        assert!(ManageOp::Overview {}.check().is_ok());
        assert!(ManageOp::Packs {}.check().is_ok());
    }

    #[test]
    fn the_listings_take_no_fields() {
        assert_eq!(op(json!({"name": "packs"})), Ok(ManageOp::Packs {}));
        assert_eq!(
            op(json!({"name": "packs_ask_again"})),
            Ok(ManageOp::PacksAskAgain {})
        );
        assert!(op(json!({"name": "packs_ask_again", "account": "bob"})).is_err());
        assert_eq!(op(json!({"name": "providers"})), Ok(ManageOp::Providers {}));
        assert!(op(json!({"name": "packs", "account": "bob"})).is_err());
        assert!(op(json!({"name": "providers", "pack": "x"})).is_err());
    }
}
