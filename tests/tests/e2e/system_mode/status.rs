//! `glovebox status --system`, run by whoever: the system service answers on its approve socket,
//! so each owner sees their own accounts and executors (and nobody else's), a user who owns none
//! sees only that it runs, and with the service stopped the command says so and fails.

use super::*;

/// `glovebox status --system` run by `user` (root when `None`): exit code and stdout.
fn status_as(s: &System, user: Option<&TestUser>) -> (Option<i32>, String) {
    let out = s.run_as_user(user, &["status"], None);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn each_owner_sees_only_their_own_accounts_in_status() {
    if !is_root() {
        return;
    }
    let mut s = System::start(Setup {
        accounts: &["a", "b"],
        ..Default::default()
    });
    let (a, b) = (s.account("a"), s.account("b"));
    let (code, out) = status_as(&s, Some(&a.owner));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("running as a system service"), "{out}");
    assert!(out.contains(&format!("WebSocket: {}", s.url)), "{out}");
    assert!(
        out.contains(&format!(
            "account:   a (yours): executor uid {}",
            a.run_as.uid
        )),
        "{out}"
    );
    assert!(!out.contains("account:   b"), "a's owner sees b: {out}");
    assert!(out.contains("health:    ok"), "{out}");

    let (code, out) = status_as(&s, Some(&b.owner));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("account:   b (yours)"), "{out}");
    assert!(!out.contains("account:   a"), "b's owner sees a: {out}");

    // a's run_as user owns nothing: up and healthy, no account, no executor uid.
    let (code, out) = status_as(&s, Some(&a.run_as));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("none owned by you"), "{out}");
    assert!(!out.contains("executor uid"), "{out}");

    // Stopped: said, and a failure.
    let mut child = s.child.take().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    child.wait().unwrap();
    let (code, out) = status_as(&s, None);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("not running as a system service"), "{out}");
}
