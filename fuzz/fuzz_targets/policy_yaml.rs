//! Fuzzes the policy file parser (`RawPolicy::parse`) and the compiler behind it: any text is
//! parsed or refused; a parsed file is compiled as a managed, an account and a project layer,
//! and a policy that compiles judges a path, a command and a tool without panicking.

#![no_main]

use glovebox_policy::{Domain, Inputs, Policy, RawPolicy, Source};
use libfuzzer_sys::fuzz_target;

const WORKDIR: &str = "/home/u/work";

fn judge(policy: &Policy) {
    for domain in [Domain::Read, Domain::Write, Domain::Delete] {
        for path in ["/home/u/work/a.txt", "/home/u/work/.env", "/etc/passwd"] {
            let _ = policy.decide_at(domain, path, Some(1_700_000_000));
        }
    }
    let _ = policy.decide_command_at("git status", WORKDIR, Some(1_700_000_000));
    let _ = policy.decide_tool_at("client__read_page", None);
}

fuzz_target!(|text: &str| {
    let Ok(raw) = RawPolicy::parse(text) else {
        return;
    };
    let empty = || Source::new("account", RawPolicy::default(), 0);
    let layers = [
        (vec![Source::new("managed", raw.clone(), 0)], empty(), None),
        (Vec::new(), Source::new("account", raw.clone(), 0), None),
        (Vec::new(), empty(), Some(Source::new("project", raw, 0))),
    ];
    for (managed, account, project) in layers {
        let inputs = Inputs {
            workdir: WORKDIR.to_owned(),
            protected: vec!["/home/u/.local/state/glovebox".to_owned()],
            roots: vec![WORKDIR.to_owned(), "/tmp".to_owned()],
            managed,
            account,
            project,
        };
        if let Ok(policy) = Policy::compile_layers(&inputs) {
            judge(&policy);
        }
    }
});
