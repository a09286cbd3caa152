//! The web console in system mode: `glovebox console --system`, run by an account's owner, mints
//! a login link over the approve socket — the session stands for that OS user, with no token
//! read — and nobody else's run of it does (root, the administrator, may open an account it
//! names, audited); the link works once; the session is an approver
//! connection of the owner's account; and it ends, with the owner's open console page and
//! `glovebox approve`, when the owner no longer owns the account.

use super::accounts::{add, as_root};
use super::*;
use glovebox_e2e::http_request;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// `glovebox console --system [--account ID]` run by `user`.
fn console_as(s: &System, user: &TestUser, account: Option<&str>) -> std::process::Output {
    s.run_as_user(Some(user), &["console"], account)
}

fn origin(s: &System) -> String {
    let authority = s.url.trim_start_matches("ws://").split('/').next().unwrap();
    format!("http://{authority}")
}

/// The owner's login link, once the broker knows the owner (accounts added at run time reach it
/// a moment after `account add` returns).
fn link_for(s: &System, owner: &TestUser) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let out = console_as(s, owner, None);
        if out.status.success() {
            return String::from_utf8(out.stdout).unwrap().trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no console link for uid {}: {}",
            owner.uid,
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Uses a login link: its status and the session cookie's value, if one was set.
async fn redeem(s: &System, link: &str) -> (u16, Option<String>) {
    let base = origin(s);
    let path = link.strip_prefix(&base).expect("a link to the broker");
    let host = base.trim_start_matches("http://");
    let (status, headers, _) = http_request(&base, "GET", path, &[("Host", host)], "").await;
    let cookie = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .and_then(|(_, v)| v.split(';').next())
        .and_then(|pair| pair.strip_prefix("glovebox_console="))
        .map(str::to_owned);
    (status, cookie)
}

/// The console page's status with this session cookie.
async fn page_status(s: &System, cookie: &str) -> u16 {
    let base = origin(s);
    let host = base.trim_start_matches("http://");
    let with_cookie = format!("glovebox_console={cookie}");
    let (status, _, _) = http_request(
        &base,
        "GET",
        "/console/",
        &[("Host", host), ("Cookie", with_cookie.as_str())],
        "",
    )
    .await;
    status
}

/// The session's WebSocket, past hello.
async fn session_socket(s: &System, cookie: &str) -> Client {
    let base = origin(s);
    let url = format!("{}/console/ws", base.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert(
        "cookie",
        format!("glovebox_console={cookie}").parse().unwrap(),
    );
    headers.insert("origin", base.parse().unwrap());
    let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let mut client = Client {
        socket,
        hello_ok: serde_json::Value::Null,
    };
    client
        .send(json!({"type": "hello", "role": "approver"}))
        .await;
    let hello_ok = client.next().await;
    assert_eq!(hello_ok["type"], "hello_ok", "{hello_ok}");
    client.hello_ok = hello_ok;
    client
}

#[tokio::test]
async fn an_owner_signs_in_to_the_console_as_themselves_and_nobody_else_can() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a", "b"],
        ..Default::default()
    });
    let (a, b) = (s.account("a"), s.account("b"));

    // b's owner cannot make a link for a, root owns nothing, and both refusals are audited.
    let out = console_as(&s, &b.owner, Some("a"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not the owner of account \"a\""), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).trim().is_empty());
    let out = s.run_as_user(None, &["console"], None);
    assert!(!out.status.success(), "root owns no account");
    let reasons = s.audit_reasons().await;
    let wanted = format!("peer uid {}", b.owner.uid);
    assert!(reasons.iter().any(|r| r.contains(&wanted)), "{reasons:?}");

    // a's owner: a link with no credential in it, that works once.
    let link = link_for(&s, &a.owner);
    assert!(
        link.starts_with(&format!("{}/console/login?t=", origin(&s))),
        "{link}"
    );
    assert!(!link.contains(&a.token), "the link carries no credential");
    let (status, cookie) = redeem(&s, &link).await;
    assert_eq!(status, 303);
    let cookie = cookie.expect("a session cookie");
    assert_eq!(redeem(&s, &link).await, (401, None), "a second use fails");
    assert_eq!(page_status(&s, &cookie).await, 200);
    assert_eq!(page_status(&s, "not-a-session").await, 401);
    assert_eq!(session_socket(&s, &cookie).await.hello_ok["account"], "a");

    // Root, the administrator, opens an account it names (never one chosen for it), audited;
    // an agent token stays the owner's.
    let out = s.run_as_user(None, &["console"], Some("b"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let link = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let (status, cookie) = redeem(&s, &link).await;
    assert_eq!(status, 303);
    let cookie = cookie.expect("a session cookie");
    assert_eq!(session_socket(&s, &cookie).await.hello_ok["account"], "b");
    let reasons = s.audit_reasons().await;
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("peer uid 0 (root) opened the account as its approver")),
        "{reasons:?}"
    );
    let out = s.run_as_user(None, &["token", "show"], Some("b"));
    assert!(!out.status.success(), "root reads no agent token here");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&b.token));
}

#[tokio::test]
async fn a_console_session_ends_when_its_owner_no_longer_owns_the_account() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["base"],
        ..Default::default()
    });
    let c = add(&s, "c");
    let (status, cookie) = redeem(&s, &link_for(&s, &c.owner)).await;
    assert_eq!(status, 303);
    let cookie = cookie.expect("a session cookie");
    assert_eq!(page_status(&s, &cookie).await, 200);
    let mut console = session_socket(&s, &cookie).await;
    assert_eq!(console.hello_ok["account"], "c");
    let mut approver = s.approve(&c.owner, Some("c"));
    approver.expect("approving for account c");

    let out = as_root(&s, &["account", "remove", c.id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + WAIT;
    while page_status(&s, &cookie).await != 401 {
        assert!(
            Instant::now() < deadline,
            "the session outlived the account's removal"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The open console page and the owner's `approve` are closed, not left answering asks.
    loop {
        match console.next_message().await {
            tokio_tungstenite::tungstenite::Message::Close(_) => break,
            _ => continue,
        }
    }
    approver.expect("no more asks");
}
