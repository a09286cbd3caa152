//! The web console end to end, in a real headless Chromium driven over the DevTools protocol
//! (`glovebox_e2e::browser`): the login link that `glovebox console` prints, approvals with the
//! diff in front of the person, "always" rules and their revocation, the sandbox switch's
//! two-click arm, withdrawn asks, and what pages and requests without the session (or from
//! another origin, or with the agent's token) get. Screenshots of the main screens go to
//! `target/console-screenshots/`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use glovebox_e2e::browser::{Browser, Page};
use glovebox_e2e::{Client, Glovebox, expect_error, expect_ok, http_request};
use serde_json::{Value, json};

/// The broker's HTTP origin, `http://127.0.0.1:<port>`.
pub(crate) fn origin(g: &Glovebox) -> String {
    let rest = g.url.strip_prefix("ws://").unwrap();
    format!("http://{}", rest.split('/').next().unwrap())
}

fn host(g: &Glovebox) -> String {
    origin(g).strip_prefix("http://").unwrap().to_owned()
}

/// Runs `glovebox console` and returns the login link it printed.
pub(crate) fn login_link(g: &Glovebox) -> String {
    let (code, stdout, stderr) = g.run_cli(&["console"]);
    assert_eq!(code, 0, "glovebox console failed: {stderr}");
    let url = stdout.trim().to_owned();
    assert!(
        url.starts_with(&format!("{}/console/login?t=", origin(g))),
        "{url}"
    );
    assert!(
        !url.contains(&g.token) && !url.contains(&g.credential_of(&g.account, "approver")),
        "the link carries no credential"
    );
    url
}

/// Logs the browser in with a fresh link and waits until the page is connected.
pub(crate) async fn signed_in(g: &Glovebox, browser: &Browser) -> Page {
    let mut page = browser.page().await;
    page.goto(&login_link(g)).await;
    page.wait_for(
        "the console to connect",
        &format!(
            "document.getElementById('who')?.textContent === {}",
            json!(format!("account {}", g.account))
        ),
    )
    .await;
    page
}

/// Waits until an ask for `call_id` is on screen and can be answered.
pub(crate) async fn ask_shown(page: &mut Page, call_id: &str) {
    page.wait_for(
        &format!("the ask of {call_id}, answerable"),
        &format!(
            "!document.getElementById('ask').hidden && \
             document.getElementById('ask-call').textContent === {} && \
             !document.getElementById('answer-once').disabled",
            json!(call_id)
        ),
    )
    .await;
}

pub(crate) async fn no_ask_shown(page: &mut Page) {
    page.wait_for(
        "no ask on screen",
        "document.getElementById('ask').hidden && !document.getElementById('no-ask').hidden",
    )
    .await;
}

pub(crate) async fn invoke(agent: &mut Client, call_id: &str, tool: &str, params: Value) {
    agent
        .send(json!({"type": "invoke", "call_id": call_id, "tool": tool, "params": params}))
        .await;
}

#[tokio::test]
async fn a_login_link_works_once_and_sets_a_strict_http_only_cookie() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let link = login_link(&g);
    let mut page = browser.page().await;
    page.goto(&link).await;
    page.wait_for(
        "the console to connect",
        "document.getElementById('who')?.textContent.startsWith('account ')",
    )
    .await;
    page.screenshot("approvals-idle").await;
    // the audit's newest signed checkpoint is in view
    let checkpoint = page.text("#audit-checkpoint").await;
    assert!(
        checkpoint.starts_with("audit checkpoint: ") && checkpoint.contains(" rows, digest "),
        "{checkpoint}"
    );
    let cookies = page.cookies(&format!("{}/console/", origin(&g))).await;
    let cookie = cookies
        .iter()
        .find(|c| c["name"] == "glovebox_console")
        .expect("a session cookie");
    assert_eq!(cookie["httpOnly"], true, "{cookie}");
    assert_eq!(cookie["sameSite"], "Strict", "{cookie}");
    assert_eq!(cookie["path"], "/console", "{cookie}");
    assert_eq!(
        page.eval("document.cookie").await,
        json!(""),
        "the page's script cannot read the session"
    );

    // a second use of the same link, in a browser without the session, gets nothing
    let other = Browser::launch();
    let mut second = other.page().await;
    second.goto(&link).await;
    let body = second.text("body").await;
    assert!(body.contains("unknown, used or expired"), "{body}");
    assert!(!body.contains(&g.account), "{body}");
    assert!(
        second
            .cookies(&format!("{}/console/", origin(&g)))
            .await
            .is_empty()
    );
    second.goto(&format!("{}/console/", origin(&g))).await;
    assert!(second.text("body").await.contains("not signed in"));
}

