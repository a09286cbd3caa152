//! The console's Packs panel in a real browser: the account's packs with their state, tools,
//! errors (a server's hostile stderr shown as text) and trust (a project pack trusted from the
//! console through the same trust ask as anywhere), and the client-tool providers connected,
//! which come and go without a reload.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::browser::{Browser, Page};
use glovebox_e2e::{Glovebox, Options, sibling_bin};
use serde_json::{Value, json};

use crate::client_tools::open_provider;
use crate::console::signed_in;

/// The `textContent` of one cell (`state`, `tools`, `trust`, `message`) of a pack's row, as an
/// expression ("" while the row is not there).
fn cell(origin: &str, pack: &str, column: usize) -> String {
    format!(
        "(document.querySelector({})?.cells[{column}]?.textContent ?? '')",
        json!(format!("#packs tr[data-pack=\"{origin}:{pack}\"]"))
    )
}

const STATE: usize = 2;
const TOOLS: usize = 3;
const TRUST: usize = 4;
const MESSAGE: usize = 5;

async fn open_packs(page: &mut Page) {
    // A click can miss while the page is still moving (an ask arriving or expiring shifts the
    // layout between finding the tab and pressing it): click until the panel shows.
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    loop {
        page.click("#tab-packs").await;
        if page
            .eval("!document.getElementById('panel-packs').hidden")
            .await
            == Value::Bool(true)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the Packs tab never opened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    page.wait_for(
        "the packs table",
        "document.querySelectorAll('#packs tbody tr').length > 0",
    )
    .await;
}

fn fake(mode: &str, extra: Value) -> Value {
    let mut def = json!({"command": sibling_bin("glovebox-fake-pack"), "args": [mode]});
    if let Value::Object(more) = extra {
        for (k, v) in more {
            def[k] = v;
        }
    }
    def
}

#[tokio::test]
async fn the_console_lists_packs_with_their_tools_and_a_failing_servers_error_as_text() {
    let servers = json!({"mcpServers": {
        "good": fake("good", json!({})),
        "loud": fake("shout", json!({})),
        "resting": fake("good", json!({"enabled": false})),
    }});
    let g = Glovebox::start_with(Options {
        accounts: vec![("test".into(), true)],
        mcp_json: Some(servers.to_string()),
        ..Options::default()
    });
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    page.eval("window.__pwned = undefined").await;
    open_packs(&mut page).await;
    page.wait_for(
        "the working pack running with its tools",
        &format!(
            "{} === 'ready' && {}.includes('good__echo') && {}.includes('good__write_note')",
            cell("user", "good", STATE),
            cell("user", "good", TOOLS),
            cell("user", "good", TOOLS)
        ),
    )
    .await;
    page.wait_for(
        "the failing pack with its server's last words",
        &format!(
            "{} === 'failed' && {}.includes('shout-marker')",
            cell("user", "loud", STATE),
            cell("user", "loud", MESSAGE)
        ),
    )
    .await;
    let message = page.eval(&cell("user", "loud", MESSAGE)).await;
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("<img src=x onerror=\"window.__pwned=1\"><script>"),
        "the error is shown as the server wrote it: {message}"
    );
    let message = message.as_str().unwrap_or_default();
    assert!(
        message.contains("postgres://app:****@db/prod") && !message.contains("shout-secret"),
        "the server's credential is masked in its error: {message}"
    );
    assert_eq!(
        page.eval(&cell("user", "resting", STATE)).await,
        json!("disabled")
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#packs img, #packs script, #packs svg').length")
            .await,
        json!(0),
        "no element was made of a server's words"
    );
    assert_eq!(
        page.eval("window.__pwned === undefined").await,
        json!(true),
        "nothing a server wrote ran"
    );
    page.screenshot("packs").await;
    let log = g.stderr();
    assert!(
        log.contains("postgres://app:****@db/prod") && !log.contains("shout-secret"),
        "glovebox's log names the failure without the server's credential"
    );
}

/// A glovebox whose workdir's `.glovebox/mcp.json` has one project pack, `proj`, and a browser.
fn with_project_pack() -> (Glovebox, Browser) {
    let g = Glovebox::start_with(Options {
        accounts: vec![("test".into(), true)],
        // The trust ask is raised when the console signs in and answered a few page steps
        // later: on a loaded machine those can outlast the default 25 s.
        ask_timeout_secs: Some(90),
        ..Options::default()
    });
    let dir = g.workdir.join(".glovebox");
    std::fs::create_dir_all(&dir).unwrap();
    let file = json!({"mcpServers": {"proj": fake("good", json!({}))}});
    std::fs::write(dir.join("mcp.json"), file.to_string()).unwrap();
    (g, Browser::launch())
}

