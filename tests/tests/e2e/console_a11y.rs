//! The console's accessibility, checked in a real browser on each main screen: axe-core (pinned
//! in `tests/package.json`, put into the page over DevTools by the test, never served by the
//! console) finds no serious or critical violation (names and labels, contrast, roles), and Tab
//! reaches every control shown, in the order the page shows them — at 1280×800 and in a narrow
//! window.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::browser::{Browser, Page};
use glovebox_e2e::{Glovebox, Options, sibling_bin};
use serde_json::json;

use crate::console::{ask_shown, invoke, signed_in};

/// Checks the screen as it is now: no serious or critical axe violation, and Tab goes through
/// every control shown, in document order.
async fn check_screen(page: &mut Page, screen: &str) {
    // A fading toast is half transparent for its 0.2 s: judge the screen as it settles.
    page.wait_for(
        &format!("{screen}: transitions to end"),
        "document.getAnimations().every(a => a.playState !== 'running')",
    )
    .await;
    let violations = page.accessibility_violations().await;
    assert!(
        violations.is_empty(),
        "{screen}: accessibility violations:\n{}",
        violations.join("\n")
    );
    let (reached, shown) = page.tab_order().await;
    assert!(shown.len() > 3, "{screen}: hardly any controls: {shown:?}");
    assert_eq!(
        reached, shown,
        "{screen}: Tab reaches (left) differs from the controls shown in order (right)"
    );
}

async fn open(page: &mut Page, tab: &str, ready: &str) {
    page.click(&format!("#tab-{tab}")).await;
    page.wait_for(&format!("the {tab} panel"), ready).await;
}

#[tokio::test]
async fn every_main_screen_passes_axe_and_tab_reaches_every_control_in_order() {
    let pack = sibling_bin("glovebox-fake-pack");
    let servers = json!({"mcpServers": {
        "good": {"command": pack, "args": ["good"]},
        "loud": {"command": pack, "args": ["shout"]},
    }});
    let g = Glovebox::start_with(Options {
        accounts: vec![("test".into(), true)],
        mcp_json: Some(servers.to_string()),
        ..Options::default()
    });
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    check_screen(&mut page, "approvals, idle").await;

    let mut agent = g.connect("agent").await;
    invoke(
        &mut agent,
        "a1",
        "file_write",
        json!({"path": "a11y.txt", "content": "first line\nsecond line\n"}),
    )
    .await;
    ask_shown(&mut page, "a1").await;
    check_screen(&mut page, "approvals, an ask").await;
    let (reached, _) = page.tab_order().await;
    for answer in ["#answer-once", "#answer-always", "#answer-deny"] {
        assert!(reached.iter().any(|r| r == answer), "{answer}: {reached:?}");
    }
    page.click("#answer-deny").await;
    assert_eq!(agent.result_for("a1").await["ok"], false);

    open(
        &mut page,
        "activity",
        "document.getElementById('calls').textContent.includes('a11y.txt')",
    )
    .await;
    check_screen(&mut page, "activity").await;

    open(
        &mut page,
        "rules",
        "document.querySelectorAll('#rules tbody tr').length > 0",
    )
    .await;
    check_screen(&mut page, "rules").await;

    let packs_ready = "(() => { const rows = [...document.querySelectorAll('#packs tbody tr')]; \
         const state = (p) => rows.find((r) => r.dataset.pack === p)?.cells[2].textContent; \
         return state('user:good') === 'ready' && state('user:loud') === 'failed'; })()";
    open(&mut page, "packs", packs_ready).await;
    check_screen(&mut page, "packs").await;

    open(
        &mut page,
        "account",
        "document.getElementById('tools-toggle').textContent === 'Switch tools off' && \
         document.querySelectorAll('#jobs tbody tr').length > 0",
    )
    .await;
    check_screen(&mut page, "account").await;

    page.viewport(420, 800).await;
    check_screen(&mut page, "account, narrow").await;
    open(&mut page, "packs", packs_ready).await;
    page.screenshot("packs-narrow").await;
    assert_eq!(
        page.eval(
            "(() => { const r = document.querySelector('#panel-packs .scroll'); \
             const cell = document.querySelector('#packs tr.pack td.pack-state'); \
             return [r.scrollWidth <= r.clientWidth, \
                     getComputedStyle(cell, '::before').content]; })()"
        )
        .await,
        json!([true, "\"State: \""]),
        "at 420 px each pack is a card of labelled lines, not a row to scroll sideways"
    );
    check_screen(&mut page, "packs, narrow").await;
}