#[tokio::test]
async fn without_the_session_the_console_gives_nothing_and_the_agent_token_is_refused() {
    let g = Glovebox::start();
    let base = origin(&g);
    let h = host(&g);
    for path in [
        "/console/",
        "/console/app.js",
        "/console/app.css",
        "/console/ws",
    ] {
        let (status, headers, body) =
            http_request(&base, "GET", path, &[("Host", h.as_str())], "").await;
        assert_eq!(status, 401, "{path}: {body}");
        assert!(!body.contains(&g.account), "{path}: {body}");
        assert!(
            headers
                .iter()
                .any(|(k, v)| k == "content-security-policy" && v.contains("script-src 'self'")),
            "{path}: {headers:?}"
        );
    }
    // the agent's token opens nothing here, however it is presented
    let agent_token = g.token.clone();
    let bearer = format!("Bearer {agent_token}");
    let protocol = format!("glovebox.v1, bearer.{agent_token}");
    for (name, value) in [
        ("Authorization", bearer.as_str()),
        ("Sec-WebSocket-Protocol", protocol.as_str()),
    ] {
        for path in ["/console/", "/console/ws"] {
            let (status, _, body) = http_request(
                &base,
                "GET",
                path,
                &[("Host", h.as_str()), (name, value)],
                "",
            )
            .await;
            assert_eq!(status, 403, "{name} on {path}: {body}");
            assert!(!body.contains(&g.account), "{body}");
        }
    }
    // nor can an agent connection mint a login link
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "console_login"})).await;
    let reply = agent.next().await;
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["code"], "denied", "{reply}");
    // a rebinding DNS name is not the console's
    let (status, _, _) = http_request(
        &base,
        "GET",
        "/console/",
        &[("Host", "attacker.example")],
        "",
    )
    .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_cross_site_form_post_and_socket_are_refused() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let cookie = page
        .cookies(&format!("{}/console/", origin(&g)))
        .await
        .into_iter()
        .find(|c| c["name"] == "glovebox_console")
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .to_owned();

    // another site's page posts a form to the console's logout
    let form = format!(
        "data:text/html,<form id=f method=post action=\"{}/console/logout\"></form>",
        origin(&g)
    );
    page.goto(&form).await;
    page.forget_events();
    page.eval("document.getElementById('f').submit()").await;
    page.loaded().await;
    assert!(
        page.eval("location.href")
            .await
            .as_str()
            .unwrap()
            .ends_with("/console/logout"),
        "the form was posted"
    );
    let body = page.text("body").await;
    assert!(!body.contains("signed out"), "{body}");

    // even with the cookie attached, another origin is refused (not only by SameSite)
    let base = origin(&g);
    let h = host(&g);
    let with_cookie = format!("glovebox_console={cookie}");
    for evil in ["http://attacker.example", "null", "http://127.0.0.1:1"] {
        let (status, _, body) = http_request(
            &base,
            "POST",
            "/console/logout",
            &[
                ("Host", h.as_str()),
                ("Cookie", with_cookie.as_str()),
                ("Origin", evil),
            ],
            "",
        )
        .await;
        assert_eq!(status, 403, "{evil}: {body}");
        let (status, _, _) = http_request(
            &base,
            "GET",
            "/console/ws",
            &[
                ("Host", h.as_str()),
                ("Cookie", with_cookie.as_str()),
                ("Origin", evil),
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ],
            "",
        )
        .await;
        assert_eq!(status, 403, "a socket from {evil}");
    }
    let (status, _, _) = http_request(
        &base,
        "POST",
        "/console/logout",
        &[("Host", h.as_str()), ("Cookie", with_cookie.as_str())],
        "",
    )
    .await;
    assert_eq!(status, 403, "a POST without an Origin");

    // the session survived all of it
    page.goto(&format!("{base}/console/")).await;
    page.wait_for(
        "the console to connect again",
        "document.getElementById('who')?.textContent.startsWith('account ')",
    )
    .await;

    // and the console's own sign-out ends it
    page.forget_events();
    page.click(".signout button").await;
    page.loaded().await;
    page.wait_for(
        "signed out",
        "document.body && document.body.innerText.includes('signed out')",
    )
    .await;
    let (status, _, _) = http_request(
        &base,
        "GET",
        "/console/",
        &[("Host", h.as_str()), ("Cookie", with_cookie.as_str())],
        "",
    )
    .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_write_is_approved_after_its_diff_is_shown_and_a_denied_one_changes_nothing() {
    let g = Glovebox::start();
    std::fs::write(g.workdir.join("notes.txt"), "old line\nkept\n").unwrap();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;

    invoke(
        &mut agent,
        "w1",
        "file_write",
        json!({"path": "notes.txt", "content": "new line\nkept\n"}),
    )
    .await;
    ask_shown(&mut page, "w1").await;
    let removed = page.text("#ask-preview .line.del").await;
    let added = page.text("#ask-preview .line.add").await;
    assert_eq!(
        (removed.as_str(), added.as_str()),
        ("-old line", "+new line")
    );
    assert!(page.text("#ask-subjects").await.contains("notes.txt"));
    assert_eq!(page.text("#ask-tool").await, "file_write");
    page.screenshot("approvals-write-diff").await;
    page.click("#answer-once").await;
    expect_ok(&agent.result_for("w1").await);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("notes.txt")).unwrap(),
        "new line\nkept\n"
    );
    no_ask_shown(&mut page).await;

    // denied with the keyboard: the file stays as it was
    invoke(
        &mut agent,
        "w2",
        "file_write",
        json!({"path": "notes.txt", "content": "overwritten\n"}),
    )
    .await;
    ask_shown(&mut page, "w2").await;
    page.press('n').await;
    expect_error(&agent.result_for("w2").await, "denied");
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("notes.txt")).unwrap(),
        "new line\nkept\n"
    );
    no_ask_shown(&mut page).await;

    // the activity view has both calls from the audit
    page.click("#tab-activity").await;
    page.wait_for(
        "both calls in the activity view",
        "document.querySelectorAll('#calls tbody tr.outcome-ok, #calls tbody tr.outcome-denied').length >= 2",
    )
    .await;
    page.screenshot("activity").await;
}

