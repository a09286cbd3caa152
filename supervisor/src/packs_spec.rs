//! The child spec of an account's pack host: `glovebox pack-host`, as the account's executor
//! identity (its `run_as` user, with that user's `HOME`), with its socket beside the executor's
//! and its keys (the account's pack ticket key, its socket's peers, its audit key) on stdin. In
//! system mode its packs' homes are in the directory `up` made for it (`--pack-home`), since the
//! `run_as` user may have no home of its own.

use glovebox_config::StateDir;

use super::Spec;
use crate::identity::Identity;

/// The pack host of account `a`, handed `handover` (its keys) on stdin.
pub(super) fn packs_spec(
    state: &StateDir,
    a: &glovebox_config::Account,
    identity: &Identity,
    protected: &str,
    pack_home: Option<std::path::PathBuf>,
    handover: String,
) -> Spec {
    let mut extra: Vec<String> = a
        .pack_env
        .iter()
        .flat_map(|name| ["--pack-env".to_owned(), name.clone()])
        .collect();
    if let Some(home) = pack_home {
        extra.extend(["--pack-home".to_owned(), home.display().to_string()]);
    }
    super::account_service_spec(
        super::AccountService {
            name: "packs",
            command: "pack-host",
            socket: &state.packs_socket(&a.id),
            extra,
        },
        state,
        a,
        identity,
        protected,
        handover,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_host_runs_as_its_accounts_executor_user_beside_its_socket() {
        let state = StateDir::new(std::path::Path::new("/s"));
        let account = glovebox_config::Account {
            id: glovebox_config::AccountId::parse("a").unwrap(),
            workdir: "/w".into(),
            roots: vec!["/w".into(), "/r".into()],
            run_as: Some("alice".into()),
            owner: None,
            job_env: vec![],
            pack_env: Vec::new(),
            sandbox: Default::default(),
            enabled: true,
            token_hashes: vec![],
            approver_token_hashes: vec![],
        };
        let alice = Identity {
            name: "alice".into(),
            uid: 1001,
            gid: 1001,
            home: "/home/alice".into(),
            drops: true,
        };
        let spec = packs_spec(&state, &account, &alice, "/s", None, "keys\n".into());
        assert_eq!(spec.name, "packs[a]");
        assert_eq!(spec.run_as, Some((1001, 1001)));
        assert_eq!(spec.stdin_line.as_deref(), Some("keys\n"));
        assert!(
            spec.env
                .contains(&("HOME".to_owned(), "/home/alice".to_owned()))
        );
        let joined = spec.args.join(" ");
        assert!(
            joined.starts_with(
                "pack-host --account a --workdir /w --socket /s/run/exec-a/packs.sock"
            ),
            "{joined}"
        );
        assert!(joined.contains("--root /w --root /r"), "{joined}");
        // The account's walls: its jobs' network and each private /tmp's size.
        assert!(
            joined.ends_with(
                "--network loopback --tmp-size 1073741824 --processes 512 \
                 --memory-bytes 4294967296 --cpu-seconds 3600"
            ),
            "{joined}"
        );
        let me = Identity {
            drops: false,
            ..alice
        };
        let spec = packs_spec(&state, &account, &me, "/s", None, "k".into());
        assert_eq!((spec.run_as, spec.env.len()), (None, 0));
        assert!(!spec.args.iter().any(|a| a == "--pack-home"));
        // System mode: the pack homes `up` made beside the state.
        let spec = packs_spec(
            &state,
            &account,
            &me,
            "/s",
            Some(state.pack_home_dir("a")),
            "k".into(),
        );
        assert!(
            spec.args.join(" ").ends_with("--pack-home /s-packs/a"),
            "{:?}",
            spec.args
        );
    }
}
