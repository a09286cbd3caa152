//! The approve socket under a flood: a local user who owns no account opens hundreds of silent
//! connections on it. The broker counts them per uid (its oldest shed for its next) and closes
//! what sends no request within the header deadline, while an owner's `glovebox approve
//! --system` connects and works throughout.

use super::*;

#[tokio::test]
async fn a_users_silent_connections_on_the_approve_socket_never_starve_an_owner() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a"],
        ..Default::default()
    });
    let a = s.account("a");
    let approve_sock = s.runtime.join("broker/approve.sock").display().to_string();
    // a's run_as user owns no account: 300 silent connections, held 3 s
    let (uid, gid) = (a.run_as.uid, a.run_as.gid);
    let flood = {
        let s_sock = approve_sock.clone();
        let attack = glovebox_e2e::sibling_bin("glovebox-attack");
        std::thread::spawn(move || {
            let out = Command::new(attack)
                .args(["hold", "300", "3", &s_sock])
                .uid(uid)
                .gid(gid)
                .output()
                .unwrap();
            attempts(&String::from_utf8_lossy(&out.stdout))
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    // while it holds them, the owner's approver connects
    let mut approver = s.approve(&a.owner, Some("a"));
    approver.expect("approving for account a");
    approver.expect("waiting for asks");
    let tried = flood.join().unwrap();
    let held = tried
        .iter()
        .find(|t| t.attack == "hold connections")
        .unwrap();
    assert!(held.detail.starts_with("300 held"), "{held:?}");
    let kept = tried
        .iter()
        .find(|t| t.attack == "keep connections open")
        .unwrap();
    let closed: usize = kept
        .detail
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap();
    // at most 16 of one uid's silent connections stay; the others were shed
    assert!(closed >= 300 - 16, "{kept:?}");

    // silent connections within the cap are closed at the header deadline (10 s)
    let tried = s.attack_as(uid, gid, &["hold", "8", "12", &approve_sock]);
    let kept = tried
        .iter()
        .find(|t| t.attack == "keep connections open")
        .unwrap();
    assert_eq!(kept.detail, "8 of 8 closed by the server", "{kept:?}");
}