#[tokio::test]
async fn a_cut_preview_is_allowed_only_by_a_second_click_after_it_is_said() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    let content = "x".repeat(300 * 1024);
    invoke(
        &mut agent,
        "big",
        "file_write",
        json!({"path": "big.txt", "content": content}),
    )
    .await;
    ask_shown(&mut page, "big").await;
    assert!(
        page.text("#ask-warning")
            .await
            .contains("the preview was cut at its limit")
    );
    let short = page.text("#ask-id").await;
    assert_eq!(short.len(), 4, "{short}");
    page.click("#answer-once").await;
    // the first click only says so, and the buttons wait their second again
    page.wait_for(
        "the cut preview to be said",
        "document.getElementById('ask-arming').textContent.includes('preview was cut') && \
         document.getElementById('answer-once').disabled === false && \
         !document.getElementById('ask').hidden",
    )
    .await;
    assert!(!g.workdir.join("big.txt").exists());
    page.click("#answer-once").await;
    expect_ok(&agent.result_for("big").await);
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("big.txt")).unwrap(),
        content
    );
    no_ask_shown(&mut page).await;
}

#[tokio::test]
async fn a_key_held_before_an_ask_appears_does_not_answer_it() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    invoke(
        &mut agent,
        "t1",
        "file_write",
        json!({"path": "typed.txt", "content": "x"}),
    )
    .await;
    // the ask is on screen but not yet armed: a key press right now does nothing
    page.wait_for(
        "the ask on screen",
        "document.getElementById('ask-call').textContent === 't1' && !document.getElementById('ask').hidden",
    )
    .await;
    page.press('y').await;
    assert!(
        page.eval("document.getElementById('answer-once').disabled")
            .await
            .as_bool()
            .unwrap(),
        "answers wait a moment after the ask appears"
    );
    ask_shown(&mut page, "t1").await;
    assert!(
        !g.workdir.join("typed.txt").exists(),
        "the early key press did not answer"
    );
    page.click("#answer-deny").await;
    expect_error(&agent.result_for("t1").await, "denied");
}

