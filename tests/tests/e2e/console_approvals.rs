//! Approvals in the console beyond one person and one visible tab: a desktop notification for an
//! ask that arrives while the tab is hidden (never while it is visible, never with the file's
//! contents), and an ask answered by another approver of the account (`glovebox approve`'s
//! protocol) disappearing from the console, which says it was answered elsewhere; and a change
//! read side by side.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::browser::{Browser, Page};
use glovebox_e2e::{Client, Glovebox, expect_ok};
use serde_json::json;

use crate::console::{ask_shown, invoke, login_link, no_ask_shown, origin, signed_in};

/// Put in every document before the console's script: records each `Notification` the page makes
/// (title and body) instead of showing it, and lets the test say whether the tab is hidden
/// (`window.__hidden`, announced with a `visibilitychange` like a real one).
const HARNESS: &str = r#"
(() => {
  const Real = window.Notification;
  window.__notes = [];
  window.__hidden = false;
  Object.defineProperty(Document.prototype, "hidden", {
    configurable: true, get() { return window.__hidden; } });
  Object.defineProperty(Document.prototype, "visibilityState", {
    configurable: true, get() { return window.__hidden ? "hidden" : "visible"; } });
  class Recorded extends EventTarget {
    constructor(title, options) {
      super();
      window.__notes.push({ title, body: (options && options.body) || "" });
    }
    close() {}
    static get permission() { return Real.permission; }
    static requestPermission() { return Real.requestPermission(); }
  }
  window.Notification = Recorded;
})();
"#;

/// The approver's next frame that is not an `activity` notice.
async fn next_not_activity(approver: &mut Client) -> serde_json::Value {
    loop {
        let frame = approver.next().await;
        if frame["type"] != "activity" {
            return frame;
        }
    }
}

async fn set_hidden(page: &mut Page, hidden: bool) {
    page.eval(&format!(
        "window.__hidden = {hidden}; document.dispatchEvent(new Event('visibilitychange'))"
    ))
    .await;
}

#[tokio::test]
async fn an_ask_arriving_while_the_tab_is_hidden_makes_a_notification_without_the_contents() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = browser.page().await;
    page.call(
        "Browser.grantPermissions",
        json!({ "origin": origin(&g), "permissions": ["notifications"] }),
    )
    .await;
    page.before_each_document(HARNESS).await;
    page.goto(&login_link(&g)).await;
    page.wait_for(
        "the console to connect, with notifications on",
        "document.getElementById('who').textContent.startsWith('account ') && \
         document.getElementById('notify-state').textContent === 'Notifications: on.'",
    )
    .await;
    let mut agent = g.connect("agent").await;

    // Hidden: the ask is announced on the desktop, naming the tool and the path only.
    set_hidden(&mut page, true).await;
    invoke(
        &mut agent,
        "h1",
        "file_write",
        json!({"path": "notes/plan.txt", "content": "TOP-SECRET-CONTENT-4711\n"}),
    )
    .await;
    let notes = page
        .wait_for(
            "a notification",
            "window.__notes.length > 0 && window.__notes",
        )
        .await;
    assert_eq!(notes.as_array().unwrap().len(), 1, "{notes}");
    let note = &notes[0];
    assert_eq!(note["title"], "glovebox: a call waits for your approval");
    let body = note["body"].as_str().unwrap();
    assert!(
        body.contains("file_write") && body.contains("plan.txt"),
        "{body}"
    );
    assert!(
        !body.contains("TOP-SECRET"),
        "a notification never carries the file's contents: {body}"
    );
    // The contents were on the page (the diff), so leaving them out was a choice.
    assert!(
        page.text("#ask-preview")
            .await
            .contains("TOP-SECRET-CONTENT-4711")
    );
    // Hidden, the ask cannot be answered; back in view it can, after its second on screen.
    assert_eq!(
        page.eval("document.getElementById('answer-once').disabled")
            .await,
        json!(true)
    );
    set_hidden(&mut page, false).await;
    ask_shown(&mut page, "h1").await;
    page.click("#answer-deny").await;
    assert_eq!(agent.result_for("h1").await["ok"], false);

    // Visible: the next ask is on screen, and nothing is sent to the desktop.
    invoke(
        &mut agent,
        "v1",
        "file_write",
        json!({"path": "seen.txt", "content": "x"}),
    )
    .await;
    ask_shown(&mut page, "v1").await;
    assert_eq!(page.eval("window.__notes.length").await, json!(1));
    page.click("#answer-deny").await;
    assert_eq!(agent.result_for("v1").await["ok"], false);
}