#[tokio::test]
async fn a_project_pack_waits_for_trust_given_in_the_console_and_then_runs() {
    let (g, browser) = with_project_pack();
    let mut page = signed_in(&g, &browser).await;
    open_packs(&mut page).await;
    page.wait_for(
        "the project pack waiting for trust",
        &format!(
            "{} === 'untrusted' && {}.startsWith('waiting')",
            cell("project", "proj", STATE),
            cell("project", "proj", TRUST)
        ),
    )
    .await;
    // Listing asked the approver, as an agent's listing would (the console's own hello lists
    // the account's tools too, so the ask may come before or after the panel opened): the trust
    // ask, with the command, under Approvals.
    page.click("#tab-approvals").await;
    page.wait_for(
        "the trust ask, answerable",
        "!document.getElementById('ask').hidden && \
         document.getElementById('ask-tool').textContent === 'pack_trust' && \
         !document.getElementById('answer-once').disabled",
    )
    .await;
    let command = page.text("#ask-command").await;
    assert!(command.contains("glovebox-fake-pack good"), "{command}");
    page.screenshot("packs-trust-ask").await;
    page.click("#answer-once").await;
    open_packs(&mut page).await;
    page.wait_for(
        "the trusted project pack running",
        &format!(
            "{} === 'ready' && {}.includes('proj__echo') && {}.startsWith('trusted until')",
            cell("project", "proj", STATE),
            cell("project", "proj", TOOLS),
            cell("project", "proj", TRUST)
        ),
    )
    .await;
}

#[tokio::test]
async fn a_connected_provider_is_listed_and_disappears_when_it_disconnects() {
    let g = Glovebox::start();
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    page.click("#tab-packs").await;
    page.wait_for(
        "no provider yet",
        "document.getElementById('providers').textContent.includes('No provider')",
    )
    .await;
    let mut provider = open_provider(&g, &g.token).await.unwrap();
    let ok = provider.register(&["pick_color"]).await;
    let connection = ok["connection_id"].as_str().unwrap().to_owned();
    page.wait_for(
        "the provider and its tool",
        &format!(
            "(() => {{ const t = document.getElementById('providers').textContent; \
             return t.includes({}) && t.includes('client__pick_color'); }})()",
            json!(connection)
        ),
    )
    .await;
    page.screenshot("packs-provider").await;
    drop(provider);
    page.wait_for(
        "the provider gone",
        &format!(
            "(() => {{ const t = document.getElementById('providers').textContent; \
             return !t.includes({}) && t.includes('No provider'); }})()",
            json!(connection)
        ),
    )
    .await;
}

#[tokio::test]
async fn a_refused_project_pack_is_asked_about_again_from_the_console() {
    let (g, browser) = with_project_pack();
    let mut page = signed_in(&g, &browser).await;
    open_packs(&mut page).await;
    // Refused at its trust ask: kept out, with the way back on its row.
    page.click("#tab-approvals").await;
    let trust_ask = "!document.getElementById('ask').hidden && \
         document.getElementById('ask-tool').textContent === 'pack_trust' && \
         !document.getElementById('answer-deny').disabled";
    page.wait_for("the trust ask, answerable", trust_ask).await;
    page.click("#answer-deny").await;
    open_packs(&mut page).await;
    let ask_again = "#packs tr[data-pack=\"project:proj\"] button.ask-again";
    page.wait_for(
        "the refused pack with its Ask again button",
        &format!(
            "{} === 'untrusted' && {}.startsWith('refused') && !!document.querySelector({})",
            cell("project", "proj", STATE),
            cell("project", "proj", TRUST),
            json!(ask_again)
        ),
    )
    .await;
    // Listing again does not ask again by itself.
    page.click("#packs-refresh").await;
    page.click("#tab-approvals").await;
    page.wait_for("no ask", "document.getElementById('ask').hidden")
        .await;
    open_packs(&mut page).await;
    page.click(ask_again).await;
    page.click("#tab-approvals").await;
    page.wait_for("the trust ask again", trust_ask).await;
    page.click("#answer-once").await;
    open_packs(&mut page).await;
    page.wait_for(
        "the trusted project pack running",
        &format!(
            "{} === 'ready' && {}.startsWith('trusted until')",
            cell("project", "proj", STATE),
            cell("project", "proj", TRUST)
        ),
    )
    .await;
    let details: Vec<String> = sqlx::query_scalar(
        "SELECT COALESCE(detail, '') FROM events WHERE kind = 'trust' ORDER BY id",
    )
    .fetch_all(&g.audit_pool().await)
    .await
    .unwrap();
    assert!(
        details
            .iter()
            .any(|d| d.contains("asked to be asked again") && d.contains("1 refused")),
        "{details:?}"
    );
}