#[tokio::test]
async fn hostile_names_and_contents_are_shown_as_text_and_never_run() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    let name = "<img src=x onerror=\"window.__pwned=1\">.txt";
    let content = "<script>window.__pwned=2</script>\n<svg onload=\"window.__pwned=3\"></svg>\n";
    invoke(
        &mut agent,
        "x1",
        "file_write",
        json!({"path": name, "content": content}),
    )
    .await;
    ask_shown(&mut page, "x1").await;
    assert!(page.text("#ask-subjects").await.contains(name));
    assert!(
        page.text("#ask-preview")
            .await
            .contains("<script>window.__pwned=2</script>")
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#ask img, #ask script, #ask svg').length")
            .await,
        json!(0),
        "no markup from the agent became elements"
    );
    page.screenshot("approvals-hostile").await;
    page.click("#answer-once").await;
    expect_ok(&agent.result_for("x1").await);

    // and again where the audit shows it
    page.click("#tab-activity").await;
    page.wait_for(
        "the call in the activity view",
        &format!(
            "[...document.querySelectorAll('#calls td.subject')].some(td => td.textContent.includes({}))",
            json!(name)
        ),
    )
    .await;
    page.click("#calls tbody tr button").await;
    page.wait_for(
        "the call's detail",
        "!document.getElementById('call-detail').hidden && document.querySelectorAll('#call-events tbody tr').length > 0",
    )
    .await;
    assert_eq!(
        page.eval("document.querySelectorAll('main img, main script, main svg').length")
            .await,
        json!(0)
    );
    assert_eq!(
        page.eval("typeof window.__pwned").await,
        json!("undefined"),
        "no script from the agent ran"
    );
}