#[tokio::test]
async fn an_ask_answered_by_another_approver_leaves_the_console_saying_so() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;

    // The other approver answers: the console's ask goes, and it says why.
    invoke(
        &mut agent,
        "e1",
        "file_write",
        json!({"path": "elsewhere.txt", "content": "one\n"}),
    )
    .await;
    ask_shown(&mut page, "e1").await;
    let ask = approver.next_ask().await;
    assert_eq!(ask["call_id"], "e1", "{ask}");
    approver.answer(&ask, "once").await;
    expect_ok(&agent.result_for("e1").await);
    no_ask_shown(&mut page).await;
    page.wait_for(
        "the console to say the ask was answered elsewhere",
        "document.getElementById('toast').textContent.includes('answered elsewhere')",
    )
    .await;
    // Its keys do nothing now: the call ran once, with the other approver's answer.
    page.press('n').await;
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("elsewhere.txt")).unwrap(),
        "one\n"
    );

    // The console answers: the other approver is told the ask closed, answered.
    invoke(
        &mut agent,
        "e2",
        "file_write",
        json!({"path": "here.txt", "content": "two\n"}),
    )
    .await;
    let ask = approver.next_ask().await;
    assert_eq!(ask["call_id"], "e2", "{ask}");
    ask_shown(&mut page, "e2").await;
    page.click("#answer-once").await;
    expect_ok(&agent.result_for("e2").await);
    let closed = next_not_activity(&mut approver).await;
    assert_eq!(
        closed,
        json!({"type": "ask_closed", "ask_id": ask["ask_id"], "reason": "answered"})
    );
    // A late answer from the other approver is refused, and changes nothing.
    approver.answer(&ask, "deny").await;
    let refused = next_not_activity(&mut approver).await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        std::fs::read_to_string(g.workdir.join("here.txt")).unwrap(),
        "two\n"
    );
}

#[tokio::test]
async fn an_ask_is_not_answered_while_another_panel_is_shown_and_waits_again_on_return() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    invoke(
        &mut agent,
        "p1",
        "file_write",
        json!({"path": "panel.txt", "content": "x"}),
    )
    .await;
    ask_shown(&mut page, "p1").await;
    // Away from Approvals, the answer keys do nothing and the buttons are off.
    page.click("#tab-rules").await;
    page.press('y').await;
    assert_eq!(
        page.eval(
            "[document.getElementById('ask').hidden, document.getElementById('answer-once').disabled]"
        )
        .await,
        json!([false, true]),
        "the ask is still there, unanswered"
    );
    // Back on Approvals, it waits its second again before anything answers it: the buttons come
    // on no sooner than a second after the click that brought the panel back.
    page.eval(
        "window.__back = 0; window.__armed = 0; \
         document.getElementById('tab-approvals').addEventListener('click', () => { window.__back = performance.now(); }, true); \
         new MutationObserver(() => { if (!document.getElementById('answer-once').disabled && !window.__armed) window.__armed = performance.now(); }) \
           .observe(document.getElementById('answer-once'), { attributes: true })",
    )
    .await;
    page.click("#tab-approvals").await;
    ask_shown(&mut page, "p1").await;
    let waited = page
        .eval("window.__back > 0 && window.__armed > 0 ? window.__armed - window.__back : -1")
        .await
        .as_f64()
        .unwrap();
    assert!(waited >= 900.0, "answerable {waited} ms after coming back");
    page.press('n').await;
    assert_eq!(agent.result_for("p1").await["ok"], false);
    assert!(!g.workdir.join("panel.txt").exists());
}

/// The side-by-side cell texts of the ask's diff: `[old no, old, new no, new]` per change row.
const SIDE_BY_SIDE_ROWS: &str = "[...document.querySelectorAll('#ask-sxs tbody tr.change, #ask-sxs tbody tr.same')]\
     .map((r) => [...r.cells].map((c) => c.textContent))";

#[tokio::test]
async fn a_change_can_be_read_side_by_side_each_line_on_its_side_as_text() {
    let g = Glovebox::start();
    std::fs::write(
        g.workdir.join("config.txt"),
        "keep\nold <b>value</b>\n-- removed comment\nend\n",
    )
    .unwrap();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    let mut agent = g.connect("agent").await;
    invoke(
        &mut agent,
        "s1",
        "file_write",
        json!({"path": "config.txt", "content": "keep\nnew <i>value</i>\nend\n"}),
    )
    .await;
    ask_shown(&mut page, "s1").await;
    assert!(page.visible("#ask-preview").await, "one column first");
    assert!(!page.visible("#ask-sxs").await);
    page.click("#diff-layout").await;
    page.wait_for(
        "the side-by-side view",
        "!document.getElementById('ask-sxs-wrap').hidden && \
         document.getElementById('ask-preview').hidden && \
         document.getElementById('diff-layout').getAttribute('aria-pressed') === 'true'",
    )
    .await;
    let rows = page.eval(SIDE_BY_SIDE_ROWS).await;
    assert_eq!(
        rows,
        json!([
            ["1", "keep", "1", "keep"],
            ["2", "old <b>value</b>", "2", "new <i>value</i>"],
            // a removed line starting with "--" is a removed line, not a file header
            ["3", "-- removed comment", "", ""],
            ["4", "end", "3", "end"],
        ]),
        "{rows}"
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#ask-sxs b, #ask-sxs i').length")
            .await,
        json!(0),
        "the file's text is text"
    );
    page.screenshot("approvals-side-by-side").await;
    // The choice is kept for the next ask, and the answer is given as usual.
    page.click("#answer-deny").await;
    assert_eq!(agent.result_for("s1").await["ok"], false);
    invoke(
        &mut agent,
        "s2",
        "file_write",
        json!({"path": "config.txt", "content": "keep\nend\n"}),
    )
    .await;
    ask_shown(&mut page, "s2").await;
    assert!(page.visible("#ask-sxs").await, "side by side again");
    page.click("#diff-layout").await;
    page.wait_for(
        "one column again",
        "!document.getElementById('ask-preview').hidden && document.getElementById('ask-sxs-wrap').hidden",
    )
    .await;
    page.click("#answer-deny").await;
    assert_eq!(agent.result_for("s2").await["ok"], false);
}