/// The Packs panel's secrets: the account's approver sets a secret a pack waits for (the pack
/// then starts), sees names only (the value is cleared from the page at once and never comes
/// back), deletes it; each change audited as the approver's.
#[tokio::test]
async fn the_approver_sets_and_deletes_a_packs_secret_in_the_console_and_never_sees_it_again() {
    const VALUE: &str = "console-secret-9d41e7";
    let g = Glovebox::start_with(Options {
        accounts: vec![("test".into(), true)],
        mcp_json: Some(
            json!({"mcpServers": {"needy": {
                "command": sibling_bin("glovebox-fake-pack"), "args": ["good"],
                "env": {"API_TOKEN": "${secret:API_TOKEN}"}
            }}})
            .to_string(),
        ),
        ..Options::default()
    });
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    open_packs(&mut page).await;
    page.wait_for(
        "the pack waiting for its secret, and no secret stored",
        &format!(
            "{}.includes('API_TOKEN') && document.getElementById('secrets').textContent.includes('No secret')",
            cell("user", "needy", MESSAGE)
        ),
    )
    .await;
    page.eval(&format!(
        "document.getElementById('secret-name').value = 'API_TOKEN'; \
         document.getElementById('secret-value').value = {}; \
         document.getElementById('secret-set').click()",
        json!(VALUE)
    ))
    .await;
    page.wait_for(
        "the secret listed by name",
        "!!document.querySelector('#secrets li[data-secret=\"API_TOKEN\"]')",
    )
    .await;
    assert_eq!(
        page.eval("document.getElementById('secret-value').value")
            .await,
        json!(""),
        "the value is cleared at once"
    );
    // The pack starts with it.
    page.click("#packs-refresh").await;
    page.wait_for(
        "the pack ready",
        &format!("{} === 'ready'", cell("user", "needy", STATE)),
    )
    .await;
    let html = page.eval("document.documentElement.outerHTML").await;
    assert!(
        !html.to_string().contains(VALUE),
        "the value is never on the page"
    );
    // Deleted: gone from the list.
    page.click("#secrets li[data-secret=\"API_TOKEN\"] button")
        .await;
    page.wait_for(
        "no secret stored again",
        "document.getElementById('secrets').textContent.includes('No secret')",
    )
    .await;
    let pool = g.audit_pool().await;
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT outcome, detail FROM events WHERE kind = 'secret' ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        [
            (
                "set".to_owned(),
                "pack secret API_TOKEN (by the account's approver)".to_owned()
            ),
            (
                "removed".to_owned(),
                "pack secret API_TOKEN (by the account's approver)".to_owned()
            )
        ]
    );
    let all: Vec<String> =
        sqlx::query_scalar("SELECT COALESCE(detail, '') || COALESCE(reason, '') FROM events")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(all.iter().all(|r| !r.contains(VALUE)), "never in the audit");
}

/// The approver adds a pack in the console (checked as glovebox reads it: a literal credential
/// is refused with the reason), sees it run with its tools, and removes it; both changes are in
/// the audit as the approver's, and the account's mcp.json holds what was added.
#[tokio::test]
async fn the_approver_adds_and_removes_a_pack_in_the_console() {
    let g = Glovebox::start_with(Options {
        accounts: vec![("test".into(), true)],
        mcp_json: Some(json!({"mcpServers": {}}).to_string()),
        ..Options::default()
    });
    let browser = Browser::launch();
    let mut page = signed_in(&g, &browser).await;
    open_packs(&mut page).await;
    let fake = sibling_bin("glovebox-fake-pack").display().to_string();
    let fill = |name: &str, env: &str| {
        format!(
            "document.getElementById('pack-name').value = {}; \
             document.getElementById('pack-command').value = {}; \
             document.getElementById('pack-env').value = {}; \
             document.getElementById('pack-network').value = 'none'; \
             document.getElementById('pack-add').click()",
            json!(name),
            json!(format!("{fake}\ngood\n")),
            json!(env)
        )
    };
    page.eval(&fill(
        "leaky",
        "API_KEY=ghp_0123456789abcdef0123456789abcdef0123",
    ))
    .await;
    page.wait_for(
        "the refusal, with its reason",
        "document.getElementById('toast').textContent.includes('looks like a credential')",
    )
    .await;
    page.eval(&fill("added", "MODE=quiet")).await;
    page.wait_for(
        "the added pack running with its tools",
        &format!(
            "{} === 'ready' && {}.includes('added__echo')",
            cell("user", "added", STATE),
            cell("user", "added", TOOLS)
        ),
    )
    .await;
    let file = std::fs::read_to_string(g.state.join("accounts/test/mcp.json")).unwrap();
    let file: Value = serde_json::from_str(&file).unwrap();
    assert_eq!(
        file["mcpServers"],
        json!({"added": {"command": fake, "args": ["good"], "env": {"MODE": "quiet"},
                        "network": "none"}})
    );
    assert_eq!(
        page.eval("document.getElementById('pack-name').value")
            .await,
        json!(""),
        "the form is cleared once the pack is added"
    );
    page.click("button[aria-label=\"Remove pack added\"]").await;
    page.wait_for(
        "no pack configured again",
        "document.getElementById('packs').textContent.includes('No pack is configured')",
    )
    .await;
    let pool = g.audit_pool().await;
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT outcome, detail FROM events WHERE kind = 'pack' ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        [
            (
                "added".to_owned(),
                format!(
                    "pack added: {fake} good, network none, env MODE (by the account's approver)"
                )
            ),
            (
                "removed".to_owned(),
                "pack added (by the account's approver)".to_owned()
            )
        ]
    );
}