#[tokio::test]
async fn always_adds_a_rule_that_the_rule_list_shows_and_revoke_removes() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    invoke(
        &mut agent,
        "a1",
        "file_write",
        json!({"path": "always.txt", "content": "1"}),
    )
    .await;
    ask_shown(&mut page, "a1").await;
    page.click("#answer-always").await;
    expect_ok(&agent.result_for("a1").await);

    page.click("#tab-rules").await;
    let has_rule = "[...document.querySelectorAll('#rules tbody tr')].some(tr => \
                    tr.querySelector('code.pattern')?.textContent.includes('always.txt'))";
    page.wait_for("the always rule in the list", has_rule).await;
    page.screenshot("rules").await;
    assert!(
        std::fs::read_to_string(g.permissions_file())
            .unwrap()
            .contains("always.txt")
    );
    // the rule decides now: no ask
    expect_ok(
        &agent
            .invoke(
                "a2",
                "file_write",
                json!({"path": "always.txt", "content": "2"}),
            )
            .await,
    );

    // the Revoke button on that rule's row (the account file has others)
    // (the list is redrawn when the account's rules or calls change, so the row is marked in
    // the same step that finds it, and again if a redraw took the mark away)
    let mark = "(() => { const tr = [...document.querySelectorAll('#rules tbody tr')].find(tr => \
                tr.querySelector('code.pattern')?.textContent.includes('always.txt')); \
                const b = tr?.querySelector('button.revoke'); if (b) b.id = 'revoke-always'; \
                return !!b; })()";
    for _ in 0..20 {
        page.wait_for("the always rule's revoke button", mark).await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if page.visible("#revoke-always").await {
            break;
        }
    }
    page.click("#revoke-always").await;
    page.wait_for("the rule gone", &format!("!({has_rule})"))
        .await;
    assert!(
        !std::fs::read_to_string(g.permissions_file())
            .unwrap()
            .contains("always.txt")
    );
    // and it asks again
    invoke(
        &mut agent,
        "a3",
        "file_write",
        json!({"path": "always.txt", "content": "3"}),
    )
    .await;
    ask_shown(&mut page, "a3").await;
    page.click("#answer-deny").await;
    expect_error(&agent.result_for("a3").await, "denied");
}

#[tokio::test]
async fn the_sandbox_switch_needs_two_clicks_within_five_seconds_and_disarms() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    page.click("#tab-account").await;
    page.wait_for(
        "the sandbox switch",
        "document.getElementById('sandbox-toggle').textContent.includes('Turn the sandbox off')",
    )
    .await;
    let armed = "document.getElementById('sandbox-toggle').classList.contains('armed')";

    // one click arms; left alone it disarms after five seconds and nothing changed
    page.click("#sandbox-toggle").await;
    let armed_at = Instant::now();
    assert_eq!(page.eval(armed).await, json!(true));
    page.screenshot("account-sandbox-armed").await;
    page.wait_for("the switch to disarm", &format!("!({armed})"))
        .await;
    let after = armed_at.elapsed();
    assert!(
        after >= Duration::from_millis(4500),
        "disarmed after {after:?}"
    );
    assert!(!page.visible("#sandbox-banner").await);
    let mut agent = g.connect("agent").await;
    let check = |id: &str| {
        json!({"type": "invoke", "call_id": id, "tool": "file_write",
                                  "params": {"path": "free.txt", "content": "x"}})
    };
    agent.send(check("s1")).await;
    ask_shown(&mut page, "s1").await;
    page.click("#answer-deny").await;
    expect_error(&agent.result_for("s1").await, "denied");

    // two clicks within the time turn it off: the banner shows, and calls no longer ask
    page.click("#tab-account").await;
    page.click("#sandbox-toggle").await;
    tokio::time::sleep(Duration::from_millis(500)).await; // a second click, not a double click
    page.click("#sandbox-toggle").await;
    page.wait_for(
        "the red banner",
        "!document.getElementById('sandbox-banner').hidden",
    )
    .await;
    page.eval("window.scrollTo(0, document.documentElement.scrollHeight)")
        .await;
    assert_eq!(
        page.eval(
            "(() => { const r = document.getElementById('sandbox-banner').getBoundingClientRect(); \
             return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight; })()"
        )
        .await,
        json!(true),
        "the banner stays in view however the page is scrolled"
    );
    assert_eq!(
        page.eval("window.scrollY > 0").await,
        json!(true),
        "the page is taller than the window, so scrolling moved it"
    );
    page.screenshot("account-sandbox-off").await;
    expect_ok(
        &agent
            .invoke(
                "s2",
                "file_write",
                json!({"path": "free.txt", "content": "x"}),
            )
            .await,
    );

    // one click turns it back on
    page.click("#sandbox-toggle").await;
    page.wait_for(
        "the banner gone",
        "document.getElementById('sandbox-banner').hidden",
    )
    .await;
    agent.send(check("s3")).await;
    ask_shown(&mut page, "s3").await;
    page.click("#answer-deny").await;
    expect_error(&agent.result_for("s3").await, "denied");
}

