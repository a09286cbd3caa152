//! An account's owner manages its packs in system mode as themselves, over the approve socket
//! (`glovebox packs add|list|remove --system`): the gate, which keeps the account's `mcp.json`,
//! checks each definition as the pack host reads it and audits the change as the account's
//! approver's; the pack then runs for the account's agent. Another user is refused.

use super::*;

/// `glovebox packs ARGS --system` run by `user`.
fn packs_as(s: &System, user: &TestUser, args: &[&str]) -> (i32, String, String) {
    let args: Vec<&str> = std::iter::once("packs")
        .chain(args.iter().copied())
        .collect();
    glovebox_as(s, user, &args, "")
}

#[tokio::test]
async fn an_owner_adds_lists_and_removes_its_accounts_packs_and_nobody_else_can() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a"],
        ..Default::default()
    });
    let a = s.account("a");
    let fake = glovebox_e2e::sibling_bin("glovebox-fake-pack");
    let fake = fake.to_str().unwrap();
    let (code, out, err) = packs_as(&s, &a.owner, &["add", "notes", "--", fake, "good"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("added pack notes of account a"), "{out}");
    // It runs for the account's agent, confined and gated like any pack.
    let deadline = Instant::now() + WAIT;
    let listed = loop {
        let (code, out, err) = packs_as(&s, &a.owner, &["list"]);
        assert_eq!(code, 0, "{out}{err}");
        if out.contains("notes (account): ready") {
            break out;
        }
        assert!(Instant::now() < deadline, "never ready:\n{out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(listed.contains("notes__echo"), "{listed}");
    let mut agent = s.agent("a").await;
    let echoed = agent
        .invoke("e", "notes__echo", json!({"text": "from the owner's pack"}))
        .await;
    assert!(
        echoed.to_string().contains("from the owner's pack"),
        "{echoed}"
    );
    // A literal credential in its environment is refused with the reason, and nothing changes.
    let before = std::fs::read_to_string(s.state.join("accounts/a/mcp.json")).unwrap();
    let (code, out, err) = packs_as(
        &s,
        &a.owner,
        &[
            "add",
            "leaky",
            "--env",
            "API_KEY=sk-live-0123456789abcdef0123456789abcdef",
            "--",
            fake,
            "good",
        ],
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("secret set"), "{err}");
    let after = std::fs::read_to_string(s.state.join("accounts/a/mcp.json")).unwrap();
    assert_eq!(before, after);
    // a's executor user owns nothing: refused, and nothing changes.
    let (code, out, err) = packs_as(&s, &a.run_as, &["remove", "notes"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("not the owner"), "{err}");
    let (code, out, err) = packs_as(&s, &a.owner, &["remove", "notes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("removed pack notes from account a"), "{out}");
    let (code, out, err) = packs_as(&s, &a.owner, &["remove", "notes"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("has no pack \"notes\""), "{err}");
    let (_, out, _) = packs_as(&s, &a.owner, &["list"]);
    assert!(out.contains("no pack is configured"), "{out}");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(s.state.join("audit.db"))
        .read_only(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
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
                format!("pack notes: {fake} good (by the account's approver)")
            ),
            (
                "removed".to_owned(),
                "pack notes (by the account's approver)".to_owned()
            )
        ]
    );
}
