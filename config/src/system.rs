//! System mode's fixed names and default paths, shared by the code and `deploy/` (the package's
//! sysusers.d and tmpfiles.d entries are checked against these by `cli/tests/cli/deploy.rs`).

/// The OS user the gate runs as in system mode: it owns the state directory, keys, audit and policy.
pub const GATE_USER: &str = "glovebox-gate";
/// The OS user the broker runs as in system mode: it reads nothing of the state but what it is handed.
pub const BROKER_USER: &str = "glovebox-broker";
/// The group that may read `audit.db` in system mode (administrators who query it with `sqlite3`).
pub const AUDIT_GROUP: &str = "glovebox-audit";

/// `glovebox.yaml` in system mode.
pub const CONFIG_FILE: &str = "/etc/glovebox/glovebox.yaml";
/// The administrator's managed policy files (`*.yaml`), root-owned.
pub const POLICY_DIR: &str = "/etc/glovebox/policy.d";
/// The state directory in system mode.
pub const STATE_DIR: &str = "/var/lib/glovebox";
/// Sockets of a running system-mode glovebox.
pub const RUNTIME_DIR: &str = "/run/glovebox";

/// Why an account is refused in system mode when its agent user (`run_as`) is its approver
/// (`owner`), compared by uid: the agent's jobs would hold the owner's uid, and with it the
/// approve socket (its asks, its token). `None` when they are different users.
pub fn own_approver_refusal(
    run_as: &str,
    run_as_uid: u32,
    owner: &str,
    owner_uid: u32,
) -> Option<String> {
    (run_as_uid == owner_uid).then(|| {
        format!(
            "run_as {run_as:?} and owner {owner:?} are the same user: in system mode the agent's \
             user must not be the one who approves its asks"
        )
    })
}