#[tokio::test]
async fn an_ask_withdrawn_by_the_agent_disappears() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    invoke(
        &mut agent,
        "c1",
        "file_write",
        json!({"path": "gone.txt", "content": "x"}),
    )
    .await;
    ask_shown(&mut page, "c1").await;
    agent.send(json!({"type": "cancel", "call_id": "c1"})).await;
    no_ask_shown(&mut page).await;
    assert!(page.text("#toast").await.contains("withdrawn"));
    assert!(!g.workdir.join("gone.txt").exists());
}

#[tokio::test]
async fn the_console_is_usable_in_a_narrow_window() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    page.viewport(420, 800).await;
    let mut agent = g.connect("agent").await;
    invoke(
        &mut agent,
        "n1",
        "file_write",
        json!({"path": "narrow.txt", "content": "x"}),
    )
    .await;
    ask_shown(&mut page, "n1").await;
    assert_eq!(
        page.eval("document.documentElement.scrollWidth <= window.innerWidth")
            .await,
        json!(true),
        "nothing sticks out sideways"
    );
    page.screenshot("approvals-narrow").await;
    page.click("#answer-once").await;
    expect_ok(&agent.result_for("n1").await);
}

#[tokio::test]
async fn a_rule_added_after_its_explain_preview_decides_the_next_call() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    page.click("#tab-rules").await;
    page.wait_for(
        "the rule list",
        "document.querySelectorAll('#rules tbody tr').length > 0",
    )
    .await;
    page.type_into("#rule-pattern", "./added.txt").await;
    let preview = page
        .wait_for(
            "the explain preview",
            "document.getElementById('rule-preview').textContent",
        )
        .await;
    let preview = preview.as_str().unwrap();
    assert!(
        preview.contains("added.txt") && preview.contains("ASK"),
        "{preview}"
    );
    page.click("#add-rule button[type=submit]").await;
    page.wait_for(
        "the rule added",
        "document.getElementById('rule-result').textContent.startsWith('Added')",
    )
    .await;
    assert!(
        std::fs::read_to_string(g.permissions_file())
            .unwrap()
            .contains("added.txt")
    );
    // the rule decides: no ask, although an approver is connected
    let mut agent = g.connect("agent").await;
    expect_ok(
        &agent
            .invoke(
                "r1",
                "file_write",
                json!({"path": "added.txt", "content": "x"}),
            )
            .await,
    );
    page.type_into("#rule-pattern", "./added.txt").await;
    page.wait_for(
        "the preview to say allow",
        "document.getElementById('rule-preview').textContent.includes('ALLOW')",
    )
    .await;
}

