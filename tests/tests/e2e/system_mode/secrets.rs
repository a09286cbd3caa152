//! An account's owner manages its pack secrets in system mode as themselves, over the approve
//! socket (`glovebox secret set|list|remove --system`), never root's control socket; another user
//! is refused; each change audited as the account's approver's.

use super::*;

/// `glovebox secret ARGS --system` run by `user` with `stdin` as its input.
fn secret_as(s: &System, user: &TestUser, args: &[&str], stdin: &str) -> (i32, String, String) {
    let args: Vec<&str> = std::iter::once("secret")
        .chain(args.iter().copied())
        .collect();
    glovebox_as(s, user, &args, stdin)
}

#[tokio::test]
async fn an_owner_sets_lists_and_removes_its_accounts_secrets_and_nobody_else_can() {
    if !is_root() {
        return;
    }
    let s = System::start(Setup {
        accounts: &["a"],
        ..Default::default()
    });
    let a = s.account("a");
    let (code, out, err) = secret_as(&s, &a.owner, &["set", "API_TOKEN"], "owner-secret-51c2\n");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("secret API_TOKEN of account a stored"),
        "{out}"
    );
    let (code, out, err) = secret_as(&s, &a.owner, &["list"], "");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), "API_TOKEN");
    assert!(!out.contains("owner-secret"), "{out}");
    // a's executor user owns nothing: refused, and nothing changes
    let (code, out, err) = secret_as(&s, &a.run_as, &["set", "API_TOKEN"], "stolen\n");
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("not the owner"), "{err}");
    let (code, out, _) = secret_as(&s, &a.owner, &["remove", "API_TOKEN"], "");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("removed"), "{out}");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(s.state.join("audit.db"))
        .read_only(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let details: Vec<String> =
        sqlx::query_scalar("SELECT detail FROM events WHERE kind = 'secret' ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        details,
        [
            "pack secret API_TOKEN (by the account's approver)",
            "pack secret API_TOKEN (by the account's approver)"
        ]
    );
}