#[tokio::test]
async fn the_tools_switch_turns_an_accounts_tools_off_and_on_for_its_agents() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    std::fs::write(g.workdir.join("a.txt"), "x").unwrap();
    let mut agent = g.connect("agent").await;
    expect_ok(
        &agent
            .invoke("r1", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    page.click("#tab-account").await;
    page.wait_for(
        "the tools switch",
        "document.getElementById('tools-toggle').textContent === 'Switch tools off'",
    )
    .await;
    page.click("#tools-toggle").await;
    page.wait_for(
        "the switch to show tools off",
        "document.getElementById('tools-toggle').textContent === 'Switch tools on' && \
         document.getElementById('tools-state').textContent.startsWith('Off')",
    )
    .await;
    // The gate refuses every call of the account's agents, including connections made before.
    let r = agent
        .invoke("r2", "file_read", json!({"path": "a.txt"}))
        .await;
    assert_eq!(r["ok"], false, "{r}");
    page.click("#tools-toggle").await;
    page.wait_for(
        "the switch to show tools on",
        "document.getElementById('tools-toggle').textContent === 'Switch tools off'",
    )
    .await;
    expect_ok(
        &agent
            .invoke("r3", "file_read", json!({"path": "a.txt"}))
            .await,
    );
}

#[tokio::test]
async fn confinement_switched_on_in_the_console_denies_what_would_ask_outside_the_workdir() {
    let g = Glovebox::with_extra_roots(&["elsewhere"]);
    let outside = g.root().join("elsewhere/out.txt");
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    let write = |id: &str| {
        json!({"type": "invoke", "call_id": id, "tool": "file_write",
               "params": {"path": outside, "content": "x"}})
    };
    // Unconfined, a write outside the workdir asks.
    agent.send(write("w1")).await;
    ask_shown(&mut page, "w1").await;
    page.click("#answer-deny").await;
    expect_error(&agent.result_for("w1").await, "denied");
    page.click("#tab-account").await;
    page.wait_for(
        "the confinement switch",
        "document.getElementById('confine-toggle').textContent === 'Confine to the workdir'",
    )
    .await;
    page.click("#confine-toggle").await;
    page.wait_for(
        "confinement on",
        "document.getElementById('confine-state').textContent.startsWith('On')",
    )
    .await;
    // Confined, it is denied without asking anyone; inside the workdir still asks.
    let r = agent
        .invoke("w2", "file_write", json!({"path": outside, "content": "x"}))
        .await;
    let e = expect_error(&r, "denied");
    assert!(e.to_string().contains("workdir"), "{e}");
    assert!(!outside.exists());
    agent
        .send(
            json!({"type": "invoke", "call_id": "w3", "tool": "file_write",
                     "params": {"path": "in.txt", "content": "x"}}),
        )
        .await;
    ask_shown(&mut page, "w3").await;
    page.click("#answer-once").await;
    expect_ok(&agent.result_for("w3").await);
}

#[tokio::test]
async fn a_job_is_listed_tailed_and_killed_from_the_console() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    agent
        .send(
            json!({"type": "invoke", "call_id": "j1", "tool": "exec_run",
                     "params": {"command": "echo started-marker; sleep 600"}}),
        )
        .await;
    ask_shown(&mut page, "j1").await;
    page.click("#answer-once").await;
    let job = expect_ok(&agent.result_for("j1").await)["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    page.click("#tab-account").await;
    page.click("#jobs-refresh").await;
    let kill_button = format!("[aria-label={}]", json!(format!("Kill job {job}")));
    let tail_button = format!("[aria-label={}]", json!(format!("Output of job {job}")));
    page.wait_for(
        "the running job in the table",
        &format!("document.querySelector({}) !== null", json!(kill_button)),
    )
    .await;
    page.click(&tail_button).await;
    page.wait_for(
        "the job's output",
        "document.getElementById('job-tail').textContent.includes('started-marker')",
    )
    .await;
    page.click(&kill_button).await;
    page.wait_for(
        "the job no longer running",
        &format!(
            "document.querySelector({}) === null && \
             document.getElementById('jobs').textContent.includes({})",
            json!(kill_button),
            json!(job)
        ),
    )
    .await;
    let status = agent.wait_job(&job).await;
    assert_ne!(status["state"], "running", "{status}");
}

#[tokio::test]
async fn a_failing_audit_is_shown_in_a_banner_until_it_recovers() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    assert!(!page.visible("#audit-banner").await);
    std::fs::write(g.workdir.join("a.txt"), "x").unwrap();
    let mut agent = g.connect("agent").await;
    let full = g.fail_audit_writes().await;
    let r = agent
        .invoke("lost", "file_read", json!({"path": "a.txt"}))
        .await;
    assert_eq!(r["ok"], false, "{r}");
    page.wait_for(
        "the audit banner",
        "!document.getElementById('audit-banner').hidden && \
         document.getElementById('audit-banner').textContent.includes('every call is refused')",
    )
    .await;
    full.lift().await;
    expect_ok(
        &agent
            .invoke("after", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    page.wait_for(
        "the audit banner to go",
        "document.getElementById('audit-banner').hidden",
    )
    .await;
}
